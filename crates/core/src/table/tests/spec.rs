//! What a checker's spec makes of it: a new plan on a change, InvalidSpec,
//! Suspended, QuotaExceeded; and a checker removed.

use super::*;
use webchecker_api::WebCheckerStatus;

/// The status a step writes, if any.
fn written(fx: &[Effect]) -> Option<&WebCheckerStatus> {
    fx.iter().find_map(|e| match e {
        Effect::Writer(ToWriter::Submit {
            op: Op::Status(s), ..
        }) => Some(s.as_ref()),
        _ => None,
    })
}

fn over_budget(message: &str) -> Compiled {
    Arc::new(Err(PatternError::OverBudget(message.into())))
}

#[test]
fn a_spec_change_probes_the_new_plan_next_on_the_same_cadence() {
    let mut sim = Sim::warm();
    let next = probed_until_settled(&mut sim, "a");
    // The watch echoes our own status write: same spec, nothing to do but
    // fence the next write with the new resourceVersion.
    let mut echo = checker("a", spec("/", 10, ""));
    echo.resource_version = "2".into();
    assert_eq!(sim.upsert(echo, false), ["observe ns/a rv=2"]);
    // A new path: the probe already due stays due, with the new plan.
    let mut edited = checker("a", spec("/v2", 10, ""));
    edited.generation = Some(2);
    edited.resource_version = "3".into();
    assert_eq!(
        sim.upsert(edited, false),
        ["observe ns/a rv=3", "metric owned 1"]
    );
    sim.advance(next - sim.now);
    sim.due("ns/a");
    let (_, seq, plan) = sim.dispatch().expect("the probe due starts");
    assert_eq!(plan.target.path_and_query, "/v2");
    let fx = sim.step(Input::Done {
        key: "ns/a".into(),
        seq,
        outcome: Some(ok()),
        finished: sim.wall,
    });
    let status = written(&fx).expect("observedGeneration changed: written");
    assert_eq!(status.observed_generation, Some(2));
    assert_eq!(
        status.condition("Ready").unwrap().observed_generation,
        Some(2)
    );
    assert_eq!(scheduled(&sim, &sim.show(&fx)), next + 10 * S);
}

#[test]
fn an_invalid_spec_is_reported_and_never_probed_until_it_is_fixed() {
    let mut sim = Sim::warm();
    // A timeout as long as the interval: the plan refuses it.
    let fx = sim.step(Input::Change(Change::Upsert {
        checker: Box::new(checker("a", spec("/", 1, ""))),
        initial: false,
        seen: sim.now,
    }));
    assert_eq!(
        sim.show(&fx),
        [
            "observe ns/a rv=1",
            "status ns/a Ready=False InvalidSpec",
            "event Warning InvalidSpec",
            "metric up ns/a false down",
            "metric owned 1"
        ]
    );
    let message = &written(&fx).unwrap().condition("Ready").unwrap().message;
    assert!(message.contains("spec.timeoutSeconds"), "{message}");
    assert!(!sim.table.wants_worker());
    let mut fixed = checker("a", spec("/", 10, ""));
    fixed.generation = Some(2);
    assert_eq!(
        sim.upsert(fixed, false),
        [
            "observe ns/a rv=1",
            "schedule ns/a in 50ms",
            "metric owned 1"
        ]
    );
}

#[test]
fn a_malformed_object_is_invalid_spec_and_its_next_error_changes_nothing() {
    let mut sim = Sim::warm();
    let mut bad = checker("m", spec("/", 10, ""));
    bad.definition = Err("invalid type: string \"ten\", expected u32".into());
    let fx = sim.step(Input::Change(Change::Upsert {
        checker: Box::new(bad),
        initial: false,
        seen: sim.now,
    }));
    let message = &written(&fx).unwrap().condition("Ready").unwrap().message;
    assert!(
        message.starts_with("the object does not match the WebChecker schema: invalid type"),
        "{message}"
    );
    assert_eq!(
        only(&sim.show(&fx), &["schedule", "event"]),
        ["event Warning InvalidSpec"]
    );
    let mut again = checker("m", spec("/", 10, ""));
    again.definition = Err("another error".into());
    again.resource_version = "2".into();
    assert_eq!(sim.upsert(again, false), ["observe ns/m rv=2"]);
}

