//! A hostile pod beside the replicas (an address of its own on their
//! network, docs/security.md "Confirmation and zone quorum under a hostile
//! pod"). It holds 150 uploads of 2 MB to a replica's confirm listener,
//! each but its last byte: the replica's peak memory hardly moves, /healthz
//! answers at once and its checkers keep their cadence. Its asks with
//! another ServiceAccount's token, another audience's, an unbound token, a
//! member's real token replayed from its own address, and a member's real
//! token from the member's address about a checker that member does not
//! own, are all refused and probe nothing. Then it sends 100 made-up asks
//! a second to every replica while one replica's path to the targets is
//! cut: none of that replica's checkers, confirmed or judged by zone
//! quorum, turns Ready=False, each is Degraded by a refutation from another
//! zone, and the flood costs the API server no TokenReview.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use kube::Api;
use kube::api::ListParams;
use serde_json::json;

use crate::support::fleet::*;
use crate::support::hostile::{self, Intruder};
use crate::support::netns::{Netns, ZonedReplicas};
use crate::support::*;
use webchecker::api::WebChecker;

const CONFIRMING: usize = 60;
const QUORUM: usize = 30;
const CUT: Duration = Duration::from_secs(20);
/// Uploads held open against one replica, and the size each announces.
const UPLOADS: usize = 150;
const UPLOAD_BYTES: usize = 2_000_000;
/// What the uploads may cost the replica's peak resident memory at most.
const MEMORY_BOUND_KIB: u64 = 16 * 1024;
/// Made-up asks a second to each replica.
const FLOOD_PER_SECOND: u32 = 100;

/// Ready (status, message) and Degraded (status, reason, message) of each checker.
type Seen = BTreeMap<String, ((String, String), Option<(String, String, String)>)>;

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
                .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()));
            (name, (ready, degraded))
        })
        .collect()
}

/// The confirm listener of each replica.
fn confirm_addrs(ops: &[Operator]) -> Vec<SocketAddr> {
    ops.iter()
        .map(|o| format!("{}:{}", o.ip, o.confirm_port).parse().unwrap())
        .collect()
}

/// What the flood and the cut act on and watch.
struct Scene<'a> {
    cluster: &'static Cluster,
    fleet: &'a Fleet,
    netns: &'a Netns,
    api: &'a Api<WebChecker>,
    addrs: &'a [SocketAddr],
    owners: &'a HashMap<String, String>,
    interval: Duration,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_pod_neither_blinds_nor_exhausts_the_replicas() {
    let cluster = Cluster::shared("confirmation");
    let ns = cluster.namespace("hostile");
    let ZonedReplicas {
        netns,
        proxy: _proxy,
        ops,
    } = ZonedReplicas::spawn(cluster, &ns, "hp", FAST_LEASES).await;
    let intruder = Intruder {
        source: netns.add_host_address(),
    };
    let witness = Witness::start_on(&netns.host_ip).await;
    witness.set_hold(HOLD.0, HOLD.1);
    let mut fleet =
        Fleet::start_with_witness(cluster, ns.clone(), ops, witness, CONFIRMING, INTERVAL).await;
    let interval = Duration::from_secs(INTERVAL.into());
    let quorum: Vec<String> = (0..QUORUM).map(|i| format!("q{i}")).collect();
    super::create_checkers_with(
        &mut fleet,
        &quorum,
        json!({"locations": {"zones": 3, "quorum": 2}}),
    )
    .await;
    let owners = fleet.wait_all_assigned(Duration::from_secs(60)).await;
    fleet
        .wait_all_probed_since(Instant::now(), Duration::from_secs(30))
        .await;
    let api: Api<WebChecker> = Api::namespaced(fleet.client.clone(), &ns);
    let addrs = confirm_addrs(&fleet.ops);

    stalled_uploads(&fleet, &intruder, addrs[0], &owners, interval).await;
    refused_asks(cluster, &fleet, &intruder, &addrs, &owners).await;
    let scene = Scene {
        cluster,
        fleet: &fleet,
        netns: &netns,
        api: &api,
        addrs: &addrs,
        owners: &owners,
        interval,
    };
    flood_during_a_cut(&scene, intruder).await;
}

/// Confirmation probes of checker `name` so far.
fn confirmations_of(w: &Witness, name: &str) -> usize {
    w.confirmation_hits()
        .iter()
        .filter(|h| h.checker == name)
        .count()
}

