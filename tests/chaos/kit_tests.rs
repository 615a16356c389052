//! The kit's own tests: the schedule and the oracle on made-up histories.

use super::*;

#[test]
fn prng_is_splitmix64() {
    let mut p = Prng::new(0);
    assert_eq!(p.next_u64(), 0xe220_a839_7b1d_cdaf);
    assert_eq!(p.next_u64(), 0x6e78_9e6a_a1b9_65f4);
    let mut q = Prng::new(42);
    let d = q.between(Duration::from_secs(5), Duration::from_secs(30));
    assert!(d >= Duration::from_secs(5) && d <= Duration::from_secs(30));
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

/// The deck of `make test` stands in for fixed fault tests: every kind once,
/// etcd frozen 25 s and the API server 30 s, each proxy mode 4-12 s.
#[test]
fn a_deck_deals_every_kind_once_with_the_freezes_at_their_longest() {
    let mut s = Schedule::new(874_556_080, KINDS.to_vec());
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
            _ => {}
        }
    }
}

fn hit(checker: &str, replica: &str, start: Instant, ms: u64) -> Hit {
    Hit {
        checker: checker.into(),
        replica: replica.into(),
        start,
        end: start + Duration::from_millis(ms),
        headers: HashMap::new(),
    }
}

#[allow(clippy::too_many_arguments)]
fn rec(
    at: Instant,
    rv: u64,
    kind: RecKind,
    name: &str,
    owner: Option<&str>,
    epoch: Option<&str>,
    drain: Option<&str>,
    status_by: Option<&str>,
    status: &str,
) -> ObjRec {
    ObjRec {
        at,
        rv,
        kind,
        name: name.into(),
        generation: Some(1),
        owner: owner.map(String::from),
        epoch: epoch.map(String::from),
        drain: drain.map(String::from),
        status_owner: status_by.map(String::from),
        observed_generation: Some(1),
        status: status.into(),
    }
}

fn lease(at: Instant, rv: u64, kind: RecKind, holder: &str, uid: &str) -> LeaseRec {
    LeaseRec {
        at,
        rv,
        kind,
        name: format!("webchecker-member-{holder}"),
        holder: Some(holder.into()),
        uid: uid.into(),
        inferred: false,
    }
}

#[test]
fn oracle_finds_overlaps_and_honours_the_cut_off_exception() {
    let t = Instant::now();
    let clk = Clock { origin: t };
    let ms = Duration::from_millis;
    let mut log = ProbeLog::default();
    log.absorb(vec![
        hit("a", "r1", t, 100),
        hit("a", "r2", t + ms(50), 100),
        hit("b", "r1", t, 100),
        hit("b", "r2", t + ms(200), 100),
    ]);
    let by = log.by_checker(t, t + ms(1000));
    let none = |_: &str, _: Instant| false;
    let v = overlaps(&log, &by, &none, &clk);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].checker.as_deref(), Some("a"));
    assert!(
        v[0].detail.contains("r1") && v[0].detail.contains("r2"),
        "{}",
        v[0].detail
    );
    let r1_cut_off = |r: &str, _: Instant| r == "r1";
    assert!(overlaps(&log, &by, &r1_cut_off, &clk).is_empty());
}

