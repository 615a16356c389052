use std::time::{Duration, Instant};

use webchecker_api::{SloWindow, WebCheckerStatus};
use webchecker_plan::{Outcome, Reason, SloTarget};

use super::short_duration;
use crate::ask::{Place, Verdict};
use crate::status::tests::{bad as fail, ok as ok_with};
use crate::status::{CheckerStatus, Context, MAINTENANCE, SLO_WRITE_EVERY, Truth};

const DAY0: u64 = 1_767_225_600; // 2026-01-01T00:00:00Z

fn ok() -> Outcome {
    ok_with(200)
}

static HERE: Place = Place {
    replica: String::new(),
    zone: String::new(),
};

fn other() -> Place {
    Place {
        replica: "r2".into(),
        zone: String::new(),
    }
}

/// A checker probed every 10 s with `slo: 99.9 / 30d`.
struct World {
    start: Instant,
    secs: u64,
    threshold: u32,
    confirm: bool,
    slo: Option<SloTarget>,
    /// The maintenance window open now, if any.
    window: Option<&'static str>,
}

fn world(threshold: u32, confirm: bool) -> World {
    World {
        start: Instant::now(),
        secs: 0,
        threshold,
        confirm,
        slo: Some(SloTarget {
            milli_percent: 99_900,
            window: SloWindow::Month,
        }),
        window: None,
    }
}

impl World {
    fn ctx(&mut self) -> Context<'static> {
        self.secs += 10;
        let now = DAY0 + self.secs;
        Context {
            generation: Some(1),
            owner: "r1",
            now_wall: chrono::DateTime::from_timestamp(now as i64, 0)
                .unwrap()
                .format("%Y-%m-%dT%H:%M:%SZ")
                .to_string(),
            now: self.start + Duration::from_secs(self.secs),
            // Far longer than SLO_WRITE_EVERY probes: the writes the tests
            // see past a transition are the ledger's.
            heartbeat: Duration::from_secs(6 * 3600),
            success_threshold: 1,
            failure_threshold: self.threshold,
            certificate_warning_days: None,
            confirm: self.confirm,
            place: &HERE,
            now_unix: now,
            slo: self.slo,
            maintenance: self.window,
            dependency: None,
        }
    }

    /// Folds probes in; the last status written, if any.
    fn run(&mut self, s: &mut CheckerStatus, probes: &[Outcome]) -> Option<WebCheckerStatus> {
        let mut last = None;
        for o in probes {
            let ctx = self.ctx();
            if let Some(w) = s.observe(o, &ctx).write {
                last = Some(w);
            }
        }
        last
    }
}

/// Good and total probes in the status `s` would write now.
fn counts(w: &mut World, s: &mut CheckerStatus) -> (i64, i64) {
    let ctx = w.ctx();
    let st = s.status_slo(ctx.now_unix).expect("status.slo");
    (st.good_probes, st.total_probes)
}

#[test]
fn without_confirmation_every_failure_counts() {
    let mut w = world(1, false);
    let mut s = CheckerStatus::from_existing(None);
    w.run(
        &mut s,
        &[
            ok(),
            ok(),
            ok(),
            fail(Reason::ConnectError),
            fail(Reason::Timeout),
        ],
    );
    assert_eq!(counts(&mut w, &mut s), (3, 5));
    // A flap below a threshold of 3 counts too: nobody could say otherwise.
    let mut w = world(3, false);
    let mut s = CheckerStatus::from_existing(None);
    w.run(
        &mut s,
        &[
            ok(),
            fail(Reason::ConnectError),
            fail(Reason::ConnectError),
            ok(),
        ],
    );
    assert_eq!(counts(&mut w, &mut s), (2, 4));
}

#[test]
fn with_confirmation_only_confirmed_failures_count() {
    let mut w = world(1, true);
    let mut s = CheckerStatus::from_existing(None);
    w.run(&mut s, &[ok(), fail(Reason::ConnectError)]);
    assert_eq!(counts(&mut w, &mut s), (1, 1), "held: not counted yet");
    let fx = s.confirmed(
        &Verdict::Refuted {
            by: other(),
            millis: 4,
        },
        &w.ctx(),
    );
    assert_eq!(fx.slo.map(|c| (c.good, c.bad)), Some((1, 0)));
    assert_eq!(
        counts(&mut w, &mut s),
        (2, 2),
        "refuted: the target answered"
    );
    w.run(&mut s, &[fail(Reason::ConnectError)]);
    s.confirmed(&Verdict::Unanswered { why: "x".into() }, &w.ctx());
    assert_eq!(counts(&mut w, &mut s), (2, 2), "unanswered: neither side");
    w.run(&mut s, &[fail(Reason::ConnectError)]);
    s.confirmed(&Verdict::Confirmed { by: other() }, &w.ctx());
    assert_eq!(counts(&mut w, &mut s), (2, 3), "confirmed: bad");
    // Ready is False: the outage's further failures count at once.
    w.run(&mut s, &[fail(Reason::ConnectError), fail(Reason::Timeout)]);
    assert_eq!(counts(&mut w, &mut s), (2, 5));
    w.run(&mut s, &[ok()]);
    assert_eq!(counts(&mut w, &mut s), (3, 6));
}