/// The flood, then the cut of the third replica's path to the targets.
async fn flood_during_a_cut(scene: &Scene<'_>, intruder: Intruder) {
    let Scene {
        cluster,
        fleet,
        netns,
        api,
        addrs,
        owners,
        interval,
    } = *scene;
    let ns = &fleet.ns;
    let members: Vec<String> = fleet.ops.iter().map(|o| o.identity.clone()).collect();
    // A checker of the second replica, never cut: nothing asks about it
    // but the flood.
    let of_b = owners
        .iter()
        .find(|(n, o)| *o == &fleet.ops[1].identity && n.starts_with('c'))
        .map(|(n, _)| n.clone())
        .expect("a checker of the second replica");
    let bait = bait(api, &of_b).await;
    let bait_before = confirmations_of(&fleet.witness, &bait.0);
    let reviews_before = hostile::token_reviews(cluster).await;
    let flood = intruder.flood(
        addrs.to_vec(),
        FLOOD_PER_SECOND,
        ns.clone(),
        members,
        (ns.clone(), bait.0.clone(), bait.1.clone()),
    );
    tokio::time::sleep(2 * interval).await;
    let cut_one = "hp-c";
    let cut_at = Instant::now();
    netns.cut_tcp_to(&[fleet.witness.addr.port()]);
    let mine: Vec<&String> = owners
        .iter()
        .filter(|(_, o)| *o == cut_one)
        .map(|(n, _)| n)
        .collect();
    let watched = watch_the_cut(api, &mine, cut_at).await;
    let flood_sent = flood.stats.sent.load(std::sync::atomic::Ordering::Relaxed);
    let reviews = hostile::token_reviews(cluster).await - reviews_before;
    drop(flood);
    netns.heal();
    let CutWatched {
        ready_false,
        all_degraded_after,
        last,
    } = watched;
    println!(
        "flood of {FLOOD_PER_SECOND} made-up asks/s at each replica ({flood_sent} sent) and a {CUT:?} \
         cut of {cut_one} ({} of its checkers): {ready_false} checkers Ready=False, all of its \
         checkers Degraded by another zone after {all_degraded_after:?}; {reviews} TokenReviews \
         meanwhile",
        mine.len()
    );
    assert_eq!(ready_false, 0, "a made-up flood blinded the confirmation");
    let not: Vec<_> = mine
        .iter()
        .map(|n| (n, &last[n.as_str()]))
        .filter(|(_, (_, d))| d.as_ref().is_none_or(|(s, _, _)| s != "True"))
        .take(3)
        .collect();
    let degraded_in = all_degraded_after.unwrap_or_else(|| {
        panic!("every checker of {cut_one} refuted by another zone; at the end e.g. {not:#?}")
    });
    assert!(
        degraded_in <= 2 * interval + LEASE,
        "Degraded after {degraded_in:?}"
    );
    assert!(flood_sent as f64 >= 0.5 * f64::from(FLOOD_PER_SECOND) * CUT.as_secs_f64());
    // Members' own tokens may need a review (a new one every 48 minutes);
    // the flood's need none.
    assert!(reviews <= 6.0, "{reviews} TokenReviews during the flood");
    assert_eq!(
        confirmations_of(&fleet.witness, &bait.0),
        bait_before,
        "a made-up ask was probed"
    );
}

/// What the watch over the cut saw.
struct CutWatched {
    /// The most checkers Ready=False at once.
    ready_false: usize,
    /// When every checker of the cut replica was first refuted by another zone.
    all_degraded_after: Option<Duration>,
    /// The checkers as last seen.
    last: Seen,
}