#[test]
fn oracle_finds_an_old_owner_probing_again() {
    let t = Instant::now();
    let clk = Clock { origin: t };
    let s = Duration::from_secs;
    let mut log = ProbeLog::default();
    log.absorb(vec![
        hit("a", "r1", t + s(1), 10),
        hit("a", "r2", t + s(3), 10),
        hit("a", "r1", t + s(5), 10),
    ]);
    let by = log.by_checker(t, t + s(10));
    let none = |_: &str, _: Instant| false;
    let moved_once = vec![
        rec(
            t,
            10,
            RecKind::Listed,
            "a",
            Some("r1"),
            Some("u1"),
            None,
            None,
            "",
        ),
        rec(
            t + s(2),
            12,
            RecKind::Modified,
            "a",
            Some("r2"),
            Some("u2"),
            None,
            None,
            "",
        ),
    ];
    let seq = ownership(&moved_once, t + ms_(1), t + s(10));
    let v = stale_probes(&log, &by, &seq, &none, WATCH_SLACK, &[], &clk);
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(
        v[0].detail.contains("r1 probed it at t+5.000s"),
        "{}",
        v[0].detail
    );
    // Handed back through a fresh assignment before the probe: fine.
    let mut back = moved_once.clone();
    back.push(rec(
        t + s(4),
        14,
        RecKind::Modified,
        "a",
        Some("r1"),
        Some("u1"),
        None,
        None,
        "",
    ));
    let seq = ownership(&back, t + ms_(1), t + s(10));
    assert!(stale_probes(&log, &by, &seq, &none, WATCH_SLACK, &[], &clk).is_empty());
    // Assignment seen long after the probe: the probe came first.
    let mut late = moved_once.clone();
    late.push(rec(
        t + s(9),
        14,
        RecKind::Modified,
        "a",
        Some("r1"),
        Some("u1"),
        None,
        None,
        "",
    ));
    let seq = ownership(&late, t + ms_(1), t + s(10));
    let v = stale_probes(&log, &by, &seq, &none, WATCH_SLACK, &[], &clk);
    assert_eq!(v.len(), 1, "{v:?}");
    // ...unless the test's watch was blind from before the probe until it
    // saw the assignment (campaign seed 138277570, window 11: an API server
    // restart).
    let blind = [(t + s(4), t + s(9))];
    assert!(stale_probes(&log, &by, &seq, &none, WATCH_SLACK, &blind, &clk).is_empty());
    let blind_after = [(t + s(8), t + s(9))];
    assert_eq!(
        stale_probes(&log, &by, &seq, &none, WATCH_SLACK, &blind_after, &clk).len(),
        1,
        "blind only after the probe (beyond the slack): still a violation"
    );
    // The cut-off replica is exempt.
    let r1 = |r: &str, at: Instant| r == "r1" && at > t + s(2);
    let seq = ownership(&moved_once, t + ms_(1), t + s(10));
    assert!(stale_probes(&log, &by, &seq, &r1, WATCH_SLACK, &[], &clk).is_empty());
}