#[test]
fn a_streak_below_the_threshold_takes_its_verdict() {
    // Confirmed at the threshold: the whole streak is bad.
    let mut w = world(3, true);
    let mut s = CheckerStatus::from_existing(None);
    w.run(
        &mut s,
        &[
            ok(),
            fail(Reason::Timeout),
            fail(Reason::Timeout),
            fail(Reason::Timeout),
        ],
    );
    assert_eq!(counts(&mut w, &mut s), (1, 1));
    s.confirmed(&Verdict::Confirmed { by: other() }, &w.ctx());
    assert_eq!(counts(&mut w, &mut s), (1, 4));
    // Ended by a success before the threshold: nobody was asked, neither side.
    let mut w = world(3, true);
    let mut s = CheckerStatus::from_existing(None);
    w.run(
        &mut s,
        &[ok(), fail(Reason::Timeout), fail(Reason::Timeout), ok()],
    );
    assert_eq!(counts(&mut w, &mut s), (2, 2));
    // A success before the verdict makes the answer moot: neither side.
    w.run(
        &mut s,
        &[
            fail(Reason::Timeout),
            fail(Reason::Timeout),
            fail(Reason::Timeout),
            ok(),
        ],
    );
    let fx = s.confirmed(&Verdict::Confirmed { by: other() }, &w.ctx());
    assert_eq!(fx.slo, None, "nothing held any more");
    assert_eq!(counts(&mut w, &mut s), (3, 3));
}

#[test]
fn the_operators_own_refusals_count_for_neither_side() {
    let mut w = world(1, false);
    let mut s = CheckerStatus::from_existing(None);
    w.run(
        &mut s,
        &[
            ok(),
            fail(Reason::Forbidden),
            fail(Reason::InvalidSpec),
            ok(),
        ],
    );
    assert_eq!(counts(&mut w, &mut s), (2, 2));
}

#[test]
fn the_ledger_is_written_after_at_most_so_many_probes_not_per_probe() {
    let mut w = world(1, false);
    let mut s = CheckerStatus::from_existing(None);
    let probes = vec![ok(); 3 * SLO_WRITE_EVERY as usize];
    let mut writes = Vec::new();
    for (i, o) in probes.iter().enumerate() {
        let ctx = w.ctx();
        if s.observe(o, &ctx).write.is_some() {
            writes.push(i + 1);
        }
    }
    // The first (Ready turned True), then every SLO_WRITE_EVERY counted
    // probes, well within the heartbeat.
    let every = SLO_WRITE_EVERY as usize;
    assert_eq!(writes, vec![1, 1 + every, 1 + 2 * every]);
}

#[test]
fn a_new_owner_goes_on_from_the_written_ledger() {
    let mut w = world(1, false);
    let mut a = CheckerStatus::from_existing(None);
    let mut probes = vec![ok(); 150];
    probes[20] = fail(Reason::ConnectError);
    let written = w.run(&mut a, &probes).expect("written");
    let at_write = written.slo.as_ref().unwrap();
    // The owner counted 150; what it last wrote is what a new owner finds.
    assert_eq!(counts(&mut w, &mut a), (149, 150));
    let (good, total) = (at_write.good_probes, at_write.total_probes);
    assert!(
        150 - total < i64::from(SLO_WRITE_EVERY),
        "lost {}",
        150 - total
    );
    let mut b = CheckerStatus::from_existing(Some(&written));
    w.run(&mut b, &[ok(), fail(Reason::Timeout)]);
    assert_eq!(counts(&mut w, &mut b), (good + 1, total + 2));
    assert_eq!(
        b.status_slo(w.ctx().now_unix).unwrap().counting_since,
        at_write.counting_since,
        "the window's data still starts where the first owner began"
    );
}

#[test]
fn spec_changes_keep_or_drop_the_counts() {
    let mut w = world(1, false);
    let mut s = CheckerStatus::from_existing(None);
    w.run(&mut s, &[ok(), fail(Reason::ConnectError), ok()]);
    // Another objective, same window: the same probes, judged anew.
    w.slo = Some(SloTarget {
        milli_percent: 95_000,
        window: SloWindow::Month,
    });
    let st = w
        .run(&mut s, &[ok()])
        .expect("a new objective is written at once");
    let slo = st.slo.unwrap();
    assert_eq!((slo.objective.as_str(), slo.total_probes), ("95%", 4));
    // Another window: counts of one window mean nothing in another.
    w.slo = Some(SloTarget {
        milli_percent: 95_000,
        window: SloWindow::Week,
    });
    let slo = w.run(&mut s, &[ok()]).unwrap().slo.unwrap();
    assert_eq!((slo.window.as_str(), slo.total_probes), ("7d", 1));
    // No SLO any more: status.slo goes, at once.
    w.slo = None;
    let st = w.run(&mut s, &[ok()]).expect("written");
    assert_eq!(st.slo, None);
}

