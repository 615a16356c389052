//! The oracle on made-up histories (made_up.rs), in seconds, without a
//! cluster, before it judges a real one.

use super::made_up::{hit, lease, rec};
use super::*;

/// How far the fault campaign's own watch may lag a replica's
/// (tests/chaos/main.rs): the slack of the stale-probe checks below.
const WATCH_SLACK: Duration = Duration::from_secs(2);

fn ms_(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn hit_from_to(checker: &str, replica: &str, from_ms: u64, to_ms: u64, t0: Instant) -> Hit {
    Hit {
        checker: checker.into(),
        replica: replica.into(),
        start: t0 + Duration::from_millis(from_ms),
        end: t0 + Duration::from_millis(to_ms),
        headers: HashMap::new(),
    }
}

#[test]
fn zone_overlaps_are_judged_per_checker_and_zone() {
    let t0 = Instant::now();
    let zone_of = |r: &str| r.rsplit('-').next().unwrap().to_string();
    // Three zones probing one checker at once, one after the other in a zone: fine.
    let fine = [
        hit_from_to("c1", "r-a", 0, 50, t0),
        hit_from_to("c1", "r-b", 10, 60, t0),
        hit_from_to("c1", "r-c", 20, 70, t0),
        hit_from_to("c1", "s-b", 100, 150, t0),
        hit_from_to("c2", "s-b", 20, 70, t0),
    ];
    assert!(zone_overlaps(&fine, &zone_of).is_empty());
    // Two replicas of zone b on c1 at once: one violation.
    let mut bad = fine.to_vec();
    bad.push(hit_from_to("c1", "t-b", 120, 130, t0));
    assert_eq!(
        zone_overlaps(&bad, &zone_of),
        ["c1 in zone b: s-b and t-b probed at overlapping times"]
    );
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
        rec(t, 10, RecKind::Listed, "a").owned_by("r1", "u1"),
        rec(t + s(2), 12, RecKind::Modified, "a").owned_by("r2", "u2"),
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
    back.push(rec(t + s(4), 14, RecKind::Modified, "a").owned_by("r1", "u1"));
    let seq = ownership(&back, t + ms_(1), t + s(10));
    assert!(stale_probes(&log, &by, &seq, &none, WATCH_SLACK, &[], &clk).is_empty());
    // Assignment seen long after the probe: the probe came first.
    let mut late = moved_once.clone();
    late.push(rec(t + s(9), 14, RecKind::Modified, "a").owned_by("r1", "u1"));
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

/// The history the fencing checks below judge: checker `a` owned by r1
/// under its Lease u1, with a status by r1; r1's Lease deleted at rv 20
/// (t+3s), r2's (u2) alive.
struct OwnedByR1 {
    t: Instant,
    clk: Clock,
    leases: Vec<LeaseRec>,
    base: ObjRec,
}

impl OwnedByR1 {
    fn new() -> OwnedByR1 {
        let t = Instant::now();
        let s = Duration::from_secs;
        OwnedByR1 {
            t,
            clk: Clock { origin: t },
            leases: vec![
                lease(t, 5, RecKind::Listed, "r1", "u1"),
                lease(t, 6, RecKind::Listed, "r2", "u2"),
                lease(t + s(3), 20, RecKind::Deleted, "r1", "u1"),
            ],
            base: rec(t, 10, RecKind::Listed, "a")
                .owned_by("r1", "u1")
                .status_by("r1", "{\"x\":1}"),
        }
    }

    /// A version of `a` at `secs` after the start, with the status `x`
    /// written by `writer`.
    fn version(&self, secs: u64, rv: u64, writer: &str, x: u32) -> ObjRec {
        rec(
            self.t + Duration::from_secs(secs),
            rv,
            RecKind::Modified,
            "a",
        )
        .status_by(writer, &format!("{{\"x\":{x}}}"))
    }

    /// `fencing` over the first ten seconds, `graceful` the SIGTERM exception.
    fn fencing_with(
        &self,
        objs: &[ObjRec],
        graceful: &dyn Fn(&str, Instant) -> bool,
    ) -> Vec<Violation> {
        let to = self.t + Duration::from_secs(10);
        fencing(objs, &self.leases, self.t, to, graceful, &self.clk)
    }

    /// `fencing` over the first ten seconds, no replica flushing.
    fn fencing(&self, objs: &[ObjRec]) -> Vec<Violation> {
        self.fencing_with(objs, &|_: &str, _: Instant| false)
    }

    fn moves(&self, objs: &[ObjRec]) -> Vec<Violation> {
        moves(objs, self.t, self.t + Duration::from_secs(10), &self.clk)
    }
}

#[test]
fn oracle_checks_every_status_write_and_every_move() {
    let h = OwnedByR1::new();
    let ok = status_writes_land_only_from_the_live_owner(&h);
    moves_need_the_proof_that_the_old_owner_is_gone(&h);
    a_drain_handshake_needs_no_proof(&h);
    assert!(h.moves(&ok).is_empty(), "a status write is no move");
}

/// Invariant 3 on status writes; returns the history of a write that is
/// fine.
fn status_writes_land_only_from_the_live_owner(h: &OwnedByR1) -> Vec<ObjRec> {
    let base = &h.base;
    // A status write by the owner before its Lease went: fine.
    let ok = vec![base.clone(), h.version(1, 11, "r1", 2).owned_by("r1", "u1")];
    assert!(h.fencing(&ok).is_empty());
    // By a non-owner: violation.
    let foreign = vec![base.clone(), h.version(1, 11, "r2", 2).owned_by("r1", "u1")];
    let v = h.fencing(&foreign);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].inv, Inv::Fencing);
    // By the owner after its Lease was deleted (rv 20 < 21): violation, unless
    // it was flushing after SIGTERM.
    let after = vec![base.clone(), h.version(4, 21, "r1", 2).owned_by("r1", "u1")];
    assert_eq!(h.fencing(&after).len(), 1);
    let flushing = |r: &str, _: Instant| r == "r1";
    assert!(h.fencing_with(&after, &flushing).is_empty());
    ok
}

