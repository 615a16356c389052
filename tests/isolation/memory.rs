//! Per-namespace memory budgets (docs/security.md, "Take the replica's
//! memory"): 200 checkers of one namespace, each at the per-checker maximum of
//! compiled patterns (17 patterns, about 3.8 MiB), against one replica. With
//! nothing but the per-checker limit the replica would keep some 760 MiB of
//! patterns, three times the chart's 256 MiB limit: an OOM kill, and the
//! checkers move to the next replica, which dies the same way. With the
//! namespace's budget (32 MiB by default) the oldest fit, the others are
//! `QuotaExceeded`, the replica stays under the chart's limit and another
//! namespace sees no change. The same for 200 checkers that each send four
//! 200 KiB header values from a Secret (800 KiB each, 160 MiB in all, kept
//! by the resolver, the engine and the requests): the namespace's budget of
//! values (16 MiB by default) holds 20.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::support::*;

/// The chart's memory limit (values.yaml, resources.limits.memory).
const CHART_LIMIT_KIB: u64 = 256 * 1024;
const INTERVAL: u64 = 2;

/// 16 header checks and a body match of `\w{4}` (about 225 KiB each once
/// compiled): just under the 4 MiB a checker may compile to.
fn heaviest_patterns() -> serde_json::Value {
    let headers: Vec<serde_json::Value> = (0..16)
        .map(|i| serde_json::json!({"name": format!("X-H{i}"), "regex": format!("\\w{{4}}{i}")}))
        .collect();
    serde_json::json!({
        "timeoutSeconds": 1,
        "headerChecks": headers,
        "bodyMatch": {"regex": "\\w{4}16"},
    })
}

/// Ready reason of each checker of `ns`, with its creation order key.
async fn reasons(client: &kube::Client, ns: &str) -> BTreeMap<(String, String), String> {
    checkers_api(client, ns)
        .list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .map(|o| {
            let created = o
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.to_string())
                .unwrap_or_default();
            let reason = o.data["status"]["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
                .and_then(|c| c["reason"].as_str())
                .unwrap_or("")
                .to_string();
            ((created, o.metadata.name.unwrap_or_default()), reason)
        })
        .collect()
}

/// Each checker's Ready reason by creation order key.
type Verdicts = BTreeMap<(String, String), String>;

/// Waits until each of the `n` checkers of `ns` has a Ready reason.
async fn wait_verdicts(client: &kube::Client, ns: &str, n: usize, what: &str) -> Verdicts {
    eventually(Duration::from_secs(120), what, || async {
        let r = reasons(client, ns).await;
        (r.len() == n && r.values().all(|v| !v.is_empty())).then_some(r)
    })
    .await
}

/// Secret `big` of `ns`: four values of 200 KiB.
async fn create_big_secret(client: &kube::Client, ns: &str) {
    let mut data = BTreeMap::new();
    for k in 0..4 {
        data.insert(format!("k{k}"), "v".repeat(200 << 10));
    }
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "big"},
        "stringData": data,
    }))
    .unwrap();
    kube::Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), ns)
        .create(&Default::default(), &secret)
        .await
        .expect("create the Secret");
}

/// Checkers `names` on `host` whose four headers come from Secret `big`.
fn valued_checkers(names: &[String], host: &str) -> Vec<kube::core::DynamicObject> {
    let headers: Vec<serde_json::Value> = (0..4)
        .map(|k| serde_json::json!({"name": format!("X-{k}"), "valueFrom": {"secretKeyRef": {"name": "big", "key": format!("k{k}")}}}))
        .collect();
    names
        .iter()
        .map(|n| checker_object(n, host, 10, serde_json::json!({"headers": headers})))
        .collect()
}