#[test]
fn a_suspended_checker_is_not_probed_and_drops_its_series_until_resumed() {
    let mut sim = Sim::warm();
    probed_until_settled(&mut sim, "a");
    assert_eq!(
        sim.upsert(checker("a", spec("/", 10, ", suspend: true")), false),
        [
            "observe ns/a rv=1",
            "cancel ns/a",
            "status ns/a Ready=Unknown Suspended",
            "event Warning Suspended",
            "metric forget ns/a",
            "metric owned 1"
        ]
    );
    assert!(!sim.table.wants_worker());
    assert_eq!(
        sim.upsert(checker("a", spec("/", 10, "")), false),
        [
            "observe ns/a rv=1",
            "schedule ns/a in 50ms",
            "metric owned 1"
        ]
    );
}

#[test]
fn a_checker_over_its_namespace_budget_is_quota_exceeded_until_room_is_made() {
    let mut sim = Sim::warm();
    probed_until_settled(&mut sim, "a");
    // Its patterns no longer fit (an older checker arrived).
    let lines = sim.command(Input::Change(Change::Patterns {
        key: "ns/a".into(),
        compiled: over_budget("patterns over the budget of namespace \"ns\""),
    }));
    assert_eq!(
        lines,
        [
            "cancel ns/a",
            "status ns/a Ready=False QuotaExceeded",
            "event Warning QuotaExceeded",
            "metric up ns/a false down",
            "metric owned 1"
        ]
    );
    // Room was made: probed again, soon.
    let lines = sim.command(Input::Change(Change::Patterns {
        key: "ns/a".into(),
        compiled: compiled(&spec("/", 10, "")),
    }));
    assert_eq!(lines, ["schedule ns/a in 50ms", "metric owned 1"]);
    // The same through its values.
    probed_until_settled(&mut sim, "b");
    let lines = sim.command(Input::Change(Change::Refresh {
        key: "ns/b".into(),
        resolved: Resolved::over_budget("values over the budget".into()),
    }));
    assert_eq!(
        only(&lines, &["cancel", "status"]),
        ["cancel ns/b", "status ns/b Ready=False QuotaExceeded"]
    );
    let lines = sim.command(Input::Change(Change::Refresh {
        key: "ns/b".into(),
        resolved: Resolved::default(),
    }));
    assert_eq!(lines, ["schedule ns/b in 50ms", "metric owned 2"]);
}

#[test]
fn a_removed_checker_is_never_probed_again() {
    let mut sim = Sim::warm();
    let next = probed_until_settled(&mut sim, "a");
    let seq = sim.start("ns/a", next);
    assert_eq!(
        sim.command(Input::Change(Change::Remove { key: "ns/a".into() })),
        [
            "abort ns/a",
            "forget ns/a",
            "metric forget ns/a",
            "metric owned 0"
        ]
    );
    // A result or a timer that was already on its way finds nothing.
    assert_eq!(sim.done("ns/a", seq, Some(refused())), Vec::<String>::new());
    assert_eq!(sim.due("ns/a"), Vec::<String>::new());
    assert!(!sim.table.wants_worker());
    // Removing what is not known still forgets it at the writer.
    assert_eq!(
        sim.command(Input::Change(Change::Remove { key: "ns/z".into() })),
        ["forget ns/z", "metric owned 0"]
    );
}

