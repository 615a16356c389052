//! The report, docs/benchmarks.md: the machine, the parts' sections and
//! summaries, and the method notes.

use std::process::Command;

use crate::common::Cfg;
use crate::sys::{cmd_out, ncpus, which};

/// One part's text for the report, and its lines of the summary.
#[derive(Default)]
pub struct Section {
    pub body: String,
    pub summary: Vec<String>,
}

pub struct Machine {
    nproc: usize,
    cpu: String,
    mem: String,
    date: String,
    load_start: String,
    kernel: String,
    rustc: String,
    commit: String,
    blackbox: String,
}

pub fn machine() -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|v| v.trim_start_matches([' ', '\t', ':']).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        })
        .map(|kib| format!("{:.1} GiB", kib / 1024.0 / 1024.0))
        .unwrap_or_else(|| "unknown".into());
    Machine {
        nproc: ncpus(),
        cpu,
        mem,
        date: chrono::Utc::now().format("%Y-%m-%d %H:%M UTC").to_string(),
        load_start: std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
        kernel: cmd_out("uname", &["-r"]),
        rustc: cmd_out("rustc", &["--version"]),
        commit: commit(),
        blackbox: which(&["prometheus-blackbox-exporter", "blackbox_exporter"])
            .map(|p| {
                cmd_out(p.to_str().unwrap(), &["--version"])
                    .split(" (")
                    .next()
                    .unwrap_or("")
                    .to_string()
            })
            .unwrap_or_else(|| "not installed".into()),
    }
}

fn commit() -> String {
    if let Ok(c) = std::env::var("BENCH_COMMIT") {
        return c;
    }
    let dir = webchecker_kit::repo();
    let dir = dir.to_str().unwrap_or(".");
    let out = Command::new("git")
        .args(["-C", dir, "rev-parse", "--short", "HEAD"])
        .output();
    match out {
        Ok(o) if o.status.success() => {
            let hash = String::from_utf8_lossy(&o.stdout).trim().to_string();
            let dirty = Command::new("git")
                .args([
                    "-C",
                    dir,
                    "status",
                    "--porcelain",
                    "--untracked-files=no",
                    "--",
                    "src",
                    "kit",
                    "bench",
                    "Cargo.toml",
                    "Cargo.lock",
                    "hack",
                    "crds",
                ])
                .output()
                .map(|o| !o.stdout.is_empty())
                .unwrap_or(false);
            if dirty {
                format!("{hash} (with uncommitted changes)")
            } else {
                hash
            }
        }
        _ => "unknown".into(),
    }
}

/// The whole document: title, summary, machine, the parts in order (title,
/// outcome), method notes. Returns it and how many parts failed.
pub fn document(
    cfg: &Cfg,
    m: &Machine,
    took: f64,
    parts: Vec<(&str, Option<crate::common::Res<Section>>)>,
) -> (String, usize) {
    let load_end = load_now();
    let mut doc = String::new();
    doc.push_str("# Benchmarks\n\n");
    doc.push_str(&format!(
        "Written by `{}` ({}, bench/); do not edit by hand. The machine is shared and noisy, so every \
         figure is either a ratio against a peer measured in the same run or a distribution over several rounds.\n\n",
        cfg.command,
        if cfg.quick { "quick mode: short runs, figures indicative only" } else { "full run" }
    ));
    let mut failures = 0;
    let mut summary = Vec::new();
    let mut sections = Vec::new();
    for (title, part) in parts {
        let Some(part) = part else { continue };
        match part {
            Ok(sec) => {
                summary.extend(sec.summary);
                sections.push(format!("## {title}\n\n{}\n", sec.body));
            }
            Err(e) => {
                failures += 1;
                summary.push(format!("{title}: failed: {e}"));
                sections.push(format!("## {title}\n\n**Failed:** {e}\n\n"));
            }
        }
    }
    doc.push_str("## Summary\n\n<!-- bench-summary:start -->\n");
    for l in &summary {
        doc.push_str(&format!("- {l}\n"));
    }
    doc.push_str(&format!(
        "\n(`{}` on {} x {}, {}, {}.)\n<!-- bench-summary:end -->\n\n",
        cfg.command, m.nproc, m.cpu, m.mem, m.date
    ));
    doc.push_str(&format!(
        "## Machine\n\n| | |\n|---|---|\n| date | {} |\n| command | `{}` |\n| `nproc` | {} |\n| CPU (/proc/cpuinfo) | {} |\n| memory | {} |\n| kernel | {} |\n| load average at start / end | {} / {} |\n| rustc | {} |\n| commit | {} |\n| blackbox_exporter | {} |\n| bench wall time | {:.1} min |\n\n",
        m.date,
        cfg.command,
        m.nproc,
        m.cpu,
        m.mem,
        m.kernel,
        m.load_start,
        load_end,
        m.rustc,
        m.commit,
        m.blackbox,
        took / 60.0
    ));
    for s in sections {
        doc.push_str(&s);
    }
    doc.push_str(&method_notes());
    (doc, failures)
}

