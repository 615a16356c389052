//! A verdict never rests on one replica's network (docs/architecture.md,
//! "Verdicts"): three replicas in three zones, one of them in a network
//! namespace of its own whose path to the targets an nftables drop cuts
//! while its path to the API server and its peers stays. Its checkers stay
//! Ready (another zone's replica probes them and succeeds) and show
//! Degraded naming it; checkers that opted out of confirmation turn Ready=False,
//! which is what every checker would do without it. A target really down is
//! Ready=False within an interval, confirmed by another zone. The witness's
//! log is the oracle: owners' probes stay exclusive, and confirmation
//! probes come from another zone, once per failure, never in steady state.
//! Through the cut, the refuted failures spend none of a checker's error
//! budget (spec.slo), while those of the checkers that do not ask do.

mod fairness;
mod hostile;
use webchecker_kit as support;
mod zones;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::fleet::*;
use support::netns::ZonedReplicas;
use support::*;
use webchecker::api::WebChecker;

const CHECKERS: usize = 300;
/// Checkers with `confirmFailures: false`: what every checker would do
/// without confirmation.
const OPTED_OUT: usize = 60;
const CUT: Duration = Duration::from_secs(30);

/// Ready, Degraded (if any, with its message) of every checker.
async fn conditions(
    api: &Api<WebChecker>,
) -> BTreeMap<String, (String, Option<(String, String)>, String)> {
    let list = api.list(&ListParams::default()).await.unwrap();
    list.items
        .into_iter()
        .map(|wc| {
            let name = wc.metadata.name.clone().unwrap();
            let status = wc.status.unwrap_or_default();
            let ready = status
                .condition("Ready")
                .map(|c| (c.status.clone(), c.message.clone()))
                .unwrap_or_default();
            let degraded = status
                .condition("Degraded")
                .map(|c| (c.status.clone(), c.message.clone()));
            (name, (ready.0, degraded, ready.1))
        })
        .collect()
}

/// A replica's status write delay so far: (sum of seconds, writes).
async fn write_delay(fleet: &Fleet, identity: &str) -> (f64, f64) {
    let m = "webchecker_status_write_delay_seconds";
    (
        fleet.counter(identity, &format!("{m}_sum"), &[]).await,
        fleet.counter(identity, &format!("{m}_count"), &[]).await,
    )
}

/// A counter summed over the replicas but `except`.
async fn summed(fleet: &Fleet, except: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    let mut total = 0.0;
    for o in fleet.ops.iter().filter(|o| o.identity != except) {
        total += fleet.counter(&o.identity, name, labels).await;
    }
    total
}

/// Status writes that landed, over every replica.
async fn status_writes(fleet: &Fleet) -> f64 {
    summed(
        fleet,
        "",
        "webchecker_status_writes_total",
        &[("result", "ok")],
    )
    .await
}

fn zone_of(replica: &str) -> &str {
    replica.rsplit('-').next().unwrap()
}

/// Creates checkers `names` on the fleet's witness with `extra` in their
/// spec, and counts them among the fleet's.
async fn create_checkers_with(fleet: &mut Fleet, names: &[String], extra: serde_json::Value) {
    let dynamic = fleet.api();
    for name in names {
        let o = checker_object(name, &fleet.witness.url(), INTERVAL.into(), extra.clone());
        dynamic.create(&PostParams::default(), &o).await.unwrap();
    }
    fleet.names.extend(names.iter().cloned());
}

/// The cut replica's checkers: those that confirm, and how many opted out.
struct Share<'a> {
    cut_one: &'a str,
    mine: Vec<&'a String>,
    mine_opted: usize,
}

impl<'a> Share<'a> {
    fn of(owners: &'a HashMap<String, String>, cut_one: &'a str) -> Share<'a> {
        let mine: Vec<&String> = owners
            .iter()
            .filter(|(n, o)| *o == cut_one && !n.starts_with('o'))
            .map(|(n, _)| n)
            .collect();
        let mine_opted = owners
            .iter()
            .filter(|(n, o)| *o == cut_one && n.starts_with('o'))
            .count();
        assert!(
            !mine.is_empty() && mine_opted > 0,
            "{cut_one} owns checkers of both kinds"
        );
        Share {
            cut_one,
            mine,
            mine_opted,
        }
    }
}

