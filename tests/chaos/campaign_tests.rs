//! The campaign's own tests, in seconds, without a cluster: its schedule
//! and bounds, and its judgements (judge.rs, report.rs) on made-up
//! histories. The kit's tests (the oracle, the object log, the fault proxy,
//! the Prng) are the kit's own (kit/src, kit/tests).

use super::*;
use support::oracle::made_up::{hit, lease, rec};

fn ms_(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn a_schedule_is_a_function_of_its_seed_and_deals_every_kind() {
    let draw = |seed| {
        let mut s = Schedule::new(seed, KINDS.to_vec());
        (0..KINDS.len() * 2)
            .map(|_| s.next_window().describe())
            .collect::<Vec<_>>()
    };
    assert_eq!(draw(7), draw(7));
    assert_ne!(draw(7), draw(8));
    let mut s = Schedule::new(99, KINDS.to_vec());
    let kinds: HashSet<&str> = (0..KINDS.len())
        .map(|_| s.next_window().fault.kind())
        .collect();
    assert_eq!(kinds.len(), KINDS.len(), "one pass deals every kind once");
    let mut s = Schedule::new(3, vec!["etcd-freeze"]);
    for _ in 0..10 {
        let w = s.next_window();
        assert_eq!(w.fault, Fault::EtcdFreeze);
        assert!(w.hold >= Duration::from_secs(5) && w.hold <= Duration::from_secs(30));
    }
}

/// The deck of `make test` stands in for fixed fault tests: every kind once
/// (20 of them), etcd frozen 25 s and the API server 30 s, each proxy mode
/// 4-12 s, and a busy API server (errors or latency on every proxy) while a
/// replica is killed or stopped past the failover bound of that load.
#[test]
fn a_deck_deals_every_kind_once_with_the_freezes_at_their_longest() {
    assert_eq!(KINDS.len(), 20);
    for seed in [874_556_080, 1, 2, 3] {
        let mut s = Schedule::new(seed, KINDS.to_vec());
        s.deck_only = true;
        let windows: Vec<Window> = (0..KINDS.len()).map(|_| s.next_window()).collect();
        let kinds: HashSet<&str> = windows.iter().map(|w| w.fault.kind()).collect();
        assert_eq!(kinds.len(), KINDS.len());
        for w in &windows {
            match &w.fault {
                Fault::EtcdFreeze => assert_eq!(w.hold, Duration::from_secs(25)),
                Fault::ApiFreeze => assert_eq!(w.hold, Duration::from_secs(30)),
                Fault::Proxy { .. } => assert!(
                    w.hold >= Duration::from_secs(4) && w.hold <= Duration::from_secs(12),
                    "{}",
                    w.describe()
                ),
                Fault::Busy { mode, lost } => check_busy(w, mode, lost),
                _ => {}
            }
        }
    }
}

fn check_busy(w: &Window, mode: &ProxyMode, lost: &Fault) {
    let d = w.describe();
    let bound = w.fault.failover_bound();
    match (w.fault.kind(), lost) {
        ("errors+sigkill", Fault::Kill(Target::Other(_)))
        | ("errors+leader-kill", Fault::Kill(Target::Leader)) => {
            assert!(w.hold >= bound + INTERVAL, "{d}")
        }
        ("errors+sigstop" | "latency+sigstop", Fault::Stop(_)) => {
            assert!(w.hold >= bound + RETRY, "{d}")
        }
        (k, l) => panic!("{k}: {l:?}"),
    }
    assert!(w.hold <= bound + INTERVAL + Duration::from_secs(4), "{d}");
    match mode {
        ProxyMode::Errors { share, codes } => {
            assert!(*share == 0.3 || *share == 0.5, "{d}");
            assert!(codes == &[429] || codes == &[429, 503], "{d}");
            assert!(w.fault.kind().starts_with("errors+"), "{d}");
        }
        ProxyMode::Latency(l) => {
            assert!(*l >= ms_(50) && *l <= ms_(800), "{d}");
            assert_eq!(w.fault.kind(), "latency+sigstop");
        }
        m => panic!("{m:?}"),
    }
    assert!(!w.fault.alike(), "{d}");
}

/// Failover bounds under a busy API server (tests/reliability/main.rs): the
/// normal one at 30% errors, twice it at 50%, plus the calls of the path
/// under latency; a cut-off replica hears of its Lease's deletion within a
/// retry period when only stale connections stall, within ten at 50% errors,
/// not before the fault ends when nothing answers.
#[test]
fn bounds_under_a_busy_api_server() {
    let errors = |share| ProxyMode::Errors {
        share,
        codes: vec![429],
    };
    assert_eq!(busy_failover_bound(&errors(0.3)), failover_bound());
    assert_eq!(busy_failover_bound(&errors(0.5)), failover_bound() * 2);
    assert_eq!(
        busy_failover_bound(&ProxyMode::Latency(ms_(500))),
        failover_bound() + Duration::from_secs(4)
    );
    let busy = |mode: ProxyMode, lost: Fault| Fault::Busy {
        mode,
        lost: Box::new(lost),
    };
    assert_eq!(
        busy(errors(0.5), Fault::Stop(Target::Leader)).failover_bound(),
        failover_bound() * 2
    );
    assert_eq!(
        busy(errors(0.5), Fault::Stop(Target::Other(1))).failover_bound(),
        failover_bound() * 2
    );
    assert_eq!(
        busy(errors(0.3), Fault::Kill(Target::Leader)).failover_bound(),
        failover_bound()
    );
    assert_eq!(hear_bound(&ProxyMode::StallOpen), Some(cutoff_grace()));
    assert_eq!(hear_bound(&errors(0.5)), Some(RETRY * 10 + cutoff_grace()));
    assert_eq!(hear_bound(&errors(1.0)), None);
    assert_eq!(hear_bound(&ProxyMode::BlackHole), None);
    assert_eq!(hear_bound(&ProxyMode::Hang), None);
    assert!(rejoin_bound() <= failover_bound());
}

#[test]
fn a_partly_cut_off_replica_is_exempt_only_until_it_could_hear() {
    let t = Instant::now();
    let s = Duration::from_secs;
    let hear = s(6);
    let lead = WATCH_SLACK + PROBE_TIMEOUT;
    let grace = cutoff_grace();
    // r1 held u1 from before the fault (t+1 .. t+12) and lost it at t+5,
    // then held u2 and lost it at t+12.5, after the fault ended.
    let leases = vec![
        lease(t, 1, RecKind::Listed, "r1", "u1"),
        lease(t, 2, RecKind::Listed, "r2", "u9"),
        lease(t + s(5), 5, RecKind::Deleted, "r1", "u1"),
        lease(t + s(8), 8, RecKind::Added, "r1", "u2"),
        lease(t + ms_(12_500), 9, RecKind::Deleted, "r1", "u2"),
        lease(t + s(5), 6, RecKind::Deleted, "r2", "u9"),
    ];
    let spans = judge::unheard(&leases, "r1", (t + s(1), t + s(12)), hear);
    assert_eq!(
        spans,
        vec![
            (t + s(5) - lead, t + s(11)),
            (t + ms_(12_500) - lead, t + ms_(12_500) + grace)
        ]
    );
    // Deleted close to the end: one grace after the end, not `hear`; never
    // before the fault.
    let spans = judge::unheard(&leases, "r2", (t + s(4), t + s(6)), hear);
    assert_eq!(spans, vec![(t + s(4), t + s(6) + grace)]);
    // Not deleted during the fault: no exemption at all.
    assert!(judge::unheard(&leases, "r2", (t + s(6), t + s(9)), hear).is_empty());
    assert!(judge::unheard(&leases, "r3", (t, t + s(20)), hear).is_empty());
}

#[test]
fn a_restarted_replica_is_back_with_a_lease_checkers_and_probes() {
    let t = Instant::now();
    let s = Duration::from_secs;
    let mut st = LogState::default();
    st.leases = vec![
        lease(t, 1, RecKind::Listed, "r1", "u1"),
        lease(t + s(1), 3, RecKind::Modified, "r1", "u1"),
        lease(t + s(2), 4, RecKind::Deleted, "r1", "u1"),
        lease(t + s(3), 5, RecKind::Added, "r1", "u2"),
    ];
    st.objs = vec![
        // Still the old incarnation's: not a return.
        rec(t + s(1), 2, RecKind::Modified, "a").owned_by("r1", "u1"),
        rec(t + s(4), 6, RecKind::Modified, "b")
            .owned_by("r1", "u2")
            .draining_to("r1"),
        rec(t + s(5), 7, RecKind::Modified, "b").owned_by("r1", "u2"),
    ];
    let old: HashSet<String> = ["u1".to_string()].into();
    let mut log = ProbeLog::default();
    log.absorb(vec![
        hit("a", "r1", t + ms_(500), 1),
        hit("b", "r2", t + s(5), 1),
    ]);
    let r = judge::rejoin(&st, &log, "r1", t + ms_(800), &old);
    assert_eq!(r.lease, Some(t + s(3)));
    assert_eq!(r.assigned, Some(t + s(5)), "a drain is no assignment");
    assert_eq!(r.probed, None, "a probe before the restart does not count");
    assert_eq!(r.back(), None);
    assert_eq!(r.missing(), "no probe by it");
    log.absorb(vec![hit("b", "r1", t + s(6), 1)]);
    let r = judge::rejoin(&st, &log, "r1", t + ms_(800), &old);
    assert_eq!(r.back(), Some(t + s(6)));
    // Its old Lease renewed after the restart is not a return.
    let r = judge::rejoin(
        &st,
        &log,
        "r1",
        t + ms_(800),
        &["u1".into(), "u2".into()].into(),
    );
    assert_eq!(r.lease, None);
    assert_eq!(
        r.missing(),
        "no new membership Lease, no checker assigned to it"
    );
}

#[test]
fn a_frozen_sharder_fails_the_liveness_check() {
    // The object log of a sharder that stopped deciding: a new checker stays
    // unowned, an old one keeps a dead member's epoch.
    let t = Instant::now();
    let mut s = LogState::default();
    s.leases_now
        .insert("m1".into(), lease(t, 5, RecKind::Listed, "r1", "u1"));
    s.current.insert(
        "old".into(),
        rec(t, 6, RecKind::Listed, "old").owned_by("r2", "u2"),
    );
    s.current.insert(
        "ok".into(),
        rec(t, 7, RecKind::Listed, "ok").owned_by("r1", "u1"),
    );
    s.current
        .insert("new".into(), rec(t, 8, RecKind::Added, "new"));
    let names: Vec<String> = ["old", "ok", "new"].iter().map(|x| x.to_string()).collect();
    let left = unowned_in(&s, &names, &["r1".to_string(), "r2".to_string()]);
    assert_eq!(left, vec!["old".to_string(), "new".to_string()]);
}
