//! The kit's own tests: the schedule and the oracle on made-up histories,
//! and the object log read from etcd on a control plane of its own.

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
        rec(
            t + s(1),
            2,
            RecKind::Modified,
            "a",
            Some("r1"),
            Some("u1"),
            None,
            None,
            "",
        ),
        rec(
            t + s(4),
            6,
            RecKind::Modified,
            "b",
            Some("r1"),
            Some("u2"),
            Some("r1"),
            None,
            "",
        ),
        rec(
            t + s(5),
            7,
            RecKind::Modified,
            "b",
            Some("r1"),
            Some("u2"),
            None,
            None,
            "",
        ),
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
        handed_over_from: None,
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
    // The old owner's acknowledgement assigns the target itself and says so.
    let mut handed = drained[3].clone();
    handed.rv = 13;
    handed.handed_over_from = Some("r1".into());
    let two_writes = vec![base.clone(), drained[1].clone(), handed.clone()];
    assert!(fencing(&two_writes, &leases, t, t + s(10), &never, &clk).is_empty());
    // Without it (the sharder skipping the handshake), or from a drain to
    // another target, the move needs its proof.
    for bad in [
        {
            let mut r = handed.clone();
            r.handed_over_from = None;
            r
        },
        {
            let mut r = handed.clone();
            r.owner = Some("r3".into());
            r
        },
    ] {
        let v = fencing(
            &[base.clone(), drained[1].clone(), bad],
            &leases,
            t,
            t + s(10),
            &never,
            &clk,
        );
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].inv, Inv::Proof);
    }
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

// ============================================================== object logs

/// A change the test made, as the object log must have it: the kind ("checkers"
/// or "leases"), the name, its resourceVersion (within `lo..=hi`: a deletion's
/// is known only between the last write and the next read) and the record kind.
#[derive(Clone, Debug, PartialEq)]
struct Made {
    what: &'static str,
    name: String,
    lo: u64,
    hi: u64,
    kind: RecKind,
}

impl Made {
    fn at(what: &'static str, name: &str, rv: u64, kind: RecKind) -> Made {
        Made {
            what,
            name: name.into(),
            lo: rv,
            hi: rv,
            kind,
        }
    }
}

fn rv_of(meta: &kube::core::ObjectMeta) -> u64 {
    meta.resource_version.as_deref().unwrap().parse().unwrap()
}

/// Sets annotation `step` to `n` (a merge patch, so a retry after an answer
/// lost to a restart writes nothing again), through the errors of a control
/// plane that is coming back; the change it made.
async fn step<K>(api: &Api<K>, what: &'static str, name: &str, n: u32) -> Made
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    use kube::api::{Patch, PatchParams};
    let patch = serde_json::json!({"metadata": {"annotations": {"step": n.to_string()}}});
    let done = |o: &K| {
        let ann = o.meta().annotations.as_ref();
        ann.and_then(|a| a.get("step")) == Some(&n.to_string())
    };
    let rv = eventually(
        Duration::from_secs(90),
        &format!("step {n} of {name}"),
        || async {
            match api
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(o) => Some(rv_of(o.meta())),
                Err(_) => {
                    let o = api.get(name).await.ok()?;
                    done(&o).then(|| rv_of(o.meta()))
                }
            }
        },
    )
    .await;
    Made::at(what, name, rv, RecKind::Modified)
}

/// Creates `obj` through the errors of a control plane that is coming back;
/// the change it made and the object's UID.
async fn create<K>(api: &Api<K>, what: &'static str, obj: &K) -> (Made, String)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let name = obj.meta().name.clone().unwrap();
    let (rv, uid) = eventually(
        Duration::from_secs(90),
        &format!("create {name}"),
        || async {
            let o = match api.create(&PostParams::default(), obj).await {
                Ok(o) => o,
                Err(_) => api.get(&name).await.ok()?,
            };
            Some((rv_of(o.meta()), o.meta().uid.clone().unwrap()))
        },
    )
    .await;
    (Made::at(what, &name, rv, RecKind::Added), uid)
}

/// Deletes `name` (a precondition on its last version, so nothing else came
/// in between); its deletion's resourceVersion is above that version and at
/// most the revision of a list made afterwards.
async fn delete<K>(api: &Api<K>, what: &'static str, name: &str, last: u64) -> Made
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    use kube::api::{DeleteParams, ListParams, Preconditions};
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            resource_version: Some(last.to_string()),
            uid: None,
        }),
        ..DeleteParams::default()
    };
    api.delete(name, &dp).await.unwrap();
    let list = api.list(&ListParams::default()).await.unwrap();
    let hi = list.metadata.resource_version.unwrap().parse().unwrap();
    Made {
        what,
        name: name.into(),
        lo: last + 1,
        hi,
        kind: RecKind::Deleted,
    }
}

/// What a log recorded, in its order.
fn recorded(s: &LogState) -> Vec<(&'static str, String, u64, RecKind)> {
    let objs = s
        .objs
        .iter()
        .map(|o| ("checkers", o.name.clone(), o.rv, o.kind));
    let leases = s
        .leases
        .iter()
        .map(|l| ("leases", l.name.clone(), l.rv, l.kind));
    objs.chain(leases).collect()
}

fn a_member_lease(name: &str, holder: &str) -> Lease {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {MEMBER_LABEL: "true"}},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 3},
    }))
    .unwrap()
}