fn moves_need_the_proof_that_the_old_owner_is_gone(h: &OwnedByR1) {
    let base = &h.base;
    // Moved after the proof (Lease deleted at rv 20): fine; before: violation.
    let proven = vec![base.clone(), h.version(4, 21, "r1", 1).owned_by("r2", "u2")];
    assert!(h.fencing(&proven).is_empty());
    let unproven = vec![base.clone(), h.version(2, 15, "r1", 1).owned_by("r2", "u2")];
    let v = h.fencing(&unproven);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].inv, Inv::Proof);
    assert!(
        v[0].detail.contains("deleted only later, at rv 20"),
        "{}",
        v[0].detail
    );
}

fn a_drain_handshake_needs_no_proof(h: &OwnedByR1) {
    let base = &h.base;
    // Through a drain handshake: no proof needed.
    let drained = vec![
        base.clone(),
        h.version(1, 12, "r1", 1)
            .owned_by("r1", "u1")
            .draining_to("r2"),
        h.version(1, 13, "r1", 1).draining_to("r2"),
        h.version(2, 14, "r1", 1).owned_by("r2", "u2"),
    ];
    assert!(h.fencing(&drained).is_empty());
    assert_eq!(h.moves(&drained).len(), 1, "one entry per checker");
    // The old owner's acknowledgement assigns the target itself and says so.
    let mut handed = drained[3].clone();
    handed.rv = 13;
    handed.handed_over_from = Some("r1".into());
    let two_writes = vec![base.clone(), drained[1].clone(), handed.clone()];
    assert!(h.fencing(&two_writes).is_empty());
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
        let v = h.fencing(&[base.clone(), drained[1].clone(), bad]);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].inv, Inv::Proof);
    }
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
