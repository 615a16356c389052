//! Part 7: the cost curve of rebalancing, by simulation. The real sharder
//! (`webchecker::coordination::standalone`: the same `Sharder`, `Book`,
//! window and ring a leader runs) against a fake API server (api.rs) with a
//! configurable write latency and write rate, and simulated replicas that
//! acknowledge their drains as a replica's status writer does (world.rs).
//! Members go 3 -> 10 -> 30 -> 10 -> 3; each step is timed from the Lease
//! change to the last change of an owner or drain, once every checker is on
//! a member, none is drained, and every member holds floor(M/N)..=ceil(M/N).

mod api;
mod world;

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{Cfg, Res, err};
use crate::report::Section;
use crate::stats::fmt_int;
use crate::sys;
use api::{Counts, FakeApi, Limits};
use world::World;

/// One simulated cluster's run.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub checkers: usize,
    /// Member counts in turn; the first is where the checkers are placed.
    pub members: Vec<usize>,
    pub limits: Limits,
    /// A replica's probe in flight when a drain arrives ends within this.
    pub probe: Duration,
}

/// One step of a scenario.
#[derive(Clone, Debug)]
pub struct Step {
    pub from: usize,
    pub to: usize,
    /// From the Lease change to the last change that settled it.
    pub settled: Option<Duration>,
    pub counts: Counts,
    /// CPU of the sharder's thread over the step (seconds).
    pub sharder_cpu: f64,
}

impl Step {
    fn writes(&self) -> u64 {
        self.counts.sharder_writes + self.counts.acks
    }
}

/// A scenario's steps, and the live heap the sharder held at the end.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub steps: Vec<Step>,
    /// Bytes in use that the sharder's stop freed: its watch caches, book and
    /// runtime, for every checker (the leader's cost beyond a replica's).
    pub sharder_heap: u64,
}

/// Bytes the process's allocator has handed out and not taken back (glibc,
/// every arena, mmapped chunks included).
fn live_heap() -> u64 {
    // SAFETY: mallinfo2 only reads the allocator's counters.
    let m = unsafe { libc::mallinfo2() };
    (m.uordblks + m.hblkhd) as u64
}

fn thread_cpu_s(tid: i32) -> f64 {
    sys::cpu_ticks_of(&format!("/proc/self/task/{tid}/stat"))
        .map_or(0.0, |(u, s)| (u + s) as f64 / sys::clk_tck())
}

/// Runs one scenario; `timeout` bounds each step.
pub fn simulate(s: &Scenario, timeout: Duration) -> Res<Outcome> {
    let keys = (0..s.checkers).map(|i| format!("team-{}/checker-{i}", i % 100));
    let api = FakeApi::new("webchecker-system", keys, s.limits);
    let mut w = World::new(api.clone(), s.probe);
    let most = *s.members.iter().max().ok_or_else(|| err("no members"))?;
    let first = s.members[0];
    w.join(0..first);
    w.start_renewals(most);
    let mut steps = Vec::new();
    let mut from = 0;
    let mut at = first;
    w.start_sharder();
    for &to in std::iter::once(&first).chain(&s.members[1..]) {
        if to > at {
            w.join(at..to);
        } else if to < at {
            w.leave(to..at);
        }
        at = to;
        api.take_counts();
        let cpu0 = thread_cpu_s(w.sharder_tid);
        let t0 = Instant::now();
        let mut done = false;
        while t0.elapsed() < timeout {
            w.sleep(Duration::from_millis(20));
            if api.settled() {
                done = true;
                break;
            }
        }
        // Stragglers after the settling change count in this step.
        w.sleep(Duration::from_secs(1));
        let counts = api.take_counts();
        let settled = done.then(|| counts.last_change.map_or(Duration::ZERO, |c| c - t0));
        let step = Step {
            from,
            to,
            settled,
            sharder_cpu: thread_cpu_s(w.sharder_tid) - cpu0,
            counts,
        };
        eprintln!(
            "bench: sim {} checkers {from} -> {to}: {} ({} moved, {} writes, {} shed, peak {} drains, sharder {:.1} CPU-s)",
            s.checkers,
            step.settled.map_or("not settled".into(), |d| format!(
                "{:.1} s",
                d.as_secs_f64()
            )),
            step.counts.owner_changes,
            step.writes(),
            step.counts.shed,
            step.counts.peak_drains,
            step.sharder_cpu,
        );
        steps.push(step);
        from = to;
        if !done {
            return Err(err(format!(
                "{} checkers did not settle on {to} members within {} s (loads {:?}, {} drains)",
                s.checkers,
                timeout.as_secs(),
                api.loads().values().collect::<Vec<_>>(),
                api.drains()
            )));
        }
    }
    let held = live_heap();
    w.stop_sharder();
    let sharder_heap = held.saturating_sub(live_heap());
    let outcome = Outcome {
        steps,
        sharder_heap,
    };
    eprintln!(
        "bench: sim {} checkers: {}",
        s.checkers,
        sharder_heap_text(s, &outcome)
    );
    Ok(outcome)
}

