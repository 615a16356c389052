use std::collections::BTreeMap;

use crate::ring::{self, PlacementRef};

use super::*;
use crate::window::START_WINDOW;
use webchecker_api::assignment::Assignment;
use webchecker_api::assignment::{
    DRAIN_ANNOTATION, DRAIN_EPOCH_ANNOTATION, EPOCH_ANNOTATION, OWNER_LABEL,
};

/// The oracle.
impl Book {
    /// The decision from scratch, over every checker: what
    /// [`Book::decide`] must equal.
    fn decide_full(&self, m: &Roster<'_>) -> Vec<Action> {
        // A leaving member is in no ring: its checkers are drained away
        // (it owns them validly until each handover), none placed on it.
        let ring_members: Vec<String> = m
            .members
            .keys()
            .filter(|id| m.placeable(id))
            .cloned()
            .collect();
        if ring_members.is_empty() {
            return Vec::new();
        }
        let mut actions = Vec::new();
        let mut placements = Vec::with_capacity(self.objects.len());
        // In the map's order: the plan does not depend on it, and the
        // handovers below are sorted.
        for (key, o) in &self.objects {
            let pending = self
                .inflight
                .get(key)
                .or_else(|| self.written.get(key).map(|w| &w.1));
            if let Some(t) = pending {
                placements.push(PlacementRef {
                    key,
                    holder: m.placeable(t).then_some(&**t),
                });
                continue;
            }
            let valid = m.valid_owner(o);
            if valid && o.owner.as_deref().is_some_and(|id| m.suspects.contains(id)) {
                continue;
            }
            if o.owner
                .as_deref()
                .is_some_and(|id| self.proving.contains(id))
            {
                continue;
            }
            if m.unverified(o).is_some() {
                continue;
            }
            let target_fresh = m.drain_target(o);
            let holder = match (valid, target_fresh) {
                // A drain in progress counts against its target.
                (true, Some(t)) => Some(t),
                (true, None) if o.drain().is_none() => o.owner.as_deref(),
                // Draining towards a member that left, is suspect or holds
                // another Lease than the drain names: re-target.
                (true, None) => None,
                (false, Some(t)) if o.owner.is_none() => {
                    // The old owner acknowledged the drain: hand over to the target.
                    actions.push(Action::Assign {
                        key: key.to_string(),
                        to: t.to_string(),
                        cause: Cause::Rebalance,
                    });
                    Some(t)
                }
                (false, _) => None,
            };
            placements.push(PlacementRef { key, holder });
        }
        actions.sort_by(|a, b| a.key().cmp(b.key()));
        let handovers: HashSet<String> = actions.iter().map(|a| a.key().to_string()).collect();
        let width = self.window.unwrap_or(START_WINDOW);
        let mut window = width.saturating_sub(self.handovers_in_progress());
        let mut drain = |key: String, to: String, actions: &mut Vec<Action>| {
            if window > 0 && !self.held_back.contains_key(key.as_str()) {
                window -= 1;
                actions.push(Action::SetDrain { key, to });
            }
        };
        for mv in ring::plan_refs(&ring_members, &placements) {
            match mv {
                Move::Assign { key, .. } | Move::Drain { key, .. }
                    if self.pending(&key) || handovers.contains(&key) => {}
                Move::Assign { key, to } => {
                    let o = &self.objects[key.as_str()];
                    if m.valid_owner(o) && o.owner.as_deref() == Some(to.as_str()) {
                        actions.push(Action::ClearDrain { key, owner: to });
                    } else if m.valid_owner(o) {
                        drain(key, to, &mut actions);
                    } else {
                        let cause = match o.owner.as_deref() {
                            None if o.drain().is_some() => Cause::Rebalance,
                            None => Cause::New,
                            Some(owner) if self.dead.contains(owner) => Cause::Dead,
                            Some(_) => Cause::Departed,
                        };
                        actions.push(Action::Assign { key, to, cause });
                    }
                }
                Move::Drain { key, to, .. } => drain(key, to, &mut actions),
            }
        }
        actions
    }
}

/// Decides, and checks the decision against the oracle's.
fn decide_checked(b: &mut Book, m: &Roster<'_>) -> Vec<Action> {
    let full = b.decide_full(m);
    let acts = b.decide(m);
    assert_eq!(
        acts, full,
        "the incremental decision differs from the full one"
    );
    acts
}

fn meta(
    name: &str,
    rv: &str,
    owner: Option<&str>,
    epoch: Option<&str>,
    drain: Option<&str>,
) -> ObjectMeta {
    let mut labels = BTreeMap::new();
    if let Some(o) = owner {
        labels.insert(OWNER_LABEL.to_string(), o.to_string());
    }
    let mut ann = BTreeMap::new();
    if let Some(e) = epoch {
        ann.insert(EPOCH_ANNOTATION.to_string(), e.to_string());
    }
    if let Some(d) = drain {
        ann.insert(DRAIN_ANNOTATION.to_string(), d.to_string());
    }
    ObjectMeta {
        namespace: Some("ns".into()),
        name: Some(name.into()),
        resource_version: Some(rv.into()),
        labels: Some(labels),
        annotations: Some(ann),
        ..Default::default()
    }
}

fn book(items: &[ObjectMeta]) -> Book {
    let now = Instant::now();
    let mut b = Book::default();
    b.list_begin();
    for m in items {
        b.list_item(m, now);
    }
    b.list_done();
    b
}

