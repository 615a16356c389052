//! Diagnosis in the table: a checker of an in-cluster target that falls
//! asks the cluster why, its Events wait for the answer (until its next
//! probe at most) and carry it, and status.diagnosis holds it while Ready
//! stays False.

use super::route_events::{arrive, events, probe};
use super::*;
use webchecker_api::Diagnosis;

fn in_cluster(name: &str) -> Checker {
    let mut s = spec("/", 10, "");
    s.host = "http://cart.ns.svc.cluster.local:8080".into();
    checker(name, s)
}

/// A warm table that diagnoses.
fn diagnosing() -> Sim {
    let mut sim = Sim::warm();
    sim.table.settings.diagnosis = true;
    sim
}

fn notes(fx: &[Effect]) -> Vec<String> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::Event(n) => Some(n.note.clone()),
            _ => None,
        })
        .collect()
}

fn written(fx: &[Effect]) -> Option<Option<Diagnosis>> {
    fx.iter().find_map(|e| match e {
        Effect::Writer(ToWriter::Submit {
            op: Op::Status(s), ..
        }) => Some(s.diagnosis.clone()),
        _ => None,
    })
}

fn crash() -> Diagnosis {
    Diagnosis {
        cause: "CrashLoopBackOff".into(),
        message: "Service cart has no ready endpoints: pod cart-1 CrashLoopBackOff".into(),
    }
}

#[test]
fn a_fall_waits_for_the_cluster_s_word_and_carries_it() {
    let mut sim = diagnosing();
    let at = arrive(&mut sim, in_cluster("a"));
    let (_, at) = probe(&mut sim, "a", at, ok());
    let (fx, at) = probe(&mut sim, "a", at, refused());
    assert_eq!(events(&fx), Vec::<String>::new(), "held for the diagnosis");
    assert_eq!(
        only(&sim.show(&fx), &["diagnose"]),
        ["diagnose ns/a Service cart"]
    );
    let seq = fx
        .iter()
        .find_map(|e| match e {
            Effect::Diagnose { seq, .. } => Some(*seq),
            _ => None,
        })
        .unwrap();
    let fx = sim.step(Input::Diagnosis {
        key: "ns/a".into(),
        seq,
        diagnosis: Some(crash()),
    });
    assert_eq!(events(&fx), ["a Warning ConnectError"]);
    assert!(
        notes(&fx)[0].ends_with(
            "; the cluster says: Service cart has no ready endpoints: pod cart-1 CrashLoopBackOff"
        ),
        "{:?}",
        notes(&fx)
    );
    assert_eq!(written(&fx), Some(Some(crash())));
    // Recovery: the diagnosis goes with the failure.
    let (fx, _) = probe(&mut sim, "a", at, ok());
    assert_eq!(written(&fx), Some(None));
}

#[test]
fn without_an_answer_by_the_next_probe_the_events_go_as_they_are() {
    let mut sim = diagnosing();
    let at = arrive(&mut sim, in_cluster("a"));
    let (_, at) = probe(&mut sim, "a", at, ok());
    let (fx, at) = probe(&mut sim, "a", at, refused());
    assert_eq!(events(&fx), Vec::<String>::new());
    let (fx, _) = probe(&mut sim, "a", at, refused());
    assert_eq!(events(&fx), ["a Warning ConnectError"]);
    assert!(!notes(&fx)[0].contains("cluster says"));
    // A late answer: nothing held any more, the status takes it.
    let seq = 1;
    let fx = sim.step(Input::Diagnosis {
        key: "ns/a".into(),
        seq,
        diagnosis: Some(crash()),
    });
    assert_eq!(events(&fx), Vec::<String>::new());
}

#[test]
fn a_target_outside_the_cluster_or_the_namespace_is_not_diagnosed() {
    let mut sim = diagnosing();
    let mut other = spec("/", 10, "");
    other.host = "http://cart.infra.svc".into();
    for c in [checker("a", spec("/", 10, "")), checker("b", other)] {
        let name = c.name.clone();
        let at = arrive(&mut sim, c);
        let (_, at) = probe(&mut sim, &name, at, ok());
        let (fx, _) = probe(&mut sim, &name, at, refused());
        assert_eq!(events(&fx), [format!("{name} Warning ConnectError")]);
        assert_eq!(only(&sim.show(&fx), &["diagnose"]), Vec::<String>::new());
    }
}

/// A message a user reads is at most a condition message long: the
/// failure's own words are cut to keep the cause whole.
#[test]
fn the_event_keeps_the_whole_diagnosis() {
    let max = webchecker_api::MAX_MESSAGE;
    let cause = "Service cart: pod cart-1: CrashLoopBackOff (container app, restarted 5 times)";
    let note = crate::table::effect::with_diagnosis(&"x".repeat(max), cause);
    assert!(
        note.ends_with(&format!("…; the cluster says: {cause}")),
        "{note}"
    );
    assert_eq!(note.chars().count(), max);
    let short = crate::table::effect::with_diagnosis("Ready=False: HTTP 503", cause);
    assert_eq!(
        short,
        format!("Ready=False: HTTP 503; the cluster says: {cause}")
    );
    // A diagnosis that leaves no room: cut at the end, as any message.
    let long = "é".repeat(max);
    let cut = crate::table::effect::with_diagnosis("Ready=False: HTTP 503", &long);
    assert!(cut.chars().count() == max && cut.ends_with('…'), "{cut}");
}
