use std::time::{Duration, Instant};

use super::*;
use webchecker_plan::{Phases, Reason};

fn probe(success: bool) -> Outcome {
    Outcome {
        reason: if success {
            Reason::ProbeSucceeded
        } else {
            Reason::UnexpectedStatus
        },
        message: if success { "HTTP 200" } else { "HTTP 503" }.into(),
        status_code: Some(if success { 200 } else { 503 }),
        duration: Duration::from_millis(5),
        phases: Phases::default(),
        cert_not_after: None,
        tls: None,
        http_version: None,
        redirects: 0,
        grpc: None,
    }
}

static HERE: std::sync::LazyLock<Place> = std::sync::LazyLock::new(|| Place {
    replica: "r0".into(),
    zone: "a".into(),
});

struct Round {
    start: Instant,
    n: u64,
    failure_threshold: u32,
}

impl Round {
    fn ctx(&mut self) -> Context<'static> {
        self.n += 1;
        Context {
            generation: Some(1),
            owner: "r0",
            now_wall: format!("2026-01-01T00:{:02}:{:02}Z", self.n / 60, self.n % 60),
            now: self.start + Duration::from_secs(self.n),
            heartbeat: Duration::from_secs(300),
            success_threshold: 1,
            failure_threshold: self.failure_threshold,
            certificate_warning_days: None,
            confirm: true,
            place: &HERE,
            now_unix: 1_767_225_600 + self.n,
            slo: None,
            maintenance: None,
            dependency: None,
        }
    }
}

fn answer(zone: &str, success: Option<bool>) -> ZoneAnswer {
    ZoneAnswer {
        by: Place {
            replica: format!("r-{zone}"),
            zone: zone.into(),
        },
        result: match success {
            Some(s) => ZoneResult::Probed {
                success: s,
                reason: if s { "ProbeSucceeded" } else { "ConnectError" }.into(),
                millis: 9,
            },
            None => ZoneResult::NoAnswer,
        },
    }
}

const Q: ZoneQuorum = ZoneQuorum {
    zones: 3,
    quorum: 2,
};

/// A checker never probed, and the rounds' clock (`failureThreshold` = `ft`).
fn fresh(ft: u32) -> (CheckerStatus, Round) {
    let r = Round {
        start: Instant::now(),
        n: 0,
        failure_threshold: ft,
    };
    (CheckerStatus::from_existing(None), r)
}

/// One round: the owner's probe, then the other zones' answers.
fn round(
    s: &mut CheckerStatus,
    r: &mut Round,
    own: bool,
    others: &[(&str, Option<bool>)],
) -> Effects {
    let ctx = r.ctx();
    let held = s.observe_zone(&probe(own), Q, true, &ctx);
    assert!(
        held.write.is_none() && held.transition.is_none(),
        "nothing decided before the answers"
    );
    let answers: Vec<ZoneAnswer> = others.iter().map(|(z, ok)| answer(z, *ok)).collect();
    s.zones_answered(&answers, Q, &ctx)
}

fn zones(w: &webchecker_api::WebCheckerStatus) -> Vec<(String, String)> {
    w.zones
        .iter()
        .map(|z| (z.zone.clone(), z.result.clone()))
        .collect()
}