/// Every 500 ms until CUT after `cut_at`: checkers Ready=False, and whether
/// each of `mine` is Degraded by another zone's refutation.
async fn watch_the_cut(api: &Api<WebChecker>, mine: &[&String], cut_at: Instant) -> CutWatched {
    let mut ready_false = 0usize;
    let mut all_degraded_after = None;
    let mut last = Seen::new();
    while cut_at.elapsed() < CUT {
        let now = seen(api).await;
        ready_false = ready_false.max(now.values().filter(|(r, _)| r.0 == "False").count());
        let refuted = mine
            .iter()
            .filter(|n| {
                now[n.as_str()].1.as_ref().is_some_and(|(s, reason, m)| {
                    s == "True"
                        && (reason == "UnconfirmedFailure" && m.contains("reached the target")
                            || reason == "ZonesFailing" && m.contains("zone c (replica hp-c)"))
                })
            })
            .count();
        if refuted == mine.len() && all_degraded_after.is_none() {
            all_degraded_after = Some(cut_at.elapsed());
        }
        last = now;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    CutWatched {
        ready_false,
        all_degraded_after,
        last,
    }
}

/// The name and UID of checker `name`, which a hostile ask names.
async fn bait(api: &Api<WebChecker>, name: &str) -> (String, String) {
    let wc = api.get(name).await.unwrap();
    (name.to_string(), wc.metadata.uid.unwrap())
}

/// 150 uploads of 2 MB held against `target` (the first replica's confirm
/// listener) for ten intervals.
async fn stalled_uploads(
    fleet: &Fleet,
    intruder: &Intruder,
    target: SocketAddr,
    owners: &HashMap<String, String>,
    interval: Duration,
) {
    let op = &fleet.ops[0];
    let hwm_before = proc_memory_kib(op.pid(), "VmHWM");
    let from = Instant::now();
    let held = intruder.stall(target, UPLOADS, UPLOAD_BYTES).await;
    // /healthz on the main listener, every 200 ms while the uploads hold.
    let mut slowest = Duration::ZERO;
    while from.elapsed() < 10 * interval {
        let t = Instant::now();
        let got = op.get_within("/healthz", Duration::from_secs(5)).await;
        assert!(matches!(got, Some((200, _))), "/healthz: {got:?}");
        slowest = slowest.max(t.elapsed());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let to = Instant::now();
    let hwm_after = proc_memory_kib(op.pid(), "VmHWM");
    drop(held);
    let theirs: Vec<String> = owners
        .iter()
        .filter(|(_, o)| **o == op.identity)
        .map(|(n, _)| n.clone())
        .collect();
    let (gap, checker) = largest_gap(&fleet.witness.hits(), &theirs, from, to);
    println!(
        "{UPLOADS} uploads of {UPLOAD_BYTES} bytes held against {}: peak memory {} -> {} KiB \
         (+{} KiB), slowest /healthz {slowest:?}, largest gap of its checkers {gap:?} ({checker})",
        op.identity,
        hwm_before,
        hwm_after,
        hwm_after.saturating_sub(hwm_before)
    );
    assert!(
        hwm_after.saturating_sub(hwm_before) < MEMORY_BOUND_KIB,
        "the uploads cost {} KiB",
        hwm_after - hwm_before
    );
    assert!(
        slowest < Duration::from_secs(1),
        "/healthz took {slowest:?}"
    );
    // An interval, the witness's hold and a loaded machine's slack.
    assert!(
        gap <= interval + Duration::from_secs(1),
        "{gap:?} ({checker})"
    );
}

/// Asks a pod can make with what it can get, each refused without a probe.
async fn refused_asks(
    cluster: &Cluster,
    fleet: &Fleet,
    intruder: &Intruder,
    addrs: &[SocketAddr],
    owners: &HashMap<String, String>,
) {
    let ns = &fleet.ns;
    let api: Api<WebChecker> = Api::namespaced(fleet.client.clone(), ns);
    let (a, b) = (&fleet.ops[0], &fleet.ops[1]);
    // A checker the first replica owns: asks about it name its owner.
    let name = owners
        .iter()
        .find(|(n, o)| *o == &a.identity && n.starts_with('c'))
        .map(|(n, _)| n.clone())
        .expect("a checker of the first replica");
    let (name, uid) = bait(&api, &name).await;
    let as_a = hostile::ask(&a.identity, ns, &name, &uid, 1);
    let out = cluster.kubectl(&["-n", ns, "create", "serviceaccount", "intruder"]);
    assert!(out.status.success());
    let others = hostile::real_token(cluster, ns, "intruder", hostile::AUDIENCE, None);
    let other_audience = hostile::real_token(
        cluster,
        ns,
        "webchecker-operator",
        "https://kubernetes",
        None,
    );
    let unbound = hostile::real_token(cluster, ns, "webchecker-operator", hostile::AUDIENCE, None);
    let a_token = hostile::real_token(
        cluster,
        ns,
        "webchecker-operator",
        hostile::AUDIENCE,
        Some(&a.identity),
    );
    let from_b = hostile::ask(&b.identity, ns, &name, &uid, 1);
    let confirmed_before = fleet.witness.confirmation_hits().len();
    let cases: [(&str, &str, &serde_json::Value); 4] = [
        ("another ServiceAccount's token", &others, &as_a),
        ("a token for another audience", &other_audience, &as_a),
        ("an unbound token naming a member", &unbound, &from_b),
        (
            "a member's own token, from another address",
            &a_token,
            &as_a,
        ),
    ];
    for (what, token, ask) in cases {
        let (status, body) = intruder.ask(addrs[1], token, ask).await;
        println!("{what}: HTTP {status} {body}");
        assert_eq!(status, 200, "{what}");
        assert!(
            body.contains("\"refused\"") && body.contains("not accepted"),
            "{what}: {body}"
        );
    }
    // The first replica's own token, sent from its own address (where the
    // test process reaches the third replica from), about a checker the
    // first replica does not own: a member that went rogue probes nothing
    // of others' either.
    let stranger = owners
        .iter()
        .find(|(n, o)| *o != &a.identity && n.starts_with('c'))
        .map(|(n, _)| n.clone())
        .unwrap();
    let (sname, suid) = bait(&api, &stranger).await;
    let from_a_address = Intruder {
        source: a.ip.parse().unwrap(),
    };
    let rogue = hostile::ask(&a.identity, ns, &sname, &suid, 1);
    let (status, body) = from_a_address.ask(addrs[2], &a_token, &rogue).await;
    println!("an ask about a checker the asker does not own: HTTP {status} {body}");
    assert!(
        status == 200 && body.contains("does not own the checker"),
        "{body}"
    );
    // And the same token, from the same address, about its own checker is
    // served: the refusals above are of the asks, not of the listener.
    let (status, body) = from_a_address.ask(addrs[2], &a_token, &as_a).await;
    assert!(status == 200 && body.contains("\"probed\""), "{body}");
    assert_eq!(
        fleet.witness.confirmation_hits().len(),
        confirmed_before + 1,
        "only the last ask was probed"
    );
}
