//! System calls per probe of a prober worker (ours, the floor): one run
//! under `strace -c -f` attached to it. strace slows every call, so only
//! the counts are read, never the times: per probe they say what each
//! prober asks of the kernel, which is where most of a probe's CPU goes.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{Res, err};
use crate::engines::Worker;
use crate::sys::{signal, which};

/// One worker's counted run.
#[derive(Debug, Default, Clone)]
pub struct Counts {
    pub probes: f64,
    pub calls: BTreeMap<String, u64>,
}

impl Counts {
    /// Calls of `name` per probe.
    pub fn per_probe(&self, name: &str) -> f64 {
        self.calls.get(name).copied().unwrap_or(0) as f64 / self.probes.max(1.0)
    }

    /// Calls of every kind per probe.
    pub fn total_per_probe(&self) -> f64 {
        self.calls.values().sum::<u64>() as f64 / self.probes.max(1.0)
    }
}

/// One run of worker `w` at `c` for `d` against `url`, its system calls
/// counted (`strace -c -f -p`, summary in `work`/strace-`name`.txt).
pub fn count(
    w: &mut Worker,
    url: &str,
    c: usize,
    d: Duration,
    work: &Path,
    name: &str,
) -> Res<Counts> {
    let strace = which(&["strace"])
        .ok_or_else(|| err("strace not found (hack/install-deps.sh installs it)"))?;
    let out = work.join(format!("strace-{name}.txt"));
    let pid = w.child.id();
    let threads = std::fs::read_dir(format!("/proc/{pid}/task"))?.count();
    let mut tracer = Command::new(strace)
        .args(["-f", "-c", "-o"])
        .arg(&out)
        .args(["-p", &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let stderr = tracer
        .stderr
        .take()
        .ok_or_else(|| err("no stderr of strace"))?;
    let mut lines = BufReader::new(stderr).lines();
    // Every thread attached before the run: strace says so on stderr, per
    // thread or at once ("attached with N threads").
    let mut attached = 0;
    while attached < threads {
        let line = lines
            .next()
            .ok_or_else(|| err("strace could not attach to the worker"))??;
        attached += attached_in(&line);
    }
    let done = w.ask(&format!("run {url} {c} {}", d.as_millis()))?;
    signal(tracer.id(), libc::SIGINT);
    drop(lines);
    tracer.wait()?;
    let probes: f64 = done
        .get(1)
        .ok_or_else(|| err("no answer from the worker"))?
        .parse()?;
    Ok(Counts {
        probes,
        calls: parse(&std::fs::read_to_string(&out)?),
    })
}

/// Threads a line of strace's stderr says it attached to.
fn attached_in(line: &str) -> usize {
    if !line.contains(" attached") {
        return 0;
    }
    line.split_once("attached with ")
        .and_then(|(_, rest)| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(1)
}

/// The calls by name of `strace -c`'s summary (`% time seconds usecs/call
/// calls [errors] syscall`), the total left out.
pub fn parse(summary: &str) -> BTreeMap<String, u64> {
    summary
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if !(5..=6).contains(&f.len()) || f[0].parse::<f64>().is_err() {
                return None;
            }
            let name = *f.last()?;
            (name != "total").then(|| Some((name.to_string(), f[3].parse().ok()?)))?
        })
        .collect()
}

/// The table of calls per probe of ours and the floor, the calls either
/// makes at least 0.05 times a probe, ours' most frequent first.
pub fn table(c: usize, ours: &Counts, floor: &Counts) -> String {
    let mut names: Vec<&String> = ours.calls.keys().chain(floor.calls.keys()).collect();
    names.sort();
    names.dedup();
    names.retain(|n| ours.per_probe(n) >= 0.05 || floor.per_probe(n) >= 0.05);
    names.sort_by(|a, b| ours.per_probe(b).total_cmp(&ours.per_probe(a)));
    let mut s = format!(
        "\nSystem calls per probe at C = {c}, one run of each under `strace -c -f` ({} probes of ours, {} of the floor; \
         strace slows each call, so only the counts are read):\n\n| system call | ours per probe | floor per probe |\n|---|---:|---:|\n",
        crate::stats::fmt_int(ours.probes),
        crate::stats::fmt_int(floor.probes)
    );
    for n in names {
        s.push_str(&format!(
            "| {n} | {:.2} | {:.2} |\n",
            ours.per_probe(n),
            floor.per_probe(n)
        ));
    }
    s.push_str(&format!(
        "| **all** | **{:.2}** | **{:.2}** |\n",
        ours.total_per_probe(),
        floor.total_per_probe()
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_calls_of_stracees_summary() {
        let text = "% time     seconds  usecs/call     calls    errors syscall\n\
            ------ ----------- ----------- --------- --------- ----------------\n\
             41.10    0.120000          12     10000      10000 connect\n\
             20.00    0.060000           3     20000           epoll_wait\n\
            ------ ----------- ----------- --------- --------- ----------------\n\
            100.00    0.180000           6     30000     10000 total\n";
        let calls = parse(text);
        assert_eq!(calls.len(), 2, "{calls:?}");
        assert_eq!(calls["connect"], 10000);
        assert_eq!(calls["epoll_wait"], 20000);
        let ours = Counts {
            probes: 10000.0,
            calls,
        };
        assert_eq!(ours.per_probe("connect"), 1.0);
        assert_eq!(ours.total_per_probe(), 3.0);
    }

    #[test]
    fn counts_the_threads_attached() {
        assert_eq!(attached_in("strace: Process 12 attached with 5 threads"), 5);
        assert_eq!(attached_in("strace: Process 13 attached"), 1);
        assert_eq!(attached_in("strace: Process 13 detached"), 0);
    }
}
