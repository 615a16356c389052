//! spec.slo end to end, the witness's log as the oracle: the owner counts
//! the probes the target answered, bad ones as bad, writes the count after
//! at most SLO_WRITE_EVERY probes (no write per probe), shows it in
//! `kubectl get wc`, and every new owner goes on from what the killed one
//! wrote, losing at most SLO_WRITE_EVERY probes (docs/slo.md).

use webchecker_kit as support;

mod dependencies;
mod maintenance;

use std::time::{Duration, Instant};

use kube::Api;
use serde_json::json;
use support::fleet::*;
use support::release::text;
use support::*;
use webchecker::SLO_WRITE_EVERY;
use webchecker::api::{SloStatus, WebChecker};

const NAME: &str = "shop";
/// Seconds between probes: the shortest, so that the count passes
/// SLO_WRITE_EVERY in about two minutes.
const EVERY: u64 = 1;
/// Probes answered 503 in a row.
const FAILING: i64 = 10;

/// status.slo and its owner, once `ok` holds for them.
async fn slo_when(
    api: &Api<WebChecker>,
    what: &str,
    within: Duration,
    ok: impl Fn(&SloStatus, &str) -> bool,
) -> (SloStatus, String) {
    eventually(within, what, || async {
        let s = api.get(NAME).await.ok()?.status?;
        let owner = s.owner.clone()?;
        let slo = s.slo?;
        ok(&slo, &owner).then_some((slo, owner))
    })
    .await
}

/// Probes of the checker the witness answered.
fn answered(w: &Witness) -> i64 {
    w.hits().iter().filter(|h| h.checker == NAME).count() as i64
}

async fn answered_at_least(w: &Witness, n: i64, within: Duration) {
    eventually(within, &format!("{n} probes answered"), || async {
        (answered(w) >= n).then_some(())
    })
    .await;
}

/// The whole budget of write-worth probes, and a bound for `k` probes.
const N: i64 = SLO_WRITE_EVERY as i64;

fn probes(k: i64) -> Duration {
    Duration::from_secs(EVERY * 3 * (k as u64 + 10))
}

fn failover() -> Duration {
    Duration::from_secs(EVERY) + LEASE * 3
}

