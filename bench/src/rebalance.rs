//! Part 3b: a rebalance at scale on a real control plane. M checkers
//! (10,000; BENCH_REBALANCE_CHECKERS) settled on 3 release replicas, then a
//! fourth joins: how long until every checker is settled on its new owner
//! (the newcomer holds its share, nothing drains, every owner valid), how
//! many API writes the moves took, and what the witness saw meanwhile: no
//! two replicas probing one checker, and each checker's largest gap
//! between probes (acceptance: interval + 2 s).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use webchecker_kit::objlog::{ObjRec, ObjectLog, RecKind};
use webchecker_kit::oracle::{Clock, overlaps};
use webchecker_kit::{Cluster, histogram_buckets, largest_gap_in, last_before, metric};

use crate::common::{Res, err};
use crate::fleet::{Fleet, INTERVAL};
use crate::report::Section;
use crate::stats::{bucket_quantile, fmt_int};

pub struct Rebalance {
    m: usize,
    newcomer_share: usize,
    /// From the newcomer's spawn to its membership Lease.
    join_s: f64,
    /// From its Lease to the last ownership change of the rebalance.
    settle_s: f64,
    moved: usize,
    /// Versions that changed an owner, epoch or drain, by what they did.
    drains: usize,
    handovers: usize,
    assigns: usize,
    peak_draining: usize,
    /// The leader's handover window, sampled every second: (min, max).
    window: (f64, f64),
    /// The leader's `webchecker_handover_duration_seconds`: (p50, p99).
    handover_s: (f64, f64),
    overlaps: usize,
    gap_s: f64,
    gap_checker: String,
}

/// Ownership changes of the records after `from`, by kind: (drains
/// requested, handovers by the old owner, other writes), and the most drains
/// standing at once.
fn count_writes(objs: &[ObjRec], from: Instant) -> (usize, usize, usize, usize) {
    let mut last: HashMap<&str, &ObjRec> = HashMap::new();
    let (mut drains, mut handovers, mut other, mut draining, mut peak) = (0, 0, 0, 0usize, 0);
    for o in objs {
        let prev = last.insert(o.name.as_str(), o);
        if o.kind != RecKind::Modified || o.at < from {
            continue;
        }
        let Some(p) = prev else { continue };
        if (&p.owner, &p.epoch, &p.drain) == (&o.owner, &o.epoch, &o.drain) {
            continue;
        }
        match (p.drain.is_some(), o.drain.is_some()) {
            (false, true) => {
                drains += 1;
                draining += 1;
            }
            (true, false) => draining = draining.saturating_sub(1),
            _ => {}
        }
        peak = peak.max(draining);
        if o.drain.is_none() && o.handed_over_from.is_some() && p.owner != o.owner {
            handovers += 1;
        } else if p.drain == o.drain || o.drain.is_none() {
            other += 1;
        }
    }
    (drains, handovers, other, peak)
}

/// When the rebalance settled, as the object log saw it: the newcomer holds
/// `share`, nobody drains, every checker has a valid owner.
fn settled(log: &ObjectLog, newcomer: &str, share: usize, m: usize) -> bool {
    log.with(|s| {
        let members = s.members();
        let valid = |o: &ObjRec| {
            o.assignment()
                .is_some_and(|(owner, epoch)| members.get(owner).map(String::as_str) == Some(epoch))
        };
        s.current.len() == m
            && s.current.values().all(valid)
            && s.current
                .values()
                .filter(|o| o.owner.as_deref() == Some(newcomer))
                .count()
                == share
    })
}

