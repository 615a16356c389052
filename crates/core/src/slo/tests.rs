//! Unit tests of the SLO ledger (crates/core/src/slo.rs).

use super::*;
use proptest::prelude::*;

const DAY: u64 = 86_400;
/// A Unix time at the start of a day (and of every bucket).
const T0: u64 = 1_800_000_000 / DAY * DAY;

fn ledger(target: f64, window: u64) -> Ledger {
    Ledger::new(Objective { target, window })
}

/// `n` probes, every `every` seconds from `from`; each `bad_every`th bad.
fn probes(l: &mut Ledger, from: u64, n: u64, every: u64, bad_every: u64) -> u64 {
    for k in 0..n {
        let tally = if bad_every > 0 && k % bad_every == 0 {
            Tally::Bad
        } else {
            Tally::Good
        };
        l.record(from + k * every, tally);
    }
    from + n * every
}

#[test]
fn availability_and_budget_are_the_counts_against_the_objective() {
    let mut l = ledger(0.99, DAY);
    let end = probes(&mut l, T0, 1000, 10, 200);
    let r = l.report(end);
    assert_eq!((r.good, r.bad), (995, 5));
    assert!((r.availability.unwrap() - 0.995).abs() < 1e-9);
    // 5 bad of an allowance of 10: half the budget left.
    assert!((r.budget_left.unwrap() - 0.5).abs() < 1e-9, "{r:?}");
    assert_eq!(r.budget_seconds, 864);
    assert_eq!(r.budget_left_seconds(), Some(432));
    assert_eq!(r.since, Some(T0));
}

#[test]
fn a_budget_spent_past_its_allowance_is_negative() {
    let mut l = ledger(0.9, DAY);
    let end = probes(&mut l, T0, 100, 10, 5);
    let r = l.report(end);
    assert_eq!(r.bad, 20);
    assert!((r.budget_left.unwrap() + 1.0).abs() < 1e-9, "{r:?}");
}

#[test]
fn maintenance_counts_for_neither_side() {
    let mut l = ledger(0.99, DAY);
    let end = probes(&mut l, T0, 100, 10, 0);
    for k in 0..50 {
        l.record(end + k * 10, Tally::Excluded);
    }
    let r = l.report(end + 500);
    assert_eq!((r.good, r.bad), (100, 0));
    assert_eq!(r.budget_left, Some(1.0));
}

#[test]
fn nothing_counted_says_nothing() {
    let l = ledger(0.999, 30 * DAY);
    let r = l.report(T0);
    assert_eq!(r.availability, None);
    assert_eq!(r.budget_left, None);
    assert_eq!(r.burn_1h, None);
    assert_eq!(r.since, None);
    // 30 days at 99.9 %: 43.2 minutes of budget.
    assert_eq!(r.budget_seconds, 2592);
}

#[test]
fn probes_older_than_the_window_leave_it_bucket_by_bucket() {
    let mut l = ledger(0.99, DAY);
    let coarse = l.objective().coarse();
    assert_eq!(coarse, DAY / 30);
    // One bad probe at T0, then a good one per bucket for a day and more.
    l.record(T0, Tally::Bad);
    let mut now = T0;
    for k in 1..=31 {
        now = T0 + k * coarse;
        l.record(now, Tally::Good);
    }
    // A window after T0 the bad probe's bucket is out.
    let r = l.report(now);
    assert_eq!(r.bad, 0, "{r:?}");
    assert_eq!(r.good, 31);
    // Within the window it still counts.
    let mut l = ledger(0.99, DAY);
    l.record(T0, Tally::Bad);
    l.record(T0 + DAY - 1, Tally::Good);
    assert_eq!(l.report(T0 + DAY - 1).bad, 1);
}

