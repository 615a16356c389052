//! Reliability under control-plane faults and bad objects, on a real control
//! plane; the witness targets and the API objects are the judges.

mod busy;
use webchecker_kit as support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use support::fleet::*;
use support::*;

/// Each checker is probed by exactly one replica in `[from, to]`, and that
/// replica is its owner label.
fn single_prober(
    hits: &[Hit],
    owners: &HashMap<String, String>,
    from: Instant,
    to: Instant,
) -> Result<(), String> {
    let mut by: HashMap<&str, std::collections::BTreeSet<&str>> = HashMap::new();
    for h in hits.iter().filter(|h| h.start >= from && h.start <= to) {
        by.entry(&h.checker).or_default().insert(&h.replica);
    }
    for (c, owner) in owners {
        match by.get(c.as_str()) {
            None => return Err(format!("{c} not probed")),
            Some(rs) if rs.len() != 1 || !rs.contains(owner.as_str()) => {
                return Err(format!("{c} probed by {rs:?}, owner {owner}"));
            }
            _ => {}
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_restart_and_compaction_lose_and_duplicate_nothing() {
    // Without the watch cache a compaction makes re-established watches get
    // 410 Gone (docs/control-plane.md), so the replicas must re-list.
    let cluster: &'static Cluster =
        Box::leak(Box::new(Cluster::start_with("etcd", "--watch-cache=false")));
    let mut fleet = Fleet::start_on(cluster, "etcd", 3, 300).await;
    let before = fleet.wait_all_assigned(Duration::from_secs(30)).await;
    let expired_before = fleet.sum("webchecker_watch_expired_total").await;
    cluster.script("restart-etcd");
    cluster.script("compact-etcd");
    // Break the open watches so they re-establish from a compacted version.
    cluster.script("stop-apiserver");
    cluster.script("start-apiserver");
    for o in fleet.ops.iter_mut() {
        assert!(o.exited().is_none(), "{} exited", o.identity);
    }
    // The API server itself must have answered 410 Gone to a resumed watch
    // (counted by the operator only for that answer), else this test proved
    // nothing about re-listing.
    let expired_after = eventually(
        Duration::from_secs(30),
        "a watch ended with 410 Gone and re-listed",
        || async {
            let total = fleet.sum("webchecker_watch_expired_total").await;
            (total > expired_before).then_some(total)
        },
    )
    .await;
    // Settle, then every checker is probed by exactly its owner, and nothing moved.
    tokio::time::sleep(LEASE + RETRY * 2).await;
    let after = fleet.wait_all_assigned(Duration::from_secs(20)).await;
    assert_eq!(
        before, after,
        "no checker moved because of the etcd restart"
    );
    let from = Instant::now();
    tokio::time::sleep(Duration::from_secs(2 * INTERVAL as u64 + 1)).await;
    single_prober(&fleet.witness.hits(), &after, from, Instant::now()).unwrap();
    let owned = fleet.sum("webchecker_owned_checkers").await;
    assert_eq!(
        owned as usize,
        fleet.names.len(),
        "no checker lost or doubled in the replicas' tables"
    );
    println!(
        "etcd restart + compaction: watches ended with 410 Gone {expired_before} -> {expired_after}, owners unchanged"
    );
    fleet.ops.clear();
    cluster.script("down");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_object_is_reported_and_never_stalls_the_others() {
    let cluster: &'static Cluster = Box::leak(Box::new(Cluster::start("malformed")));
    let fleet = Fleet::start_on(cluster, "bad", 2, 40).await;
    // Write an object the current schema would reject, as if stored under an
    // older, looser CRD: relax the CRD, create it, restore the CRD.
    let crd_path = repo().join("crds/webcheckers.test.network.io.yaml");
    let mut loose: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(&crd_path).unwrap()).unwrap();
    // Drop the spec schema so anything goes, and the rules on the whole
    // object that read the spec's fields.
    let root = &mut loose["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    root["properties"]["spec"] =
        serde_yaml::from_str("{type: object, x-kubernetes-preserve-unknown-fields: true}").unwrap();
    if let Some(m) = root.as_mapping_mut() {
        m.remove("x-kubernetes-validations");
    }
    let out = cluster.kubectl_stdin(
        &["replace", "-f", "-"],
        &serde_yaml::to_string(&loose).unwrap(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bad = format!(
        "apiVersion: test.network.io/v1alpha1\nkind: WebChecker\nmetadata:\n  name: bad\nspec:\n  host: {}\n  path: /c/bad\n  intervalSeconds: \"ten\"\n",
        fleet.witness.url()
    );
    let out = eventually(
        Duration::from_secs(20),
        "the loose CRD accepts the object",
        || async {
            let out = cluster.kubectl_stdin(&["apply", "-n", &fleet.ns, "-f", "-"], &bad);
            out.status.success().then_some(out)
        },
    )
    .await;
    println!("{}", String::from_utf8_lossy(&out.stdout));
    // Restore the real schema (a full replace, so no loose field survives).
    let out = cluster.kubectl(&["replace", "-f", crd_path.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The malformed checker is reported as InvalidSpec ...
    let api = fleet.api();
    let status = eventually(
        Duration::from_secs(30),
        "the malformed checker reported",
        || async {
            let o = api.get("bad").await.ok()?;
            let c = o.data.pointer("/status/conditions/0")?.clone();
            (c["reason"] == "InvalidSpec").then_some(c)
        },
    )
    .await;
    println!("malformed object: {status}");
    assert_eq!(status["status"], "False");
    assert!(
        status["message"].as_str().unwrap().contains("schema"),
        "{status}"
    );
    // ... and the others go on, including checkers created after it.
    let late: Vec<String> = (0..5).map(|i| format!("late{i}")).collect();
    create_checkers(
        &fleet.client,
        &fleet.ns,
        &fleet.witness.url(),
        &late,
        INTERVAL,
    )
    .await;
    let from = Instant::now();
    eventually(
        Duration::from_secs(20),
        "every good checker probed after the bad one",
        || async {
            let hits = fleet.witness.hits();
            fleet
                .names
                .iter()
                .chain(late.iter())
                .all(|n| hits.iter().any(|h| &h.checker == n && h.start >= from))
                .then_some(())
        },
    )
    .await;
    assert_eq!(
        fleet.witness.count_for("bad"),
        0,
        "the malformed checker was never probed"
    );
    let mut drop_fleet = fleet;
    drop_fleet.ops.clear();
    cluster.script("down");
}

/// An outage longer than every timer that could end it badly: the status
/// writer's largest backoff (30 s), a watch's server-side timeout plus the
/// silence it is allowed (20 s + 10 s), and twenty leases. Longer adds
/// nothing but waiting (it was 180 s).
const LONG_OUTAGE: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_server_outage_longer_than_every_timer_loses_nothing() {
    let cluster: &'static Cluster = Box::leak(Box::new(Cluster::start("outage3m")));
    let mut fleet = Fleet::start_on(cluster, "long", 3, 1000).await;
    let before = fleet.wait_all_assigned(Duration::from_secs(60)).await;
    let moves_before = fleet.sum("webchecker_moves_total").await;
    let failing: Vec<String> = fleet.names.iter().take(50).cloned().collect();
    cluster.script("stop-apiserver");
    let down_at = Instant::now();
    for c in &failing {
        fleet.witness.set_mode(c, Mode::Status(500));
    }
    let mut saw_unreachable = vec![false; fleet.ops.len()];
    while down_at.elapsed() < LONG_OUTAGE {
        for (i, o) in fleet.ops.iter().enumerate() {
            let m = o
                .metrics()
                .await
                .unwrap_or_else(|| panic!("{} stopped serving metrics", o.identity));
            assert!(
                metric(&m, "webchecker_owned_checkers", &[]).unwrap_or(0.0) > 0.0,
                "{} dropped its checkers",
                o.identity
            );
            if metric(&m, "webchecker_api_reachable", &[]) == Some(0.0) {
                saw_unreachable[i] = true;
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let up_at = Instant::now();
    cluster.script("start-apiserver");
    let returned = Instant::now();
    for o in fleet.ops.iter_mut() {
        assert!(
            o.exited().is_none(),
            "{} exited during the outage",
            o.identity
        );
    }
    assert!(
        saw_unreachable.iter().all(|s| *s),
        "every replica noticed the outage: {saw_unreachable:?}"
    );
    // Probing went on throughout, by the same owners.
    let hits = fleet.assert_probed_throughout(down_at, up_at, "outage of 60 s, 1000 checkers");
    for h in &hits {
        assert_eq!(
            Some(&h.replica),
            before.get(&h.checker),
            "{} probed by a non-owner during the outage",
            h.checker
        );
    }
    // The transitions pending during the outage are written.
    fleet
        .wait_reason(&failing, "UnexpectedStatus", Duration::from_secs(10))
        .await;
    println!(
        "status converged {:?} after the API server returned",
        returned.elapsed()
    );
    let m = fleet.ops[0].metrics().await.unwrap();
    let failures = metric(
        &m,
        "webchecker_lease_renew_failures_total",
        &[("reason", "unreachable")],
    )
    .unwrap_or(0.0);
    assert!(failures > 0.0, "the outage shows in the metrics");
    tokio::time::sleep(LEASE + RETRY * 2).await;
    let after = fleet.wait_all_assigned(Duration::from_secs(10)).await;
    assert_eq!(before, after, "no checker moved because of the outage");
    assert_eq!(
        moves_before,
        fleet.sum("webchecker_moves_total").await,
        "no assignment written because of the outage"
    );
    fleet.ops.clear();
    cluster.script("down");
}