/// What the watch over the cut saw.
struct DuringCut {
    /// The most confirming and opted-out checkers Ready=False at once.
    false_confirming: usize,
    false_opted: usize,
    /// When each of the cut replica's checkers first showed Degraded naming it.
    degraded_at: HashMap<String, Duration>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_replicas_broken_path_pages_nobody_and_a_down_target_is_confirmed_from_another_zone() {
    let cluster = Cluster::shared("confirmation");
    let ns = cluster.namespace("confirm");
    let ZonedReplicas {
        netns,
        proxy: _proxy,
        ops,
    } = ZonedReplicas::spawn(cluster, &ns, "cf", FAST_LEASES).await;
    let host = netns.host_ip.clone();
    let cut_one = "cf-c";
    let witness = Witness::start_on(&host).await;
    witness.set_hold(support::HOLD.0, support::HOLD.1);
    let mut fleet =
        Fleet::start_with_witness(cluster, ns.clone(), ops, witness, CHECKERS, INTERVAL).await;
    let interval = Duration::from_secs(INTERVAL.into());
    let api: Api<WebChecker> = Api::namespaced(fleet.client.clone(), &ns);
    let opted: Vec<String> = (0..OPTED_OUT).map(|i| format!("o{i}")).collect();
    let objective = json!({"objective": "99"});
    create_checkers_with(
        &mut fleet,
        &opted,
        json!({"confirmFailures": false, "slo": objective.clone()}),
    )
    .await;
    let owners = fleet.wait_all_assigned(Duration::from_secs(60)).await;
    fleet
        .wait_all_probed_since(Instant::now(), Duration::from_secs(30))
        .await;

    steady_state(&fleet, interval).await;

    // Cut the third replica's path to the targets; its checkers that
    // confirm get an objective first.
    let share = Share::of(&owners, cut_one);
    with_an_objective(&api, &share.mine, objective, interval).await;
    let delay_before = write_delay(&fleet, cut_one).await;
    let cut_at = Instant::now();
    netns.cut_tcp_to(&[fleet.witness.addr.port()]);
    let during = watch_the_cut(&api, &share, cut_at).await;
    check_the_cut(&fleet, &api, &share, delay_before, during, interval).await;
    refuted_failures_spend_no_budget(&fleet, &share).await;

    // Heal: everything Ready=True and Degraded=False again.
    netns.heal();
    let healed_at = Instant::now();
    eventually(
        2 * interval + LEASE + Duration::from_secs(5),
        "every checker Ready and none Degraded after the heal",
        || async {
            let now = conditions(&api).await;
            now.values()
                .all(|(ready, degraded, _)| {
                    ready == "True" && degraded.as_ref().is_none_or(|(s, _)| s == "False")
                })
                .then_some(())
        },
    )
    .await;
    println!(
        "healed: all Ready, none Degraded after {:?}",
        healed_at.elapsed()
    );

    a_target_really_down(&fleet, &api, &owners, interval).await;
    the_oracle(&fleet, &owners);
}

/// Gives `names` spec.slo and waits until each status has it.
async fn with_an_objective(
    api: &Api<WebChecker>,
    names: &[&String],
    objective: serde_json::Value,
    interval: Duration,
) {
    let patch = json!({"spec": {"slo": objective}});
    for n in names {
        api.patch(n, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }
    eventually(2 * interval + LEASE, "status.slo on each", || async {
        for n in names {
            api.get(n).await.ok()?.status?.slo?;
        }
        Some(())
    })
    .await;
}

/// spec.slo through the cut: the cut replica's failures that another zone
/// refuted count good, and those of the checkers that do not ask count bad.
async fn refuted_failures_spend_no_budget(fleet: &Fleet, share: &Share<'_>) {
    let text = fleet.op(share.cut_one).metrics().await.expect("metrics");
    let counts = |n: &str| {
        let l = [("namespace", fleet.ns.as_str()), ("name", n)];
        let of = |family| metric(&text, family, &l).unwrap_or(0.0);
        (
            of("webchecker_slo_good_probes_total"),
            of("webchecker_slo_probes_total"),
        )
    };
    for n in &share.mine {
        let (good, all) = counts(n);
        assert!(
            all > 0.0 && good == all,
            "{n}: {good} good of {all} counted"
        );
    }
    let bad: f64 = fleet
        .names
        .iter()
        .filter(|n| n.starts_with('o'))
        .map(|n| counts(n))
        .map(|(good, all)| all - good)
        .sum();
    println!(
        "objectives through the cut: {} checkers of {} refuted, no probe counted bad; \
         {bad} counted bad on its checkers that do not ask",
        share.mine.len(),
        share.cut_one
    );
    assert!(bad > 0.0, "the failures nobody was asked about count bad");
}

/// Steady state: one probe per checker per interval, no confirmation.
async fn steady_state(fleet: &Fleet, interval: Duration) {
    let writes_before = status_writes(fleet).await;
    let from = Instant::now();
    tokio::time::sleep(10 * interval).await;
    let to = Instant::now();
    let steady = fleet.witness.hits_between(from, to);
    let per_checker = steady.len() as f64 / fleet.names.len() as f64 / 10.0;
    let writes = status_writes(fleet).await - writes_before;
    let probes = steady.len() as f64;
    println!(
        "steady state: {per_checker:.2} probes per checker per interval, {} confirmation probes, \
         {:.2} status writes per 100 probes",
        fleet.witness.confirmation_hits().len(),
        100.0 * writes / probes.max(1.0)
    );
    assert!((0.95..=1.05).contains(&per_checker), "{per_checker}");
    assert!(fleet.witness.confirmation_hits().is_empty());
}

/// Every 500 ms until CUT after `cut_at`: how many checkers are Ready=False,
/// and when each of the cut replica's first shows Degraded naming it.
async fn watch_the_cut(api: &Api<WebChecker>, share: &Share<'_>, cut_at: Instant) -> DuringCut {
    let cut_one = share.cut_one;
    let (mut false_confirming, mut false_opted) = (0usize, 0usize);
    // When each of its checkers first showed Degraded naming it.
    let mut degraded_at: HashMap<String, Duration> = HashMap::new();
    while cut_at.elapsed() < CUT {
        let now = conditions(api).await;
        let down = |opted: bool| {
            now.iter()
                .filter(|(n, (ready, _, _))| n.starts_with('o') == opted && ready == "False")
                .count()
        };
        false_confirming = false_confirming.max(down(false));
        false_opted = false_opted.max(down(true));
        let seen = cut_at.elapsed();
        for n in &share.mine {
            if now[n.as_str()].1.as_ref().is_some_and(|(s, m)| {
                // Refuted by another zone's probe, not merely unconfirmed.
                s == "True"
                    && m.contains(&format!("replica {cut_one} in zone c"))
                    && m.contains("reached the target")
            }) {
                degraded_at.entry(n.to_string()).or_insert(seen);
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    DuringCut {
        false_confirming,
        false_opted,
        degraded_at,
    }
}

/// Nothing of the cut replica's paged, its opted-out checkers did, and all
/// of its confirming checkers were Degraded in time.
async fn check_the_cut(
    fleet: &Fleet,
    api: &Api<WebChecker>,
    share: &Share<'_>,
    delay_before: (f64, f64),
    during: DuringCut,
    interval: Duration,
) {
    let Share {
        cut_one,
        ref mine,
        mine_opted,
    } = *share;
    let DuringCut {
        false_confirming,
        false_opted,
        degraded_at,
    } = during;
    for (n, (ready, _, message)) in conditions(api).await {
        if ready == "False" && !n.starts_with('o') {
            println!("{n}: Ready=False: {message}");
        }
    }
    let unconfirmed = fleet
        .counter(
            cut_one,
            "webchecker_unconfirmed_failures_total",
            &[("zone", "c")],
        )
        .await;
    let busy = summed(
        fleet,
        cut_one,
        "webchecker_confirm_requests_total",
        &[("result", "busy")],
    )
    .await;
    let delay_after = write_delay(fleet, cut_one).await;
    let writes = delay_after.1 - delay_before.1;
    println!(
        "{cut_one}'s status writes during the cut: {writes}, landed {:.2} s after the change on average",
        (delay_after.0 - delay_before.0) / writes.max(1.0)
    );
    let mut times: Vec<Duration> = degraded_at.values().copied().collect();
    times.sort();
    let all_degraded_after = (times.len() == mine.len()).then(|| times[times.len() - 1]);
    println!(
        "{CUT:?} cut of {cut_one}'s path to the targets: {false_confirming} of {CHECKERS} checkers \
         Ready=False (its share: {}); without confirmation {false_opted} of {OPTED_OUT} \
         (its share: {mine_opted}); all its checkers Degraded after {all_degraded_after:?} \
         (first {:?}, median {:?}); {unconfirmed} unconfirmed failures counted in zone c; \
         {busy} asks refused busy",
        mine.len(),
        times.first(),
        times.get(times.len() / 2),
    );
    assert_eq!(false_confirming, 0, "a replica's broken path paged");
    assert_eq!(
        false_opted, mine_opted,
        "the cut is real: the opted-out checkers of {cut_one} turn Ready=False"
    );
    let degraded_in = all_degraded_after.expect("its checkers all showed Degraded");
    assert!(
        degraded_in <= 2 * interval + LEASE,
        "Degraded after {degraded_in:?}"
    );
    assert!(unconfirmed >= mine.len() as f64);
}

/// A target really down: Ready=False, confirmed from another zone.
async fn a_target_really_down(
    fleet: &Fleet,
    api: &Api<WebChecker>,
    owners: &HashMap<String, String>,
    interval: Duration,
) {
    let down: Vec<String> = (0..12).map(|i| format!("c{i}")).collect();
    for c in &down {
        fleet.witness.set_mode(c, Mode::Status(503));
    }
    let down_at = Instant::now();
    let confirmed_in = eventually(
        2 * interval + LEASE + Duration::from_secs(2),
        "the down targets Ready=False, confirmed",
        || async {
            let now = conditions(api).await;
            down.iter()
                .all(|c| now[c].0 == "False" && now[c].2.contains("(confirmed by replica "))
                .then_some(down_at.elapsed())
        },
    )
    .await;
    let now = conditions(api).await;
    for c in &down {
        let owner = &owners[c];
        let message = &now[c].2;
        assert!(
            !message.contains(&format!("in zone {}", zone_of(owner))),
            "{c} (owned in zone {}) confirmed from its own zone: {message}",
            zone_of(owner)
        );
    }
    println!(
        "target down: Ready=False after {confirmed_in:?} (interval {interval:?}), e.g. {:?}",
        now["c0"].2
    );
}

/// The oracle: owners' probes exclusive; confirmations from another zone,
/// for the owner, never by the owner.
fn the_oracle(fleet: &Fleet, owners: &HashMap<String, String>) {
    assert_eq!(exclusivity_violation(&fleet.witness.hits()), None);
    let confirmations = fleet.witness.confirmation_hits();
    assert!(!confirmations.is_empty());
    let mut by: HashMap<&str, usize> = HashMap::new();
    for h in &confirmations {
        let asked_for = &h.headers[CONFIRM_FOR];
        assert_eq!(asked_for, &owners[&h.checker], "{h:?}");
        assert_ne!(zone_of(&h.replica), zone_of(asked_for), "{h:?}");
        *by.entry(h.replica.as_str()).or_default() += 1;
    }
    println!("confirmation probes by replica: {by:?}");
}
