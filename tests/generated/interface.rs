//! docs/operator-interface.md is the contract between the binary, the chart,
//! the dashboards and the alert rules; these tests hold its tables to the
//! code, so that the page cannot lag behind it: the flags (from clap), the
//! probe reasons (from `Reason`), the conditions and their reasons and the
//! Events' reasons (from the constants the code writes). The metrics table
//! is checked against a real scrape by tests/observability/catalogue.rs.

use std::collections::{BTreeMap, BTreeSet};

use clap::CommandFactory;
use webchecker::config::Config;

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