fn members(ids: &[(&str, &str)]) -> BTreeMap<String, String> {
    ids.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

/// Decides as a sharder whose view saw every epoch of the book go that is
/// no member's Lease now.
fn decide(b: &mut Book, live: &BTreeMap<String, String>, suspects: &[&str]) -> Vec<Action> {
    let suspects: HashSet<String> = suspects.iter().map(|s| s.to_string()).collect();
    let retired: HashSet<String> = b
        .objects
        .values()
        .filter_map(|o| o.epoch.as_deref().map(str::to_string))
        .filter(|e| !live.values().any(|uid| uid == e))
        .collect();
    decide_checked(
        b,
        &Roster {
            members: live,
            suspects: &suspects,
            leaving: &HashSet::new(),
            retired: &retired,
        },
    )
}

fn assign(key: &str, to: &str, cause: Cause) -> Action {
    Action::Assign {
        key: key.into(),
        to: to.into(),
        cause,
    }
}

#[test]
fn a_stale_epoch_means_the_owner_departed() {
    let mut b = book(&[meta("x", "1", Some("a"), Some("uid-a1"), None)]);
    let acts = decide(&mut b, &members(&[("a", "uid-a2")]), &[]);
    assert_eq!(acts, [assign("ns/x", "a", Cause::Departed)]);
}

/// Window #143 of chaos seed 11264228: r1 restarted under Lease "new" and
/// took its checkers; a sharder whose view still held r1's earlier Lease
/// "old" (its Lease watch hung since a proxy fault, then failed, so nobody
/// was suspect) moved them off r1's live session, to r1 under the dead
/// epoch and to the others. An epoch the view has not seen go is no proof.
#[test]
fn an_epoch_the_view_has_not_seen_go_is_no_proof() {
    let mut b = book(&[
        meta("x", "1", Some("r1"), Some("new"), None),
        meta("y", "1", Some("r1"), Some("old"), None),
        meta("z", "1", Some("gone"), Some("ug"), None),
    ]);
    let lagging = members(&[("r0", "u0"), ("r1", "old"), ("r2", "u2")]);
    let none = HashSet::new();
    let m = Roster {
        members: &lagging,
        suspects: &none,
        leaving: &HashSet::new(),
        retired: &none,
    };
    let acts = decide_checked(&mut b, &m);
    assert!(
        acts.iter().all(|a| a.key() != "ns/x" && a.key() != "ns/z"),
        "{acts:?}"
    );
    let unverified: Vec<(String, String)> = b.unverified(&m).into_iter().collect();
    assert_eq!(
        unverified,
        [
            ("gone".to_string(), "ug".to_string()),
            ("r1".to_string(), "new".to_string())
        ]
    );
    // A read found "new" replaced (or the view saw it deleted): now it moves.
    let retired: HashSet<String> = ["new".to_string(), "ug".to_string()].into();
    let m = Roster {
        members: &lagging,
        suspects: &none,
        leaving: &HashSet::new(),
        retired: &retired,
    };
    let acts = decide_checked(&mut b, &m);
    assert!(acts.iter().any(|a| a.key() == "ns/x"), "{acts:?}");
    assert!(acts.iter().any(|a| a.key() == "ns/z"), "{acts:?}");
    assert!(b.unverified(&m).is_empty());
}

#[test]
fn an_acknowledged_drain_is_handed_to_its_target() {
    let mut b = book(&[meta("x", "1", None, None, Some("b"))]);
    let acts = decide(&mut b, &members(&[("a", "ua"), ("b", "ub")]), &[]);
    assert_eq!(acts, [assign("ns/x", "b", Cause::Rebalance)]);
}

#[test]
fn valid_assignments_are_left_alone() {
    let mut b = book(&[meta("x", "1", Some("a"), Some("ua"), None)]);
    assert!(decide(&mut b, &members(&[("a", "ua")]), &[]).is_empty());
}

#[test]
fn a_proven_dead_owner_is_reassigned_with_cause_dead() {
    let mut b = book(&[meta("x", "1", Some("a"), Some("ua"), None)]);
    b.proven("a");
    let acts = decide(&mut b, &members(&[("b", "ub")]), &[]);
    assert_eq!(acts, [assign("ns/x", "b", Cause::Dead)]);
}

/// A member whose Lease looks stale but could not be proven
/// gone (its renewal raced the proof, or the proof got a 5xx) keeps its checkers.
#[test]
fn a_suspect_keeps_its_checkers_until_proven_gone() {
    let mut b = book(&[
        meta("x", "1", Some("a"), Some("ua"), None),
        meta("y", "1", Some("b"), Some("ub"), None),
    ]);
    let live = members(&[("a", "ua"), ("b", "ub")]);
    assert!(decide(&mut b, &live, &["a"]).is_empty());
}

#[test]
fn new_checkers_never_go_to_a_suspect() {
    let mut b = book(&[
        meta("x", "1", None, None, None),
        meta("y", "1", None, None, None),
    ]);
    let acts = decide(&mut b, &members(&[("a", "ua"), ("b", "ub")]), &["a"]);
    assert_eq!(acts.len(), 2);
    assert!(acts.iter().all(|a| a.target() == "b"), "{acts:?}");
}

#[test]
fn nobody_fresh_means_no_decision() {
    let mut b = book(&[meta("x", "1", None, None, None)]);
    assert!(decide(&mut b, &members(&[("a", "ua")]), &["a"]).is_empty());
}

/// The race found by the overload run: the old owner's drain ack and the
/// SetDrain's own event both arrive while the SetDrain write is in flight. The
/// decision after the write completes must hand the checker over.
#[test]
fn a_drain_acked_while_its_write_was_in_flight_is_handed_over() {
    let now = Instant::now();
    let mut b = book(&[meta("x", "1", Some("a"), Some("ua"), None)]);
    let live = members(&[("a", "ua"), ("b", "ub")]);
    let drain = Action::SetDrain {
        key: "ns/x".into(),
        to: "b".into(),
    };
    b.write_started(&drain);
    assert!(
        decide(&mut b, &live, &[]).iter().all(|a| a.key() != "ns/x"),
        "in flight: hands off"
    );
    b.applied(&meta("x", "2", Some("a"), Some("ua"), Some("b")), now);
    b.applied(&meta("x", "3", None, None, Some("b")), now);
    b.write_finished("ns/x", &WriteOutcome::Written("2".into()), now);
    assert!(!b.pending("ns/x"), "its event was seen: not held");
    assert_eq!(
        decide(&mut b, &live, &[]),
        [assign("ns/x", "b", Cause::Rebalance)]
    );
}

#[test]
fn a_write_never_seen_back_holds_its_key_for_a_bounded_time() {
    let now = Instant::now();
    let mut b = book(&[meta("x", "1", None, None, None)]);
    let a = assign("ns/x", "a", Cause::New);
    b.write_started(&a);
    b.write_finished("ns/x", &WriteOutcome::Written("2".into()), now);
    assert!(b.pending("ns/x"));
    assert!(!b.expire_written(now + WRITTEN_HOLD / 2));
    assert!(b.expire_written(now + WRITTEN_HOLD));
    assert!(!b.pending("ns/x"));
}

#[test]
fn a_failed_or_raced_write_frees_its_key_at_once() {
    let now = Instant::now();
    let mut b = book(&[meta("x", "1", None, None, None)]);
    for outcome in [WriteOutcome::Failed, WriteOutcome::Raced] {
        b.write_started(&assign("ns/x", "a", Cause::New));
        b.write_finished("ns/x", &outcome, now);
        assert!(!b.pending("ns/x"), "{outcome:?}");
    }
}

#[test]
fn proofs_back_off_and_a_refutation_resets_them() {
    let t0 = Instant::now();
    let s = Duration::from_secs(1);
    let mut b = Book::default();
    assert!(b.proof_due("a", t0));
    b.proof_failed("a", t0, s, 8 * s);
    assert!(!b.proof_due("a", t0 + s / 2));
    assert!(b.proof_due("a", t0 + s));
    b.proof_failed("a", t0 + s, s, 8 * s);
    assert!(!b.proof_due("a", t0 + 2 * s));
    assert!(b.proof_due("a", t0 + 3 * s));
    for _ in 0..10 {
        b.proof_failed("a", t0, s, 8 * s);
    }
    assert!(b.proof_due("a", t0 + 8 * s), "capped");
    b.proof_refuted("a");
    assert!(b.proof_due("a", t0));
}

#[test]
fn a_shed_proof_is_retried_soon_and_leaves_the_backoff_as_it_was() {
    let t0 = Instant::now();
    let s = Duration::from_secs(1);
    let mut b = Book::default();
    b.proof_failed("a", t0, s, 8 * s);
    b.proof_failed("a", t0, s, 8 * s);
    for i in 0..5 {
        b.proof_shed("a", t0, s / 4);
        assert!(b.proof_due("a", t0 + s / 4), "shed {i} times");
    }
    // A failure with no answer after that doubles from where it was (2 s).
    b.proof_failed("a", t0, s, 8 * s);
    assert!(!b.proof_due("a", t0 + 3 * s));
    assert!(b.proof_due("a", t0 + 4 * s));
}

#[test]
fn the_dead_set_is_pruned_once_no_checker_names_the_member() {
    let now = Instant::now();
    let mut b = book(&[meta("x", "1", Some("a"), Some("ua"), None)]);
    b.proven("a");
    let live = members(&[("b", "ub")]);
    b.prune(&live);
    assert_eq!(
        decide(&mut b, &live, &[]),
        [assign("ns/x", "b", Cause::Dead)]
    );
    b.applied(&meta("x", "2", Some("b"), Some("ub"), None), now);
    b.prune(&live);
    assert!(b.dead.is_empty());
}

#[test]
fn the_census_counts_checkers_nobody_serves_after_the_grace() {
    let t0 = Instant::now();
    let s = Duration::from_secs(1);
    let mut b = book(&[
        meta("unowned", "1", None, None, None),
        meta("gone", "1", Some("z"), Some("uz"), None),
        meta("suspect", "1", Some("a"), Some("ua"), None),
        meta("fine", "1", Some("b"), Some("ub"), None),
        meta("draining", "1", Some("b"), Some("ub"), Some("a")),
    ]);
    let live = members(&[("a", "ua"), ("b", "ub")]);
    let suspects: HashSet<String> = ["a".to_string()].into();
    let none = HashSet::new();
    let m = Roster {
        members: &live,
        suspects: &suspects,
        leaving: &HashSet::new(),
        retired: &none,
    };
    assert_eq!(
        b.census(&m, t0, 10 * s, 60 * s).orphaned,
        0,
        "within the grace"
    );
    assert_eq!(b.census(&m, t0 + 11 * s, 10 * s, 60 * s).orphaned, 3);
    assert_eq!(
        b.census(&m, t0 + 61 * s, 10 * s, 60 * s).orphaned,
        4,
        "a drain stuck too long"
    );
    // Once served again the clock clears.
    b.applied(
        &meta("unowned", "2", Some("b"), Some("ub"), None),
        t0 + 62 * s,
    );
    assert_eq!(b.census(&m, t0 + 62 * s, 10 * s, 60 * s).orphaned, 3);
}

/// The drain's target left while the owner is still valid: if the owner is
/// the best place again, the drain is withdrawn, not turned into a handover
/// from the owner to itself (a pointless gap).
#[test]
fn a_drain_whose_target_left_is_withdrawn_when_the_owner_is_best() {
    let mut b = book(&[meta("x", "1", Some("a"), Some("ua"), Some("gone"))]);
    let acts = decide(&mut b, &members(&[("a", "ua")]), &[]);
    assert_eq!(
        acts,
        [Action::ClearDrain {
            key: "ns/x".into(),
            owner: "a".into()
        }]
    );
}

/// A newcomer's share is drained a window at a time: draining it all at once
/// queues every ack and assignment behind the others, and each checker of the
/// share stays unprobed for the whole queue. Unowned checkers never wait.
#[test]
fn rebalancing_drains_a_bounded_window_and_never_holds_back_orphans() {
    let n = 4 * START_WINDOW;
    let mut items: Vec<ObjectMeta> = (0..n)
        .map(|i| meta(&format!("c{i}"), "1", Some("a"), Some("ua"), None))
        .collect();
    items.extend((0..8).map(|i| meta(&format!("new{i}"), "1", None, None, None)));
    let mut b = book(&items);
    let live = members(&[("a", "ua"), ("b", "ub")]);
    let first = decide(&mut b, &live, &[]);
    let drains: Vec<&Action> = first
        .iter()
        .filter(|a| matches!(a, Action::SetDrain { .. }))
        .collect();
    assert_eq!(drains.len(), START_WINDOW);
    assert_eq!(
        first
            .iter()
            .filter(|a| matches!(
                a,
                Action::Assign {
                    cause: Cause::New,
                    ..
                }
            ))
            .count(),
        8,
        "new checkers are assigned whatever the window"
    );
    // In flight, then seen back as annotations: the window stays full.
    let now = Instant::now();
    for a in &drains {
        b.write_started(a);
    }
    assert!(
        decide(&mut b, &live, &[])
            .iter()
            .all(|a| !matches!(a, Action::SetDrain { .. })),
        "no drain beyond the window while the first ones are in flight"
    );
    for (i, a) in drains.iter().enumerate() {
        b.write_finished(a.key(), &WriteOutcome::Written(format!("w{i}")), now);
        let name = a.key().trim_start_matches("ns/");
        b.applied(
            &meta(name, &format!("w{i}"), Some("a"), Some("ua"), Some("b")),
            now,
        );
    }
    assert!(
        decide(&mut b, &live, &[])
            .iter()
            .all(|a| !matches!(a, Action::SetDrain { .. })),
        "acknowledged or not, a drain holds its place until it is handed over"
    );
    // Half of them handed over: as many new drains start.
    for (i, a) in drains.iter().take(START_WINDOW / 2).enumerate() {
        let name = a.key().trim_start_matches("ns/");
        b.applied(
            &meta(name, &format!("h{i}"), Some("b"), Some("ub"), None),
            now,
        );
    }
    let next = decide(&mut b, &live, &[]);
    assert_eq!(
        next.iter()
            .filter(|a| matches!(a, Action::SetDrain { .. }))
            .count(),
        START_WINDOW / 2
    );
}

/// A drain whose acknowledgement never lands (a 4xx the writer drops: an
/// admission policy, RBAC drift) is withdrawn after the bound, so the owner
/// probes the checker again, and it is not drained again for a while.
#[test]
fn a_drain_never_acknowledged_is_withdrawn_and_held_back() {
    let s = Duration::from_secs(1);
    let t0 = Instant::now();
    let names: Vec<String> = (0..10).map(|i| format!("c{i}")).collect();
    let owned = |rv: &str, drain: &dyn Fn(&str) -> Option<&'static str>| -> Vec<ObjectMeta> {
        names
            .iter()
            .map(|n| meta(n, rv, Some("a"), Some("ua"), drain(n)))
            .collect()
    };
    let mut b = book(&owned("1", &|_| None));
    let live = members(&[("a", "ua"), ("b", "ub")]);
    // b joined: half of a's checkers are drained towards it.
    let drained: HashSet<String> = decide(&mut b, &live, &[])
        .iter()
        .filter_map(|a| match a {
            Action::SetDrain { key, to } if to == "b" => Some(key.clone()),
            _ => None,
        })
        .collect();
    assert!(drained.len() >= 4, "{drained:?}");
    let is_drained = |n: &str| drained.contains(&format!("ns/{n}")).then_some("b");
    for m in owned("2", &is_drained) {
        b.applied(&m, t0);
    }
    let none = HashSet::new();
    let m = Roster {
        members: &live,
        suspects: &none,
        leaving: &HashSet::new(),
        retired: &none,
    };
    assert!(
        b.stuck_drains(&m, t0 + 9 * s, 10 * s).is_empty(),
        "within the bound"
    );
    // Never acknowledged: every one withdrawn, back to its owner.
    let withdrawn: HashSet<String> = b
        .stuck_drains(&m, t0 + 11 * s, 10 * s)
        .into_iter()
        .map(|a| {
            assert!(
                matches!(&a, Action::ClearDrain { owner, .. } if owner == "a"),
                "{a:?}"
            );
            a.key().to_string()
        })
        .collect();
    assert_eq!(withdrawn, drained);
    for m in owned("3", &|_| None) {
        b.applied(&m, t0 + 12 * s);
    }
    let again = |b: &mut Book| {
        decide(b, &live, &[])
            .iter()
            .filter(|a| matches!(a, Action::SetDrain { .. }))
            .count()
    };
    assert_eq!(again(&mut b), 0, "held back: not drained again at once");
    // After the hold they may be drained again.
    let later = t0 + 12 * s + 10 * s * STUCK_HOLD_FACTOR;
    assert!(b.stuck_drains(&m, later, 10 * s).is_empty());
    assert_eq!(again(&mut b), drained.len());
}

