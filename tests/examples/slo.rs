//! spec.slo: an objective over the probes of an https site.

use super::*;

/// slo.yaml against nginx: status.slo counts the probes and shows the whole
/// 43 minute budget of 99.9% over 30 days left, in `kubectl get wc` too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_objective_reports_its_budget() {
    let (ns, api) = world("ex-slo").await;
    let ip = loopback_ip();
    let public = PublicCa::new();
    let leaf = public.ca.leaf(&["www.example.com"]);
    let page = [("www/index.html", "<h1>store</h1>\n")];
    let web = https_site(ip, &["www.example.com"], &leaf, &page, "").await;
    let _op = operator(&ns, &format!("op-{ns}"), &[&public.flag]).await;

    apply_example(&ns, "slo.yaml").await;
    let slo = eventually(FIRST, "status.slo with a counted probe", || async {
        let slo = api.get("storefront-slo").await.ok()?.status?.slo?;
        (slo.total_probes >= 1).then_some(slo)
    })
    .await;
    assert_eq!(
        (slo.objective.as_str(), slo.window.as_str()),
        ("99.9%", "30d")
    );
    assert_eq!(slo.good_probes, slo.total_probes);
    assert_eq!(slo.availability.as_deref(), Some("100%"));
    assert_eq!(slo.budget.as_deref(), Some("100% (43m of 43m)"));
    assert_eq!(slo.budget_seconds, 2592);
    assert_eq!(slo.burn_rate_1h.as_deref(), Some("0.00"));
    assert!(!slo.window_complete);
    let table = kubectl(&["get", "wc", "-n", &ns, "-o", "wide"]).await;
    for column in ["BUDGET", "AVAILABILITY", "100% (43m of 43m)"] {
        assert!(table.contains(column), "no {column} in\n{table}");
    }
    assert!(web.access_log().lines().count() >= 1);
}