#[test]
fn burn_rates_look_at_the_last_hour_and_six() {
    let mut l = ledger(0.99, 30 * DAY);
    // Five good hours, then an hour with 10 % bad.
    let mid = probes(&mut l, T0, 5 * 360, 10, 0);
    let end = probes(&mut l, mid, 360, 10, 10);
    let r = l.report(end);
    // Last hour: 10 % bad against 1 % allowed.
    assert!((r.burn_1h.unwrap() - 10.0).abs() < 1e-9, "{r:?}");
    // Six hours: 36 of 2160.
    assert!(
        (r.burn_6h.unwrap() - 36.0 / 2160.0 / 0.01).abs() < 1e-9,
        "{r:?}"
    );
    // A day later the fine buckets are gone; the window still has them.
    let later = end + DAY;
    l.record(later, Tally::Good);
    let r = l.report(later);
    assert_eq!(r.burn_6h, Some(0.0));
    assert_eq!(r.bad, 36);
}

#[test]
fn a_new_owner_resumes_where_the_old_one_stopped() {
    let objective = Objective {
        target: 0.999,
        window: 30 * DAY,
    };
    let mut old = Ledger::new(objective);
    let end = probes(&mut old, T0, 5000, 10, 1000);
    let text = old.snapshot().render();
    let snapshot = Snapshot::parse(&text).expect("readable");
    assert_eq!(snapshot, old.snapshot());
    let mut new = Ledger::resume(objective, snapshot, end);
    assert_eq!(new.report(end), old.report(end));
    new.record(end, Tally::Bad);
    old.record(end, Tally::Bad);
    assert_eq!(new.report(end + 1), old.report(end + 1));
}

#[test]
fn a_snapshot_of_another_window_starts_afresh() {
    let mut old = ledger(0.99, 30 * DAY);
    probes(&mut old, T0, 100, 10, 10);
    let other = Objective {
        target: 0.99,
        window: 7 * DAY,
    };
    let new = Ledger::resume(other, old.snapshot(), T0 + 1000);
    assert_eq!(new.report(T0 + 1000).since, None);
    // Another target over the same window keeps the counts.
    let same = Objective {
        target: 0.9,
        window: 30 * DAY,
    };
    let new = Ledger::resume(same, old.snapshot(), T0 + 1000);
    assert_eq!(new.report(T0 + 1000).bad, 10);
}

#[test]
fn an_empty_ledger_renders_and_reads_back() {
    let l = ledger(0.99, DAY);
    let text = l.snapshot().render();
    assert_eq!(text, "v1 2880 - - -");
    assert_eq!(Snapshot::parse(&text).unwrap(), l.snapshot());
}

#[test]
fn unreadable_snapshots_say_why() {
    for text in [
        "",
        "v2 2880 - - -",
        "v1 0 - - -",
        "v1 2880 x - -",
        "v1 2880 - 1:2 -",
        "v1 2880 - 2:1:1,1:1:1 -",
        "v1 2880 - 1:1:99999999999 -",
        "v1 2880 - - - extra",
    ] {
        let e = Snapshot::parse(text).expect_err(text);
        assert!(!e.0.is_empty());
    }
    let many: Vec<String> = (0..200).map(|i| format!("{i}:1:0")).collect();
    let text = format!("v1 2880 - - {}", many.join(","));
    assert!(Snapshot::parse(&text).is_err(), "too many buckets");
}

proptest! {
    #[test]
    fn any_text_is_read_or_refused_never_a_panic(text in "\\PC{0,80}") {
        let _ = Snapshot::parse(&text);
    }

    #[test]
    fn counts_add_up_however_probes_arrive(
        steps in proptest::collection::vec((0u64..4000, 0u8..3), 1..300)
    ) {
        let mut l = ledger(0.99, 30 * DAY);
        let (mut now, mut good, mut bad) = (T0, 0u64, 0u64);
        for (dt, kind) in steps {
            now += dt;
            let tally = match kind { 0 => Tally::Good, 1 => Tally::Bad, _ => Tally::Excluded };
            match tally { Tally::Good => good += 1, Tally::Bad => bad += 1, Tally::Excluded => {} }
            l.record(now, tally);
        }
        // Under 30 days of steps: nothing left the window.
        let r = l.report(now);
        prop_assert_eq!((r.good, r.bad), (good, bad));
        let back = Snapshot::parse(&l.snapshot().render()).unwrap();
        prop_assert_eq!(back, l.snapshot());
    }
}
