//! Part 1's floor: how far our prober is from the least a probe can cost.
//! The floor (engines.rs, `floor_probe`) connects, sends the request, reads
//! the status line and the headers and closes, in the same runtime, rounds
//! and core as ours, over plain HTTP/1.1. Its probes per CPU-second over
//! ours is what ours could still gain; the user and kernel time per probe
//! of each say where.

use std::collections::BTreeMap;

use crate::engines::Proto;
use crate::runs::{AllRuns, CONCURRENCIES, pairs};
use crate::stats::{median, minmax};

/// The goal: the floor's probes per CPU-second at most this many times ours.
const GOAL: f64 = 1.3;

/// The floor's table and its summary line, from engine `floor` and ours (0)
/// of `all` (`rounds` rounds at each concurrency).
pub fn report(all: &AllRuns, floor: usize, rounds: usize) -> (String, String) {
    let runs = pairs(all, floor, 0);
    let Some(by_c) = runs.get(&Proto::Http1) else {
        return (String::new(), "Probe floor: not measured".into());
    };
    let mut s = String::from(
        "\n### The floor\n\nThe least a probe can cost: a program that connects to the address (nothing to resolve), \
         sends the request, reads the status line and the headers and closes, in a tight loop at the same \
         concurrency, in the same tokio runtime, on the same core and in the same rounds as ours (`bench \
         prober-worker floor`, plain HTTP/1.1). Ours also builds its request from a plan, times every phase, \
         reads the body and classifies the outcome. *floor/ours* is the floor's probes per CPU-second over ours: \
         what ours could still gain.\n\n\
         | C | ours probes/CPU-s | floor probes/CPU-s | floor/ours median (min–max) | ours user µs/probe | ours kernel µs/probe | floor user µs/probe | floor kernel µs/probe |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let mut medians = BTreeMap::new();
    let (mut ours_user, mut ours_sys, mut floor_user, mut floor_sys) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (c, r) in by_c {
        let ratios: Vec<f64> = r
            .iter()
            .map(|(f, o)| f.per_cpu_s() / o.per_cpu_s())
            .collect();
        let (lo, hi) = minmax(&ratios);
        let m = median(&ratios);
        medians.insert(*c, m);
        let med = |f: &dyn Fn(&(crate::engines::EngineRun, crate::engines::EngineRun)) -> f64| {
            median(&r.iter().map(f).collect::<Vec<_>>())
        };
        let row = [
            med(&|(_, o)| o.per_cpu_s()),
            med(&|(f, _)| f.per_cpu_s()),
            med(&|(_, o)| o.user_us()),
            med(&|(_, o)| o.sys_us()),
            med(&|(f, _)| f.user_us()),
            med(&|(f, _)| f.sys_us()),
        ];
        ours_user.push(row[2]);
        ours_sys.push(row[3]);
        floor_user.push(row[4]);
        floor_sys.push(row[5]);
        s.push_str(&format!(
            "| {c} | {:.0} | {:.0} | {m:.2}x ({lo:.2}x–{hi:.2}x) | {:.1} | {:.1} | {:.1} | {:.1} |\n",
            row[0], row[1], row[2], row[3], row[4], row[5]
        ));
    }
    let (lo, hi) = minmax(&medians.values().copied().collect::<Vec<_>>());
    let met = medians.values().all(|m| *m <= GOAL);
    let verdict = if met {
        "**met** at every concurrency".to_string()
    } else {
        let short: Vec<String> = medians
            .iter()
            .filter(|(_, m)| **m > GOAL)
            .map(|(c, _)| c.to_string())
            .collect();
        format!("**not met** at C = {}", short.join(", "))
    };
    s.push_str(&format!(
        "\nGoal: the floor at most {GOAL}x ours over plain HTTP/1.1: {verdict} (median ratios {lo:.2}x to {hi:.2}x).\n"
    ));
    let range = |v: &[f64]| {
        let (a, b) = minmax(v);
        format!("{a:.1}–{b:.1}")
    };
    let summary = format!(
        "Probe floor (HTTP/1.1: connect, send, read the head, close, nothing else): it does **{lo:.2}x–{hi:.2}x** our \
         probes per CPU-second (median of {rounds} rounds at C = {}; goal <= {GOAL}x: {verdict}); per probe ours \
         spends {} µs in user space and {} µs in the kernel, the floor {} µs and {} µs.",
        CONCURRENCIES
            .iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        range(&ours_user),
        range(&ours_sys),
        range(&floor_user),
        range(&floor_sys),
    );
    (s, summary)
}
