//! Zone quorum (`spec.locations: {zones: 3, quorum: 2}`): every checker is
//! probed from the three zones each interval, one replica per zone; one
//! zone's broken path makes its checkers Degraded (naming the zone), never
//! Ready=False; a target really down is Ready=False once two zones fail.
//! The oracle is the witness's log: per checker and zone, one prober at a
//! time (invariant 2 per zone), three probes per checker per interval.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use kube::Api;
use kube::api::ListParams;
use serde_json::json;

use crate::support::fleet::*;
use crate::support::netns::{Netns, ZonedReplicas};
use crate::support::oracle::zone_overlaps;
use crate::support::*;
use webchecker::api::WebChecker;

const CHECKERS: usize = 60;
const CUT: Duration = Duration::from_secs(20);

fn zone_of(replica: &str) -> String {
    replica.rsplit('-').next().unwrap().to_string()
}

/// Ready (status, message), Degraded (status, message) and the zones'
/// results of one checker.
type Checker = (
    (String, String),
    Option<(String, String)>,
    Vec<(String, String)>,
);

/// Each checker's, by name.
type Seen = BTreeMap<String, Checker>;

async fn seen(api: &Api<WebChecker>) -> Seen {
    let list = api.list(&ListParams::default()).await.unwrap();
    list.items
        .into_iter()
        .map(|wc| {
            let name = wc.metadata.name.clone().unwrap();
            let s = wc.status.unwrap_or_default();
            let ready = s
                .condition("Ready")
                .map(|c| (c.status.clone(), c.message.clone()))
                .unwrap_or_default();
            let degraded = s
                .condition("Degraded")
                .map(|c| (c.status.clone(), c.message.clone()));
            let zones = s
                .zones
                .iter()
                .map(|z| (z.zone.clone(), z.result.clone()))
                .collect();
            (name, (ready, degraded, zones))
        })
        .collect()
}