struct World {
    cluster: &'static Cluster,
    fleet: Fleet,
    api: Api<WebChecker>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_match_the_target_and_survive_killed_owners_within_the_bound() {
    let cluster = Cluster::shared("slo");
    let ns = cluster.namespace("slo");
    let ops = (0..2)
        .map(|i| Operator::spawn(cluster, &format!("slo-r{i}"), &ns, FAST_LEASES))
        .collect();
    let witness = Witness::start().await;
    let fleet = Fleet::start_with_witness(cluster, ns.clone(), ops, witness, 0, 1).await;
    // Every failure counts: nobody is asked to confirm it.
    let spec = json!({"confirmFailures": false, "slo": {"objective": "99", "window": "7d"}});
    let obj = checker_object(NAME, &fleet.witness.url(), EVERY, spec);
    create_all(&fleet.client, &ns, vec![obj], 1).await;
    let api: Api<WebChecker> = Api::namespaced(fleet.client.clone(), &ns);
    let mut w = World {
        cluster,
        fleet,
        api,
    };
    let failed = fail_a_known_share(&w).await;
    let (written, owner) = written_past_the_bound(&w, failed).await;
    let (taken, second) = kill_the_owner(&mut w, &written, &owner).await;
    replace_every_replica(&mut w, &written, &taken, [&owner, &second]).await;
}

/// FAILING probes answered 503 (give or take the one in flight at each
/// switch): how many.
async fn fail_a_known_share(w: &World) -> i64 {
    let witness = &w.fleet.witness;
    answered_at_least(witness, 10, probes(10)).await;
    witness.set_mode(NAME, Mode::Status(503));
    let failing_from = answered(witness);
    answered_at_least(witness, failing_from + FAILING, probes(FAILING)).await;
    witness.set_mode(NAME, Mode::Ok);
    answered(witness) - failing_from
}

/// Written at each Ready transition, then once SLO_WRITE_EVERY more were
/// counted (long before the 20 min heartbeat): the failures counted bad,
/// the budget in `kubectl get wc`.
async fn written_past_the_bound(w: &World, failed: i64) -> (SloStatus, String) {
    let (written, owner) = slo_when(
        &w.api,
        "the count written past SLO_WRITE_EVERY",
        probes(2 * N),
        |s, _| s.total_probes > N,
    )
    .await;
    let bad = written.total_probes - written.good_probes;
    println!("{written:?}: {failed} answered 503");
    assert!(
        (bad - failed).abs() <= 1,
        "{bad} counted bad, {failed} answered 503"
    );
    let ns = &w.fleet.ns;
    let get = ["get", "wc", "-n", ns.as_str(), "-o", "wide"];
    let table = text(&w.cluster.kubectl_async(&get).await.stdout);
    println!("{table}");
    for column in ["BUDGET", "AVAILABILITY"] {
        assert!(table.contains(column), "no {column} in\n{table}");
    }
    let budget = written.budget.clone().expect("a budget");
    assert!(table.contains(&budget), "{table}");
    (written, owner)
}

/// Half a write's worth of probes after `written`, its owner dies at once;
/// the next owner writes at its first probe, from the killed one's ledger.
async fn kill_the_owner(w: &mut World, written: &SloStatus, owner: &str) -> (SloStatus, String) {
    let base = written.total_probes;
    let witness = &w.fleet.witness;
    answered_at_least(witness, answered(witness) + N / 2, probes(N / 2)).await;
    let index = w
        .fleet
        .ops
        .iter()
        .position(|o| o.identity == owner)
        .unwrap();
    w.fleet.ops[index].kill();
    let killed = Instant::now();
    // One owner counted every probe so far (the one in flight aside).
    let counted_before_kill = answered(&w.fleet.witness);
    let last = w.api.get(NAME).await.unwrap().status.unwrap().slo.unwrap();
    assert_eq!(last.total_probes, base, "no write between the two reads");
    let before = answered(&w.fleet.witness);
    let (taken, new_owner) = slo_when(
        &w.api,
        "the new owner's first write",
        failover() * 2,
        |_, o| o != owner,
    )
    .await;
    let since_kill = answered(&w.fleet.witness) - before;
    let lost = counted_before_kill - base;
    println!(
        "{owner} killed after its write of {base} probes, about {counted_before_kill} counted by then; \
         {new_owner} wrote {} {:?} later (lost about {lost}, bound {N})",
        taken.total_probes,
        killed.elapsed()
    );
    assert!(
        lost <= N,
        "about {lost} probes lost, more than SLO_WRITE_EVERY"
    );
    assert!(
        taken.total_probes > base && taken.total_probes <= base + since_kill + 1,
        "the new owner resumed from {base}: wrote {} with {since_kill} probes since the kill",
        taken.total_probes
    );
    assert_eq!(taken.counting_since, written.counting_since);
    (taken, new_owner)
}

/// Both first replicas gone: a third takes over from the second's write,
/// and goes on counting.
async fn replace_every_replica(
    w: &mut World,
    written: &SloStatus,
    taken: &SloStatus,
    gone: [&str; 2],
) {
    let ns = w.fleet.ns.clone();
    w.fleet
        .ops
        .push(Operator::spawn(w.cluster, "slo-r2", &ns, FAST_LEASES));
    w.fleet.ops[2].wait_ready(Duration::from_secs(60)).await;
    let second = w
        .fleet
        .ops
        .iter()
        .position(|o| o.identity == gone[1])
        .unwrap();
    w.fleet.ops[second].kill();
    let (third, last_owner) = slo_when(
        &w.api,
        "the third owner's first write",
        failover() * 2,
        |_, o| !gone.contains(&o),
    )
    .await;
    assert_eq!(last_owner, "slo-r2");
    assert!(
        third.total_probes > taken.total_probes,
        "the third owner resumed from {}: wrote {}",
        taken.total_probes,
        third.total_probes
    );
    assert_eq!(third.counting_since, written.counting_since);
    assert_eq!(exclusivity_violation(&w.fleet.witness.hits()), None);
    let labels = [("namespace", ns.as_str()), ("name", NAME)];
    eventually(failover() * 2, "the third owner counts", || async {
        let m = w.fleet.ops[2].metrics().await?;
        let v = metric(&m, "webchecker_slo_probes_total", &labels)?;
        (v >= 3.0).then_some(v)
    })
    .await;
}
