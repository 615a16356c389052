//! Part 3c: status writes with an objective (`spec.slo`) on every checker.
//! Three replicas, 1,000 healthy checkers at 1 s (the shortest interval, so
//! that the ledger's own write, once per `SLO_WRITE_EVERY` counted probes,
//! comes within minutes rather than hours), each with
//! `slo: {objective: "99.9"}`. Once every checker was probed and start-up's
//! writes passed, the replicas' status writes and probes are counted over
//! 2 x `SLO_WRITE_EVERY` intervals: writes per 100 probes, against the goal
//! of fewer than 1.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde_json::json;
use webchecker::SLO_WRITE_EVERY;
use webchecker_kit::fleet::Fleet;
use webchecker_kit::{Cluster, Operator, Witness, checker_object, create_all, metric};

use crate::common::{Res, err};
use crate::report::Section;
use crate::stats::{fmt_int, yes};

const CHECKERS: usize = 1000;
const INTERVAL: u32 = 1;
/// Start-up's writes (each checker's first Ready) are not steady state.
const SETTLE: Duration = Duration::from_secs(30);

struct Figures {
    checkers: usize,
    window_s: f64,
    probes: f64,
    writes: f64,
    slo_probes: f64,
}

/// Sum over the replicas of `name`'s samples.
fn total(texts: &[String], name: &str) -> f64 {
    texts
        .iter()
        .map(|t| metric(t, name, &[]).unwrap_or(0.0))
        .sum()
}

async fn scrape(ops: &[Operator]) -> Res<Vec<String>> {
    let mut out = Vec::new();
    for o in ops {
        out.push(
            o.metrics()
                .await
                .ok_or_else(|| err("a replica's /metrics"))?,
        );
    }
    Ok(out)
}

async fn measure(cl: &'static Cluster, checkers: usize) -> Res<Figures> {
    let ns = cl.namespace("slo-writes");
    let ops: Vec<Operator> = (0..3)
        .map(|i| Operator::spawn(cl, &format!("slo-r{i}"), &ns, &["--log-level=info"]))
        .collect();
    let witness = Witness::start().await;
    witness.set_lean();
    let fleet = Fleet::start_with_witness(cl, ns.clone(), ops, witness, 0, INTERVAL).await;
    let objs = (0..checkers)
        .map(|i| {
            let spec = json!({"timeoutSeconds": 0.5, "slo": {"objective": "99.9"}});
            checker_object(
                &format!("c{i}"),
                &fleet.witness.url(),
                INTERVAL.into(),
                spec,
            )
        })
        .collect();
    create_all(&fleet.client, &ns, objs, 64).await;
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut seen = HashSet::new();
    while seen.len() < checkers {
        if Instant::now() > deadline {
            return Err(err(format!(
                "{} of {checkers} checkers probed in 300 s",
                seen.len()
            )));
        }
        seen.extend(fleet.witness.take_hits().into_iter().map(|h| h.checker));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(SETTLE).await;
    let window = Duration::from_secs(u64::from(2 * SLO_WRITE_EVERY * INTERVAL));
    let a = scrape(&fleet.ops).await?;
    let t = Instant::now();
    tokio::time::sleep(window).await;
    let b = scrape(&fleet.ops).await?;
    let window_s = t.elapsed().as_secs_f64();
    let delta = |name: &str| total(&b, name) - total(&a, name);
    Ok(Figures {
        checkers,
        window_s,
        probes: delta("webchecker_probes_total"),
        writes: delta("webchecker_status_writes_total"),
        slo_probes: delta("webchecker_slo_probes_total"),
    })
}

pub async fn part(cl: &'static Cluster, quick: bool) -> Res<Section> {
    let f = measure(cl, if quick { 200 } else { CHECKERS }).await?;
    let per100 = 100.0 * f.writes / f.probes.max(1.0);
    let bound = 100.0 / SLO_WRITE_EVERY as f64;
    let body = format!(
        "Three replicas, {} healthy checkers at {INTERVAL} s, each with `slo: {{objective: \"99.9\"}}`. \
         After every checker was probed and {} s more, the replicas' counters over {:.0} s \
         (2 x {SLO_WRITE_EVERY} intervals): the ledger writes a checker's status once \
         {SLO_WRITE_EVERY} probes were counted since its last write, {bound:.2} writes per 100 probes \
         at most in steady state.\n\n\
         | probes | counted for spec.slo | status writes | writes per 100 probes | goal < 1 |\n\
         |---:|---:|---:|---:|---|\n\
         | {} | {} | {} | {per100:.2} | {} |\n",
        fmt_int(f.checkers as f64),
        SETTLE.as_secs(),
        f.window_s,
        fmt_int(f.probes),
        fmt_int(f.slo_probes),
        fmt_int(f.writes),
        yes(per100 < 1.0),
    );
    let summary = vec![format!(
        "Status writes with spec.slo on every checker: {} checkers at {INTERVAL} s on 3 replicas, \
         {per100:.2} status writes per 100 probes in steady state (bound {bound:.2}; goal < 1: {})",
        fmt_int(f.checkers as f64),
        yes(per100 < 1.0),
    )];
    Ok(Section { body, summary })
}