/// A drain the owner is still working on (not yet past the bound), one whose
/// target left, or one whose owner is no longer valid is not withdrawn here.
#[test]
fn only_drains_stuck_on_a_valid_owner_towards_a_live_target_are_withdrawn() {
    let s = Duration::from_secs(1);
    let t0 = Instant::now();
    let mut b = Book::default();
    b.list_begin();
    b.list_item(&meta("gone", "1", Some("a"), Some("ua"), Some("left")), t0);
    b.list_item(&meta("acked", "1", None, None, Some("b")), t0);
    b.list_item(&meta("stale", "1", Some("a"), Some("old"), Some("b")), t0);
    b.list_done();
    let live = members(&[("a", "ua"), ("b", "ub")]);
    let none = HashSet::new();
    let m = Roster {
        members: &live,
        suspects: &none,
        leaving: &HashSet::new(),
        retired: &none,
    };
    assert!(b.stuck_drains(&m, t0 + 60 * s, 10 * s).is_empty());
}

/// Our own proof deletes the member's Lease; the view may drop the member
/// before the proof's verdict comes back. Its checkers wait for the verdict
/// (then move with cause dead), instead of moving at once as departed.
#[test]
fn a_members_checkers_wait_for_the_verdict_of_its_proof_under_way() {
    let mut b = book(&[meta("x", "1", Some("gone"), Some("ug"), None)]);
    let live = members(&[("a", "ua")]);
    b.proof_started("gone");
    assert!(decide(&mut b, &live, &[]).is_empty());
    b.proven("gone");
    assert_eq!(
        decide(&mut b, &live, &[]),
        [assign("ns/x", "a", Cause::Dead)]
    );
}

