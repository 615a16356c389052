//! The sizing table of the chart's README is generated from the benchmarks'
//! figures (hack/sizing-table.py) and is up to date. The values table of
//! the chart's README is generated from values.yaml
//! (hack/chart-values-doc.py, `make chart-sync`): it is up to date, and read
//! back with a real YAML parser its defaults are values.yaml's and it covers
//! every value (the generator reads YAML with a parser of its own).

use std::collections::BTreeMap;
use std::process::Command;

use serde_yaml::Value;

use super::{repo, repo_file};

const README: &str = "deploy/helm/webchecker-operator/README.md";
const VALUES: &str = "deploy/helm/webchecker-operator/values.yaml";

/// `python3 SCRIPT --check` passes: what SCRIPT writes is up to date.
fn up_to_date(script: &str) {
    let out = Command::new("python3")
        .args([script, "--check"])
        .current_dir(repo())
        .output()
        .expect("python3 (hack/install-deps.sh installs it)");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn values_table_is_up_to_date() {
    up_to_date("hack/chart-values-doc.py");
}

/// The chart README's sizing table, from docs/benchmarks.md's figures and
/// the alert's threshold (hack/sizing-table.py, `make chart-sync`).
#[test]
fn sizing_table_is_up_to_date() {
    up_to_date("hack/sizing-table.py");
}

/// Table cells split at `|` but not at `\|`.
fn cells(row: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut chars = row.trim().trim_matches('|').chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                out.last_mut().unwrap().push(chars.next().unwrap())
            }
            '|' => out.push(String::new()),
            c => out.last_mut().unwrap().push(c),
        }
    }
    out.into_iter().map(|c| c.trim().to_string()).collect()
}

/// key -> (type, default) of the generated table.
fn table() -> BTreeMap<String, (String, serde_json::Value)> {
    let readme = repo_file(README);
    let begin = readme
        .find("<!-- values:begin")
        .expect("values:begin marker");
    let end = readme
        .find("<!-- values:end -->")
        .expect("values:end marker");
    let mut rows = BTreeMap::new();
    for line in readme[begin..end].lines().filter(|l| l.starts_with("| `")) {
        let c = cells(line);
        assert_eq!(c.len(), 4, "{line}");
        let key = c[0].trim_matches('`').to_string();
        let default = serde_json::from_str(c[2].trim_matches('`'))
            .unwrap_or_else(|e| panic!("{README}: default of {key} is not JSON ({e}): {line}"));
        assert!(
            rows.insert(key.clone(), (c[1].clone(), default)).is_none(),
            "{key} twice"
        );
    }
    assert!(rows.len() > 50, "{README}: {} rows", rows.len());
    rows
}

/// Every key path of values.yaml whose value is not a non-empty map.
fn leaves(v: &Value, prefix: &str, out: &mut Vec<String>) {
    match v.as_mapping() {
        Some(m) if !m.is_empty() => {
            for (k, v) in m {
                let k = k.as_str().expect("string keys");
                let path = if prefix.is_empty() {
                    k.to_string()
                } else {
                    format!("{prefix}.{k}")
                };
                leaves(v, &path, out);
            }
        }
        _ => out.push(prefix.to_string()),
    }
}

fn at<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(v, |v, k| v.as_mapping()?.get(k))
}

#[test]
fn values_table_holds_every_value_with_its_default() {
    let values: Value = serde_yaml::from_str(&repo_file(VALUES)).expect("values.yaml parses");
    let rows = table();
    let mut problems = Vec::new();
    for (key, (typ, default)) in &rows {
        let Some(v) = at(&values, key) else {
            problems.push(format!("{key}: no such value"));
            continue;
        };
        let want = serde_json::to_value(v).unwrap();
        if &want != default {
            problems.push(format!("{key}: table {default}, values.yaml {want}"));
        }
        let want_type = match &want {
            serde_json::Value::Bool(_) => "bool",
            serde_json::Value::Number(n) if n.is_f64() => "float",
            serde_json::Value::Number(_) => "int",
            serde_json::Value::Array(_) => "list",
            serde_json::Value::Object(_) => "object",
            _ => "string",
        };
        if typ != want_type {
            problems.push(format!("{key}: type {typ}, values.yaml has a {want_type}"));
        }
    }
    let mut all = Vec::new();
    leaves(&values, "", &mut all);
    for leaf in &all {
        let covered = rows
            .keys()
            .any(|k| leaf == k || leaf.starts_with(&format!("{k}.")));
        if !covered {
            problems.push(format!("{leaf}: not in the table"));
        }
    }
    assert!(
        problems.is_empty(),
        "{README}'s values table against {VALUES}:\n  {}",
        problems.join("\n  ")
    );
}
