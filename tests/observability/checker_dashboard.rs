//! The checker dashboard (dashboards/checker.json) shows one checker, across
//! the replicas that owned it: its expressions, with the namespace and checker
//! variables set as the fleet's data links set them, return that checker's
//! series only, never split by replica, and say what the scenario did to it.

use std::collections::BTreeMap;

use crate::expressions::extract;
use crate::prom::{Sample, samples, single};
use crate::scenario::{FAILING, NEW_REPLICA, Run};

/// The expressions of the checker dashboard for one checker: panel title ->
/// expression of each target, in order (variable queries left out).
fn panels_of(run: &Run, checker: &str) -> BTreeMap<String, Vec<String>> {
    let ns = format!("namespace={}", run.ns);
    let name = format!("checker={checker}");
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (source, expr) in extract(&["--var", &ns, "--var", &name, "dashboards/checker.json"]) {
        let Some(panel) = source.split("#panel=").nth(1) else {
            continue;
        };
        let title = panel
            .split_once(':')
            .unwrap()
            .1
            .rsplit_once("/target=")
            .unwrap()
            .0;
        out.entry(title.to_string()).or_default().push(expr);
    }
    assert!(
        out.len() >= 15,
        "checker dashboard panels: {:?}",
        out.keys()
    );
    out
}

async fn eval(run: &Run, expr: &str, at: Option<f64>) -> Vec<Sample> {
    let v = run.prom.query_at(expr, at).await;
    assert_eq!(v["status"], "success", "{expr}: {v}");
    samples(&v["data"])
}

/// Panels without data for a checker of the plain http witness: the
/// certificate exists for https checkers only.
const HTTPS_ONLY: &[&str] = &[
    "Certificate expires in",
    "Certificate days left",
    "Certificate chain",
];
/// Panels without data for a checker without spec.locations (the zone series
/// exist for those with it only; the scenario has none).
const ZONES: &[&str] = &[
    "Zone results",
    "Zone probe duration",
    "Zone failures per second",
];
/// Panels without data for a checker without spec.slo (the scenario gives
/// one to the failing ones only).
const SLO: &[&str] = &["Objective", "Error budget left over the range", "Burn rate"];
/// Panels without data for a checker that never failed.
const FAILURES: &[&str] = &["Failures by reason", "Failure reasons"];

/// Every panel's samples belong to `checker` and carry no replica label
/// (instance, pod): per-checker queries aggregate by (namespace, name). Every
/// panel has data but those of `empty_ok`.
async fn only_this_checker(
    run: &Run,
    checker: &str,
    panels: &BTreeMap<String, Vec<String>>,
    empty_ok: &[&str],
) {
    for (title, exprs) in panels {
        for expr in exprs {
            let got = eval(run, expr, None).await;
            assert!(
                !got.is_empty() || empty_ok.contains(&title.as_str()),
                "{checker}: no data in {title}\n    {expr}"
            );
            for (labels, _) in &got {
                assert!(
                    !labels.contains_key("instance") && !labels.contains_key("pod"),
                    "{title}: a series per replica: {labels:?}\n    {expr}"
                );
                if let Some(n) = labels.get("name") {
                    assert_eq!(n, checker, "{title}: another checker's series\n    {expr}");
                }
            }
        }
    }
}

pub async fn checker_dashboard_follows_one_checker(run: &Run) {
    // A failing checker: 503 on every probe.
    let down = run.group("down");
    assert_eq!(down.len(), FAILING);
    let failing = &down[0];
    let p = panels_of(run, failing);
    let empty_ok: Vec<&str> = HTTPS_ONLY.iter().chain(ZONES).copied().collect();
    only_this_checker(run, failing, &p, &empty_ok).await;
    let one = |t: &str| p[t][0].clone();
    assert_eq!(single(&eval(run, &one("Ready"), None).await, "Ready"), 0.0);
    assert_eq!(
        single(&eval(run, &one("Last HTTP status"), None).await, "status"),
        503.0
    );
    let reasons = eval(run, &one("Failure reasons"), None).await;
    assert_eq!(
        reasons.len(),
        1,
        "failure reasons of {failing}: {reasons:?}"
    );
    assert_eq!(reasons[0].0["reason"], "UnexpectedStatus");
    assert!(reasons[0].1 >= 1.0, "failures of {failing}: {reasons:?}");
    let results: Vec<String> = eval(run, &one("Probes per second"), None)
        .await
        .into_iter()
        .map(|(l, _)| l["result"].clone())
        .collect();
    assert_eq!(results, ["failure"], "probes of {failing} by result");
    // Its objective (99.5%) is spent: every probe fails, 200 times the
    // allowed share.
    assert_eq!(
        single(&eval(run, &one("Objective"), None).await, "Objective"),
        0.995
    );
    assert_eq!(p["Burn rate"].len(), 2, "1h and 6h");
    for expr in &p["Burn rate"] {
        let burn = single(&eval(run, expr, None).await, "Burn rate");
        assert!((burn - 200.0).abs() < 0.5, "burn rate of {failing}: {burn}");
    }

    // A checker the scale-out moved: one owner before, NEW_REPLICA now, and
    // its probe counters added up over both.
    let moved = &run.moved[0];
    let p = panels_of(run, moved);
    let fails = ["down-", "sla-", "brk-"]
        .iter()
        .any(|g| moved.starts_with(g));
    let empty_ok: Vec<&str> = HTTPS_ONLY
        .iter()
        .chain(ZONES)
        .chain(if fails { &[][..] } else { FAILURES })
        .chain(if moved.starts_with("down-") {
            &[][..]
        } else {
            SLO
        })
        .copied()
        .collect();
    only_this_checker(run, moved, &p, &empty_ok).await;
    let owner = &p["Owner"][0];
    let owner_at = |at: Option<f64>| async move {
        let s = eval(run, owner, at).await;
        assert_eq!(s.len(), 1, "owner of {moved} at {at:?}: {s:?}");
        s[0].0["replica"].clone()
    };
    assert_eq!(owner_at(Some(run.move_at - 2.0)).await, run.before[moved]);
    assert_eq!(owner_at(None).await, NEW_REPLICA);
    assert_ne!(run.before[moved], NEW_REPLICA);
    println!(
        "checker dashboard: {failing} failing (UnexpectedStatus), {moved} owned by {} then {NEW_REPLICA}",
        run.before[moved]
    );
}