fn drain_meta(
    name: &str,
    rv: &str,
    owner: &str,
    epoch: &str,
    to: &str,
    to_epoch: &str,
) -> ObjectMeta {
    let mut m = meta(name, rv, Some(owner), Some(epoch), Some(to));
    m.annotations
        .get_or_insert_default()
        .insert(DRAIN_EPOCH_ANNOTATION.to_string(), to_epoch.to_string());
    m
}

/// The two-write handover: the old owner's acknowledgement assigns the
/// target itself. The sharder writes nothing more for it, counts the move,
/// and its window slot is free for the next drain at once.
#[test]
fn a_handover_acknowledged_by_assigning_the_target_needs_no_third_write() {
    let n = 4 * START_WINDOW;
    let items: Vec<ObjectMeta> = (0..n)
        .map(|i| meta(&format!("c{i:03}"), "1", Some("a"), Some("ua"), None))
        .collect();
    let mut b = book(&items);
    let live = members(&[("a", "ua"), ("b", "ub")]);
    let drains = decide(&mut b, &live, &[]);
    assert_eq!(drains.len(), START_WINDOW);
    let now = Instant::now();
    for a in &drains {
        let name = a.key().trim_start_matches("ns/");
        assert_eq!(
            b.applied(&drain_meta(name, "2", "a", "ua", "b", "ub"), now),
            None
        );
    }
    assert!(decide(&mut b, &live, &[]).is_empty(), "the window is full");
    let mut handed = 0;
    for a in drains.iter().take(10) {
        let name = a.key().trim_start_matches("ns/");
        let later = now + Duration::from_millis(300);
        let took = b.applied(&meta(name, "3", Some("b"), Some("ub"), None), later);
        assert_eq!(took, Some(Duration::from_millis(300)));
        handed += 1;
    }
    assert_eq!(handed, 10, "each completed handover is seen as one move");
    let next = decide(&mut b, &live, &[]);
    assert_eq!(next.len(), 10, "{next:?}");
    assert!(
        next.iter()
            .all(|a| matches!(a, Action::SetDrain { to, .. } if to == "b"))
    );
    assert!(
        next.iter()
            .all(|a| drains.iter().all(|d| d.key() != a.key()))
    );
}

