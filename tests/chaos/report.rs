//! Settings from the environment, and the report.

use super::*;

/// Checkers of `names` that are not validly owned by one of `running`.
pub(super) fn unowned_in(s: &LogState, names: &[String], running: &[String]) -> Vec<String> {
    names
        .iter()
        .filter(|n| {
            s.current.get(*n).is_none_or(|o| {
                !s.validly_owned(o) || o.owner.as_ref().is_none_or(|ow| !running.contains(ow))
            })
        })
        .cloned()
        .collect()
}

pub(super) fn seed_from_env() -> u64 {
    match std::env::var("CHAOS_SEED") {
        Ok(s) if !s.trim().is_empty() => s
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("CHAOS_SEED={s:?} is not a number")),
        _ => {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap();
            // Keep seeds short enough to type.
            (t.as_nanos() as u64 ^ ((std::process::id() as u64) << 20)) % 1_000_000_000
        }
    }
}

/// How long a campaign runs: `CHAOS_MINUTES=n`, or `deck` (the default, and
/// what `make test` runs): one pass over every kind, each exactly once, with
/// the freezes held at their longest (etcd 25 s, the API server 30 s).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Length {
    Minutes(f64),
    Deck,
}

impl Length {
    pub(super) fn from_env() -> Length {
        match std::env::var("CHAOS_MINUTES") {
            Ok(s) if s.trim() == "deck" => Length::Deck,
            Ok(s) if !s.trim().is_empty() => {
                Length::Minutes(s.trim().parse().unwrap_or_else(|_| {
                    panic!("CHAOS_MINUTES={s:?} is neither a number of minutes nor \"deck\"")
                }))
            }
            _ => Length::Deck,
        }
    }

    /// What CHAOS_MINUTES replays this length.
    pub(super) fn arg(self) -> String {
        match self {
            Length::Minutes(m) => m.to_string(),
            Length::Deck => "deck".into(),
        }
    }

    pub(super) fn describe(self) -> String {
        match self {
            Length::Minutes(m) => format!("{m} minutes asked"),
            Length::Deck => "one deck: every kind once".into(),
        }
    }
}

pub(super) fn fmt_d(d: Option<Duration>) -> String {
    d.map(|d| format!("{:.1}s", d.as_secs_f64()))
        .unwrap_or_else(|| "-".into())
}

pub(super) fn report(c: &Campaign, length: Length, ran: Duration, kinds: &[&str]) -> String {
    let mut r = String::new();
    write_settings(&mut r, c, length, ran, kinds);
    write_tallies(&mut r, c);
    write_recovery(&mut r, c);
    write_windows(&mut r, c);
    write_violations(&mut r, c);
    let _ = writeln!(
        r,
        "\nOperator logs: {} (operator-*.log).",
        c.cluster.dir.display()
    );
    r
}

/// The seed and how to replay it, the campaign's settings, and its bounds.
fn write_settings(r: &mut String, c: &Campaign, length: Length, ran: Duration, kinds: &[&str]) {
    let _ = writeln!(r, "# Chaos campaign report\n");
    let _ = writeln!(
        r,
        "Seed **{}** ({}, {:.1} min ran, {} windows). Replay: `CHAOS_SEED={} CHAOS_MINUTES={} make chaos`.\n",
        c.seed,
        length.describe(),
        ran.as_secs_f64() / 60.0,
        c.records.len(),
        c.seed,
        length.arg()
    );
    let _ = writeln!(
        r,
        "{REPLICAS} replicas (lease {}s, retry {}ms, each behind its own fault proxy), {} checkers at the end ({CHECKERS} at the start, {NEW_PER_WINDOW} new per window), interval {INTERVAL_S}s. Fault kinds drawn: {}.\n",
        LEASE.as_secs(),
        RETRY.as_millis(),
        c.checkers.len(),
        kinds.join(", ")
    );
    let _ = writeln!(
        r,
        "Bounds: coverage gap {:.1}s (interval + failover {:.1}s); gap while every replica's API access is down {:.1}s; new checker owned {:.1}s after creation; settle {:.1}s after the fault; cut-off replica stops {:.1}s after reconnecting; test watch lag {:.1}s.\n",
        coverage_bound().as_secs_f64(),
        failover_bound().as_secs_f64(),
        outage_gap_bound().as_secs_f64(),
        new_assign_bound().as_secs_f64(),
        settle_bound().as_secs_f64(),
        cutoff_grace().as_secs_f64(),
        WATCH_SLACK.as_secs_f64()
    );
    let errors = |share| ProxyMode::Errors {
        share,
        codes: vec![429],
    };
    let _ = writeln!(
        r,
        "Under a busy API server (every proxy): failover {:.1}s at 30% errors, {:.1}s at 50%, {:.1}s + {LATENCY_CALLS} x the added latency; a (re)started replica back (Lease, checkers, a probe) within {:.1}s; a replica a share of whose calls fails stops probing what moved {:.1}s after its Lease's deletion at 50% errors.\n",
        busy_failover_bound(&errors(0.3)).as_secs_f64(),
        busy_failover_bound(&errors(0.5)).as_secs_f64(),
        failover_bound().as_secs_f64(),
        rejoin_bound().as_secs_f64(),
        hear_bound(&errors(0.5)).unwrap_or_default().as_secs_f64()
    );
    if let Some(a) = &c.aborted {
        let _ = writeln!(r, "**Campaign aborted**: {a}\n");
    }
}

