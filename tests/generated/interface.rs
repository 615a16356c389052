//! docs/operator-interface.md is the contract between the binary, the chart,
//! the dashboards and the alert rules; these tests hold its tables to the
//! code, so that the page cannot lag behind it: the flags (from clap), every
//! condition with its statuses and reasons (`Reason`, `NotProbed`,
//! `DegradedReason`, `ExpiryReason`: the types the reducer writes them
//! through) and the Events on routes. The metrics table is checked against
//! a real scrape by tests/observability/catalogue.rs.

use std::collections::{BTreeMap, BTreeSet};

use clap::CommandFactory;
use webchecker::config::Config;
use webchecker::engine::status::{
    CERTIFICATE_EXPIRING, DEGRADED, DegradedReason, ExpiryReason, MAINTENANCE, NO_QUORUM,
    NotProbed, PENDING, READY, Truth,
};
use webchecker::probe::Reason;

use super::repo_file;

const DOC: &str = "docs/operator-interface.md";

/// The rows of the Markdown table that follows the heading `heading`,
/// each as its trimmed cells.
fn table_after(doc: &str, heading: &str) -> Vec<Vec<String>> {
    let start = doc
        .find(heading)
        .unwrap_or_else(|| panic!("{DOC}: no heading {heading:?}"));
    doc[start..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            let cells: Vec<String> = l.split('|').map(|c| c.trim().to_string()).collect();
            cells[1..cells.len() - 1].to_vec()
        })
        .collect()
}

/// The text between backticks in `cell`, each span once.
fn code_spans(cell: &str) -> Vec<String> {
    cell.split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 1)
        .map(|(_, s)| s.to_string())
        .collect()
}