/// A drain written by an earlier sharder names no epoch; its owner clears
/// the assignment and the sharder assigns the target (a rolling upgrade).
#[test]
fn a_drain_acknowledged_the_earlier_way_is_still_assigned() {
    let mut b = book(&[meta("x", "1", None, None, Some("b"))]);
    let acts = decide(&mut b, &members(&[("a", "ua"), ("b", "ub")]), &[]);
    assert_eq!(acts, [assign("ns/x", "b", Cause::Rebalance)]);
}

/// The target restarted after the drain was written: the drain names its
/// earlier Lease, and an acknowledgement would assign the checker to a
/// session that ended. The sharder drains again under the current epoch.
#[test]
fn a_drain_naming_the_targets_earlier_lease_is_written_again() {
    let mut items: Vec<ObjectMeta> = (0..3)
        .map(|i| meta(&format!("a{i}"), "1", Some("a"), Some("ua"), None))
        .collect();
    items.push(drain_meta("x", "1", "a", "ua", "b", "ub-old"));
    let mut b = book(&items);
    let acts = decide(&mut b, &members(&[("a", "ua"), ("b", "ub")]), &[]);
    assert!(
        acts.iter()
            .any(|a| matches!(a, Action::SetDrain { key, to } if key == "ns/x" && to == "b")),
        "{acts:?}"
    );
    // Under the current epoch it is left alone.
    let mut items: Vec<ObjectMeta> = (0..3)
        .map(|i| meta(&format!("a{i}"), "1", Some("a"), Some("ua"), None))
        .collect();
    items.push(drain_meta("x", "1", "a", "ua", "b", "ub"));
    let mut b = book(&items);
    let acts = decide(&mut b, &members(&[("a", "ua"), ("b", "ub")]), &[]);
    assert!(acts.iter().all(|a| a.key() != "ns/x"), "{acts:?}");
}

