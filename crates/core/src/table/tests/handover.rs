//! Letting checkers go: the drain handshake, probes held back at the last
//! moment, the fence, the graceful shutdown.

use super::*;

fn drain(key: &str, rv: &str) -> Input {
    let (namespace, name) = key.split_once('/').unwrap();
    Input::Change(Change::Drain {
        key: key.into(),
        namespace: namespace.into(),
        name: name.into(),
        resource_version: rv.into(),
        uid: format!("uid-{name}"),
        epoch: None,
        handover: None,
    })
}

/// A drain whose sharder named the target's epoch.
fn drain_to(key: &str, rv: &str, to: &str) -> Input {
    let mut input = drain(key, rv);
    if let Input::Change(Change::Drain { handover, .. }) = &mut input {
        *handover = Some(Handover {
            to: to.into(),
            epoch: format!("uid-{to}"),
        });
    }
    input
}

fn sorted(mut lines: Vec<String>) -> Vec<String> {
    lines.sort();
    lines
}

#[test]
fn a_drain_without_a_probe_in_flight_is_acknowledged_at_once() {
    let mut sim = Sim::warm();
    probed_until_settled(&mut sim, "a");
    let last = sim.wall_ms();
    sim.advance(2 * S);
    assert_eq!(
        sim.command(drain("ns/a", "7")),
        [
            "observe ns/a rv=7".to_string(),
            "cancel ns/a".into(),
            format!("ack ns/a last={last}"),
            "metric forget ns/a".into(),
            // Still held until the feed sees it handed over.
            "metric owned 0 held 1".into(),
        ]
    );
    // Nothing is due any more; a checker never seen is acknowledged too.
    assert!(!sim.table.wants_worker());
    assert_eq!(
        sim.command(drain("ns/x", "3")),
        [
            "observe ns/x rv=3",
            "ack ns/x",
            "metric forget ns/x",
            "metric owned 0 held 1"
        ]
    );
}

#[test]
fn a_drain_with_a_probe_in_flight_is_acknowledged_when_the_probe_ends() {
    let mut sim = Sim::warm();
    let next = probed_until_settled(&mut sim, "a");
    let seq = sim.start("ns/a", next);
    sim.advance(Duration::from_millis(200));
    assert_eq!(
        sim.command(drain("ns/a", "7")),
        [
            "observe ns/a rv=7",
            "metric forget ns/a",
            "metric owned 0 held 1"
        ]
    );
    sim.advance(Duration::from_millis(100));
    // Its result is the old owner's last probe: no status write, no next probe.
    let last = sim.wall_ms();
    assert_eq!(
        sim.done("ns/a", seq, Some(ok())),
        [format!("ack ns/a last={last}")]
    );
    assert!(!sim.table.wants_worker());
}

/// The two-write handover: the ack names the drain's target, and a drain
/// re-targeted while the probe was in flight hands over to the latest one.
#[test]
fn the_ack_hands_over_to_the_latest_target_of_the_drain() {
    let mut sim = Sim::warm();
    probed_until_settled(&mut sim, "a");
    let last = sim.wall_ms();
    let lines = sim.command(drain_to("ns/a", "7", "r2"));
    assert_eq!(
        only(&lines, &["ack"]),
        [format!("ack ns/a last={last} to=r2@uid-r2")]
    );

    let next = probed_until_settled(&mut sim, "b");
    let seq = sim.start("ns/b", next);
    let lines = sim.command(drain_to("ns/b", "7", "r2"));
    assert_eq!(only(&lines, &["ack"]), Vec::<String>::new());
    // r2 left; the sharder drains towards r3 before the probe ends.
    let lines = sim.command(drain_to("ns/b", "8", "r3"));
    assert_eq!(only(&lines, &["ack"]), Vec::<String>::new());
    sim.advance(Duration::from_millis(100));
    let last = sim.wall_ms();
    assert_eq!(
        sim.done("ns/b", seq, Some(ok())),
        [format!("ack ns/b last={last} to=r3@uid-r3")]
    );
}

#[test]
fn a_drain_withdrawn_by_a_later_upsert_resumes_probing() {
    let mut sim = Sim::warm();
    probed_until_settled(&mut sim, "a");
    let lines = sim.command(drain("ns/a", "7"));
    assert_eq!(only(&lines, &["ack"]).len(), 1);
    sim.advance(S);
    // The sharder took the drain back before the ack was written: the ack
    // is withdrawn and the checker probed again (within the jitter: its
    // timer was dropped with the drain).
    let mut c = checker("a", spec("/", 10, ""));
    c.resource_version = "8".into();
    assert_eq!(
        sim.upsert(c, false),
        [
            "observe ns/a rv=8",
            "withdraw ns/a",
            "schedule ns/a in 50ms",
            "metric owned 1"
        ]
    );
}

#[test]
fn a_probe_held_back_at_the_last_moment_is_tried_again_at_the_same_due_time() {
    let mut sim = Sim::warm();
    let next = probed_until_settled(&mut sim, "a");
    let seq = sim.start("ns/a", next);
    sim.advance(Duration::from_millis(100));
    // The membership gate closed before the request was written: the probe
    // did not happen, so nothing is written and the due time stays.
    assert_eq!(sim.done("ns/a", seq, None), Vec::<String>::new());
    assert!(sim.table.wants_worker());
    sim.advance(S);
    let fx = sim.step(Input::Dispatch { free: 4 });
    assert_eq!(sim.show(&fx), ["probe ns/a", "metric lag 1100ms"]);
    let done = sim.done("ns/a", seq, Some(ok()));
    assert_eq!(scheduled(&sim, &done), next + 10 * S);
}