/// Every flag of the binary is in the table, with its environment variable
/// and its default; the table has no flag the binary lacks.
#[test]
fn the_flags_table_is_the_binarys() {
    let doc = repo_file(DOC);
    let rows = table_after(&doc, "## Flags");
    let documented: BTreeMap<String, (String, String)> = rows
        .iter()
        .map(|r| {
            let flag = code_spans(&r[0]).first().cloned().unwrap_or_default();
            let env = code_spans(&r[1]).first().cloned().unwrap_or_default();
            (flag, (env, r[2].clone()))
        })
        .collect();
    let mut wrong = Vec::new();
    let mut seen = BTreeSet::new();
    for arg in Config::command().get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        if ["help", "version"].contains(&long) {
            continue;
        }
        let flag = format!("--{long}");
        seen.insert(flag.clone());
        let Some((env, default)) = documented.get(&flag) else {
            wrong.push(format!("{flag} is not in the table"));
            continue;
        };
        let want_env = arg
            .get_env()
            .map(|e| e.to_string_lossy().to_string())
            .unwrap_or_default();
        if *env != want_env {
            wrong.push(format!(
                "{flag}: env {env:?} in the table, {want_env:?} in the binary"
            ));
        }
        let defaults: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().to_string())
            .filter(|v| !v.is_empty())
            .collect();
        for d in defaults {
            if !code_spans(default).contains(&d) {
                wrong.push(format!(
                    "{flag}: default `{d}` not in the table's {default:?}"
                ));
            }
        }
    }
    for flag in documented.keys() {
        if !seen.contains(flag) {
            wrong.push(format!(
                "{flag} is in the table but not a flag of the binary"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{DOC}'s flags table and the binary (src/config.rs) differ:\n  {}",
        wrong.join("\n  ")
    );
}

/// (condition, status, reason) of every reason the code writes.
fn written_reasons() -> BTreeSet<(String, String, String)> {
    let row = |c: &str, t: Truth, r: &str| (c.to_string(), t.as_str().to_string(), r.to_string());
    let mut all = BTreeSet::new();
    for r in Reason::ALL {
        let t = if r == Reason::ProbeSucceeded {
            Truth::True
        } else {
            Truth::False
        };
        all.insert(row(READY, t, r.as_str()));
    }
    for n in NotProbed::ALL {
        all.insert(row(READY, n.ready(), n.as_str()));
    }
    all.insert(row(READY, Truth::Unknown, PENDING));
    all.insert(row(READY, Truth::Unknown, NO_QUORUM));
    all.insert(row(
        READY,
        Truth::False,
        webchecker::engine::status::DEPENDENCY_DOWN,
    ));
    all.insert(row(MAINTENANCE, Truth::True, "InWindow"));
    all.insert(row(MAINTENANCE, Truth::False, "NoWindow"));
    for r in ExpiryReason::ALL {
        all.insert(row(CERTIFICATE_EXPIRING, r.status(), r.as_str()));
    }
    for r in DegradedReason::ALL {
        all.insert(row(DEGRADED, r.status(), r.as_str()));
    }
    all
}

/// The conditions table has a row for every (condition, status, reason)
/// the operator writes, and no other.
#[test]
fn the_conditions_table_is_what_the_operator_writes() {
    let doc = repo_file(DOC);
    let documented: BTreeSet<(String, String, String)> =
        table_after(&doc, "## Conditions and reasons")
            .iter()
            .map(|r| {
                let span = |i: usize| code_spans(&r[i]).first().cloned().unwrap_or_default();
                (span(0), span(1), span(2))
            })
            .collect();
    let written = written_reasons();
    let missing: Vec<_> = written.difference(&documented).collect();
    let stale: Vec<_> = documented.difference(&written).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "{DOC}'s conditions table and the code differ: not in the table {missing:?}; not written by the code {stale:?}"
    );
}

/// The Events table names every reason route discovery puts on a route.
#[test]
fn the_events_table_has_every_route_event() {
    use webchecker::discovery::{
        INVALID_CHECKER, NAME_TAKEN, TOO_MANY, annotations, route_events, service,
    };
    let doc = repo_file(DOC);
    let documented: BTreeSet<(String, String)> = table_after(&doc, "## Events")
        .iter()
        .filter(|r| r[0] == "the route")
        .map(|r| {
            let span = |i: usize| code_spans(&r[i]).first().cloned().unwrap_or_default();
            (span(1), span(2))
        })
        .collect();
    let code: BTreeSet<(String, String)> = [
        ("Warning", route_events::CHECKER_DOWN),
        ("Normal", route_events::CHECKER_UP),
        ("Warning", annotations::INVALID_ANNOTATION),
        ("Warning", INVALID_CHECKER),
        ("Warning", NAME_TAKEN),
        ("Warning", TOO_MANY),
        ("Warning", service::NO_HTTP_PORT),
    ]
    .into_iter()
    .map(|(t, r)| (t.to_string(), r.to_string()))
    .collect();
    assert_eq!(documented, code, "{DOC}'s Events on routes");
}

/// Metric name -> the label values its row lists in parentheses (backticks
/// dropped), of every table row of `doc` whose first cell is one metric.
fn metric_rows(doc: &str) -> BTreeMap<String, BTreeSet<String>> {
    doc.lines()
        .filter(|l| l.starts_with("| `webchecker_"))
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let name = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            if name.contains('`') {
                return None;
            }
            let labels = cells.get(3)?;
            let values = labels
                .split('(')
                .skip(1)
                .filter_map(|g| g.split(')').next())
                .flat_map(|g| g.split(','))
                .map(|v| v.trim().trim_matches('`').to_string())
                .filter(|v| !v.is_empty())
                .collect();
            Some((name.to_string(), values))
        })
        .collect()
}

/// The metrics table of the contract has every metric of the catalogue
/// (docs/metrics.md, held to a real scrape by tests/observability), and
/// where it lists a label's values they are the catalogue's.
#[test]
fn the_metrics_table_is_the_catalogues() {
    let contract = metric_rows(&repo_file(DOC));
    let catalogue = metric_rows(&repo_file("docs/metrics.md"));
    let mut wrong = Vec::new();
    for (name, values) in &catalogue {
        match contract.get(name) {
            None => wrong.push(format!("{name} is not in {DOC}")),
            Some(v) if !v.is_empty() && v != values => wrong.push(format!(
                "{name}: {v:?} in {DOC}, {values:?} in docs/metrics.md"
            )),
            _ => {}
        }
    }
    for name in contract.keys().filter(|n| !catalogue.contains_key(*n)) {
        wrong.push(format!("{name} is in {DOC} but not in docs/metrics.md"));
    }
    assert!(
        wrong.is_empty(),
        "metrics tables differ:\n  {}",
        wrong.join("\n  ")
    );
}

#[test]
fn tables_and_spans_are_read_as_written() {
    let doc =
        "# x\n## Flags\ntext\n\n| a | b |\n|---|---|\n| `--x` | `X` |\n| `--y` | (none) |\n\nafter";
    assert_eq!(
        table_after(doc, "## Flags"),
        vec![vec!["`--x`", "`X`"], vec!["`--y`", "(none)"]]
    );
    assert_eq!(code_spans("`a` or `b`, c"), vec!["a", "b"]);
}
