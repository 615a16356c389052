//! When probes are due: the cadence, missed intervals, interval changes,
//! first probes (spread at start-up, at once later, at the old owner's
//! cadence on a handover).

use super::*;

#[test]
fn the_next_probe_is_due_one_interval_after_the_last_was_due() {
    let mut sim = Sim::warm();
    let next = probed_until_settled(&mut sim, "a");
    // A slow probe (2 s) does not push the cadence back.
    let seq = sim.start("ns/a", next);
    sim.advance(2 * S);
    let done = sim.done("ns/a", seq, Some(ok()));
    assert_eq!(
        only(&done, &["schedule", "metric missed"]),
        ["schedule ns/a in 8000ms"]
    );
    assert_eq!(scheduled(&sim, &done), next + 10 * S);
}

#[test]
fn whole_missed_intervals_are_skipped_and_counted() {
    let mut sim = Sim::warm();
    let next = probed_until_settled(&mut sim, "a");
    sim.advance(next - sim.now);
    sim.due("ns/a");
    // No worker for 25 s (an overload): the probe starts that late.
    sim.advance(25 * S);
    let fx = sim.step(Input::Dispatch { free: 4 });
    assert_eq!(sim.show(&fx), ["probe ns/a", "metric lag 25000ms"]);
    sim.advance(Duration::from_millis(300));
    let done = sim.done("ns/a", 1, Some(ok()));
    // Due at +10 s and +20 s passed: the next is at +30 s, on the grid.
    assert_eq!(
        only(&done, &["schedule", "metric missed"]),
        ["schedule ns/a in 4700ms", "metric missed 2"]
    );
    assert_eq!(scheduled(&sim, &done), next + 30 * S);
}

#[test]
fn a_shorter_interval_takes_effect_at_once_and_a_longer_one_from_the_next_probe() {
    let mut sim = Sim::warm();
    let first = sim.upsert(checker("a", spec("/", 60, "")), false);
    let seq = sim.start("ns/a", scheduled(&sim, &first));
    let done = sim.done("ns/a", seq, Some(ok()));
    let old_due = scheduled(&sim, &done);
    assert!(old_due - sim.now >= 30 * S);
    sim.advance(5 * S);
    // 60 s -> 10 s: at its next 10 s slot, not after what is left of the old
    // interval.
    let mut c = checker("a", spec("/", 10, ""));
    c.generation = Some(2);
    let lines = sim.upsert(c, false);
    let at = scheduled(&sim, &lines);
    assert!(at <= sim.now + 10 * S, "{lines:?}");
    assert!(on_phase(&sim, "ns/a", at, 10 * S), "{lines:?}");
    // 10 s -> 30 s: the probe due stays; the ones after it are at most 30 s
    // apart and settle into the 30 s phase.
    sim.advance(S);
    let lines = sim.upsert(checker("a", spec("/", 30, "")), false);
    assert_eq!(only(&lines, &["schedule", "cancel"]), Vec::<String>::new());
    let mut due = at;
    for _ in 0..2 {
        let seq = sim.start("ns/a", due);
        let done = sim.done("ns/a", seq, Some(ok()));
        let next = scheduled(&sim, &done);
        assert!(next - due >= 15 * S && next - due <= 30 * S, "{done:?}");
        due = next;
    }
    assert!(on_phase(&sim, "ns/a", due, 30 * S));
    // Shorter while a probe is in flight: the end of the probe reschedules,
    // on the new interval.
    let seq = sim.start("ns/a", due);
    let lines = sim.upsert(checker("a", spec("/", 5, "")), false);
    assert_eq!(only(&lines, &["schedule"]), Vec::<String>::new());
    let done = sim.done("ns/a", seq, Some(ok()));
    let next = scheduled(&sim, &done);
    assert!(
        next - due <= 5 * S && next - due >= Duration::from_millis(2500),
        "{done:?}"
    );
}

#[test]
fn a_handover_keeps_the_old_owners_cadence_from_its_last_probe() {
    // A cold table would spread a listed checker over its interval (9 s at
    // this draw): the old owner's last probe 3 s ago wins.
    let mut sim = Sim::new();
    sim.draw = 0.9;
    let mut c = checker("a", spec("/", 10, ""));
    c.last_probe = Some(sim.wall_ms() - 3_000);
    let lines = sim.upsert(c, true);
    assert_eq!(only(&lines, &["schedule"]), ["schedule ns/a in 7000ms"]);
    // The same on a warm table, where a new arrival goes within the jitter.
    let mut sim = Sim::warm();
    let mut c = checker("b", spec("/", 10, ""));
    c.last_probe = Some(sim.wall_ms() - 3_000);
    let lines = sim.upsert(c, false);
    assert_eq!(only(&lines, &["schedule"]), ["schedule ns/b in 7000ms"]);
    // A handed-over checker is no new arrival: no first-probe delay.
    sim.advance(7 * S);
    sim.due("ns/b");
    let fx = sim.step(Input::Dispatch { free: 4 });
    assert_eq!(sim.show(&fx), ["probe ns/b", "metric lag 0ms"]);
    // Overdue at the old owner's: at once.
    let mut c = checker("c", spec("/", 10, ""));
    c.last_probe = Some(sim.wall_ms() - 25_000);
    let lines = sim.upsert(c, false);
    assert_eq!(only(&lines, &["schedule"]), ["schedule ns/c in 0ms"]);
}

