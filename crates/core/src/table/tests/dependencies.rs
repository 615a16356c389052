//! spec.dependsOn in the table: a failure while a dependency is down says
//! DependencyDown with a Normal Event; a failure with every dependency up
//! holds its Warning until a dependency had time to fall; a checker still
//! failing when its dependency recovers pages then, once.

use super::route_events::{arrive, events, probe};
use super::*;
use crate::dependencies::{Blocker, Dependencies, Edge};

/// ns/a's dependencies: `down` names the one that is down, if any.
fn edges(down: Option<&str>, hold: u64) -> Input {
    let mut d = Dependencies::default();
    let edge = Edge {
        hold: Duration::from_secs(hold),
        blocker: down.map(|n| Blocker {
            name: n.into(),
            reason: "ConnectError".into(),
        }),
        cycle: None,
    };
    d.set("ns", [("a".to_string(), edge)].into());
    Input::Dependencies(Arc::new(d))
}

fn note(fx: &[Effect]) -> String {
    fx.iter()
        .find_map(|e| match e {
            Effect::Event(n) => Some(n.note.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

fn written_reason(fx: &[Effect]) -> Option<String> {
    fx.iter().find_map(|e| match e {
        Effect::Writer(ToWriter::Submit {
            op: Op::Status(s), ..
        }) => s.condition("Ready").map(|c| c.reason.clone()),
        _ => None,
    })
}

/// One Event (`event`, its note starting with `note`), Ready's written
/// reason, and the probe's metric line.
fn said(sim: &Sim, fx: &[Effect], event: &str, note_start: &str, reason: &str, metric: &str) {
    assert_eq!(events(fx), [event]);
    assert!(note(fx).starts_with(note_start), "{}", note(fx));
    assert_eq!(written_reason(fx).as_deref(), Some(reason));
    assert_eq!(only(&sim.show(fx), &["metric probe"]), [metric]);
}

#[test]
fn a_failure_while_a_dependency_is_down_is_the_dependency_s_and_pages_when_it_recovers() {
    let mut sim = Sim::warm();
    let at = arrive(&mut sim, checker("a", spec("/", 10, "")));
    let (_, at) = probe(&mut sim, "a", at, ok());
    sim.step(edges(Some("gateway"), 12));
    let (fx, at) = probe(&mut sim, "a", at, refused());
    said(
        &sim,
        &fx,
        "a Normal DependencyDown",
        "Ready=False: depends on gateway, which is down (ConnectError)",
        "DependencyDown",
        "metric probe ns/a ConnectError ready=false down dependency-down",
    );
    let (fx, at) = probe(&mut sim, "a", at, refused());
    assert_eq!(events(&fx), Vec::<String>::new());
    assert_eq!(written_reason(&fx), None, "nothing new to write");
    // The gateway is back, this one still fails: its own page, once.
    sim.step(edges(None, 12));
    let (fx, at) = probe(&mut sim, "a", at, refused());
    said(
        &sim,
        &fx,
        "a Warning ConnectError",
        "Ready=False on its own now that its dependencies are up",
        "ConnectError",
        "metric probe ns/a ConnectError ready=false down",
    );
    let (fx, _) = probe(&mut sim, "a", at, refused());
    assert_eq!(events(&fx), Vec::<String>::new());
}

/// ns/a, with a dependency that is up and a hold of `hold` seconds, Ready
/// then failed: its Warning held. The sim, its next probe's time and the
/// failure's effects.
fn held_failure(hold: u64) -> (Sim, Instant, Vec<Effect>) {
    let mut sim = Sim::warm();
    let at = arrive(&mut sim, checker("a", spec("/", 10, "")));
    sim.step(edges(None, hold));
    let (_, at) = probe(&mut sim, "a", at, ok());
    let (fx, at) = probe(&mut sim, "a", at, refused());
    assert_eq!(events(&fx), Vec::<String>::new(), "held");
    (sim, at, fx)
}

#[test]
fn a_failure_with_its_dependencies_up_waits_for_one_to_fall_first() {
    let (mut sim, at, fx) = held_failure(12);
    assert_eq!(written_reason(&fx).as_deref(), Some("ConnectError"));
    // The gateway's status says it is down before the hold ends.
    sim.step(edges(Some("gateway"), 12));
    let (fx, at) = probe(&mut sim, "a", at, refused());
    assert_eq!(events(&fx), ["a Normal DependencyDown"]);
    let (fx, _) = probe(&mut sim, "a", at, refused());
    assert_eq!(events(&fx), Vec::<String>::new());
}

#[test]
fn a_held_warning_goes_out_when_no_dependency_fell_in_time() {
    let (mut sim, at, _) = held_failure(12);
    // 10 s later: still within the 12 s hold.
    let (fx, at) = probe(&mut sim, "a", at, refused());
    assert_eq!(events(&fx), Vec::<String>::new(), "still held");
    let (fx, at) = probe(&mut sim, "a", at, refused());
    assert_eq!(events(&fx), ["a Warning ConnectError"]);
    assert!(note(&fx).starts_with("Ready=False: "), "{}", note(&fx));
    let (fx, _) = probe(&mut sim, "a", at, refused());
    assert_eq!(events(&fx), Vec::<String>::new(), "once");
}

#[test]
fn a_recovery_during_the_hold_pages_nobody() {
    let (mut sim, at, _) = held_failure(30);
    let (fx, mut at) = probe(&mut sim, "a", at, ok());
    assert_eq!(events(&fx), ["a Normal ProbeSucceeded"]);
    for _ in 0..4 {
        let (fx, next) = probe(&mut sim, "a", at, ok());
        assert_eq!(events(&fx), Vec::<String>::new());
        at = next;
    }
}

#[test]
fn without_dependencies_a_failure_pages_at_once() {
    let mut sim = Sim::warm();
    let at = arrive(&mut sim, checker("a", spec("/", 10, "")));
    let (_, at) = probe(&mut sim, "a", at, ok());
    let (fx, _) = probe(&mut sim, "a", at, refused());
    assert_eq!(events(&fx), ["a Warning ConnectError"]);
}