#[test]
fn rotated_values_are_used_by_the_next_probe_on_the_same_cadence() {
    let token = webchecker_plan::ValueRef::secret("s", "k");
    let values = |v: &str| -> Resolved {
        [(token.clone(), Ok(v.as_bytes().to_vec()))]
            .into_iter()
            .collect()
    };
    let with_header = spec(
        "/",
        10,
        ", headers: [{name: X-Token, valueFrom: {secretKeyRef: {name: s, key: k}}}]",
    );
    let mut sim = Sim::warm();
    let mut c = checker("a", with_header);
    if let Ok(def) = c.definition.as_mut() {
        def.values = values("v1");
    }
    let first = sim.upsert(c, false);
    let seq = sim.start("ns/a", scheduled(&sim, &first));
    let done = sim.done("ns/a", seq, Some(ok()));
    let next = scheduled(&sim, &done);
    // The same values (a re-read that found no change): nothing.
    let refresh = |v: &str| {
        Input::Change(Change::Refresh {
            key: "ns/a".into(),
            resolved: values(v),
        })
    };
    assert_eq!(sim.command(refresh("v1")), Vec::<String>::new());
    // Rotated: a new plan, the due time kept.
    assert_eq!(sim.command(refresh("v2")), ["metric owned 1"]);
    sim.advance(next - sim.now);
    sim.due("ns/a");
    let (_, _, plan) = sim.dispatch().expect("the probe due starts");
    let sent: Vec<_> = plan
        .headers
        .iter()
        .filter(|(n, _)| n.as_str() == "x-token")
        .map(|(_, v)| v.as_bytes().to_vec())
        .collect();
    assert_eq!(sent, [b"v2".to_vec()]);
}

/// Deleted and created again under its name while the watch was away: the
/// re-list shows the new object (another UID) and no deletion. It is another
/// checker: the old one's queued writes and series go, the new one is probed
/// as new and gets a status of its own.
#[test]
fn a_checker_recreated_under_its_name_starts_afresh() {
    let mut sim = Sim::warm();
    probed_until_settled(&mut sim, "a");
    let mut again = checker("a", spec("/", 10, ""));
    again.object_ref.uid = Some("uid-a-2".into());
    again.resource_version = "9".into();
    let lines = sim.upsert(again, false);
    assert_eq!(
        lines,
        [
            "cancel ns/a",
            "forget ns/a",
            "observe ns/a rv=9",
            "schedule ns/a in 50ms",
            "metric forget ns/a",
            "metric owned 0",
            "metric owned 1"
        ]
    );
    let seq = sim.start("ns/a", sim.now + Duration::from_millis(50));
    let fx = sim.step(Input::Done {
        key: "ns/a".into(),
        seq,
        outcome: Some(ok()),
        finished: sim.wall,
    });
    let status = written(&fx).expect("the new object's first result is written");
    assert_eq!(status.condition("Ready").unwrap().status, "True");
}

#[test]
fn an_objective_counts_each_probe_and_its_series_go_with_it() {
    let mut sim = Sim::warm();
    sim.upsert(
        checker("a", spec("/", 10, ", slo: {objective: '99.9'}")),
        false,
    );
    sim.advance(Duration::from_millis(50));
    sim.due("ns/a");
    let (_, seq, _) = sim.dispatch().expect("a probe starts");
    let fx = sim.step(Input::Done {
        key: "ns/a".into(),
        seq,
        outcome: Some(ok()),
        finished: sim.wall,
    });
    let status = written(&fx).expect("the first verdict is written");
    let slo = status.slo.as_ref().expect("status.slo");
    assert_eq!((slo.good_probes, slo.total_probes), (1, 1));
    let lines = sim.show(&fx);
    assert!(
        lines.contains(&"metric slo ns/a 99.9% good+1 bad+0".to_string()),
        "{lines:?}"
    );
    // spec.slo removed: its series go.
    let mut changed = checker("a", spec("/", 10, ""));
    changed.generation = Some(2);
    changed.resource_version = "2".into();
    let lines = sim.upsert(changed, false);
    assert!(
        lines.contains(&"metric slo gone ns/a".to_string()),
        "{lines:?}"
    );
}