/// The window's width comes from the sharder (measured answer times).
#[test]
fn the_window_set_by_the_sharder_bounds_the_drains() {
    let items: Vec<ObjectMeta> = (0..400)
        .map(|i| meta(&format!("c{i:03}"), "1", Some("a"), Some("ua"), None))
        .collect();
    let mut b = book(&items);
    let live = members(&[("a", "ua"), ("b", "ub")]);
    b.set_window(150);
    assert_eq!(decide(&mut b, &live, &[]).len(), 150);
    b.set_window(8);
    assert_eq!(decide(&mut b, &live, &[]).len(), 8);
}

/// A member asked to stop (its Lease says it is leaving) keeps its
/// checkers until each is drained to the ring's other members, a window at
/// a time, and is given nothing: no new checker, no drain towards it.
#[test]
fn a_leaving_member_is_drained_and_takes_nothing() {
    let mut items: Vec<ObjectMeta> = (0..2 * START_WINDOW)
        .map(|i| meta(&format!("c{i}"), "1", Some("a"), Some("ua"), None))
        .collect();
    items.extend((0..4).map(|i| meta(&format!("new{i}"), "1", None, None, None)));
    items.push(meta("towards", "1", Some("b"), Some("ub"), Some("a")));
    let mut b = book(&items);
    let live = members(&[("a", "ua"), ("b", "ub"), ("c", "uc")]);
    let none = HashSet::new();
    let leaving: HashSet<String> = ["a".to_string()].into();
    let acts = decide_checked(
        &mut b,
        &Roster {
            members: &live,
            suspects: &none,
            leaving: &leaving,
            retired: &none,
        },
    );
    let drains: Vec<&Action> = acts
        .iter()
        .filter(|a| matches!(a, Action::SetDrain { .. }))
        .collect();
    // The drain towards the leaving member is in progress: it counts
    // against the window until it is re-targeted.
    assert_eq!(drains.len(), START_WINDOW - 1, "{acts:?}");
    for a in &acts {
        match a {
            Action::SetDrain { key, to } => {
                assert!(key.starts_with("ns/c") || key == "ns/towards", "{a:?}");
                assert_ne!(to, "a", "{a:?}");
            }
            Action::Assign { to, cause, .. } => {
                assert_ne!(to, "a", "{a:?}");
                assert_eq!(*cause, Cause::New, "{a:?}");
            }
            Action::ClearDrain { key, owner } => {
                assert_eq!((key.as_str(), owner.as_str()), ("ns/towards", "b"));
            }
        }
    }
    // Every member leaving: nowhere to go, nothing moves.
    let all: HashSet<String> = live.keys().cloned().collect();
    assert!(
        decide_checked(
            &mut b,
            &Roster {
                members: &live,
                suspects: &none,
                leaving: &all,
                retired: &none,
            }
        )
        .is_empty()
    );
}

/// Random sequences of events (members come, go, restart, turn suspect or
/// leaving; checkers created, changed, deleted; writes started, answered,
/// seen back or never; drains acknowledged; proofs; relists): every
/// decision equals the oracle's.
mod random {
    use super::*;
    use proptest::prelude::*;

    const MEMBERS: [&str; 5] = ["a", "b", "c", "d", "e"];

    #[derive(Clone, Debug)]
    pub(super) enum Op {
        Join(usize),
        Leave(usize, bool),
        Suspect(usize),
        Leaving(usize),
        Put {
            key: usize,
            owner: Option<usize>,
            stale_epoch: bool,
            drain: Option<usize>,
        },
        Delete(usize),
        Decide {
            start: usize,
        },
        Finish {
            which: usize,
            outcome: u8,
        },
        Ack {
            key: usize,
            old_way: bool,
        },
        Expire,
        Proof(usize, u8),
        Window(usize),
        Stuck,
        Relist,
        Census,
    }

    fn op() -> impl Strategy<Value = Op> {
        let m = 0..MEMBERS.len();
        let key = 0usize..40;
        prop_oneof![
            2 => m.clone().prop_map(Op::Join),
            1 => (m.clone(), any::<bool>()).prop_map(|(i, r)| Op::Leave(i, r)),
            1 => m.clone().prop_map(Op::Suspect),
            1 => m.clone().prop_map(Op::Leaving),
            6 => (key.clone(), proptest::option::of(m.clone()), proptest::bool::weighted(0.1), proptest::option::weighted(0.2, m.clone()))
                .prop_map(|(key, owner, stale_epoch, drain)| Op::Put { key, owner, stale_epoch, drain }),
            1 => key.clone().prop_map(Op::Delete),
            4 => (0usize..8).prop_map(|start| Op::Decide { start }),
            4 => (any::<usize>(), 0u8..6).prop_map(|(which, outcome)| Op::Finish { which, outcome }),
            3 => (key, any::<bool>()).prop_map(|(key, old_way)| Op::Ack { key, old_way }),
            1 => Just(Op::Expire),
            1 => (m.clone(), 0u8..5).prop_map(|(i, v)| Op::Proof(i, v)),
            1 => (0usize..6).prop_map(Op::Window),
            1 => Just(Op::Stuck),
            1 => Just(Op::Relist),
            2 => Just(Op::Census),
        ]
    }

    /// The cluster the book follows: objects as the API server holds them,
    /// the members' Leases, and the sharder's view of them.
    pub(super) struct World {
        book: Book,
        now: Instant,
        rv: u64,
        objects: BTreeMap<String, ObjectMeta>,
        members: BTreeMap<String, String>,
        generation: usize,
        suspects: HashSet<String>,
        leaving: HashSet<String>,
        retired: HashSet<String>,
        pub(super) inflight: Vec<Action>,
    }

