//! A failure that would turn Ready False waits for another replica's word
//! (crate::confirm): confirmed, it is written with the confirmer named;
//! refuted, Ready stays True and Degraded names the owner; unanswered, it
//! stands, marked so; a success before the answer makes the answer moot.

use super::*;
use crate::ask::{Place, Verdict};

fn confirming_sim() -> Sim {
    let mut sim = Sim::warm();
    sim.table.settings.confirm = true;
    sim.table.settings.place = Place {
        replica: "me".into(),
        zone: "a".into(),
    };
    sim
}

fn b() -> Place {
    Place {
        replica: "r2".into(),
        zone: "b".into(),
    }
}

/// The status written by a step, as (Ready, reason, message, Degraded).
fn written(fx: &[Effect]) -> Option<(String, String, String, Option<String>)> {
    fx.iter().find_map(|e| match e {
        Effect::Writer(ToWriter::Submit {
            op: Op::Status(s), ..
        }) => {
            let r = s.condition("Ready").unwrap();
            Some((
                r.status.clone(),
                r.reason.clone(),
                r.message.clone(),
                s.condition("Degraded")
                    .map(|d| format!("{} {}: {}", d.status, d.reason, d.message)),
            ))
        }
        _ => None,
    })
}

/// `a` probed once with success, then a probe that fails: the lines of its end.
fn failing(sim: &mut Sim) -> (u64, Vec<String>) {
    let next = probed_until_settled(sim, "a");
    let seq = sim.start("ns/a", next);
    sim.advance(Duration::from_millis(300));
    (seq, sim.done("ns/a", seq, Some(refused())))
}

#[test]
fn a_failure_waits_for_the_confirmer_and_is_written_with_its_name() {
    let mut sim = confirming_sim();
    let (seq, lines) = failing(&mut sim);
    // Held: no status, no Event; the ask goes out within timeout + reads.
    assert_eq!(
        only(&lines, &["confirm", "status", "event"]),
        ["confirm ns/a within 7000ms"]
    );
    assert!(lines.contains(&"metric probe ns/a ConnectError ready=true".to_string()));
    let fx = sim.step(Input::Confirmed {
        key: "ns/a".into(),
        seq,
        verdict: Verdict::Confirmed { by: b() },
    });
    let (ready, reason, message, degraded) = written(&fx).expect("written");
    assert_eq!((ready.as_str(), reason.as_str()), ("False", "ConnectError"));
    assert_eq!(message, "ConnectError (confirmed by replica r2 in zone b)");
    assert_eq!(degraded, None, "never degraded: no Degraded condition");
    assert_eq!(
        only(&sim.show(&fx), &["event", "metric verdict"]),
        [
            "event Warning ConnectError",
            "metric verdict ns/a confirmed ready=false down"
        ]
    );
}

#[test]
fn a_refuted_failure_keeps_ready_and_degrades_naming_the_owner_until_it_succeeds() {
    let mut sim = confirming_sim();
    let (seq, _) = failing(&mut sim);
    let fx = sim.step(Input::Confirmed {
        key: "ns/a".into(),
        seq,
        verdict: Verdict::Refuted { by: b(), millis: 4 },
    });
    let (ready, reason, _, degraded) = written(&fx).expect("Degraded is news: written");
    assert_eq!(
        (ready.as_str(), reason.as_str()),
        ("True", "ProbeSucceeded")
    );
    assert_eq!(
        degraded.as_deref(),
        Some(
            "True UnconfirmedFailure: probes from replica me in zone a fail (ConnectError) \
             while replica r2 in zone b reached the target in 4 ms"
        )
    );
    assert_eq!(
        only(&sim.show(&fx), &["event", "metric verdict"]),
        [
            "event Warning UnconfirmedFailure",
            "metric verdict ns/a refuted ready=true"
        ]
    );
    // The next failure asks again (the target may be down by now); still
    // refuted: nothing new to write or tell.
    let due = sim.now + 10 * S - Duration::from_millis(300);
    let seq = sim.start("ns/a", due);
    let lines = sim.done("ns/a", seq, Some(refused()));
    assert_eq!(
        only(&lines, &["confirm", "status"]),
        ["confirm ns/a within 7000ms"]
    );
    let fx = sim.step(Input::Confirmed {
        key: "ns/a".into(),
        seq,
        verdict: Verdict::Refuted { by: b(), millis: 5 },
    });
    assert_eq!(
        only(&sim.show(&fx), &["status", "event", "metric verdict"]),
        ["metric verdict ns/a refuted ready=true"],
        "counted each time"
    );
    // The owner's probes succeed again: Degraded turns False, written.
    let seq = sim.start("ns/a", sim.now + 10 * S);
    let fx = sim.step(Input::Done {
        key: "ns/a".into(),
        seq,
        outcome: Some(ok()),
        finished: sim.wall,
    });
    let (ready, _, _, degraded) = written(&fx).expect("Degraded changed: written");
    assert_eq!(ready, "True");
    assert_eq!(
        degraded.as_deref(),
        Some("False ProbesSucceed: this replica's probes succeed again")
    );
}