/// Faults by kind, violations by invariant.
fn write_tallies(r: &mut String, c: &Campaign) {
    let mut by_kind: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for w in &c.records {
        let e = by_kind.entry(w.kind).or_default();
        e.0 += 1;
        if !w.violations.is_empty() {
            e.1 += 1;
        }
    }
    let _ = writeln!(
        r,
        "## Faults injected\n\n| kind | windows | windows with violations |\n|---|---|---|"
    );
    for (k, (n, bad)) in &by_kind {
        let _ = writeln!(r, "| {k} | {n} | {bad} |");
    }
    let mut by_inv: BTreeMap<Inv, usize> = BTreeMap::new();
    for v in c.records.iter().flat_map(|w| &w.violations) {
        *by_inv.entry(v.inv).or_default() += 1;
    }
    let total: usize = by_inv.values().sum();
    let _ = writeln!(r, "\n## Violations: {total}\n");
    if !by_inv.is_empty() {
        let _ = writeln!(r, "| invariant | violations |\n|---|---|");
        for (inv, n) in &by_inv {
            let _ = writeln!(r, "| {inv} | {n} |");
        }
        let _ = writeln!(r);
    }
}

/// Recovery times: from the fault's end to every checker probed, and to
/// every new checker owned.
fn write_recovery(r: &mut String, c: &Campaign) {
    let mut probed: Vec<Duration> = c.records.iter().filter_map(|w| w.all_probed).collect();
    let mut assigned: Vec<Duration> = c.records.iter().filter_map(|w| w.new_assigned).collect();
    probed.sort();
    assigned.sort();
    let stat = |v: &[Duration]| {
        if v.is_empty() {
            "-".to_string()
        } else {
            format!(
                "median {:.1}s, max {:.1}s",
                v[v.len() / 2].as_secs_f64(),
                v[v.len() - 1].as_secs_f64()
            )
        }
    };
    let _ = writeln!(
        r,
        "## Recovery\n\nFault end to every checker probed: {}. Fault end to every new checker owned: {}.\n",
        stat(&probed),
        stat(&assigned)
    );
}

/// One row per window.
fn write_windows(r: &mut String, c: &Campaign) {
    let clk = c.clk;
    let _ = writeln!(
        r,
        "## Windows\n\n| window | fault | start | end | failover | end->new owned | end->all probed | largest gap | gap during fault | moved after | violations | notes |\n|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    let gap = |g: &Option<(Duration, String)>| {
        g.as_ref()
            .map(|(d, n)| format!("{:.1}s ({n})", d.as_secs_f64()))
            .unwrap_or_default()
    };
    for w in &c.records {
        let _ = writeln!(
            r,
            "| {} | {}{} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            w.desc.split(' ').next().unwrap_or(""),
            w.desc.split_once(' ').map(|x| x.1).unwrap_or(""),
            if w.alike {
                " (every replica alike)"
            } else {
                ""
            },
            w.started.map(|t| clk.t(t)).unwrap_or_default(),
            w.ended.map(|t| clk.t(t)).unwrap_or_default(),
            fmt_d(w.failover),
            fmt_d(w.new_assigned),
            fmt_d(w.all_probed),
            gap(&w.largest_gap),
            gap(&w.gap_during_fault),
            w.moved_after,
            w.violations.len(),
            w.notes.join("; ")
        );
    }
}

/// Every violation, the first 20 per window and invariant.
fn write_violations(r: &mut String, c: &Campaign) {
    if c.records.iter().all(|w| w.violations.is_empty()) {
        return;
    }
    let _ = writeln!(
        r,
        "\n## Violations in detail (first 20 per window and invariant)\n"
    );
    for w in &c.records {
        let mut shown: HashMap<Inv, usize> = HashMap::new();
        for v in &w.violations {
            let n = shown.entry(v.inv).or_default();
            *n += 1;
            if *n <= 20 {
                let _ = writeln!(r, "- {}", violation_line(c, w, v));
            } else if *n == 21 {
                let more = w.violations.iter().filter(|x| x.inv == v.inv).count() - 20;
                let _ = writeln!(
                    r,
                    "- window {}: ... {more} more {} violations",
                    w.desc.split(' ').next().unwrap_or(""),
                    v.inv
                );
            }
        }
    }
}

pub(super) fn violation_line(c: &Campaign, w: &WindowRecord, v: &Violation) -> String {
    let clk = c.clk;
    format!(
        "[seed {}] window {} (fault {} .. {}, checked {}): {}: {}{}",
        c.seed,
        w.desc,
        w.started.map(|t| clk.t(t)).unwrap_or_default(),
        w.ended.map(|t| clk.t(t)).unwrap_or_default(),
        w.checked.map(|t| clk.t(t)).unwrap_or_default(),
        v.inv,
        v.detail,
        if v.replicas.is_empty() {
            String::new()
        } else {
            format!(" [replicas {}]", v.replicas.join(","))
        }
    )
}