    impl World {
        pub(super) fn new() -> Self {
            let mut w = World {
                book: book(&[]),
                now: Instant::now(),
                rv: 1,
                objects: BTreeMap::new(),
                members: BTreeMap::new(),
                generation: 0,
                suspects: HashSet::new(),
                leaving: HashSet::new(),
                retired: HashSet::new(),
                inflight: Vec::new(),
            };
            for i in 0..3 {
                w.join(i);
            }
            w
        }

        fn join(&mut self, i: usize) {
            self.generation += 1;
            let epoch = format!("u{}{}", MEMBERS[i], self.generation);
            if let Some(old) = self.members.insert(MEMBERS[i].into(), epoch) {
                self.retired.insert(old);
            }
        }

        fn put(&mut self, key: &str, meta: ObjectMeta) {
            self.rv += 1;
            let mut meta = meta;
            meta.resource_version = Some(self.rv.to_string());
            self.book.applied(&meta, self.now);
            self.objects.insert(key.into(), meta);
        }

        pub(super) fn decide(&mut self) -> Vec<Action> {
            let roster = Roster {
                members: &self.members,
                suspects: &self.suspects,
                leaving: &self.leaving,
                retired: &self.retired,
            };
            decide_checked(&mut self.book, &roster)
        }

        /// What the object becomes once `a` lands.
        fn landed(&self, a: &Action) -> Option<ObjectMeta> {
            let name = a.key().trim_start_matches("ns/");
            let cur = Assignment::of(self.objects.get(name)?);
            let epoch = self.members.get(a.target()).map(String::as_str);
            Some(match a {
                Action::Assign { to, .. } => meta(name, "0", Some(to), epoch, None),
                Action::SetDrain { to, .. } => {
                    let o = cur.owner.as_deref();
                    let mut m = meta(name, "0", o, cur.epoch.as_deref(), Some(to));
                    if let Some(e) = epoch {
                        m.annotations
                            .get_or_insert_default()
                            .insert(DRAIN_EPOCH_ANNOTATION.to_string(), e.to_string());
                    }
                    m
                }
                Action::ClearDrain { .. } => {
                    meta(name, "0", cur.owner.as_deref(), cur.epoch.as_deref(), None)
                }
            })
        }
    }

    impl World {
        pub(super) fn step(&mut self, op: Op) {
            self.now += Duration::from_millis(700);
            match op {
                Op::Join(i) => self.join(i),
                Op::Leave(i, seen) => {
                    if let Some(old) = self.members.remove(MEMBERS[i])
                        && seen
                    {
                        self.retired.insert(old);
                    }
                }
                Op::Suspect(i) => toggle(&mut self.suspects, MEMBERS[i]),
                Op::Leaving(i) => toggle(&mut self.leaving, MEMBERS[i]),
                Op::Put {
                    key,
                    owner,
                    stale_epoch,
                    drain,
                } => {
                    let name = format!("c{key}");
                    let owner = owner.map(|i| MEMBERS[i]);
                    let epoch = match owner {
                        Some(_) if stale_epoch => Some("u-old".to_string()),
                        Some(o) => self.members.get(o).cloned(),
                        None => None,
                    };
                    let drain = drain.map(|i| MEMBERS[i]);
                    let m = meta(&name, "0", owner, epoch.as_deref(), drain);
                    self.put(&name, m);
                }
                Op::Delete(key) => {
                    if let Some(m) = self.objects.remove(&format!("c{key}")) {
                        self.book.deleted(&m);
                    }
                }
                Op::Decide { start } => {
                    for a in self.decide().into_iter().take(start) {
                        if !self.book.pending(a.key()) {
                            self.book.write_started(&a);
                            self.inflight.push(a);
                        }
                    }
                }
                Op::Finish { which, outcome } => self.finish(which, outcome),
                Op::Ack { key, old_way } => self.ack(&format!("c{key}"), old_way),
                Op::Expire => {
                    self.now += WRITTEN_HOLD;
                    self.book.expire_written(self.now);
                }
                Op::Proof(i, verdict) => self.proof(MEMBERS[i], verdict),
                Op::Window(w) => self.book.set_window(w),
                Op::Stuck => {
                    let roster = Roster {
                        members: &self.members,
                        suspects: &self.suspects,
                        leaving: &self.leaving,
                        retired: &self.retired,
                    };
                    self.book
                        .stuck_drains(&roster, self.now, Duration::from_secs(2));
                }
                Op::Census => self.census(),
                Op::Relist => {
                    self.book.list_begin();
                    for m in self.objects.values() {
                        self.book.list_item(m, self.now);
                    }
                    self.book.list_done();
                }
            }
        }

        /// The census, against one over every checker.
        fn census(&mut self) {
            let roster = Roster {
                members: &self.members,
                suspects: &self.suspects,
                leaving: &self.leaving,
                retired: &self.retired,
            };
            let (now, grace, bound) = (self.now, Duration::from_secs(3), Duration::from_secs(9));
            let mut objects = self.book.objects.clone();
            let mut orphaned = 0;
            for o in objects.values_mut() {
                let m = &roster;
                let served = m.valid_owner(o) && o.owner.as_deref().is_some_and(|id| m.fresh(id));
                let since = if served {
                    None
                } else {
                    Some(o.orphan_since().unwrap_or(now))
                };
                o.set_orphan_since(since);
                let old =
                    |t: Option<Instant>, d| t.is_some_and(|t| now.saturating_duration_since(t) > d);
                if old(o.orphan_since(), grace) || old(o.drain_since(), bound) {
                    orphaned += 1;
                }
            }
            let census = self.book.census(&roster, now, grace, bound);
            assert_eq!(census.orphaned, orphaned);
            for (k, o) in &objects {
                assert_eq!(self.book.objects[k].orphan_since(), o.orphan_since(), "{k}");
            }
        }