/// The leader's extra memory, as the tables and the summary say it.
fn sharder_heap_text(s: &Scenario, o: &Outcome) -> String {
    format!(
        "the leader's sharder {:.1} MiB ({:.2} KiB per checker)",
        o.sharder_heap as f64 / (1 << 20) as f64,
        o.sharder_heap as f64 / 1024.0 / s.checkers.max(1) as f64
    )
}

fn limits_text(l: &Limits) -> String {
    let rate = l
        .rate
        .map_or("unlimited".into(), |r| format!("{} writes/s", fmt_int(r)));
    format!("latency {} ms, {rate}", l.latency.as_millis())
}

fn table(s: &Scenario, steps: &[Step]) -> String {
    let mut t = format!(
        "**{} checkers, {}**\n\n| members | settled | moved | writes | writes per move | writes/s | shed (429) | most drains at once | sharder CPU | checkers per member |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        fmt_int(s.checkers as f64),
        limits_text(&s.limits)
    );
    for st in steps {
        let secs = st.settled.map(|d| d.as_secs_f64());
        let moved = st.counts.owner_changes;
        t.push_str(&format!(
            "| {} -> {} | {} | {} | {} | {} | {} | {} | {} | {:.1} s | {} |\n",
            st.from,
            st.to,
            secs.map_or("**not settled**".into(), |x| format!("{x:.1} s")),
            fmt_int(moved as f64),
            fmt_int(st.writes() as f64),
            if moved > 0 {
                format!("{:.2}", st.writes() as f64 / moved as f64)
            } else {
                "–".into()
            },
            secs.filter(|x| *x > 0.0)
                .map_or("–".into(), |x| fmt_int(st.writes() as f64 / x)),
            fmt_int(st.counts.shed as f64),
            st.counts.peak_drains,
            st.sharder_cpu,
            fmt_int(s.checkers.div_ceil(st.to) as f64),
        ));
    }
    t
}

/// The scenarios: BENCH_SIM_RUNS=checkers:latency_ms:rate[:members],...
/// (rate `none` for unlimited; members as `10/100`, else BENCH_SIM_MEMBERS=
/// 3,10,... or 3 -> 10 -> 30 -> 10 -> 3) replaces the default set;
/// BENCH_SIM_LARGE=1 adds 1,000,000 checkers 10 -> 100 to it.
pub fn scenarios(cfg: &Cfg) -> Vec<Scenario> {
    let members: Vec<usize> = std::env::var("BENCH_SIM_MEMBERS")
        .ok()
        .and_then(|v| v.split(',').map(|n| n.trim().parse().ok()).collect())
        .filter(|m: &Vec<usize>| m.len() >= 2 && !m.contains(&0))
        .unwrap_or_else(|| vec![3, 10, 30, 10, 3]);
    let probe = Duration::from_millis(50);
    let parse = |spec: &str| -> Option<Scenario> {
        let mut f = spec.split(':');
        let checkers = f.next()?.parse().ok()?;
        let latency = Duration::from_millis(f.next()?.parse().ok()?);
        let rate = match f.next()? {
            "none" => None,
            r => Some(r.parse().ok()?),
        };
        let members = match f.next() {
            Some(m) => m
                .split('/')
                .map(|n| n.trim().parse().ok())
                .collect::<Option<Vec<usize>>>()
                .filter(|m| m.len() >= 2 && !m.contains(&0))?,
            None => members.clone(),
        };
        Some(Scenario {
            checkers,
            members,
            limits: Limits { latency, rate },
            probe,
        })
    };
    let mut default = if cfg.quick {
        "2000:5:none,2000:20:200".to_string()
    } else {
        "10000:5:none,10000:20:500,10000:50:200,100000:5:none".to_string()
    };
    if std::env::var("BENCH_SIM_LARGE").is_ok_and(|v| !v.is_empty() && v != "0") {
        default.push_str(",1000000:5:none:10/100");
    }
    std::env::var("BENCH_SIM_RUNS")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or(default)
        .split(',')
        .filter_map(|s| parse(s.trim()))
        .collect()
}