/// Waits until the witness saw a probe of each of `healthy` (B's checkers).
async fn every_one_probed(witness: &Witness, healthy: &[String]) {
    eventually(Duration::from_secs(60), "B's checkers probed", || async {
        let hits = witness.hits();
        healthy
            .iter()
            .all(|n| hits.iter().any(|h| &h.checker == n))
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_over_its_pattern_budget_gets_quota_exceeded_and_the_replica_stays_under_the_chart_limit()
 {
    let c = Cluster::shared("isolation");
    let client = c.client().await;
    let leases = c.namespace("iso-memory-leases");
    let op = Operator::spawn_all_namespaces_with(c, &format!("iso-memory-{leases}"), &leases, &[]);
    op.wait_ready(Duration::from_secs(60)).await;
    let witness = Witness::start().await;

    let b_ns = c.namespace("iso-mem-b");
    let a_ns = c.namespace("iso-mem-a");
    let _cleanup = crate::DeleteCheckers(c, vec![a_ns.clone(), b_ns.clone()]);
    let healthy: Vec<String> = (0..20).map(|i| format!("h{i}")).collect();
    create_checkers(&client, &b_ns, &witness.url(), &healthy, INTERVAL as u32).await;
    every_one_probed(&witness, &healthy).await;

    let heavy: Vec<String> = (0..200).map(|i| format!("heavy{i:03}")).collect();
    let objs_a: Vec<_> = heavy
        .iter()
        .map(|n| checker_object(n, &witness.url(), 10, heaviest_patterns()))
        .collect();
    // A third namespace: headers from a Secret of 800 KiB.
    let v_ns = c.namespace("iso-mem-v");
    let _cleanup_v = crate::DeleteCheckers(c, vec![v_ns.clone()]);
    create_big_secret(&client, &v_ns).await;
    let valued: Vec<String> = (0..200).map(|i| format!("valued{i:03}")).collect();
    let objs = valued_checkers(&valued, &witness.url());
    let from = Instant::now();
    create_all(&client, &v_ns, objs, 8).await;
    create_all(&client, &a_ns, objs_a, 8).await;
    // Every one of A's checkers gets a verdict: probed, or over the budget.
    let what = "a Ready reason for each of A's checkers";
    let verdicts = wait_verdicts(&client, &a_ns, heavy.len(), what).await;
    let over: Vec<&(String, String)> = verdicts
        .iter()
        .filter(|(_, r)| *r == "QuotaExceeded")
        .map(|(k, _)| k)
        .collect();
    let admitted = heavy.len() - over.len();
    let what = "a Ready reason for each checker with values";
    let v_verdicts = wait_verdicts(&client, &v_ns, valued.len(), what).await;
    let v_over = v_verdicts
        .values()
        .filter(|r| *r == "QuotaExceeded")
        .count();
    let peak = proc_memory_kib(op.pid(), "VmHWM");
    let (gap, slowest) = largest_gap(&witness.hits(), &healthy, from, Instant::now());
    println!(
        "200 checkers at the pattern maxima: {admitted} probed, {} QuotaExceeded; 200 checkers with 800 KiB \
         of values: {} probed, {v_over} QuotaExceeded; replica peak RSS {} MiB (chart limit 256 MiB); B's largest \
         gap {gap:?} ({slowest})",
        over.len(),
        valued.len() - v_over,
        peak / 1024
    );
    // 16 MiB holds 20 checkers of 800 KiB (a value not read yet counts
    // nothing until it is).
    let v_admitted = valued.len() - v_over;
    assert!(
        (1..=22).contains(&v_admitted),
        "{v_admitted} checkers with values admitted"
    );
    // 32 MiB holds 8 checkers of about 3.8 MiB.
    assert!(
        (1..=9).contains(&admitted),
        "{admitted} of A's checkers were admitted"
    );
    the_oldest_fit(&verdicts, &over);
    assert!(
        peak < CHART_LIMIT_KIB,
        "the replica's resident memory reached {} MiB",
        peak / 1024
    );
    assert!(
        gap <= Duration::from_secs(INTERVAL + 1),
        "a checker of B waited {gap:?} between two probes ({slowest})"
    );
    refused_then_admitted_once_room_is_made(&client, &a_ns, &verdicts, over[0]).await;
}

/// The newest are over: every admitted checker is older than every refused one.
fn the_oldest_fit(verdicts: &Verdicts, over: &[&(String, String)]) {
    let newest_admitted = verdicts
        .iter()
        .filter(|(_, r)| *r != "QuotaExceeded")
        .map(|(k, _)| k)
        .max()
        .unwrap();
    assert!(
        over.iter().all(|k| *k > newest_admitted),
        "a checker newer than {newest_admitted:?} was admitted before an older one"
    );
}

/// The refusal of `first_over` (the oldest refused) says what to do; once
/// the oldest admitted checker is deleted, `first_over` is probed.
async fn refused_then_admitted_once_room_is_made(
    client: &kube::Client,
    a_ns: &str,
    verdicts: &Verdicts,
    first_over: &(String, String),
) {
    // The message says what to do.
    let api: kube::Api<webchecker::api::WebChecker> = kube::Api::namespaced(client.clone(), a_ns);
    let first_over = &first_over.1;
    let cond = condition(&api, first_over, "Ready")
        .await
        .expect("a Ready condition");
    assert!(
        cond.message.contains("--namespace-pattern-budget-mib") && cond.message.contains("32 MiB"),
        "{}",
        cond.message
    );

    // Room is made: the oldest admitted checker is deleted, and the oldest
    // refused one is probed.
    let oldest = &verdicts.keys().next().unwrap().1;
    checkers_api(client, a_ns)
        .delete(oldest, &Default::default())
        .await
        .expect("delete");
    eventually(
        Duration::from_secs(30),
        "the oldest refused checker probed once room was made",
        || async {
            let r = condition(&api, first_over, "Ready").await?;
            (r.reason != "QuotaExceeded").then_some(())
        },
    )
    .await;
}
