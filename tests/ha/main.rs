//! High availability: several operator processes against the real control
//! plane, with faults injected from outside. The witness targets' own logs
//! decide whether the invariants of docs/invariants.md held.

mod disruptions;
use webchecker_kit as support;

use support::fleet::*;
use support::objlog::ObjectLog;
use support::oracle::{Clock, fencing};

use std::collections::HashMap;
use std::time::{Duration, Instant};

use kube::api::ListParams;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_share_3000_checkers_evenly_and_exclusively() {
    let fleet = Fleet::start("ha", "share", 3, 3000).await;
    let owners = fleet.wait_all_assigned(Duration::from_secs(30)).await;
    let sizes = shard_sizes(&owners);
    let largest = *sizes.values().max().unwrap();
    // Tight targets: every member holds floor or ceil of M/N.
    println!(
        "shard sizes: {sizes:?} (design: at most {})",
        3000usize.div_ceil(3)
    );
    assert!(largest <= 3000usize.div_ceil(3), "largest shard {largest}");
    // Let every checker run a few intervals, then check the witness.
    let from = Instant::now();
    tokio::time::sleep(Duration::from_secs(3 * INTERVAL as u64)).await;
    let hits = fleet.witness.hits_since(from);
    for h in &hits {
        assert_eq!(
            Some(&h.replica),
            owners.get(&h.checker),
            "{} probed by a non-owner",
            h.checker
        );
    }
    assert_eq!(exclusivity_violation(&hits), None);
    let (window, to) = (from + Duration::from_secs(INTERVAL as u64), Instant::now());
    let (gap, who) = largest_gap(&hits, &fleet.names, window, to);
    println!("largest gap in steady state: {gap:?} ({who})");
    assert!(
        gap <= Duration::from_millis(INTERVAL as u64 * 1000 + 500),
        "{who}: {gap:?}; its probes (start, end from the window's start, which is {:?} long): {:?}",
        to - window,
        hits.iter()
            .filter(|h| h.checker == who)
            .map(|h| (
                h.start.saturating_duration_since(window),
                h.end.saturating_duration_since(window),
                &h.replica
            ))
            .collect::<Vec<_>>()
    );
    // Owned-checker gauges add up to the fleet.
    let total = fleet.sum("webchecker_owned_checkers").await;
    assert_eq!(total, 3000.0);
}

