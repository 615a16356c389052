//! A WebCheckerMaintenance: a weekly window over a namespace's database
//! checkers.

use super::*;

/// maintenance.yaml: the window's status covers the one labelled checker
/// and names its next opening, a Sunday at 02:00 in Berlin; it is open
/// exactly when the last Sunday's opening is less than two hours ago.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weekly_window_reports_what_it_covers_and_when_it_opens() {
    let (ns, _api) = world("ex-maint").await;
    let _op = operator(&ns, &format!("op-{ns}"), &[]).await;
    apply_example(&ns, "maintenance.yaml").await;
    let status = eventually(FIRST, "the window's status", || async {
        let out = kubectl(&["get", "wcm", "database-patching", "-n", &ns, "-o", "json"]).await;
        let v: serde_json::Value = serde_json::from_str(&out).ok()?;
        let s = v["status"].clone();
        (s["checkers"] == 1 && s["nextStart"].is_string()).then_some(s)
    })
    .await;
    let next: chrono::DateTime<chrono::Utc> =
        status["nextStart"].as_str().unwrap().parse().unwrap();
    // 02:00 in Berlin: 01:00 UTC in winter, 00:00 in summer.
    let utc = next.format("%A %H:%M").to_string();
    assert!(
        utc == "Sunday 01:00" || utc == "Sunday 00:00",
        "{utc}: {status}"
    );
    let now = chrono::Utc::now();
    assert!(
        next > now && next - now <= chrono::Duration::days(7),
        "{status}"
    );
    let last = next - chrono::Duration::days(7);
    let open = now - last < chrono::Duration::hours(2);
    assert_eq!(status["active"], open, "{status}");
    let table = kubectl(&["get", "wcm", "-n", &ns]).await;
    for column in ["ACTIVE", "COVERS", "NEXT", "database-patching"] {
        assert!(table.contains(column), "no {column} in\n{table}");
    }
}