#[test]
fn the_first_list_spreads_first_probes_and_a_later_list_is_warm() {
    let mut sim = Sim::new();
    sim.draw = 0.9;
    // Start-up: a listed checker's first probe is spread over its interval.
    let lines = sim.upsert(checker("a", spec("/", 10, "")), true);
    assert_eq!(only(&lines, &["schedule"]), ["schedule ns/a in 9000ms"]);
    // A watch event during the first list is a new arrival.
    let lines = sim.upsert(checker("b", spec("/", 10, "")), false);
    assert_eq!(only(&lines, &["schedule"]), ["schedule ns/b in 90ms"]);
    let lines = sim.command(Input::Change(Change::Resync {
        present: HashSet::from(["ns/a".to_string(), "ns/b".to_string()]),
    }));
    assert_eq!(lines, ["metric owned 2"]);
    // A re-list (the watch expired): what it brings that the table did
    // not know is new, probed within the jitter.
    let lines = sim.upsert(checker("c", spec("/", 10, "")), true);
    assert_eq!(only(&lines, &["schedule"]), ["schedule ns/c in 90ms"]);
}

#[test]
fn a_resync_removes_the_checkers_it_did_not_list() {
    let mut sim = Sim::warm();
    probed_until_settled(&mut sim, "a");
    sim.upsert(checker("b", spec("/", 10, "")), false);
    let lines = sim.command(Input::Change(Change::Resync {
        present: HashSet::from(["ns/b".to_string()]),
    }));
    assert_eq!(
        lines,
        [
            "cancel ns/a",
            "forget ns/a",
            "metric forget ns/a",
            "metric owned 1"
        ]
    );
    // Its timer is gone; a late expiry finds nothing.
    assert_eq!(sim.due("ns/a"), Vec::<String>::new());
    assert!(!sim.table.wants_worker());
}

#[test]
fn a_burst_of_new_checkers_spreads_over_the_interval_within_two_probes() {
    let mut sim = Sim::warm();
    // 200 checkers created at once: each probed at once (the same jitter
    // draw, so in the same millisecond).
    let mut due = std::collections::BTreeSet::new();
    for n in 0..200 {
        let lines = sim.upsert(checker(&format!("c{n}"), spec("/", 10, "")), false);
        due.insert((scheduled(&sim, &lines), format!("ns/c{n}"), 0));
    }
    let mut settled = Vec::new();
    while let Some((at, key, probes)) = due.pop_first() {
        let seq = sim.start(&key, at);
        let done = sim.done(&key, seq, Some(ok()));
        let next = scheduled(&sim, &done);
        assert!(next - at <= 10 * S, "{key}: {done:?}");
        if probes == 0 {
            due.insert((next, key, 1));
        } else {
            assert!(on_phase(&sim, &key, next, 10 * S), "{key}");
            settled.push(next);
        }
    }
    // After two probes each, every second of the interval has its share.
    let mut seconds = [0; 10];
    for at in settled {
        seconds[(wall_ms_at(&sim, at).rem_euclid(10_000) / 1_000) as usize] += 1;
    }
    assert!(seconds.iter().all(|n| (8..=32).contains(n)), "{seconds:?}");
}

#[test]
fn a_new_checker_whose_probe_outlasts_its_settling_gap_keeps_its_cadence_for_good() {
    let mut sim = Sim::warm();
    let first = sim.upsert(checker("a", spec("/", 10, "")), false);
    let due = scheduled(&sim, &first);
    // Its slot would have the next probe 5,684 ms after this one was due
    // (a_new_checker_is_probed_within_the_jitter_and_its_result_written);
    // this probe takes 6 s.
    let seq = sim.start("ns/a", due);
    sim.advance(6 * S);
    let done = sim.done("ns/a", seq, Some(ok()));
    let next = scheduled(&sim, &done);
    assert_eq!(next, due + 10 * S);
    // A quick probe later moves nothing: a gap never shrinks in steady state.
    let seq = sim.start("ns/a", next);
    let done = sim.done("ns/a", seq, Some(ok()));
    assert_eq!(scheduled(&sim, &done), next + 10 * S);
}