#[test]
fn an_unanswered_ask_keeps_ready_and_says_so_without_the_operators_reasons() {
    let mut sim = confirming_sim();
    let (seq, _) = failing(&mut sim);
    let fx = sim.step(Input::Confirmed {
        key: "ns/a".into(),
        seq,
        verdict: Verdict::Unanswered {
            why: "r2: not accepted: a token bound to no pod".into(),
        },
    });
    let (ready, reason, _, degraded) = written(&fx).expect("Degraded is news: written");
    assert_eq!(
        (ready.as_str(), reason.as_str()),
        ("True", "ProbeSucceeded"),
        "one replica's word never turns a checker False"
    );
    assert_eq!(
        degraded.as_deref(),
        Some(
            "True Unconfirmed: probes from replica me in zone a fail (ConnectError) \
             and no other replica could confirm it yet"
        )
    );
    assert_eq!(
        only(&sim.show(&fx), &["event", "metric verdict"]),
        [
            "event Warning Unconfirmed",
            "metric verdict ns/a unanswered ready=true"
        ]
    );
    // The next failure asks again, and a confirmation decides.
    let due = sim.now + 10 * S - Duration::from_millis(300);
    let seq = sim.start("ns/a", due);
    let lines = sim.done("ns/a", seq, Some(refused()));
    assert_eq!(
        only(&lines, &["confirm", "status"]),
        ["confirm ns/a within 7000ms"]
    );
    let fx = sim.step(Input::Confirmed {
        key: "ns/a".into(),
        seq,
        verdict: Verdict::Confirmed { by: b() },
    });
    let (ready, _, message, _) = written(&fx).expect("written");
    assert_eq!(ready, "False");
    assert_eq!(message, "ConnectError (confirmed by replica r2 in zone b)");
}

#[test]
fn a_refusal_of_the_operators_own_is_not_sent_for_confirmation() {
    let mut sim = confirming_sim();
    let next = probed_until_settled(&mut sim, "a");
    let seq = sim.start("ns/a", next);
    let forbidden = webchecker_plan::Outcome {
        reason: webchecker_plan::Reason::Forbidden,
        message: "127.0.0.1 is an address the operator may not probe (loopback)".into(),
        ..refused()
    };
    let lines = sim.done("ns/a", seq, Some(forbidden));
    assert_eq!(
        only(&lines, &["confirm", "status"]),
        ["status ns/a Ready=False Forbidden"]
    );
}

#[test]
fn a_success_before_the_answer_makes_it_moot_and_an_opted_out_checker_never_asks() {
    let mut sim = confirming_sim();
    let (seq, _) = failing(&mut sim);
    let next = sim.now + 10 * S - Duration::from_millis(300);
    let seq2 = sim.start("ns/a", next);
    sim.done("ns/a", seq2, Some(ok()));
    let fx = sim.step(Input::Confirmed {
        key: "ns/a".into(),
        seq,
        verdict: Verdict::Confirmed { by: b() },
    });
    assert!(fx.is_empty(), "{:?}", sim.show(&fx));

    let opted_out = checker("o", spec("/", 10, ", confirmFailures: false"));
    let lines = sim.upsert(opted_out, false);
    let at = scheduled(&sim, &lines);
    let seq = sim.start("ns/o", at);
    let lines = sim.done("ns/o", seq, Some(refused()));
    assert_eq!(
        only(&lines, &["confirm", "status"]),
        ["status ns/o Ready=False ConnectError"]
    );
}

#[test]
fn shutdown_waits_for_a_held_failure_and_writes_it() {
    let mut sim = confirming_sim();
    let next = probed_until_settled(&mut sim, "a");
    let seq = sim.start("ns/a", next);
    assert!(
        !sim.command(Input::Shutdown)
            .contains(&"stopped".to_string())
    );
    // The probe in flight fails: held, the ask goes out, not stopped yet.
    let lines = sim.done("ns/a", seq, Some(refused()));
    assert_eq!(
        only(&lines, &["confirm", "status", "stopped"]),
        ["confirm ns/a within 7000ms"]
    );
    let fx = sim.step(Input::Confirmed {
        key: "ns/a".into(),
        seq,
        verdict: Verdict::Alone,
    });
    assert_eq!(
        only(&sim.show(&fx), &["status", "stopped"]),
        ["status ns/a Ready=False ConnectError", "stopped"]
    );
}