#[test]
fn status_slo_reads_as_a_person_expects() {
    let mut w = world(1, false);
    let mut s = CheckerStatus::from_existing(None);
    let mut probes = vec![ok(); 1999];
    probes.push(fail(Reason::ConnectError));
    w.run(&mut s, &probes);
    let slo = s.status_slo(w.ctx().now_unix).unwrap();
    assert_eq!(slo.objective, "99.9%");
    assert_eq!(slo.window, "30d");
    assert_eq!(slo.availability.as_deref(), Some("99.95%"));
    // 1 bad of 2000 is half the 0.1% allowed: half the 43m12s budget.
    assert_eq!(slo.budget.as_deref(), Some("50% (21m of 43m)"));
    assert_eq!(slo.budget_remaining.as_deref(), Some("0.5"));
    assert_eq!(slo.budget_seconds, 2592);
    assert_eq!(slo.budget_remaining_seconds, Some(1296));
    // The last hour (whole 5-minute buckets): 1 bad of about 370.
    let burn: f64 = slo.burn_rate_1h.unwrap().parse().unwrap();
    assert!((2.5..=2.8).contains(&burn), "{burn}");
    assert_eq!(slo.counting_since.as_deref(), Some("2026-01-01T00:00:10Z"));
    assert!(!slo.window_complete);
    assert!(slo.ledger.starts_with("v1 86400 "), "{}", slo.ledger);
    // Spent: negative, never 100% with a failure in it.
    w.run(&mut s, &vec![fail(Reason::ConnectError); 10]);
    let slo = s.status_slo(w.ctx().now_unix).unwrap();
    // 11 bad of 2010: 5.47 times the allowance.
    assert_eq!(slo.budget.as_deref(), Some("-448% (-3h13m of 43m)"));
    assert_eq!(slo.availability.as_deref(), Some("99.452%"));
}

#[test]
fn durations_are_short() {
    for (secs, text) in [
        (0, "0s"),
        (59, "59s"),
        (2592, "43m"),
        (3600, "1h"),
        (26_000, "7h13m"),
        (86_400, "1d"),
        (270_000, "3d3h"),
        (-600, "-10m"),
    ] {
        assert_eq!(short_duration(secs), text);
    }
}

#[test]
fn a_checker_that_cannot_be_probed_keeps_its_counts() {
    let mut w = world(1, false);
    let mut a = CheckerStatus::from_existing(None);
    let written = w.run(&mut a, &[ok(), ok()]).expect("written");
    assert!(written.slo.is_some());
    // Its next owner finds it over its namespace's quota: no plan, no
    // objective known, and the counts stay on the object.
    let mut b = CheckerStatus::from_existing(Some(&written));
    let mut ctx = w.ctx();
    ctx.slo = None;
    let fx = b.set_condition(crate::status::NotProbed::QuotaExceeded, "over", &ctx);
    assert_eq!(fx.write.expect("Ready changed").slo, written.slo);
}

#[test]
fn a_maintenance_window_keeps_failures_out_of_the_budget_and_its_events_normal() {
    let mut w = world(1, false);
    let mut s = CheckerStatus::from_existing(None);
    w.run(&mut s, &[ok(), ok()]);
    w.window = Some("db-upgrade");
    let ctx = w.ctx();
    let fx = s.observe(&fail(Reason::ConnectError), &ctx);
    assert!(fx.quiet, "its Events are Normal");
    assert_eq!(
        fx.transition.map(|t| t.ready),
        Some(Truth::False),
        "Ready still says what it sees"
    );
    let written = fx.write.expect("Ready and Maintenance changed");
    let m = written
        .condition(MAINTENANCE)
        .expect("a Maintenance condition");
    assert_eq!((m.status.as_str(), m.reason.as_str()), ("True", "InWindow"));
    assert!(m.message.contains("db-upgrade"), "{}", m.message);
    w.run(&mut s, &[fail(Reason::ConnectError), ok()]);
    assert_eq!(
        counts(&mut w, &mut s),
        (2, 2),
        "nothing counted in the window"
    );
    // The window closes: counted again, the condition says so.
    w.window = None;
    let written = w.run(&mut s, &[ok()]).expect("Maintenance changed");
    let m = written.condition(MAINTENANCE).unwrap();
    assert_eq!(
        (m.status.as_str(), m.reason.as_str()),
        ("False", "NoWindow")
    );
    assert_eq!(counts(&mut w, &mut s), (3, 3));
    let fx = s.observe(&fail(Reason::ConnectError), &w.ctx());
    assert!(!fx.quiet);
}