/// The object log read from etcd sees every write and deletion, in order,
/// across compactions, an etcd restart and an API server restart, where the
/// API server's watch has to re-list and loses what happened in between.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_etcd_object_log_sees_every_change_across_restarts_and_compactions() {
    let cluster = Cluster::start_with("etcdlog", JSON_STORAGE);
    let cp = ControlPlane::new(&cluster);
    let ns = cluster.namespace("etcdlog");
    let client = cluster.client().await;
    let from_api = ObjectLog::start(client.clone(), &ns).await;
    let from_etcd = ObjectLog::from_etcd(&cluster, &ns).await;
    let checkers = checkers_api(&client, &ns);
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let checker = |n: &str| checker_object(n, "http://127.0.0.1:9", 5, serde_json::json!({}));
    let mut made = vec![
        create(&checkers, "checkers", &checker("a")).await.0,
        create(&checkers, "checkers", &checker("b")).await.0,
    ];
    let (m, uid) = create(&leases, "leases", &a_member_lease("m", "r0")).await;
    made.push(m);
    made.push(step(&checkers, "checkers", "a", 1).await);
    made.push(step(&leases, "leases", "m", 1).await);

    cp.compact().await.unwrap();
    made.push(step(&checkers, "checkers", "b", 2).await);
    made.push(step(&leases, "leases", "m", 2).await);
    made.push(create(&checkers, "checkers", &checker("c")).await.0);

    cp.restart_etcd().await.unwrap();
    made.push(step(&checkers, "checkers", "a", 3).await);
    made.push(step(&leases, "leases", "m", 3).await);

    cp.stop_apiserver().await.unwrap();
    cp.start_apiserver().await.unwrap();
    made.push(step(&checkers, "checkers", "b", 4).await);
    made.push(step(&leases, "leases", "m", 4).await);
    cp.compact().await.unwrap();
    made.push(delete(&leases, "leases", "m", made.last().unwrap().lo).await);
    made.push(step(&checkers, "checkers", "a", 5).await);
    made.push(delete(&checkers, "checkers", "a", made.last().unwrap().lo).await);
    made.push(step(&checkers, "checkers", "c", 6).await);
    made.sort_by_key(|m| (m.what, m.lo));

    let all_seen = |log: &ObjectLog| {
        log.with(|s| {
            let got = recorded(s);
            made.iter().all(|m| {
                got.iter()
                    .any(|g| g.0 == m.what && g.1 == m.name && g.2 >= m.lo && g.3 == m.kind)
            })
        })
    };
    eventually(
        Duration::from_secs(60),
        "the etcd log sees the last changes",
        || async { all_seen(&from_etcd).then_some(()) },
    )
    .await;
    let (got, gaps, errors, deleted) = from_etcd.with(|s| {
        let deleted: Vec<LeaseRec> = s
            .leases
            .iter()
            .filter(|l| l.kind == RecKind::Deleted)
            .cloned()
            .collect();
        (recorded(s), s.gaps.clone(), s.watch_errors.len(), deleted)
    });
    println!(
        "etcd log: {} records, {errors} watch errors, gaps {gaps:?}",
        got.len()
    );
    for g in &got {
        println!("  {g:?}");
    }
    assert!(gaps.is_empty(), "the etcd log has gaps: {gaps:?}");
    assert!(
        errors > 0,
        "etcd's restart went unnoticed: its watch errors are none"
    );
    let mut got = got;
    got.sort_by_key(|g| g.0);
    assert_eq!(
        got.len(),
        made.len(),
        "records {got:?}\nchanges made {made:?}"
    );
    for (g, m) in got.iter().zip(&made) {
        let ok = g.0 == m.what && g.1 == m.name && (m.lo..=m.hi).contains(&g.2) && g.3 == m.kind;
        assert!(
            ok,
            "recorded {g:?} where the change made was {m:?}\nrecords {got:?}"
        );
    }
    assert_eq!(deleted.len(), 1, "{deleted:?}");
    assert_eq!(deleted[0].uid, uid, "the Lease's deletion names its UID");
    assert!(!deleted[0].inferred, "{deleted:?}");

    // The API log, once it has caught up (a record of each kind at or past
    // the last change made), has re-listed and holds baselines instead.
    let caught_up = |got: &[(&str, String, u64, RecKind)]| {
        made.iter()
            .all(|m| got.iter().any(|g| g.0 == m.what && g.2 >= m.lo))
    };
    let (api_got, api_gaps) = eventually(
        Duration::from_secs(60),
        "the API log's watches catch up",
        || async {
            let (got, gaps) = from_api.with(|s| (recorded(s), s.gaps.clone()));
            caught_up(&got).then_some((got, gaps))
        },
    )
    .await;
    let missed = made
        .iter()
        .filter(|m| {
            !api_got.iter().any(|g| {
                g.0 == m.what && g.1 == m.name && (m.lo..=m.hi).contains(&g.2) && g.3 == m.kind
            })
        })
        .count();
    println!(
        "API log: {} records, {missed} of the {} changes missed, gaps {api_gaps:?}",
        api_got.len(),
        made.len()
    );
    assert!(
        !api_gaps.is_empty(),
        "the API server's watch re-listed nowhere: the comparison proves nothing"
    );
    drop((from_api, from_etcd, cp));
    cluster.down();
}
