//! The rules evaluate inside Prometheus, and what the panels say matches the
//! scenario: checkers up and down, status codes, replicas, the leader, shard
//! sizes, assignments, moves and drains.

use std::collections::BTreeMap;

use crate::prom::{JOB, by_label, single};
use crate::scenario::{
    BREAKING, FAILING, HEALTHY, LATE, Run, SLOW, SLOW_FAILING, handovers_and_acks,
};
use crate::support::fleet::shard_sizes;
use crate::support::repo;

/// Every rule of the rule file loaded, and none failed its evaluation.
pub async fn rules_evaluate_without_error(run: &Run) {
    let rules = run.prom.api("/api/v1/rules").await;
    let mut nrules = 0;
    for g in rules["data"]["groups"].as_array().unwrap() {
        for r in g["rules"].as_array().unwrap() {
            nrules += 1;
            assert_eq!(r["health"], "ok", "rule {}: {}", r["name"], r["lastError"]);
        }
    }
    let in_file = std::fs::read_to_string(repo().join("alerts/webchecker.rules.yaml"))
        .unwrap()
        .lines()
        .filter(|l| {
            l.trim_start().starts_with("- alert:") || l.trim_start().starts_with("- record:")
        })
        .count();
    assert!(in_file >= 11, "the rule file lists its alerts ({in_file})");
    assert_eq!(nrules, in_file, "every rule of the file loaded: {rules}");
}

pub async fn panels_match_the_scenario(run: &Run) {
    checkers_up_down_and_by_status_code(run).await;
    replicas_leader_and_shards(run).await;
    moves_and_drains_match_the_objects(run).await;
}

/// The checkers, those down, and their last status codes.
async fn checkers_up_down_and_by_status_code(run: &Run) {
    let (prom, sel, total) = (&run.prom, run.sel(), run.total());
    let down_now = FAILING + SLOW_FAILING + BREAKING;
    assert_eq!(
        single(
            &prom
                .samples(&format!(
                    "count(max by (namespace, name) (webchecker_up{{{sel}}}))"
                ))
                .await,
            "checkers"
        ),
        total as f64
    );
    assert_eq!(
        single(
            &prom
                .samples(&format!(
                    "count(max by (namespace, name) (webchecker_up{{{sel}}}) == 0)"
                ))
                .await,
            "checkers down"
        ),
        down_now as f64
    );
    let codes = by_label(
        prom.samples(&format!(
            "count_values(\"code\", max by (namespace, name) (webchecker_last_status_code{{{sel}}}))"
        ))
        .await,
        "code",
    );
    let want: BTreeMap<String, f64> = [
        (
            "200".to_string(),
            (HEALTHY + SLOW + SLOW_FAILING + LATE) as f64,
        ),
        ("500".to_string(), BREAKING as f64),
        ("503".to_string(), FAILING as f64),
    ]
    .into();
    assert_eq!(codes, want, "checkers by last status code");
}

/// Four replicas, one leader, every checker owned once, everyone sees four
/// ring members, and the shard sizes match the owner labels.
async fn replicas_leader_and_shards(run: &Run) {
    let (prom, total) = (&run.prom, run.total());
    let j = format!("job=\"{JOB}\"");
    assert_eq!(
        single(
            &prom
                .samples(&format!("count(webchecker_build_info{{{j}}})"))
                .await,
            "replicas"
        ),
        4.0
    );
    assert_eq!(
        single(
            &prom
                .samples(&format!("sum(webchecker_leader{{{j}}})"))
                .await,
            "leaders"
        ),
        1.0
    );
    assert_eq!(
        single(
            &prom
                .samples(&format!("sum(webchecker_owned_checkers{{{j}}})"))
                .await,
            "owned"
        ),
        total as f64
    );
    for (l, v) in prom
        .samples(&format!("webchecker_ring_members{{{j}}}"))
        .await
    {
        assert_eq!(v, 4.0, "ring members seen by {l:?}");
    }
    let shard = by_label(
        prom.samples(&format!(
            "webchecker_owned_checkers{{{j}}} * on (job, instance) group_left (replica) webchecker_build_info{{{j}}}"
        ))
        .await,
        "replica",
    );
    let want: BTreeMap<String, f64> = shard_sizes(&run.after)
        .into_iter()
        .map(|(o, n)| (o, n as f64))
        .collect();
    assert_eq!(
        shard, want,
        "shard sizes by replica (Prometheus vs owner labels)"
    );
}

/// The leader's moves (new, rebalance) and the old owners' drains, against
/// the handovers and acknowledgements in the object log.
async fn moves_and_drains_match_the_objects(run: &Run) {
    let (prom, total) = (&run.prom, run.total());
    let j = format!("job=\"{JOB}\"");
    let new_moves = single(
        &prom
            .samples(&format!(
                "sum(webchecker_moves_total{{{j}, cause=\"new\"}})"
            ))
            .await,
        "new assignments",
    );
    assert_eq!(
        new_moves as usize, total,
        "every checker assigned once as new"
    );
    let moves: f64 = prom
        .samples(&format!(
            "sum(webchecker_moves_total{{{j}, cause=\"rebalance\"}})"
        ))
        .await
        .first()
        .map(|(_, v)| *v)
        .unwrap_or(0.0);
    let (handovers, acks, gaps) = run.objlog.with(|l| {
        let (h, a) = handovers_and_acks(&l.objs);
        (h, a, l.gaps.len())
    });
    assert_eq!(gaps, 0, "the object log re-listed: changes may be missing");
    assert!(
        handovers >= run.moved.len(),
        "{handovers} handovers in the objects for {} checkers moved",
        run.moved.len()
    );
    assert_eq!(
        moves as usize, handovers,
        "rebalance moves counted by the leader vs handovers in the objects"
    );
    let drains = single(
        &prom
            .samples(&format!("sum(webchecker_drains_total{{{j}}})"))
            .await,
        "drains",
    );
    assert_eq!(
        drains as usize, acks,
        "drains acknowledged by the old owners vs acks in the objects"
    );
    println!(
        "scale-out: {} checkers moved, {handovers} handovers and {acks} acks in the objects, counted {moves} and {drains}",
        run.moved.len()
    );
}