        /// A write answers: landed (its watch event before the answer,
        /// after it, or never), raced or failed.
        fn finish(&mut self, which: usize, outcome: u8) {
            if self.inflight.is_empty() {
                return;
            }
            let a = self.inflight.remove(which % self.inflight.len());
            let name = a.key().trim_start_matches("ns/").to_string();
            let landed = if outcome < 4 { self.landed(&a) } else { None };
            let Some(m) = landed else {
                let how = if outcome == 4 {
                    WriteOutcome::Raced
                } else {
                    WriteOutcome::Failed
                };
                self.book.write_finished(a.key(), &how, self.now);
                return;
            };
            let rv = (self.rv + 1).to_string();
            match outcome {
                0 => {
                    self.put(&name, m);
                    let done = WriteOutcome::Written(rv);
                    self.book.write_finished(a.key(), &done, self.now);
                }
                1 => {
                    let done = WriteOutcome::Written(rv);
                    self.book.write_finished(a.key(), &done, self.now);
                    self.put(&name, m);
                }
                _ => {
                    // Never seen back (a later change came first).
                    self.rv += 1;
                    let done = WriteOutcome::Written(rv);
                    self.book.write_finished(a.key(), &done, self.now);
                }
            }
        }

        /// The owner acknowledges a drain: by assigning the target itself,
        /// or (an earlier version) by clearing its own assignment.
        fn ack(&mut self, name: &str, old_way: bool) {
            let Some(cur) = self.objects.get(name).map(Assignment::of) else {
                return;
            };
            let Some(to) = cur.drain.as_deref() else {
                return;
            };
            let m = if old_way {
                meta(name, "0", None, None, Some(to))
            } else {
                meta(name, "0", Some(to), cur.drain_epoch.as_deref(), None)
            };
            self.put(name, m);
        }

        fn proof(&mut self, id: &str, verdict: u8) {
            let (base, max) = (Duration::from_secs(1), Duration::from_secs(8));
            match verdict {
                0 => self.book.proof_started(id),
                1 => self.book.proven(id),
                2 => self.book.proof_refuted(id),
                3 => self.book.proof_failed(id, self.now, base, max),
                _ => self.book.proofs_abandoned(),
            }
        }
    }

    fn toggle(set: &mut HashSet<String>, id: &str) {
        if !set.remove(id) {
            set.insert(id.to_string());
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 400, .. ProptestConfig::default() })]

        #[test]
        fn every_decision_equals_the_full_one(ops in proptest::collection::vec(op(), 1..120)) {
            let mut w = World::new();
            for op in ops {
                w.step(op);
            }
            w.decide();
        }
    }
}

/// Scale-out and scale-in of 1,500 checkers a window at a time, with
/// checkers created and deleted meanwhile: every decision equals the
/// oracle's while the members' surpluses shrink and grow.
#[test]
fn a_long_rebalance_decides_as_the_full_plan_does() {
    use random::*;
    let mut w = World::new();
    for k in 0..1500 {
        w.step(Op::Put {
            key: k,
            owner: None,
            stale_epoch: false,
            drain: None,
        });
    }
    w.step(Op::Window(40));
    for round in 0..400 {
        match round {
            20 => w.step(Op::Join(3)),
            60 => w.step(Op::Join(4)),
            150 => w.step(Op::Leave(0, true)),
            250 => w.step(Op::Join(0)),
            _ => {}
        }
        if round % 7 == 3 {
            w.step(Op::Delete((round * 37) % 1500));
            w.step(Op::Put {
                key: (round * 53) % 1600,
                owner: None,
                stale_epoch: false,
                drain: None,
            });
        }
        w.step(Op::Decide { start: 2000 });
        while !w.inflight.is_empty() {
            w.step(Op::Finish {
                which: round,
                outcome: (round % 3) as u8,
            });
        }
        for k in 0..1600 {
            w.step(Op::Ack {
                key: k,
                old_way: k % 5 == 0,
            });
        }
    }
    assert!(w.decide().is_empty(), "settled");
}

/// A leader keeps an entry for every checker of the fleet: a settled one
/// has no drain or clock box, and shares its owner's name and epoch.
#[test]
fn a_settled_checker_holds_no_passing_state_and_shares_its_owners_names() {
    let now = Instant::now();
    let mut b = book(&[
        meta("a", "1", Some("r1"), Some("e1"), None),
        meta("b", "1", Some("r1"), Some("e1"), None),
        meta("c", "1", None, None, None),
    ]);
    let (a, bb) = (b.object("ns/a").unwrap(), b.object("ns/b").unwrap());
    assert!(a.passing.is_none() && bb.passing.is_none());
    assert!(Arc::ptr_eq(
        a.owner.as_ref().unwrap(),
        bb.owner.as_ref().unwrap()
    ));
    assert!(Arc::ptr_eq(
        a.epoch.as_ref().unwrap(),
        bb.epoch.as_ref().unwrap()
    ));
    let c = b.object("ns/c").unwrap();
    assert!(
        c.first_seen_unassigned().is_some(),
        "an unassigned one has its clock"
    );
    b.applied(&meta("c", "2", Some("r1"), Some("e1"), None), now);
    assert!(
        b.object("ns/c").unwrap().passing.is_none(),
        "assigned: the box goes"
    );
}

#[test]
fn names_no_checker_holds_are_swept_as_the_set_grows() {
    let mut n = Names::default();
    let kept = n.get("r0");
    for i in 0..1000 {
        n.get(&format!("gone-{i}"));
    }
    assert!(n.set.len() < 100, "{} names left", n.set.len());
    assert!(
        Arc::ptr_eq(&kept, &n.get("r0")),
        "a held name stays the one allocation"
    );
}