#[test]
fn one_failing_zone_is_degraded_and_the_quorum_turns_ready_false() {
    let (mut s, mut r) = fresh(1);
    let fx = round(
        &mut s,
        &mut r,
        true,
        &[("b", Some(true)), ("c", Some(true))],
    );
    let w = fx.write.expect("first status");
    assert_eq!(fx.transition.unwrap().ready, Truth::True);
    assert_eq!(
        zones(&w),
        [
            ("a".into(), "Succeeded".into()),
            ("b".into(), "Succeeded".into()),
            ("c".into(), "Succeeded".into())
        ]
    );
    assert!(
        w.condition(super::super::DEGRADED).is_none(),
        "no Degraded before a zone fails"
    );
    // Steady: nothing a reader acts on changes, nothing is written.
    for _ in 0..20 {
        let fx = round(
            &mut s,
            &mut r,
            true,
            &[("b", Some(true)), ("c", Some(true))],
        );
        assert!(fx.write.is_none());
    }

    // Zone c fails: one of three, under the quorum of 2.
    let fx = round(
        &mut s,
        &mut r,
        true,
        &[("b", Some(true)), ("c", Some(false))],
    );
    assert!(fx.transition.is_none(), "Ready stays True");
    let m = fx.degraded.expect("Degraded turned True");
    assert!(m.contains("zone c (replica r-c): ConnectError"), "{m}");
    let w = fx.write.unwrap();
    assert_eq!(zones(&w)[2], ("c".into(), "Failed".into()));
    let d = w.condition(super::super::DEGRADED).unwrap();
    assert_eq!(
        (d.status.as_str(), d.reason.as_str()),
        ("True", "ZonesFailing")
    );

    // Zone a (the owner's) fails too: quorum reached.
    let fx = round(
        &mut s,
        &mut r,
        false,
        &[("b", Some(true)), ("c", Some(false))],
    );
    let t = fx.transition.expect("Ready turned False");
    assert_eq!(t.ready, Truth::False);
    assert_eq!(
        t.reason, "UnexpectedStatus",
        "the owner's zone's reason first"
    );
    assert!(
        t.message.contains("failing in 2 of 3 zones (quorum 2)"),
        "{}",
        t.message
    );
    let w = fx.write.unwrap();
    assert_eq!(w.condition(super::super::DEGRADED).unwrap().status, "False");

    // All succeed again.
    let fx = round(
        &mut s,
        &mut r,
        true,
        &[("b", Some(true)), ("c", Some(true))],
    );
    assert_eq!(fx.transition.unwrap().ready, Truth::True);
    let w = fx.write.unwrap();
    let d = w.condition(super::super::DEGRADED).unwrap();
    assert_eq!(
        (d.status.as_str(), d.reason.as_str()),
        ("False", "AllZonesSucceed")
    );
}

#[test]
fn each_zone_keeps_its_own_failure_threshold() {
    let (mut s, mut r) = fresh(3);
    round(
        &mut s,
        &mut r,
        true,
        &[("b", Some(true)), ("c", Some(true))],
    );
    // Two zones fail twice: below the threshold, Failing, Ready True.
    for _ in 0..2 {
        let fx = round(
            &mut s,
            &mut r,
            false,
            &[("b", Some(false)), ("c", Some(true))],
        );
        assert!(fx.transition.is_none() && fx.degraded.is_none());
    }
    assert_eq!(s.zone_entry("b").unwrap().failures, 2);
    assert!(s.is_ready());
    let fx = round(
        &mut s,
        &mut r,
        false,
        &[("b", Some(false)), ("c", Some(true))],
    );
    assert_eq!(
        fx.transition.unwrap().ready,
        Truth::False,
        "the third failure of two zones"
    );
}

#[test]
fn zones_that_do_not_answer_leave_the_verdict_to_those_that_do() {
    let (mut s, mut r) = fresh(1);
    round(
        &mut s,
        &mut r,
        true,
        &[("b", Some(true)), ("c", Some(true))],
    );
    // The owner cut off from its peers, the target fine: Ready stays True.
    let fx = round(&mut s, &mut r, true, &[("b", None), ("c", None)]);
    assert!(fx.transition.is_none());
    let w = fx.write.expect("the zones' results changed");
    assert_eq!(zones(&w)[1], ("b".into(), "Unknown".into()));
    assert_eq!(w.zones[1].reason, "NoAnswer");
    // Failing where only it answers: one zone is no quorum, whatever
    // the others did not say. Ready stays; Degraded names both.
    for _ in 0..3 {
        let fx = round(&mut s, &mut r, false, &[("b", None), ("c", None)]);
        assert!(fx.transition.is_none(), "one zone's word never pages");
        assert!(s.is_ready());
    }
    let d = s.degraded.clone().expect("Degraded");
    assert_eq!((d.status, d.reason.as_str()), (Truth::True, "ZonesFailing"));
    assert!(
        d.message.contains("zone a (replica r0)") && d.message.contains("no answer from zone b, c"),
        "{}",
        d.message
    );
    // Once the zones answer and fail too, the quorum decides.
    let fx = round(&mut s, &mut r, false, &[("b", Some(false)), ("c", None)]);
    assert_eq!(fx.transition.expect("quorum reached").ready, Truth::False);
}