/// Every status write that landed since `from` came from the replica the
/// checker's owner label named in that very version, under a Lease not yet
/// deleted: a fenced write never lands, not even one overwritten later
/// (judged from a watch of every version, not from the last writer).
fn assert_every_status_write_fenced(log: &ObjectLog, from: Instant) {
    let clk = Clock { origin: from };
    let writes = log.with(|s| s.objs.iter().filter(|o| o.at > from).count());
    let violations = log.with(|s| {
        fencing(
            &s.objs,
            &s.leases,
            from,
            Instant::now(),
            &|_, _| false,
            &clk,
        )
    });
    assert!(writes > 0, "the object log saw the fleet's writes");
    assert!(
        violations.is_empty(),
        "{} unfenced writes, first: {}",
        violations.len(),
        violations[0].detail
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_moves_the_dead_replicas_checkers_within_the_bound() {
    let mut fleet = Fleet::start("ha", "kill", 3, 600).await;
    // A non-leader (leader loss has its own test).
    let v = fleet.victim(false).await;
    let (leader, victim_id, orphans) = (v.leader.clone(), v.identity.clone(), v.checkers.clone());
    let bound = LEASE + Duration::from_secs(2) + Duration::from_secs(INTERVAL as u64);
    let (gap, who) = fleet
        .kill_and_wait_failover(&v, bound + Duration::from_secs(10))
        .await;
    println!(
        "SIGKILL: {} checkers moved, largest gap {gap:?} ({who}), bound {bound:?}",
        orphans.len()
    );
    assert!(gap <= bound, "{who}: gap {gap:?} over {bound:?}");
    let owners = fleet.wait_all_assigned(Duration::from_secs(10)).await;
    assert!(owners.values().all(|o| *o != victim_id));
    assert_eq!(exclusivity_violation(&fleet.witness.hits()), None);
    let dead_moves = fleet
        .counter(&leader, "webchecker_moves_total", &[("cause", "dead")])
        .await;
    assert_eq!(
        dead_moves as usize,
        orphans.len(),
        "moves counted with cause dead"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_hands_every_checker_over_on_its_cadence_then_releases_the_lease() {
    let mut fleet = Fleet::start("ha", "term", 3, 600).await;
    let Victim {
        index: victim,
        identity: victim_id,
        checkers: orphans,
        ..
    } = fleet.victim(false).await;
    let at = Instant::now();
    let st = fleet.ops[victim].terminate(Duration::from_secs(25));
    assert!(st.success(), "clean exit on SIGTERM: {st:?}");
    let exit_after = at.elapsed();
    let gone = Instant::now();
    let leases = fleet
        .cluster
        .kubectl(&["get", "lease", "-n", &fleet.ns, "-o", "name"]);
    let leases = String::from_utf8_lossy(&leases.stdout).to_string();
    assert!(
        !leases.contains(&format!("webchecker-member-{victim_id}")),
        "Lease released on exit: {leases}"
    );
    fleet.wait_all_assigned(Duration::from_secs(10)).await;
    eventually(
        Duration::from_secs(15),
        "handed-over checkers probed after the victim exited",
        || async {
            (failover_gap(&fleet.witness.hits(), &orphans, gone).0 != Duration::MAX).then_some(())
        },
    )
    .await;
    // Over the whole shutdown: the victim probed each checker until its
    // drain, and the new owner took over at its next due time.
    let (gap, who) = largest_gap_across(&fleet.witness.hits(), &orphans, at, Instant::now());
    let bound = Duration::from_secs(INTERVAL as u64 + 1);
    println!("SIGTERM: exit after {exit_after:?}, largest gap {gap:?} ({who}), bound {bound:?}");
    assert!(gap <= bound, "{who}: {gap:?}");
    // The handover may take half of the shutdown budget (20 s), the
    // release and the last flush a few round trips more.
    assert!(
        exit_after <= Duration::from_secs(10) + 2 * LEASE,
        "exit took {exit_after:?}"
    );
    let since = fleet.witness.hits_since(at);
    assert_eq!(exclusivity_violation(&since), None);
    assert_eq!(reappearance(&since), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_loss_never_interrupts_probing_and_a_new_leader_assigns() {
    let mut fleet = Fleet::start("ha", "lead", 3, 300).await;
    let owners = fleet.wait_all_assigned(Duration::from_secs(30)).await;
    let leader = fleet.leader().await.expect("a leader");
    let survivors_checkers: Vec<String> = owners
        .iter()
        .filter(|(_, o)| **o != leader)
        .map(|(k, _)| k.clone())
        .collect();
    let idx = fleet.ops.iter().position(|o| o.identity == leader).unwrap();
    let at = Instant::now();
    fleet.ops[idx].kill();
    // Checkers created while no leader exists get assigned once one does.
    let newcomers: Vec<String> = (0..20).map(|i| format!("late{i}")).collect();
    create_checkers(
        &fleet.client,
        &fleet.ns,
        &fleet.witness.url(),
        &newcomers,
        INTERVAL,
    )
    .await;
    fleet.names.extend(newcomers.iter().cloned());
    let new_leader = eventually(LEASE + Duration::from_secs(8), "a new leader", || {
        fleet.leader()
    })
    .await;
    let elected_after = at.elapsed();
    println!("new leader {new_leader} after {elected_after:?}");
    assert!(
        elected_after <= LEASE + Duration::from_secs(2),
        "election took {elected_after:?}"
    );
    fleet.wait_all_assigned(Duration::from_secs(15)).await;
    fleet
        .wait_all_probed_since(at, Duration::from_secs(20))
        .await;
    // Survivors' own checkers saw no gap beyond their cadence.
    let until = Instant::now();
    let (gap, who) = largest_gap(&fleet.witness.hits(), &survivors_checkers, at, until);
    println!("leader loss: survivors' largest gap {gap:?} ({who})");
    assert!(
        gap <= Duration::from_millis(INTERVAL as u64 * 1000 + 700),
        "{who}: {gap:?}"
    );
    assert_eq!(exclusivity_violation(&fleet.witness.hits()), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_out_moves_a_quarter_through_drains_without_overlap() {
    let mut fleet = Fleet::start("ha", "scale", 3, 1200).await;
    let before = fleet.wait_all_assigned(Duration::from_secs(30)).await;
    let drains_before = fleet.sum("webchecker_drains_total").await;
    let from = Instant::now();
    let newcomer = Operator::spawn(fleet.cluster, "scale-r3", &fleet.ns, FAST_LEASES);
    fleet.ops.push(newcomer);
    let after = eventually(
        Duration::from_secs(60),
        "the new replica holds its share",
        || async {
            let owners = fleet.owners().await;
            let sizes = shard_sizes(
                &owners
                    .iter()
                    .filter_map(|(k, v)| v.clone().map(|v| (k.clone(), v)))
                    .collect(),
            );
            (sizes.get("scale-r3").copied().unwrap_or(0) == 300
                && owners.values().all(|o| o.is_some()))
            .then(|| {
                owners
                    .into_iter()
                    .map(|(k, v)| (k, v.unwrap()))
                    .collect::<HashMap<_, _>>()
            })
        },
    )
    .await;
    let moved = before
        .iter()
        .filter(|(k, o)| after.get(*k) != Some(*o))
        .count();
    // Sticky owners with tight targets move only the newcomer's share, the
    // least any placement can move (it holds 300, checked above).
    println!("scale 3->4: {moved} of 1200 moved (design: exactly 300)");
    assert!(moved <= 300, "{moved} moved");
    fleet
        .wait_all_probed_since(Instant::now(), Duration::from_secs(20))
        .await;
    let hits = fleet.witness.hits_since(from);
    assert_eq!(exclusivity_violation(&hits), None);
    assert_eq!(reappearance(&hits), None);
    let mut drains = 0.0;
    for o in &fleet.ops[..3] {
        drains += fleet
            .counter(&o.identity, "webchecker_drains_total", &[])
            .await;
    }
    assert_eq!(
        (drains - drains_before) as usize,
        moved,
        "every move went through a drain handshake"
    );
    let (gap, who) = largest_gap(&hits, &fleet.names, from, Instant::now());
    // A drain hands over within a retry period or two of the ack.
    let bound = Duration::from_secs(INTERVAL as u64) + LEASE;
    println!("scale 3->4: largest gap {gap:?} ({who}), bound {bound:?}");
    assert!(gap <= bound, "{who}: {gap:?}");
}

/// An install: the namespace it watches, its replicas, its Lease prefix
/// (none: the default), the tag of its checkers' names.
type Install<'a> = (&'a str, [&'a str; 2], Option<&'a str>, &'a str);

/// Two installs whose Leases share a namespace, told apart by
/// `--lease-prefix`: each is a fleet of its own (its members, its leader,
/// its checkers), none of the other's replicas probes its checkers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_installs_share_a_lease_namespace_by_prefix() {
    let cluster = Cluster::shared("ha");
    let leases = cluster.namespace("prefixes");
    let (watched_a, watched_b) = (cluster.namespace("pfx-a"), cluster.namespace("pfx-b"));
    let witness = Witness::start().await;
    witness.set_hold(HOLD.0, HOLD.1);
    let installs: [Install<'_>; 2] = [
        (watched_a.as_str(), ["pa-0", "pa-1"], Some("team-a"), "a"),
        (watched_b.as_str(), ["pb-0", "pb-1"], None, "b"),
    ];
    let ops = spawn_installs(cluster, &leases, &installs);
    for (_, o) in &ops {
        o.wait_ready(Duration::from_secs(60)).await;
    }
    let client = cluster.client().await;
    // Names apart, so the witness tells the installs' checkers apart.
    let names = |tag: &str| -> Vec<String> { (0..10).map(|i| format!("{tag}{i}")).collect() };
    let from = Instant::now();
    for (ns, _, _, tag) in &installs {
        create_checkers(&client, ns, &witness.url(), &names(tag), INTERVAL).await;
    }
    // Every checker owned by a replica of its own install.
    for (ns, ids, _, _) in &installs {
        eventually(
            Duration::from_secs(60),
            "every checker owned by its install",
            || async {
                let owners = owners(&client, ns).await.ok()?;
                (owners.len() == 10
                    && owners
                        .values()
                        .all(|o| o.as_deref().is_some_and(|o| ids.contains(&o))))
                .then_some(())
            },
        )
        .await;
    }
    each_install_has_two_members_and_a_leader(&ops, &client, &leases, &installs).await;
    // Three probes of each checker, each by a replica of its install alone.
    let all: Vec<String> = names("a").into_iter().chain(names("b")).collect();
    eventually(
        Duration::from_secs(60),
        "probes of every checker",
        || async {
            let hits = witness.hits_since(from);
            all.iter()
                .all(|n| hits.iter().filter(|h| &h.checker == n).count() >= 3)
                .then_some(())
        },
    )
    .await;
    let hits = witness.hits_since(from);
    assert_eq!(exclusivity_violation(&hits), None);
    for h in &hits {
        let tag = &h.checker[..1];
        assert!(
            h.replica.starts_with(&format!("p{tag}-")),
            "{} probed by {}",
            h.checker,
            h.replica
        );
    }
    for (ns, ids, _, _) in &installs {
        let owners = owners(&client, ns).await.unwrap();
        for (checker, owner) in owners {
            let owner = owner.unwrap();
            assert!(
                ids.contains(&owner.as_str()),
                "{ns}/{checker} owned by {owner}"
            );
        }
    }
    println!("two installs, two fleets: {} probes", hits.len());
}

/// The replicas of each install, their Leases in `leases`, each with the
/// index of its install.
fn spawn_installs(
    cluster: &'static Cluster,
    leases: &str,
    installs: &[Install<'_>],
) -> Vec<(usize, Operator)> {
    let spawn = |id: &str, watched: &str, prefix: Option<&str>| {
        let flag = prefix.map(|p| format!("--lease-prefix={p}"));
        let mut extra = FAST_LEASES.to_vec();
        extra.extend(flag.as_deref());
        Operator::spawn_scoped(cluster, id, leases, watched, &extra, &cluster.kubeconfig)
    };
    installs
        .iter()
        .enumerate()
        .flat_map(|(k, (ns, ids, prefix, _))| ids.iter().map(move |id| (k, spawn(id, ns, *prefix))))
        .collect()
}

/// Each install's replicas see two members, and each install has a leader.
async fn each_install_has_two_members_and_a_leader(
    ops: &[(usize, Operator)],
    client: &kube::Client,
    leases: &str,
    installs: &[Install<'_>; 2],
) {
    for (k, o) in ops {
        let members = eventually(Duration::from_secs(30), "ring members", || async {
            metric(&o.scrape().await, "webchecker_ring_members", &[])
        })
        .await;
        assert_eq!(
            members, 2.0,
            "{} (install {k}) sees {members} members",
            o.identity
        );
    }
    let lease_api: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(client.clone(), leases);
    for (name, ids) in [
        ("team-a-leader", installs[0].1),
        ("webchecker-leader", installs[1].1),
    ] {
        let holder = eventually(Duration::from_secs(30), "a leader per install", || async {
            let l = lease_api.get_opt(name).await.ok()??;
            l.spec?.holder_identity
        })
        .await;
        assert!(ids.contains(&holder.as_str()), "{name} held by {holder}");
    }
}

/// The exclusivity oracle can fail: two installs of the operator (Leases in
/// two namespaces, one fleet each) watching one namespace both take the same
/// checkers, each finding the other's owner without a Lease of its own
/// membership. The witness log must show two probers of one checker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_oracle_sees_two_installs_probe_one_namespace() {
    let cluster = Cluster::shared("ha");
    let watched = cluster.namespace("twice");
    let (lease_a, lease_b) = (
        cluster.namespace("install-a"),
        cluster.namespace("install-b"),
    );
    let witness = Witness::start().await;
    witness.set_hold(HOLD.0, HOLD.1);
    let spawn = |id: &str, lease_ns: &str| {
        Operator::spawn_scoped(
            cluster,
            id,
            lease_ns,
            &watched,
            FAST_LEASES,
            &cluster.kubeconfig,
        )
    };
    let ops = [spawn("twice-a", &lease_a), spawn("twice-b", &lease_b)];
    for o in &ops {
        o.wait_ready(Duration::from_secs(60)).await;
    }
    let client = cluster.client().await;
    let names: Vec<String> = (0..20).map(|i| format!("c{i}")).collect();
    let from = Instant::now();
    create_checkers(&client, &watched, &witness.url(), &names, INTERVAL).await;
    let found = eventually(Duration::from_secs(60), "two probers seen", || async {
        exclusivity_violation(&witness.hits_since(from))
    })
    .await;
    let probers: std::collections::HashSet<String> = witness
        .hits_since(from)
        .into_iter()
        .map(|h| h.replica)
        .collect();
    println!("two installs: {found} (probers {probers:?})");
}