/// Waits until every checker satisfies `ok` (within `timeout`); the time
/// it took. On a timeout the panic shows the checkers that did not.
async fn wait_all(
    api: &Api<WebChecker>,
    timeout: Duration,
    what: &str,
    only: &[String],
    ok: impl Fn(
        &(
            (String, String),
            Option<(String, String)>,
            Vec<(String, String)>,
        ),
    ) -> bool,
) -> Duration {
    let start = Instant::now();
    loop {
        let now = seen(api).await;
        let bad: Vec<_> = now
            .iter()
            .filter(|(n, v)| (only.is_empty() || only.contains(n)) && !ok(v))
            .collect();
        if !now.is_empty() && bad.is_empty() {
            return start.elapsed();
        }
        if start.elapsed() > timeout {
            panic!(
                "{what}: not within {timeout:?}: {} checkers, e.g. {:#?}",
                bad.len(),
                &bad[..bad.len().min(3)]
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn all_zones(result: &str) -> Vec<(String, String)> {
    ["a", "b", "c"]
        .iter()
        .map(|z| (z.to_string(), result.to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_zones_probe_each_checker_and_only_a_quorum_of_them_pages() {
    let cluster = Cluster::shared("confirmation");
    let ns = cluster.namespace("zones");
    let ZonedReplicas {
        netns,
        proxy: _proxy,
        ops,
    } = ZonedReplicas::spawn(cluster, &ns, "zq", FAST_LEASES).await;
    let witness = Witness::start_on(&netns.host_ip).await;
    let mut fleet = Fleet::start_with_witness(cluster, ns.clone(), ops, witness, 0, INTERVAL).await;
    let interval = Duration::from_secs(INTERVAL.into());
    let api: Api<WebChecker> = Api::namespaced(fleet.client.clone(), &ns);
    let names: Vec<String> = (0..CHECKERS).map(|i| format!("z{i}")).collect();
    // The fleet started with none: these are all its checkers.
    super::create_checkers_with(
        &mut fleet,
        &names,
        json!({"locations": {"zones": 3, "quorum": 2}}),
    )
    .await;
    let owners = fleet.wait_all_assigned(Duration::from_secs(60)).await;
    wait_all(
        &api,
        4 * interval + LEASE,
        "every checker Ready with three zones that succeed",
        &[],
        |(r, _, z)| r.0 == "True" && *z == all_zones("Succeeded"),
    )
    .await;

    steady_state(&fleet, &owners, interval).await;
    cut_zone_c(&fleet, &api, &netns, interval).await;

    netns.heal();
    let healed_at = Instant::now();
    wait_all(
        &api,
        2 * interval + LEASE + Duration::from_secs(5),
        "every zone succeeds and nothing is Degraded after the heal",
        &[],
        |(r, d, z)| {
            r.0 == "True"
                && d.as_ref().is_none_or(|(s, _)| s == "False")
                && *z == all_zones("Succeeded")
        },
    )
    .await;
    println!("healed after {:?}", healed_at.elapsed());

    a_target_really_down(&fleet, &api, interval).await;
    isolated_zone(&fleet, &api, &netns, interval).await;
    let ops = std::mem::take(&mut fleet.ops);
    fleet.ops = second_member(cluster, &fleet, ops, &api, &netns, interval).await;

    // The oracle: per checker and zone, one prober at a time.
    let mut hits = fleet.witness.hits();
    hits.extend(fleet.witness.zone_probe_hits());
    let overlaps = zone_overlaps(&hits, &|r| zone_of(r));
    assert!(overlaps.is_empty(), "{overlaps:#?}");
    let mut by: HashMap<String, usize> = HashMap::new();
    for h in fleet.witness.zone_probe_hits() {
        *by.entry(h.replica.clone()).or_default() += 1;
    }
    println!("zone probes by replica: {by:?}");
}

/// Steady state: three probes per checker per interval, one per zone.
async fn steady_state(fleet: &Fleet, owners: &HashMap<String, String>, interval: Duration) {
    let writes_before = super::status_writes(fleet).await;
    let from = Instant::now();
    tokio::time::sleep(10 * interval).await;
    let to = Instant::now();
    let own = fleet.witness.hits_between(from, to);
    let zone_hits: Vec<Hit> = fleet
        .witness
        .zone_probe_hits()
        .into_iter()
        .filter(|h| h.start >= from && h.end <= to)
        .collect();
    let probes = (own.len() + zone_hits.len()) as f64;
    let per_checker = probes / CHECKERS as f64 / 10.0;
    let written = super::status_writes(fleet).await - writes_before;
    let mut per_zone: BTreeMap<String, usize> = BTreeMap::new();
    for h in own.iter().chain(&zone_hits) {
        *per_zone.entry(zone_of(&h.replica)).or_default() += 1;
    }
    println!(
        "zones: 3: {per_checker:.2} probes per checker per interval ({} by owners, {} by other \
         zones; by zone {per_zone:?}), {:.2} status writes per 100 probes",
        own.len(),
        zone_hits.len(),
        100.0 * written / probes.max(1.0)
    );
    assert!((2.85..=3.15).contains(&per_checker), "{per_checker}");
    assert!(
        written / probes < 0.01,
        "{written} writes for {probes} probes"
    );
    for h in &zone_hits {
        let owner = &h.headers[ZONE_FOR];
        assert_eq!(owner, &owners[&h.checker], "{h:?}");
        assert_ne!(zone_of(&h.replica), zone_of(owner), "{h:?}");
    }
    // Each checker's zone series are exported by its owner alone: 3 per checker in all.
    let mut series = 0.0;
    for o in &fleet.ops {
        let m = o.metrics().await.unwrap_or_default();
        series += m
            .lines()
            .filter(|l| l.starts_with("webchecker_zone_probe_success{"))
            .count() as f64;
    }
    assert_eq!(
        series,
        3.0 * CHECKERS as f64,
        "zone series over all replicas"
    );
}

/// Cut zone c's path to the targets: its probes fail, two zones succeed.
/// Left cut: the caller heals.
async fn cut_zone_c(fleet: &Fleet, api: &Api<WebChecker>, netns: &Netns, interval: Duration) {
    let cut_at = Instant::now();
    netns.cut_tcp_to(&[fleet.witness.addr.port()]);
    let mut ready_false = 0usize;
    let mut all_degraded_after = None;
    let mut last = Seen::new();
    while cut_at.elapsed() < CUT {
        let now = seen(api).await;
        last = now.clone();
        ready_false = ready_false.max(now.values().filter(|(r, _, _)| r.0 == "False").count());
        let degraded = now
            .values()
            .filter(|(_, d, z)| {
                d.as_ref()
                    .is_some_and(|(s, m)| s == "True" && m.contains("zone c (replica zq-c)"))
                    && z.iter().any(|(zone, r)| zone == "c" && r == "Failed")
            })
            .count();
        if degraded == CHECKERS && all_degraded_after.is_none() {
            all_degraded_after = Some(cut_at.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!(
        "{CUT:?} cut of zone c: {ready_false} of {CHECKERS} Ready=False; all Degraded naming zone \
         c after {all_degraded_after:?}"
    );
    assert_eq!(ready_false, 0, "one zone's broken path paged");
    let not: Vec<_> = last
        .iter()
        .filter(|(_, (_, d, _))| d.as_ref().is_none_or(|(s, _)| s != "True"))
        .take(3)
        .collect();
    let degraded_in = all_degraded_after
        .unwrap_or_else(|| panic!("every checker showed zone c failing; at the end e.g. {not:#?}"));
    assert!(degraded_in <= 2 * interval + LEASE, "{degraded_in:?}");
}

/// A target really down: every zone fails, Ready=False. The targets are up
/// again on return.
async fn a_target_really_down(fleet: &Fleet, api: &Api<WebChecker>, interval: Duration) {
    let down: Vec<String> = (0..6).map(|i| format!("z{i}")).collect();
    for c in &down {
        fleet.witness.set_mode(c, Mode::Status(503));
    }
    let down_in = wait_all(
        api,
        interval + Duration::from_secs(2) + LEASE,
        "the down targets Ready=False from the quorum",
        &down,
        |(r, _, _)| r.0 == "False" && r.1.contains("failing in 3 of 3 zones"),
    )
    .await;
    println!(
        "target down: Ready=False after {down_in:?}: {:?}",
        seen(api).await["z0"].0.1
    );

    for c in &down {
        fleet.witness.set_mode(c, Mode::Ok);
    }
}

/// Zone c cut off from its peers and from the targets, the API server still
/// reachable (the classic zone isolation): its own probes fail and nobody
/// answers its asks, nor reaches it. No checker turns Ready=False: one
/// zone's word is no quorum, whatever the others did not say.
async fn isolated_zone(fleet: &Fleet, api: &Api<WebChecker>, netns: &Netns, interval: Duration) {
    let ready = |(r, _, z): &Checker| r.0 == "True" && *z == all_zones("Succeeded");
    wait_all(
        api,
        3 * interval + LEASE,
        "every checker Ready again",
        &[],
        ready,
    )
    .await;
    let ops = &fleet.ops;
    let peers: Vec<u16> = ops[..2]
        .iter()
        .flat_map(|o| [o.port, o.confirm_port])
        .collect();
    let own = [ops[2].port, ops[2].confirm_port];
    let cut_at = Instant::now();
    netns.isolate(&[fleet.witness.addr.port()], &peers, &own);
    let (mut ready_false, mut said) = (0usize, None);
    while cut_at.elapsed() < CUT {
        let now = seen(api).await;
        ready_false = ready_false.max(now.values().filter(|(r, _, _)| r.0 == "False").count());
        // Its own checkers say what is known: zone c fails, a and b are silent.
        said = said.or_else(|| {
            now.values()
                .filter_map(|(_, d, _)| d.as_ref())
                .find(|(s, m)| s == "True" && m.contains("no answer from zone a, b"))
                .map(|(_, m)| m.clone())
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    netns.heal();
    println!(
        "{CUT:?} isolation of zone c from its peers and the targets: {ready_false} of {CHECKERS} \
         Ready=False; its checkers say e.g. {said:?}"
    );
    assert_eq!(ready_false, 0, "an isolated zone paged");
    assert!(said.is_some(), "the isolated zone's checkers say so");
    wait_all(
        api,
        3 * interval + LEASE + Duration::from_secs(5),
        "healed",
        &[],
        ready,
    )
    .await;
}

/// Two members in zone b; the one a checker's round asks first is killed:
/// the other answers in the same round, so zone b never shows Unknown.
async fn second_member(
    cluster: &'static Cluster,
    fleet: &Fleet,
    mut ops: Vec<Operator>,
    api: &Api<WebChecker>,
    netns: &Netns,
    interval: Duration,
) -> Vec<Operator> {
    let flags: Vec<&str> = FAST_LEASES.iter().copied().chain(["--zone=b"]).collect();
    let b2 = Operator::spawn_placed(
        cluster,
        "zq-b2",
        &fleet.ns,
        &flags,
        &cluster.kubeconfig,
        &netns.host_ip,
        None,
    );
    b2.wait_ready(Duration::from_secs(60)).await;
    // Both of zone b probe for the other zones' owners by now.
    eventually(
        Duration::from_secs(30),
        "zq-b and zq-b2 both probe for other zones",
        || async {
            let since = Instant::now() - 2 * interval;
            let by: std::collections::HashSet<String> = fleet
                .witness
                .zone_probe_hits()
                .into_iter()
                .filter(|h| h.start > since)
                .map(|h| h.replica)
                .collect();
            (by.contains("zq-b") && by.contains("zq-b2")).then_some(())
        },
    )
    .await;
    let killed_at = Instant::now();
    ops[1].kill();
    let (mut unknown, mut ready_false) = (Vec::new(), 0usize);
    while killed_at.elapsed() < 4 * interval + LEASE {
        let now = seen(api).await;
        ready_false = ready_false.max(now.values().filter(|(r, _, _)| r.0 == "False").count());
        for (name, (_, _, zones)) in &now {
            if zones.iter().any(|(z, r)| z == "b" && r == "Unknown") {
                unknown.push(name.clone());
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    unknown.sort();
    unknown.dedup();
    println!(
        "zone b's first member killed: {} checkers showed zone b Unknown, {ready_false} Ready=False",
        unknown.len()
    );
    assert!(unknown.is_empty(), "zone b went unanswered for {unknown:?}");
    assert_eq!(ready_false, 0);
    ops.push(b2);
    ops
}