pub fn part(cfg: &Cfg, img: &Path) -> Res<Section> {
    let timeout = Duration::from_secs(
        std::env::var("BENCH_SIM_STEP_TIMEOUT")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(900),
    );
    let mut body = format!(
        "The real sharder (`webchecker::coordination::standalone`: the `Sharder`, `Book`, handover window and ring \
         a leader runs, on a thread and runtime of its own, with the default lease timings) against a fake API server \
         in the same process (bench/src/sim/api.rs, on a runtime of its own: WebChecker metadata and member Leases in \
         memory, served to kube's client as a tower service: one-page lists, watches, merge patches fenced by \
         resourceVersion). Every write is admitted by a token bucket when a rate is set (a write that finds it empty \
         waits up to {} ms, then gets 429, as priority and fairness would), then takes the latency (uniform in 0.5x-1.5x \
         of it), then lands and is published to the watches. Simulated replicas renew their Leases every 2 s and \
         acknowledge each drain as the status writer does: after the probe in flight (uniform in 0-50 ms), at most {} \
         at once per replica, retrying shed writes with backoff; members that leave release their Lease. Not \
         simulated: status writes (a settled checker writes none; during a move the new owner's first status \
         write adds one write per move, outside the sharder's critical path), and the watch delivery time of a real \
         API server. Checkers start unassigned on 3 members (the first row: placing them all), then the members go \
         3 -> 10 -> 30 -> 10 -> 3; the 1,000,000 checkers (`BENCH_SIM_LARGE=1`, not in a plain `make sim`) start \
         unassigned on 10, then the members go 10 -> 100. *settled*: from the Lease change to the last owner or drain change, once no \
         checker is drained, every one is on a member, and each member holds floor(M/N) or ceil(M/N). *writes*: the \
         sharder's and the acknowledgements, refused ones (409) included, shed ones not; *most drains at once*: \
         handovers in progress at the peak; *sharder CPU*: its thread's.\n\n",
        api::QUEUE_WAIT.as_millis(),
        world::ACK_WRITERS,
    );
    let mut summary = Vec::new();
    let mut failures = Vec::new();
    let mut curves = Vec::new();
    for s in scenarios(cfg) {
        match simulate(&s, timeout) {
            Ok(outcome) => {
                let steps = &outcome.steps;
                body.push_str(&table(&s, steps));
                body.push_str(&format!(
                    "\nMemory: {} of live heap at the end (freed when it stopped); a member holds its share's checkers (the last column) at part 3's cost per owned checker.\n\n",
                    sharder_heap_text(&s, &outcome)
                ));
                curves.push((
                    format!("{}, {}", fmt_int(s.checkers as f64), limits_text(&s.limits)),
                    steps
                        .iter()
                        .skip(1)
                        .map(|st| {
                            let secs = st.settled.unwrap_or_default().as_secs_f64();
                            (format!("{} -> {}", st.from, st.to), secs)
                        })
                        .collect::<Vec<_>>(),
                ));
                let times: Vec<String> = steps
                    .iter()
                    .skip(1)
                    .map(|st| {
                        let t = st.settled.unwrap_or_default().as_secs_f64();
                        format!("{} -> {} **{t:.1} s**", st.from, st.to)
                    })
                    .collect();
                let per_move = |up: bool| {
                    steps
                        .iter()
                        .skip(1)
                        .filter(|st| (st.to > st.from) == up && st.counts.owner_changes > 0)
                        .map(|st| st.writes() as f64 / st.counts.owner_changes as f64)
                        .fold(0.0, f64::max)
                };
                summary.push(format!(
                    "Rebalancing cost curve (simulation: the real sharder, a fake API server), {} checkers ({}): {}; at most {:.2} writes per move scaling out, {:.2} scaling in; {}",
                    fmt_int(s.checkers as f64),
                    limits_text(&s.limits),
                    times.join(", "),
                    per_move(true),
                    per_move(false),
                    sharder_heap_text(&s, &outcome),
                ));
            }
            Err(e) => failures.push(e.to_string()),
        }
    }
    if !curves.is_empty() {
        match crate::plots::rebalance_curve(&img.join("rebalance-sim.png"), &curves) {
            Ok(()) => body.push_str("![simulated rebalance](img/rebalance-sim.png)\n\n"),
            Err(e) => body.push_str(&format!("(plot skipped: {e})\n\n")),
        }
    }
    if !failures.is_empty() {
        return Err(err(failures.join("; ")));
    }
    Ok(Section { body, summary })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole simulation at a small scale: the real sharder takes every
    /// step, new members' shares through drains (two writes each: the
    /// sharder's, the old owner's), departed members' checkers in one write.
    #[test]
    fn the_sharder_settles_every_step_with_the_fewest_writes() {
        let s = Scenario {
            checkers: 600,
            members: vec![3, 5, 2],
            limits: Limits {
                latency: Duration::from_millis(2),
                rate: Some(2000.0),
            },
            probe: Duration::from_millis(10),
        };
        let steps = simulate(&s, Duration::from_secs(60)).unwrap().steps;
        let written = |st: &Step| st.writes() - st.counts.conflicts;
        assert_eq!(steps[0].counts.owner_changes, 600);
        assert_eq!(written(&steps[0]), 600);
        // 3 -> 5: the newcomers take 2/5 of the checkers.
        assert_eq!(steps[1].counts.owner_changes, 240);
        assert_eq!(written(&steps[1]), 480);
        assert!(steps[1].counts.peak_drains > 0);
        // 5 -> 2: the three leaving held 3/5, each moved once, in one write,
        // no drain. Their Leases go in one moment and the member view takes
        // the deletions as one change: seen one at a time, a decision between
        // two of them sends checkers to a member that leaves next (420-470).
        assert_eq!(steps[2].counts.owner_changes, 360);
        assert_eq!(written(&steps[2]), steps[2].counts.owner_changes);
        assert_eq!(steps[2].counts.peak_drains, 0);
    }
}