fn load_now() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// What a partial run (merge.rs) says of the sections it wrote: the
/// machine table above them is another run's.
pub fn partial_note(cfg: &Cfg, m: &Machine, took: f64) -> String {
    format!(
        "measured on its own by `{}`, {}, commit {}, load average {} / {}, {:.1} min; the machine table is of the last \
         full run",
        cfg.command,
        m.date,
        m.commit,
        m.load_start,
        load_now(),
        took / 60.0
    )
}

fn method_notes() -> String {
    "## Method notes\n\n\
     - Part 1 counts every probe the prober finished in the measured run and divides by the CPU time \
       (user + system, all threads) the prober *process* used meanwhile, read from `/proc/PID/stat` before \
       and after. The kernel's TCP work on loopback is partly charged to whichever process sends, so both \
       probers also pay for part of the target's handshakes; that is the same for both. blackbox_exporter's \
       figure includes serving `/probe` and encoding its metrics, which is how it is used; ours includes \
       producing an `Outcome` with phase timings, not the operator's metric and status bookkeeping. Part 1b \
       measures the same way against blackbox_exporter 0.28 (built from the Go module proxy; part 1 keeps \
       Debian's), whose grpc and tcp probers it needs; its gRPC peer is grpc-go's health server, a Go process \
       like blackbox_exporter, whose share of the loopback handshakes both probers pay alike.\n\
     - Part 3's achieved rate is counted at the witness (what the targets see), not from the operator's own \
       counters. Writes per 100 probes compares `webchecker_status_writes_total` with \
       `webchecker_probes_total` over the same window.\n\
     - Part 4's gaps are the witness's receive times, so they include connection setup; the normal cadence \
       shows as gaps of about the interval.\n\
     - Part 6 reads Prometheus's memory from Prometheus itself, at a fixed number of scrapes into a fresh TSDB, \
       when its open head chunks are half full (the mean of the long run). Not in the figures: the blocks compacted \
       every 2 h (on disk, read through the page cache), a query's memory, and the memory-mapped head chunks: each \
       cut chunk leaves about 40 bytes of heap until the head is compacted, and a head holds 1-3 h, so at 10 s \
       scrapes up to 9 of them, some 0.3 KiB, per series in a long run, which adds to each configuration in \
       proportion to its series. The three configurations run one after the other on the same objects; memory \
       depends on series and samples, not on timing, so the load of the machine changes it little.\n\
     - `BENCH_QUICK=1` shortens every part (for development); `BENCH_LARGE=1` adds 30,000 checkers to part 3; \
       `BENCH_PARTS=probe,kinds,ring,scale,rebalance,slo,failover,confirm,prom,sim,heap` runs a subset and, into an existing report, \
       replaces only those parts' sections and summary lines (each says when it was measured); \
       `BENCH_PROM_CHECKERS`, `BENCH_PROM_SCRAPES` size part 6; `BENCH_SIM_RUNS`, `BENCH_SIM_MEMBERS`, `BENCH_SIM_LARGE=1` (1,000,000 checkers 10 -> 100) part 7 \
       (`make sim` runs it alone); `BENCH_OUT=DIR` writes elsewhere.\n"
        .to_string()
}