pub async fn run(cl: &'static Cluster, m: usize) -> Res<Rebalance> {
    let mut f = Fleet::start(cl, "rebal", 3, m).await?;
    let before = f.wait_stable(Duration::from_secs(600)).await?;
    // The steady state: the first status writes of 10,000 checkers (and
    // their Events) are a burst of their own, not part of a rebalance.
    f.wait_writes_settled().await?;
    let log = ObjectLog::start(f.client.clone(), &f.ns).await;
    let spawned = Instant::now();
    let i = f.spawn();
    let newcomer = f.ops[i].identity.clone();
    let share = m / 4;
    let deadline = spawned + Duration::from_secs(600);
    let leader = f.leader().await.unwrap_or_default();
    let mut windows: Vec<f64> = Vec::new();
    let mut polls = 0u32;
    while !settled(&log, &newcomer, share, m) {
        if Instant::now() > deadline {
            return Err(err(format!("rebalance: {newcomer} not settled in 600 s")));
        }
        polls += 1;
        if polls.is_multiple_of(10)
            && let Some(w) = leader_metrics(&f, &leader)
                .await
                .and_then(|t| metric(&t, "webchecker_handover_window", &[]))
        {
            windows.push(w);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let durations = leader_metrics(&f, &leader)
        .await
        .map(|t| histogram_buckets(&t, "webchecker_handover_duration_seconds"))
        .unwrap_or_default();
    let joined = log
        .with(|s| {
            s.leases
                .iter()
                .find(|l| l.holder.as_deref() == Some(newcomer.as_str()))
                .map(|l| l.at)
        })
        .ok_or_else(|| err("rebalance: the newcomer's Lease was not seen"))?;
    let (last_change, after) = log.with(|s| {
        let last = s
            .objs
            .iter()
            .filter(|o| o.kind == RecKind::Modified && o.at >= joined)
            .filter(|o| o.owner.as_deref() == Some(newcomer.as_str()) || o.drain.is_some())
            .map(|o| o.at)
            .max()
            .unwrap_or(joined);
        let owners: HashMap<String, Option<String>> = s
            .current
            .iter()
            .map(|(k, o)| (k.clone(), o.owner.clone()))
            .collect();
        (last, owners)
    });
    // One more interval and a margin: every checker probed by its new owner.
    let end = Instant::now() + Duration::from_secs(INTERVAL as u64 + 3);
    f.wait_probed_since(Instant::now(), Duration::from_secs(120))
        .await?;
    tokio::time::sleep(end.saturating_duration_since(Instant::now())).await;
    let (drains, handovers, assigns, peak) = log.with(|s| count_writes(&s.objs, joined));
    let moved = before
        .iter()
        .filter(|(k, o)| after.get(*k).and_then(|a| a.as_ref()) != Some(*o))
        .count();
    let (overlaps_n, gap, who) = witness_figures(&f, spawned, Instant::now());
    f.shutdown();
    Ok(Rebalance {
        m,
        newcomer_share: share,
        join_s: (joined - spawned).as_secs_f64(),
        settle_s: (last_change - joined).as_secs_f64(),
        moved,
        drains,
        handovers,
        assigns,
        peak_draining: peak,
        window: (
            windows.iter().copied().fold(f64::NAN, f64::min),
            windows.iter().copied().fold(f64::NAN, f64::max),
        ),
        handover_s: (
            bucket_quantile(&durations, 0.5),
            bucket_quantile(&durations, 0.99),
        ),
        overlaps: overlaps_n,
        gap_s: gap,
        gap_checker: who,
    })
}

/// The leader's /metrics.
async fn leader_metrics(f: &Fleet, leader: &str) -> Option<String> {
    let o = f.ops.iter().find(|o| o.identity == leader)?;
    match o.get_within("/metrics", Duration::from_secs(5)).await {
        Some((200, text)) => Some(text),
        _ => None,
    }
}

/// From the witness: checkers probed by two replicas at once since `from`,
/// and the largest gap between two probes of one checker in [from, to].
fn witness_figures(f: &Fleet, from: Instant, to: Instant) -> (usize, f64, String) {
    let log = f.log();
    let by = log.by_checker(from - Duration::from_secs(INTERVAL as u64), to);
    let clk = Clock { origin: from };
    let overlapping = overlaps(&log, &by, &|_, _| false, &clk).len();
    drop(log);
    let (mut worst, mut who) = (0.0, String::new());
    for (name, starts) in f.starts() {
        let ts: Vec<Instant> = starts.iter().map(|s| s.0).collect();
        let g = largest_gap_in(&ts, last_before(&ts, from), from, to).as_secs_f64();
        if g > worst {
            (worst, who) = (g, name);
        }
    }
    (overlapping, worst, who)
}

pub fn section(r: &Res<Rebalance>) -> Section {
    let mut s = Section::default();
    let r = match r {
        Ok(r) => r,
        Err(e) => {
            s.body = format!("**Error during this part:** {e}\n");
            s.summary.push(format!("rebalance: error: {e}"));
            return s;
        }
    };
    s.body = format!(
        "{} checkers at a {INTERVAL} s interval settled on 3 release replicas (default flags and leases), then a fourth \
         replica joins (a Deployment scaled from 3 to 4). The object log (a watch of the checkers and member Leases) \
         and the witness (every probe) are the kit's, the oracle's.\n\n\
         | | |\n|---|---:|\n\
         | newcomer's share (floor(M/4)) | {} |\n\
         | checkers moved | {} |\n\
         | process start -> its membership Lease | {:.1} s |\n\
         | **its Lease -> every checker settled on its new owner** | **{:.1} s** |\n\
         | drains written by the sharder | {} |\n\
         | handovers written by the old owners (assigning the target) | {} |\n\
         | other ownership writes (re-targets, withdrawals, earlier-style assignments) | {} |\n\
         | ownership writes per moved checker | {:.2} |\n\
         | most drains in progress at once | {} |\n\
         | the leader's handover window, sampled every second (min-max) | {}-{} |\n\
         | handover duration as the leader sees it, p50 / p99 | {:.2} s / {:.2} s |\n\
         | checkers probed by two replicas at once | {} |\n\
         | largest gap between two probes of one checker | {:.2} s ({}) |\n",
        fmt_int(r.m as f64),
        fmt_int(r.newcomer_share as f64),
        fmt_int(r.moved as f64),
        r.join_s,
        r.settle_s,
        fmt_int(r.drains as f64),
        fmt_int(r.handovers as f64),
        fmt_int(r.assigns as f64),
        (r.drains + r.handovers + r.assigns) as f64 / r.moved.max(1) as f64,
        r.peak_draining,
        r.window.0,
        r.window.1,
        r.handover_s.0,
        r.handover_s.1,
        r.overlaps,
        r.gap_s,
        r.gap_checker,
    );
    s.summary.push(format!(
        "rebalance: {} checkers, 3 -> 4 replicas: settled on the new owners {:.1} s after the newcomer's Lease, {} moved, \
         {:.2} ownership writes per move, {} overlaps, largest probe gap {:.2} s at a {INTERVAL} s interval",
        fmt_int(r.m as f64),
        r.settle_s,
        fmt_int(r.moved as f64),
        (r.drains + r.handovers + r.assigns) as f64 / r.moved.max(1) as f64,
        r.overlaps,
        r.gap_s
    ));
    s
}
