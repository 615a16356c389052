//! Maintenance windows in the table (crate::maintenance): a window of the
//! checker's namespace whose selector matches its labels makes its Events
//! Normal and names itself in the gauges; when it closes on a checker still
//! down, the Warning that was held back is sent.

use super::route_events::{arrive, events, probe};
use super::*;
use crate::maintenance::{Calendar, Selector, When, Window};

fn labelled(name: &str, labels: &[(&str, &str)]) -> Checker {
    let mut c = checker(name, spec("/", 10, ""));
    c.labels = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    c
}

/// A calendar with one window of `namespace` over `team=shop`, open
/// from now for `minutes`.
fn calendar(sim: &Sim, namespace: &str, minutes: i64) -> Input {
    let now = sim.wall_ms() / 1000;
    let mut c = Calendar::default();
    c.set(
        namespace,
        Window {
            name: "db-upgrade".into(),
            selector: Selector {
                labels: [("team".to_string(), "shop".to_string())].into(),
                ..Default::default()
            },
            when: When::Once {
                start: now,
                end: now + minutes * 60,
            },
        },
    );
    Input::Calendar(Arc::new(c))
}

fn windows(sim: &Sim, fx: &[Effect]) -> Vec<String> {
    only(&sim.show(fx), &["metric probe"])
}

#[test]
fn a_window_makes_a_failure_planned_and_its_close_sends_the_warning_held_back() {
    let mut sim = Sim::warm();
    let at = arrive(&mut sim, labelled("a", &[("team", "shop")]));
    let (_, at) = probe(&mut sim, "a", at, ok());
    sim.step(calendar(&sim, "ns", 1));
    let (fx, at) = probe(&mut sim, "a", at, refused());
    assert_eq!(events(&fx), ["a Normal ConnectError"], "planned: Normal");
    assert_eq!(
        windows(&sim, &fx),
        ["metric probe ns/a ConnectError ready=false down window=db-upgrade"]
    );
    let (fx, at) = probe(&mut sim, "a", at, refused());
    assert_eq!(events(&fx), Vec::<String>::new(), "still down: no news");
    // The window closed (a minute is past): the Warning held back.
    sim.advance(Duration::from_secs(60));
    let (fx, at) = probe(&mut sim, "a", at, refused());
    assert_eq!(events(&fx), ["a Warning ConnectError"]);
    let note = fx
        .iter()
        .find_map(|e| match e {
            Effect::Event(n) => Some(n.note.clone()),
            _ => None,
        })
        .unwrap();
    assert!(
        note.starts_with("Ready=False after the maintenance window closed"),
        "{note}"
    );
    assert_eq!(
        windows(&sim, &fx),
        ["metric probe ns/a ConnectError ready=false down"]
    );
    // Only once.
    let (fx, _) = probe(&mut sim, "a", at, refused());
    assert_eq!(events(&fx), Vec::<String>::new());
}

#[test]
fn a_window_covers_only_the_checkers_its_selector_matches_in_its_namespace() {
    let mut sim = Sim::warm();
    let a = arrive(&mut sim, labelled("a", &[("team", "web")]));
    let b = arrive(&mut sim, labelled("b", &[("team", "shop")]));
    sim.step(calendar(&sim, "other", 60));
    let (fx, _) = probe(&mut sim, "b", b, refused());
    assert_eq!(
        events(&fx),
        ["b Warning ConnectError"],
        "another namespace's window"
    );
    sim.step(calendar(&sim, "ns", 60));
    let (fx, _) = probe(&mut sim, "a", a, refused());
    assert_eq!(events(&fx), ["a Warning ConnectError"], "other labels");
    // Labels change without a new spec: the window follows them.
    sim.upsert(labelled("a", &[("team", "shop")]), false);
    let (fx, _) = probe(&mut sim, "a", a + Duration::from_secs(10), ok());
    assert_eq!(events(&fx), ["a Normal ProbeSucceeded"]);
    assert_eq!(
        windows(&sim, &fx),
        ["metric probe ns/a ProbeSucceeded ready=true window=db-upgrade"]
    );
}

#[test]
fn a_checker_that_recovers_in_its_window_sends_no_warning_when_it_closes() {
    let mut sim = Sim::warm();
    let at = arrive(&mut sim, labelled("a", &[("team", "shop")]));
    sim.step(calendar(&sim, "ns", 1));
    let (fx, at) = probe(&mut sim, "a", at, refused());
    assert_eq!(events(&fx), ["a Normal ConnectError"]);
    let (fx, at) = probe(&mut sim, "a", at, ok());
    assert_eq!(events(&fx), ["a Normal ProbeSucceeded"]);
    sim.advance(Duration::from_secs(60));
    let (fx, _) = probe(&mut sim, "a", at, ok());
    assert_eq!(events(&fx), Vec::<String>::new());
}
