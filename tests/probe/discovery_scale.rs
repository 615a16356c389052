//! The scale figure of route discovery (README, docs/discovery.md): 5,000
//! Ingresses created on a real API server of its own (a Namespace that
//! opts in, one host each), one operator replica with `--discover-routes`;
//! the time from the first create to all 5,000 checkers existing (owned by
//! their Ingress) and to all of them assigned to the replica, the creates'
//! own time beside it, the leader's applies and memory.
//! `#[ignore]`d (minutes; not part of `make test`): `make discovery-scale`
//! (DISCOVERY_SCALE_INGRESSES sets the number).

use futures::StreamExt;
use k8s_openapi::api::networking::v1::Ingress;
use webchecker::assignment::OWNER_LABEL;
use webchecker::discovery::annotations::{CHECK, INTERVAL_SECONDS};
use webchecker::discovery::{SOURCE_LABEL, ingress::LABEL};

use super::ops::*;
use super::*;

/// Creates at a time: the API server's share for one client, not the
/// operator, is then what bounds the creates.
const CREATES_AT_ONCE: usize = 16;

/// Ingress `name` with one host, probed once an hour (the probes of 5,000
/// names that do not resolve are not what is measured).
fn ingress(name: &str, host: &str) -> Ingress {
    let v = serde_json::json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": name, "annotations": {INTERVAL_SECONDS: "3600"}},
        "spec": {"rules": [{"host": host}]},
    });
    serde_json::from_value(v).expect("an Ingress")
}

/// Generated checkers: (existing with their route as owner, of those
/// assigned to a replica).
async fn generated_count(api: &kube::Api<WebChecker>) -> (usize, usize) {
    let lp = kube::api::ListParams::default().labels(&format!("{SOURCE_LABEL}={LABEL}"));
    let Ok(list) = api.list_metadata(&lp).await else {
        return (0, 0);
    };
    let owned: Vec<_> = list
        .items
        .iter()
        .filter(|m| {
            m.metadata
                .owner_references
                .as_ref()
                .is_some_and(|o| o.iter().any(|r| r.kind == "Ingress"))
        })
        .collect();
    let assigned = owned
        .iter()
        .filter(|m| {
            m.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(OWNER_LABEL))
        })
        .count();
    (owned.len(), assigned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a scale run (minutes); run by `make discovery-scale`"]
async fn thousands_of_ingresses_get_their_checkers() {
    let total: usize = std::env::var("DISCOVERY_SCALE_INGRESSES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000);
    let c: &'static Cluster = Box::leak(Box::new(Cluster::start("discovery-scale")));
    let ns = c.namespace("scale");
    let client = c.client().await;
    let wcs = checkers(&client, &ns);
    let out = c.kubectl(&["annotate", "namespace", &ns, &format!("{CHECK}=true")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The default lease timings (not the tests' fast ones): a figure of
    // discovery, not of a leader lost to a starved machine and found again.
    // All in one namespace: its cap of generated checkers above the run's.
    let cap = format!("--discovery-max-checkers-per-namespace={}", total.max(1));
    let op = Operator::spawn_with_env(
        c,
        &format!("op-{ns}"),
        &ns,
        &["--discover-routes", "--log-level=info", &cap],
        &[],
    );
    op.wait_ready(Duration::from_secs(60)).await;
    eventually(
        Duration::from_secs(60),
        "route discovery active",
        || async {
            let m = op.scrape().await;
            (metric(&m, "webchecker_discovery_active", &[]) == Some(1.0)).then_some(())
        },
    )
    .await;

    let api: kube::Api<Ingress> = kube::Api::namespaced(client.clone(), &ns);
    let t0 = Instant::now();
    let failed = futures::stream::iter(0..total)
        .map(|i| {
            let api = api.clone();
            let ing = ingress(&format!("r{i:05}"), &format!("h{i:05}.{ns}.test"));
            async move { api.create(&Default::default(), &ing).await.is_err() }
        })
        .buffer_unordered(CREATES_AT_ONCE)
        .filter(|failed| futures::future::ready(*failed))
        .count()
        .await;
    let created = t0.elapsed();
    assert_eq!(failed, 0, "creates refused");
    // Polled every second (a metadata list): the figure is good to a second.
    let bound = Duration::from_secs(1800);
    let (mut seen, mut assigned) = (0, 0);
    let mut all = None;
    while assigned < total {
        assert!(
            t0.elapsed() < bound,
            "{seen} of {total} checkers, {assigned} assigned after {bound:?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        (seen, assigned) = generated_count(&wcs).await;
        if seen == total && all.is_none() {
            all = Some(t0.elapsed());
        }
    }
    let all = all.unwrap_or_else(|| t0.elapsed());
    let all_assigned = t0.elapsed();
    let m = op.scrape().await;
    let applies = metric(
        &m,
        "webchecker_discovery_applies_total",
        &[("result", "applied")],
    )
    .unwrap_or(0.0);
    let errors = metric(
        &m,
        "webchecker_discovery_applies_total",
        &[("result", "error")],
    )
    .unwrap_or(0.0);
    println!(
        "| Ingresses | created in | all checkers (owned by their Ingress) after | after the last create | all assigned to a replica after | applies (errors) | leader RSS |"
    );
    println!("|---|---|---|---|---|---|---|");
    println!(
        "| {total} | {:.1} s ({CREATES_AT_ONCE} at once) | {:.1} s | {:.1} s | {:.1} s | {applies} ({errors}) | {:.0} MiB |",
        created.as_secs_f64(),
        all.as_secs_f64(),
        all.saturating_sub(created).as_secs_f64(),
        all_assigned.as_secs_f64(),
        rss_mib(&op).await
    );
    drop(op);
    c.down();
}