#[test]
fn a_new_checker_without_a_quorum_stays_unknown_with_a_reason() {
    let (mut s, mut r) = fresh(1);
    let fx = round(&mut s, &mut r, false, &[("b", None), ("c", None)]);
    assert!(fx.transition.is_none());
    let w = fx.write.expect("its first status");
    let ready = w.condition(super::super::READY).unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("Unknown", "NoQuorum")
    );
}

#[test]
fn without_other_zones_the_owner_decides_alone_and_a_zone_no_longer_asked_leaves() {
    let (mut s, mut r) = fresh(1);
    round(
        &mut s,
        &mut r,
        true,
        &[("b", Some(true)), ("c", Some(true))],
    );
    // A zone lost its last replica: the next round asks one zone.
    let fx = round(&mut s, &mut r, true, &[("b", Some(true))]);
    assert_eq!(zones(&fx.write.unwrap()).len(), 2);
    // No asker at all: the owner's probe is the verdict, at once.
    let fx = s.observe_zone(&probe(false), Q, false, &r.ctx());
    assert_eq!(fx.transition.unwrap().ready, Truth::False);
    assert_eq!(zones(&fx.write.unwrap()), [("a".into(), "Failed".into())]);
}

#[test]
fn a_later_probe_of_the_owner_while_the_zones_are_out_is_the_one_decided_on() {
    let (mut s, mut r) = fresh(1);
    let ctx = r.ctx();
    assert!(s.observe_zone(&probe(true), Q, true, &ctx).write.is_none());
    assert!(s.observe_zone(&probe(false), Q, true, &ctx).write.is_none());
    let fx = s.zones_answered(
        &[answer("b", Some(false)), answer("c", Some(true))],
        Q,
        &ctx,
    );
    assert_eq!(fx.transition.unwrap().ready, Truth::False);
    assert!(!s.is_confirming(), "nothing held after the answers");
    // Answers with nothing held (the checker moved meanwhile) decide nothing.
    assert_eq!(
        s.zones_answered(&[answer("b", Some(true))], Q, &ctx),
        Effects::default()
    );
}

#[test]
fn a_round_from_fewer_zones_than_asked_is_degraded_and_says_so() {
    let (mut s, mut r) = fresh(1);
    let full = round(
        &mut s,
        &mut r,
        true,
        &[("b", Some(true)), ("c", Some(true))],
    );
    assert_eq!(full.degraded, None, "three zones of three: nothing to say");
    // Zone c lost its last replica: two zones of the three asked.
    let fx = round(&mut s, &mut r, true, &[("b", Some(true))]);
    assert_eq!(fx.transition, None, "Ready stays True");
    let warning = fx.degraded.expect("Degraded turns True, with a Warning");
    assert!(warning.contains("probed from 2 of 3 zones"), "{warning}");
    let d = s.degraded.clone().unwrap();
    assert_eq!((d.status, d.reason.as_str()), (Truth::True, "FewerZones"));
    // A failing zone among fewer: ZonesFailing, and the shortfall in its message.
    let fx = round(&mut s, &mut r, true, &[("b", Some(false))]);
    let d = s.degraded.clone().unwrap();
    assert_eq!((d.status, d.reason.as_str()), (Truth::True, "ZonesFailing"));
    assert!(
        d.message.contains("probed from 2 of 3 zones"),
        "{}",
        d.message
    );
    assert_eq!(
        fx.transition, None,
        "one failing zone of two: below the quorum"
    );
    // The third zone back: Degraded ends.
    round(
        &mut s,
        &mut r,
        true,
        &[("b", Some(true)), ("c", Some(true))],
    );
    let d = s.degraded.clone().unwrap();
    assert_eq!(
        (d.status, d.reason.as_str()),
        (Truth::False, "AllZonesSucceed")
    );
}
