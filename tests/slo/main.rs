//! spec.slo end to end, the witness's log as the oracle: the owner counts
//! the probes the target answered, bad ones as bad, writes the count after
//! at most SLO_WRITE_EVERY probes (no write per probe), shows it in
//! `kubectl get wc`, and every new owner goes on from what the killed one
//! wrote, losing at most SLO_WRITE_EVERY probes (docs/slo.md).

use webchecker_kit as support;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_match_the_target_and_survive_killed_owners_within_the_bound() {
    let cluster = Cluster::shared("slo");
    let ns = cluster.namespace("slo");
    let ops = (0..2)
        .map(|i| Operator::spawn(cluster, &format!("slo-r{i}"), &ns, FAST_LEASES))
        .collect();
    let witness = Witness::start().await;
    let mut fleet = Fleet::start_with_witness(cluster, ns.clone(), ops, witness, 0, 1).await;
    // Every failure counts: nobody is asked to confirm it.
    let spec = json!({"confirmFailures": false, "slo": {"objective": "99", "window": "7d"}});
    let obj = checker_object(NAME, &fleet.witness.url(), EVERY, spec);
    create_all(&fleet.client, &ns, vec![obj], 1).await;
    let api: Api<WebChecker> = Api::namespaced(fleet.client.clone(), &ns);
    let n = i64::from(SLO_WRITE_EVERY);
    let probes = |k: i64| Duration::from_secs(EVERY * 3 * (k as u64 + 10));

    // A known share fails: FAILING probes answered 503 (give or take the
    // one in flight at each switch).
    answered_at_least(&fleet.witness, 10, probes(10)).await;
    fleet.witness.set_mode(NAME, Mode::Status(503));
    let failing_from = answered(&fleet.witness);
    answered_at_least(&fleet.witness, failing_from + FAILING, probes(FAILING)).await;
    fleet.witness.set_mode(NAME, Mode::Ok);
    let failed = answered(&fleet.witness) - failing_from;

    // Written at each Ready transition, then once SLO_WRITE_EVERY more were
    // counted: long before the 20 min heartbeat.
    let (written, owner) = slo_when(
        &api,
        "the count written past SLO_WRITE_EVERY",
        probes(2 * n),
        |s, _| s.total_probes > n,
    )
    .await;
    let bad = written.total_probes - written.good_probes;
    println!("{written:?}: {failed} answered 503");
    assert!(
        (bad - failed).abs() <= 1,
        "{bad} counted bad, {failed} answered 503"
    );
    let table = text(
        &cluster
            .kubectl_async(&["get", "wc", "-n", &ns, "-o", "wide"])
            .await
            .stdout,
    );
    println!("{table}");
    for column in ["BUDGET", "AVAILABILITY"] {
        assert!(table.contains(column), "no {column} in\n{table}");
    }
    assert!(
        table.contains(written.budget.as_deref().unwrap()),
        "{table}"
    );

    // Half a write's worth of probes more, then the owner dies at once.
    let base = written.total_probes;
    answered_at_least(
        &fleet.witness,
        answered(&fleet.witness) + n / 2,
        probes(n / 2),
    )
    .await;
    let index = fleet.ops.iter().position(|o| o.identity == owner).unwrap();
    fleet.ops[index].kill();
    let killed = Instant::now();
    // One owner counted every probe so far (the one in flight aside).
    let counted_before_kill = answered(&fleet.witness);
    let last = api.get(NAME).await.unwrap().status.unwrap().slo.unwrap();
    assert_eq!(last.total_probes, base, "no write between the two reads");

    // The new owner writes at its first probe, from the killed one's ledger.
    let failover = Duration::from_secs(EVERY) + LEASE * 3;
    let before = answered(&fleet.witness);
    let (taken, new_owner) = slo_when(&api, "the new owner's first write", failover * 2, |_, o| {
        o != owner
    })
    .await;
    let since_kill = answered(&fleet.witness) - before;
    let lost = counted_before_kill - base;
    println!(
        "{owner} killed after its write of {base} probes, about {counted_before_kill} counted by then; \
         {new_owner} wrote {} {:?} later (lost about {lost}, bound {n})",
        taken.total_probes,
        killed.elapsed()
    );
    assert!(
        lost <= n,
        "about {lost} probes lost, more than SLO_WRITE_EVERY"
    );
    assert!(
        taken.total_probes > base && taken.total_probes <= base + since_kill + 1,
        "the new owner resumed from {base}: wrote {} with {since_kill} probes since the kill",
        taken.total_probes
    );
    assert_eq!(taken.counting_since, written.counting_since);

    // Every replica replaced: a third takes over from the second's write.
    fleet
        .ops
        .push(Operator::spawn(cluster, "slo-r2", &ns, FAST_LEASES));
    fleet.ops[2].wait_ready(Duration::from_secs(60)).await;
    let second = fleet
        .ops
        .iter()
        .position(|o| o.identity == new_owner)
        .unwrap();
    fleet.ops[second].kill();
    let (third, last_owner) = slo_when(
        &api,
        "the third owner's first write",
        failover * 2,
        |_, o| o != owner && o != new_owner,
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
    assert_eq!(exclusivity_violation(&fleet.witness.hits()), None);

    // And goes on counting: its own counters grow.
    let labels = [("namespace", ns.as_str()), ("name", NAME)];
    eventually(failover * 2, "the third owner counts", || async {
        let m = fleet.ops[2].metrics().await?;
        let v = metric(&m, "webchecker_slo_probes_total", &labels)?;
        (v >= 3.0).then_some(v)
    })
    .await;
}
