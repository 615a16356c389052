//! spec.locations: three replicas in three zones probe one checker.

use super::*;

/// zones.yaml with replicas in zones a, b and c: Ready=True once the three
/// zones succeed, each zone's result in status.zones; with the target gone
/// every zone fails and Ready turns False.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zone_quorum_from_three_zones() {
    let (ns, api) = world("ex-zones").await;
    let ip = loopback_ip();
    let public = PublicCa::new();
    let leaf = public.ca.leaf(&["www.example.com"]);
    let page = [("www/index.html", "<h1>store</h1>\n")];
    let web = https_site(ip, &["www.example.com"], &leaf, &page, "").await;
    let mut ops = Vec::new();
    for zone in ["a", "b", "c"] {
        let flag = format!("--zone={zone}");
        let id = format!("op-{ns}-{zone}");
        ops.push(operator(&ns, &id, &[&public.flag, &flag]).await);
    }

    apply_example(&ns, "zones.yaml").await;
    let zones = |result: &'static str| {
        let api = api.clone();
        move || {
            let api = api.clone();
            async move {
                let s = api.get("storefront").await.ok()?.status?;
                let mut seen: Vec<(String, String)> = s
                    .zones
                    .iter()
                    .map(|z| (z.zone.clone(), z.result.clone()))
                    .collect();
                seen.sort();
                let want: Vec<(String, String)> = ["a", "b", "c"]
                    .iter()
                    .map(|z| (z.to_string(), result.to_string()))
                    .collect();
                (seen == want).then_some(s)
            }
        }
    };
    eventually(FIRST, "three zones Succeeded", zones("Succeeded")).await;
    let ready = ("Ready", "True", "ProbeSucceeded");
    wait_condition(&api, "storefront", ready, FIRST).await;
    let replicas: std::collections::BTreeSet<String> = api
        .get("storefront")
        .await
        .unwrap()
        .status
        .unwrap()
        .zones
        .iter()
        .map(|z| z.replica.clone())
        .collect();
    assert_eq!(replicas.len(), 3, "one replica per zone: {replicas:?}");
    let probes = web.access_log().lines().count();
    assert!(probes >= 3, "nginx saw {probes} requests");
    show(&ns).await;

    drop(web);
    let within = after_change(interval_of(&api, "storefront").await);
    let failed = eventually(within, "three zones Failed", zones("Failed")).await;
    let c = failed.condition("Ready").unwrap();
    assert_eq!(c.status, "False", "{c:?}");
    println!(
        "storefront with the target gone: Ready=False {}: {}",
        c.reason, c.message
    );
}
