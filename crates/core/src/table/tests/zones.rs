//! spec.locations: the owner probes, asks the other zones in one round (one
//! round out at a time), and decides when their answers are in.

use super::*;
use crate::ask::Place;
use crate::ask::zones::{ZoneAnswer, ZoneResult};

fn zoned_sim() -> Sim {
    let mut sim = Sim::warm();
    sim.table.settings.zones = true;
    sim.table.settings.place = Place {
        replica: "me".into(),
        zone: "a".into(),
    };
    sim
}

fn answer(zone: &str, success: bool) -> ZoneAnswer {
    ZoneAnswer {
        by: Place {
            replica: format!("r-{zone}"),
            zone: zone.into(),
        },
        result: ZoneResult::Probed {
            success,
            reason: if success {
                "ProbeSucceeded"
            } else {
                "ConnectError"
            }
            .into(),
            millis: 3,
        },
    }
}

#[test]
fn the_owner_asks_the_other_zones_once_per_round_and_decides_on_their_answers() {
    let mut sim = zoned_sim();
    let first = sim.upsert(
        checker("z", spec("/", 10, ", locations: {zones: 3, quorum: 2}")),
        false,
    );
    let at = scheduled(&sim, &first);
    let seq = sim.start("ns/z", at);
    sim.advance(Duration::from_millis(20));
    let lines = sim.done("ns/z", seq, Some(ok()));
    assert_eq!(
        only(&lines, &["ask", "status", "event", "metric zones"]),
        ["ask 2 zones for ns/z within 7000ms"],
        "nothing decided before the other zones answered"
    );
    let next = scheduled(&sim, &lines);

    // The next probe ends before the answers: no second round goes out.
    sim.now = next;
    let seq2 = sim.start("ns/z", next);
    let lines = sim.done("ns/z", seq2, Some(ok()));
    assert!(only(&lines, &["ask", "status"]).is_empty(), "{lines:?}");

    let fx = sim.step(Input::Zones {
        key: "ns/z".into(),
        seq: seq2,
        answers: vec![answer("b", true), answer("c", false)],
    });
    let lines = sim.show(&fx);
    assert_eq!(
        only(&lines, &["status", "event", "metric zones"]),
        [
            "status ns/z Ready=True ProbeSucceeded",
            "event Normal ProbeSucceeded",
            "event Warning ZonesFailing",
            "metric zones ns/z a=ok b=ok c=fail",
        ]
    );
    let written = fx
        .iter()
        .find_map(|e| match e {
            Effect::Writer(ToWriter::Submit {
                op: Op::Status(s), ..
            }) => Some(s.zones.clone()),
            _ => None,
        })
        .unwrap();
    let shown: Vec<(&str, &str, &str)> = written
        .iter()
        .map(|z| (z.zone.as_str(), z.replica.as_str(), z.result.as_str()))
        .collect();
    assert_eq!(
        shown,
        [
            ("a", "me", "Succeeded"),
            ("b", "r-b", "Succeeded"),
            ("c", "r-c", "Failed")
        ]
    );

    // The round is back: the next probe asks again.
    let next = sim.now + Duration::from_secs(10);
    sim.now = next;
    let seq3 = sim.start("ns/z", next);
    let lines = sim.done("ns/z", seq3, Some(ok()));
    assert_eq!(
        only(&lines, &["ask"]),
        ["ask 2 zones for ns/z within 7000ms"]
    );
}

#[test]
fn a_shutdown_waits_for_the_round_out_and_writes_it() {
    let mut sim = zoned_sim();
    let first = sim.upsert(
        checker("z", spec("/", 10, ", locations: {zones: 2, quorum: 1}")),
        false,
    );
    let at = scheduled(&sim, &first);
    let seq = sim.start("ns/z", at);
    sim.done("ns/z", seq, Some(refused()));
    let fx = sim.step(Input::Shutdown);
    assert!(!sim.show(&fx).contains(&"stopped".to_string()));
    let fx = sim.step(Input::Zones {
        key: "ns/z".into(),
        seq,
        answers: vec![answer("b", false)],
    });
    let lines = sim.show(&fx);
    assert!(
        lines.contains(&"status ns/z Ready=False ConnectError".to_string()),
        "{lines:?}"
    );
    assert!(lines.contains(&"stopped".to_string()), "{lines:?}");
}