#[test]
fn a_probe_held_back_while_draining_still_acknowledges_the_drain() {
    let mut sim = Sim::warm();
    let next = probed_until_settled(&mut sim, "a");
    let last = sim.wall_ms();
    let seq = sim.start("ns/a", next);
    let lines = sim.command(drain("ns/a", "7"));
    assert_eq!(only(&lines, &["ack"]), Vec::<String>::new());
    // Held back: the ack carries the last probe that did happen, and the
    // checker does not go back to the ready queue (which skips draining
    // checkers: the handshake would never end).
    assert_eq!(
        sim.done("ns/a", seq, None),
        [format!("ack ns/a last={last}")]
    );
    assert!(!sim.table.wants_worker());
}

#[test]
fn a_fence_drops_everything_and_the_next_list_fills_a_cold_table() {
    let mut sim = Sim::warm();
    probed_until_settled(&mut sim, "a");
    let b = sim.upsert(checker("b", spec("/", 10, "")), false);
    let old_b = sim.start("ns/b", scheduled(&sim, &b));
    sim.upsert(checker("c", spec("/", 10, "")), false);
    let lines = sim.command(Input::Fence);
    assert_eq!(
        sorted(lines),
        [
            "abort ns/b",
            "cancel ns/a",
            "cancel ns/c",
            "forget all",
            "forget ns/a",
            "forget ns/b",
            "forget ns/c",
            "metric forget ns/a",
            "metric forget ns/b",
            "metric forget ns/c",
            "metric owned 0",
        ]
    );
    assert!(!sim.table.wants_worker());
    // The next list spreads first probes over the interval again.
    sim.draw = 0.9;
    let lines = sim.upsert(checker("b", spec("/", 10, "")), true);
    assert_eq!(only(&lines, &["schedule"]), ["schedule ns/b in 9000ms"]);
    // The aborted probe's result, had it been sent already, is not this
    // checker's.
    assert_eq!(sim.done("ns/b", old_b, Some(ok())), Vec::<String>::new());
}

#[test]
fn shutdown_stops_dispatching_and_ends_when_the_probes_in_flight_are_done() {
    let mut sim = Sim::warm();
    probed_until_settled(&mut sim, "a");
    let b = sim.upsert(checker("b", spec("/", 10, "")), false);
    let seq = sim.start("ns/b", scheduled(&sim, &b));
    let c = sim.upsert(checker("c", spec("/", 10, "")), false);
    sim.advance(scheduled(&sim, &c) - sim.now);
    sim.due("ns/c");
    assert_eq!(sim.command(Input::Shutdown), ["cancel ns/a"]);
    // ns/c was due: it is not started.
    assert!(!sim.table.wants_worker());
    assert!(sim.dispatch().is_none());
    // The probe in flight ends: its result is written, then the table stops.
    let done = sim.done("ns/b", seq, Some(ok()));
    assert_eq!(
        only(&done, &["status", "stopped"]),
        ["status ns/b Ready=True ProbeSucceeded", "stopped"]
    );
    assert_eq!(done.iter().filter(|l| *l == "stopped").count(), 1);
    // With nothing in flight it stops at once.
    let mut sim = Sim::warm();
    probed_until_settled(&mut sim, "a");
    assert_eq!(sim.command(Input::Shutdown), ["cancel ns/a", "stopped"]);
}

/// A checker due within a second of its drain is probed once more, then
/// handed over with that probe's time: the new owner has a whole interval
/// to take it over, however long the handover's writes take. Stopping
/// while such a probe waits hands it over at once.
#[test]
fn a_drain_just_before_a_due_probe_hands_over_after_it() {
    let mut sim = Sim::warm();
    let next = probed_until_settled(&mut sim, "a");
    sim.advance(next - sim.now - Duration::from_millis(500));
    let lines = sim.command(drain_to("ns/a", "7", "r2"));
    assert_eq!(only(&lines, &["ack", "cancel"]), Vec::<String>::new());
    let seq = sim.start("ns/a", next);
    sim.advance(Duration::from_millis(300));
    let last = sim.wall_ms();
    assert_eq!(
        sim.done("ns/a", seq, Some(ok())),
        [format!("ack ns/a last={last} to=r2@uid-r2")]
    );
    assert!(!sim.table.wants_worker());

    let next = probed_until_settled(&mut sim, "b");
    sim.advance(next - sim.now - Duration::from_millis(500));
    // Its last probe ended 300 ms after it started, 9.5 s ago.
    let before = sim.wall_ms() - 9_200;
    assert_eq!(
        only(&sim.command(drain_to("ns/b", "7", "r2")), &["ack"]),
        Vec::<String>::new()
    );
    let lines = sim.command(Input::Shutdown);
    assert_eq!(
        only(&lines, &["ack"]),
        [format!("ack ns/b last={before} to=r2@uid-r2")]
    );
}