fn ms_(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn oracle_checks_every_status_write_and_every_move() {
    let t = Instant::now();
    let clk = Clock { origin: t };
    let s = Duration::from_secs;
    let never = |_: &str, _: Instant| false;
    let leases = vec![
        lease(t, 5, RecKind::Listed, "r1", "u1"),
        lease(t, 6, RecKind::Listed, "r2", "u2"),
        lease(t + s(3), 20, RecKind::Deleted, "r1", "u1"),
    ];
    let base = rec(
        t,
        10,
        RecKind::Listed,
        "a",
        Some("r1"),
        Some("u1"),
        None,
        Some("r1"),
        "{\"x\":1}",
    );
    // A status write by the owner before its Lease went: fine.
    let ok = vec![
        base.clone(),
        rec(
            t + s(1),
            11,
            RecKind::Modified,
            "a",
            Some("r1"),
            Some("u1"),
            None,
            Some("r1"),
            "{\"x\":2}",
        ),
    ];
    assert!(fencing(&ok, &leases, t, t + s(10), &never, &clk).is_empty());
    // By a non-owner: violation.
    let foreign = vec![
        base.clone(),
        rec(
            t + s(1),
            11,
            RecKind::Modified,
            "a",
            Some("r1"),
            Some("u1"),
            None,
            Some("r2"),
            "{\"x\":2}",
        ),
    ];
    let v = fencing(&foreign, &leases, t, t + s(10), &never, &clk);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].inv, Inv::Fencing);
    // By the owner after its Lease was deleted (rv 20 < 21): violation, unless
    // it was flushing after SIGTERM.
    let after = vec![
        base.clone(),
        rec(
            t + s(4),
            21,
            RecKind::Modified,
            "a",
            Some("r1"),
            Some("u1"),
            None,
            Some("r1"),
            "{\"x\":2}",
        ),
    ];
    assert_eq!(
        fencing(&after, &leases, t, t + s(10), &never, &clk).len(),
        1
    );
    let flushing = |r: &str, _: Instant| r == "r1";
    assert!(fencing(&after, &leases, t, t + s(10), &flushing, &clk).is_empty());
    // Moved after the proof (Lease deleted at rv 20): fine; before: violation.
    let proven = vec![
        base.clone(),
        rec(
            t + s(4),
            21,
            RecKind::Modified,
            "a",
            Some("r2"),
            Some("u2"),
            None,
            Some("r1"),
            "{\"x\":1}",
        ),
    ];
    assert!(fencing(&proven, &leases, t, t + s(10), &never, &clk).is_empty());
    let unproven = vec![
        base.clone(),
        rec(
            t + s(2),
            15,
            RecKind::Modified,
            "a",
            Some("r2"),
            Some("u2"),
            None,
            Some("r1"),
            "{\"x\":1}",
        ),
    ];
    let v = fencing(&unproven, &leases, t, t + s(10), &never, &clk);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].inv, Inv::Proof);
    assert!(
        v[0].detail.contains("deleted only later, at rv 20"),
        "{}",
        v[0].detail
    );
    // Through a drain handshake: no proof needed.
    let drained = vec![
        base.clone(),
        rec(
            t + s(1),
            12,
            RecKind::Modified,
            "a",
            Some("r1"),
            Some("u1"),
            Some("r2"),
            Some("r1"),
            "{\"x\":1}",
        ),
        rec(
            t + s(1),
            13,
            RecKind::Modified,
            "a",
            None,
            None,
            Some("r2"),
            Some("r1"),
            "{\"x\":1}",
        ),
        rec(
            t + s(2),
            14,
            RecKind::Modified,
            "a",
            Some("r2"),
            Some("u2"),
            None,
            Some("r1"),
            "{\"x\":1}",
        ),
    ];
    assert!(fencing(&drained, &leases, t, t + s(10), &never, &clk).is_empty());
    assert_eq!(
        moves(&drained, t, t + s(10), &clk).len(),
        1,
        "one entry per checker"
    );
    assert!(
        moves(&ok, t, t + s(10), &clk).is_empty(),
        "a status write is no move"
    );
}

#[test]
fn oracle_measures_coverage_gaps() {
    let t = Instant::now();
    let clk = Clock { origin: t };
    let s = Duration::from_secs;
    let mut log = ProbeLog::default();
    log.absorb(vec![
        hit("a", "r1", t, 1),
        hit("a", "r1", t + s(2), 1),
        hit("a", "r2", t + s(20), 1),
        hit("b", "r1", t + s(1), 1),
        hit("b", "r1", t + s(3), 1),
    ]);
    let checkers = vec![("a".to_string(), t), ("b".to_string(), t)];
    let (v, worst) = coverage(&log, &checkers, t + s(1), t + s(21), s(13), &clk);
    // a: 2 -> 20 (18 s); b: 3 -> 21 (18 s, still open at the end).
    assert_eq!(v.len(), 2, "{v:?}");
    assert!(
        v.iter().any(|x| x.detail.contains("by r1, next by r2")),
        "{v:?}"
    );
    assert_eq!(worst.unwrap().0, s(18));
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
        rec(
            t,
            6,
            RecKind::Listed,
            "old",
            Some("r2"),
            Some("u2"),
            None,
            None,
            "",
        ),
    );
    s.current.insert(
        "ok".into(),
        rec(
            t,
            7,
            RecKind::Listed,
            "ok",
            Some("r1"),
            Some("u1"),
            None,
            None,
            "",
        ),
    );
    s.current.insert(
        "new".into(),
        rec(t, 8, RecKind::Added, "new", None, None, None, None, ""),
    );
    let names: Vec<String> = ["old", "ok", "new"].iter().map(|x| x.to_string()).collect();
    let left = unowned_in(&s, &names, &["r1".to_string(), "r2".to_string()]);
    assert_eq!(left, vec!["old".to_string(), "new".to_string()]);
}
