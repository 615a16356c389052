//! Scenarios of the checker table, in virtual time: each feeds inputs with
//! the clock readings it chooses and reads the effects as short lines
//! ("schedule ns/a in 10000ms", "ack ns/a last=...").

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::*;
use crate::arrival::ARRIVAL_JITTER;
use crate::checker::Resolved;
use crate::checker::{Change, Checker};
use webchecker_api::WebCheckerSpec;
use webchecker_plan::{Compiled, Outcome, PatternError, Phases, Reason};

mod cadence;
mod confirm;
mod dependencies;
mod diagnosis;
mod handover;
mod maintenance;
mod route_events;
mod spec;
mod zones;

const S: Duration = Duration::from_secs(1);

/// A spec probing `http://x<path>` every `interval` seconds.
fn spec(path: &str, interval: u32, extra: &str) -> WebCheckerSpec {
    serde_yaml::from_str(&format!(
        "{{host: 'http://x', path: '{path}', intervalSeconds: {interval}, timeoutSeconds: 1{extra}}}"
    ))
    .unwrap()
}

fn compiled(spec: &WebCheckerSpec) -> Compiled {
    Arc::new(webchecker_plan::compile_patterns(spec).map_err(PatternError::Invalid))
}

/// Checker `ns/<name>` at generation 1, resourceVersion "1".
fn checker(name: &str, spec: WebCheckerSpec) -> Checker {
    Checker {
        key: format!("ns/{name}"),
        namespace: "ns".into(),
        name: name.into(),
        generation: Some(1),
        resource_version: "1".into(),
        object_ref: ObjectReference {
            namespace: Some("ns".into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            ..Default::default()
        },
        source_ref: None,
        definition: Ok(Definition {
            patterns: compiled(&spec),
            spec,
            values: Resolved::default(),
        }),
        info: Default::default(),
        labels: Default::default(),
        status: None,
        last_probe: None,
        epoch: None,
    }
}

fn outcome(reason: Reason, code: Option<u16>) -> Outcome {
    Outcome {
        reason,
        message: format!("{reason:?}"),
        status_code: code,
        duration: Duration::from_millis(300),
        phases: Phases::default(),
        cert_not_after: None,
        tls: None,
        http_version: None,
        redirects: 0,
        grpc: None,
    }
}

fn ok() -> Outcome {
    outcome(Reason::ProbeSucceeded, Some(200))
}

fn refused() -> Outcome {
    outcome(Reason::ConnectError, None)
}

/// A table on 4 workers and a clock the scenario moves.
struct Sim {
    table: Table,
    now: Instant,
    wall: SystemTime,
    draw: f64,
}

impl Sim {
    fn new() -> Self {
        Sim {
            table: Table::new(Settings {
                identity: "me".into(),
                workers: 4,
                heartbeat: Duration::from_secs(1200),
                roots: Default::default(),
                place: Default::default(),
                confirm: false,
                zones: false,
                diagnosis: false,
            }),
            now: Instant::now(),
            wall: SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
            draw: 0.5,
        }
    }

    /// A table that has finished its first list: new checkers are probed
    /// within the jitter.
    fn warm() -> Self {
        let mut sim = Sim::new();
        sim.step(Input::Change(Change::Resync {
            present: HashSet::new(),
        }));
        sim
    }

    fn advance(&mut self, d: Duration) {
        self.now += d;
        self.wall += d;
    }

    fn wall_ms(&self) -> i64 {
        unix_ms(self.wall)
    }

    fn step(&mut self, input: Input) -> Vec<Effect> {
        let clock = Clock {
            now: self.now,
            wall: self.wall,
            draw: self.draw,
        };
        self.table.step(input, clock)
    }

    /// A watch event (or, `initial`, a list item) seen now.
    fn upsert(&mut self, c: Checker, initial: bool) -> Vec<String> {
        let fx = self.step(Input::Change(Change::Upsert {
            checker: Box::new(c),
            initial,
            seen: self.now,
        }));
        self.show(&fx)
    }

    fn due(&mut self, key: &str) -> Vec<String> {
        let fx = self.step(Input::Due { key: key.into() });
        self.show(&fx)
    }

    /// Dispatches with every worker free: the probe started, if any.
    fn dispatch(&mut self) -> Option<(String, u64, Arc<ProbePlan>)> {
        let fx = self.step(Input::Dispatch { free: 4 });
        fx.into_iter().find_map(|e| match e {
            Effect::Probe { key, seq, plan, .. } => Some((key, seq, plan)),
            _ => None,
        })
    }

    /// Moves to the checker's due time, fires its timer and starts its probe.
    fn start(&mut self, key: &str, due: Instant) -> u64 {
        if due > self.now {
            self.advance(due - self.now);
        }
        self.due(key);
        let (started, seq, _) = self.dispatch().expect("a probe starts");
        assert_eq!(started, key);
        seq
    }

    fn done(&mut self, key: &str, seq: u64, outcome: Option<Outcome>) -> Vec<String> {
        let fx = self.step(Input::Done {
            key: key.into(),
            seq,
            outcome,
            finished: self.wall,
        });
        self.show(&fx)
    }

    fn command(&mut self, input: Input) -> Vec<String> {
        let fx = self.step(input);
        self.show(&fx)
    }

    /// The effects as lines, metrics last, relative to the current instant.
    fn show(&self, fx: &[Effect]) -> Vec<String> {
        let (mut lines, mut metrics) = (Vec::new(), Vec::new());
        for e in fx {
            match e {
                Effect::Metric(m) => metrics.push(self.metric(m)),
                other => lines.push(self.line(other)),
            }
        }
        lines.extend(metrics);
        lines
    }

    fn line(&self, e: &Effect) -> String {
        match e {
            Effect::Probe { key, .. } => format!("probe {key}"),
            Effect::Schedule { key, at } => {
                format!("schedule {key} in {}ms", self.ms_until(*at))
            }
            Effect::Cancel { key } => format!("cancel {key}"),
            Effect::Abort { key } => format!("abort {key}"),
            Effect::ProbeForeign { key } => format!("probe foreign {key}"),
            Effect::DropForeign { key } => format!("drop foreign {key}"),
            Effect::Writer(w) => match w {
                ToWriter::Observe {
                    key,
                    resource_version,
                    ..
                } => format!("observe {key} rv={resource_version}"),
                ToWriter::Submit { key, op, .. } => match op {
                    Op::Status(s) => {
                        let c = s.condition("Ready").expect("a Ready condition");
                        format!("status {key} Ready={} {}", c.status, c.reason)
                    }
                    Op::AckDrain {
                        last_probe_unix_ms,
                        handover,
                    } => {
                        let last = last_probe_unix_ms.map(|ms| format!(" last={ms}"));
                        let to = handover
                            .as_ref()
                            .map(|h| format!(" to={}@{}", h.to, h.epoch));
                        format!(
                            "ack {key}{}{}",
                            last.unwrap_or_default(),
                            to.unwrap_or_default()
                        )
                    }
                },
                ToWriter::Withdraw { key } => format!("withdraw {key}"),
                ToWriter::Forget { key } => format!("forget {key}"),
                ToWriter::ForgetAll => "forget all".into(),
            },
            Effect::Event(n) => {
                let kind = if n.warning { "Warning" } else { "Normal" };
                format!("event {kind} {}", n.reason)
            }
            Effect::Metric(m) => self.metric(m),
            Effect::Confirm { key, limit, .. } => {
                format!("confirm {key} within {}ms", limit.as_millis())
            }
            Effect::AskZones {
                key, others, limit, ..
            } => format!(
                "ask {others} zones for {key} within {}ms",
                limit.as_millis()
            ),
            Effect::Compact => "compact".into(),
            Effect::Diagnose { key, subject, .. } => {
                format!("diagnose {key} {}", subject.describe())
            }
            Effect::Stopped => "stopped".into(),
        }
    }

    fn metric(&self, m: &Metric) -> String {
        // What a Standing adds beside Ready, when it adds anything.
        fn marks(s: &Standing) -> String {
            let mut out = String::new();
            if s.down_since.is_some() {
                out.push_str(" down");
            }
            if let Some((w, _)) = &s.window {
                out.push_str(&format!(" window={w}"));
            }
            if s.dependency_down {
                out.push_str(" dependency-down");
            }
            out
        }
        match m {
            Metric::Probe {
                namespace,
                name,
                outcome,
                standing,
                ..
            } => format!(
                "metric probe {namespace}/{name} {} ready={}{}",
                outcome.reason.as_str(),
                standing.ready,
                marks(standing)
            ),
            Metric::Up {
                namespace,
                name,
                standing,
                ..
            } => format!(
                "metric up {namespace}/{name} {}{}",
                standing.ready,
                marks(standing)
            ),
            Metric::Info {
                namespace, name, ..
            } => format!("metric info {namespace}/{name}"),
            Metric::Forget { namespace, name } => format!("metric forget {namespace}/{name}"),
            Metric::Slo {
                namespace,
                name,
                target,
                counted,
            } => format!(
                "metric slo {namespace}/{name} {} good+{} bad+{}",
                target.percent(),
                counted.good,
                counted.bad
            ),
            Metric::SloGone { namespace, name } => format!("metric slo gone {namespace}/{name}"),
            Metric::Owned { probing, held } if *held == *probing as usize => {
                format!("metric owned {probing}")
            }
            Metric::Owned { probing, held } => format!("metric owned {probing} held {held}"),
            Metric::ScheduleLag(d) => format!("metric lag {}ms", d.as_millis()),
            Metric::FirstProbeDelay(d) => format!("metric first probe {}ms", d.as_millis()),
            Metric::Missed(n) => format!("metric missed {n}"),
            Metric::Zones {
                namespace,
                name,
                results,
                ..
            } => {
                let zones: Vec<String> = results
                    .iter()
                    .map(|z| match z.result {
                        Some((ok, _)) => format!("{}={}", z.zone, if ok { "ok" } else { "fail" }),
                        None => format!("{}=?", z.zone),
                    })
                    .collect();
                format!("metric zones {namespace}/{name} {}", zones.join(" "))
            }
            Metric::Verdict {
                namespace,
                name,
                verdict,
                standing,
                ..
            } => format!(
                "metric verdict {namespace}/{name} {} ready={}{}",
                verdict.result(),
                standing.ready,
                marks(standing)
            ),
        }
    }

    fn ms_until(&self, at: Instant) -> i128 {
        if at >= self.now {
            (at - self.now).as_millis() as i128
        } else {
            -((self.now - at).as_millis() as i128)
        }
    }
}

/// The lines that start with one of `prefixes`.
fn only(lines: &[String], prefixes: &[&str]) -> Vec<String> {
    lines
        .iter()
        .filter(|l| prefixes.iter().any(|p| l.starts_with(p)))
        .cloned()
        .collect()
}

/// The instant of the one `schedule` line, from the current instant.
fn scheduled(sim: &Sim, lines: &[String]) -> Instant {
    let s = only(lines, &["schedule "]);
    assert_eq!(s.len(), 1, "one schedule in {lines:?}");
    let ms: u64 = s[0]
        .rsplit(' ')
        .next()
        .and_then(|t| t.strip_suffix("ms"))
        .and_then(|t| t.parse().ok())
        .expect("schedule ... in <ms>ms");
    sim.now + Duration::from_millis(ms)
}

/// Makes `name` (interval 10 s) known to a warm table and runs its probes
/// (each taking 300 ms) until it has settled into its phase; returns when the
/// next is due, one interval after the last.
fn probed_until_settled(sim: &mut Sim, name: &str) -> Instant {
    let key = format!("ns/{name}");
    let first = sim.upsert(checker(name, spec("/", 10, "")), false);
    let mut at = scheduled(sim, &first);
    for _ in 0..3 {
        let seq = sim.start(&key, at);
        sim.advance(Duration::from_millis(300));
        let done = sim.done(&key, seq, Some(ok()));
        let next = scheduled(sim, &done);
        if next - at == 10 * S {
            return next;
        }
        at = next;
    }
    panic!("{key} settled into its phase within two probes");
}

/// What the wall clock reads at `at`, in ms since the epoch.
fn wall_ms_at(sim: &Sim, at: Instant) -> i64 {
    if at >= sim.now {
        sim.wall_ms() + (at - sim.now).as_millis() as i64
    } else {
        sim.wall_ms() - (sim.now - at).as_millis() as i64
    }
}

/// Whether the wall clock reads the checker's phase at `at` (a due time).
fn on_phase(sim: &Sim, key: &str, at: Instant, interval: Duration) -> bool {
    wall_ms_at(sim, at).rem_euclid(interval.as_millis() as i64)
        == crate::arrival::phase(key, interval).as_millis() as i64
}

#[test]
fn a_new_checker_is_probed_within_the_jitter_and_its_result_written() {
    let mut sim = Sim::warm();
    let lines = sim.upsert(checker("a", spec("/", 10, "")), false);
    assert_eq!(
        lines,
        [
            "observe ns/a rv=1",
            "schedule ns/a in 50ms",
            "metric owned 1"
        ]
    );
    assert!(Duration::from_millis(50) <= ARRIVAL_JITTER);
    sim.advance(Duration::from_millis(50));
    assert_eq!(sim.due("ns/a"), Vec::<String>::new());
    assert!(sim.table.wants_worker());
    sim.advance(Duration::from_millis(5));
    let fx = sim.step(Input::Dispatch { free: 4 });
    assert_eq!(
        sim.show(&fx),
        ["probe ns/a", "metric lag 5ms", "metric first probe 55ms"]
    );
    sim.advance(Duration::from_millis(300));
    let done = sim.done("ns/a", 1, Some(ok()));
    assert_eq!(
        done,
        [
            "status ns/a Ready=True ProbeSucceeded",
            "event Normal ProbeSucceeded",
            "schedule ns/a in 5379ms",
            "metric probe ns/a ProbeSucceeded ready=true"
        ]
    );
    // Its phase is 734 ms past the 10 s grid and its first probe was due at
    // 50 ms: the slot at 10,734 ms is more than an interval on, so the next
    // probe is half an interval before it (5,734 ms), and the one after on it.
    let phase = crate::arrival::phase("ns/a", 10 * S);
    assert_eq!(phase, Duration::from_millis(734));
    // The next probe is no new arrival: no first-probe delay.
    sim.advance(Duration::from_millis(5379));
    sim.due("ns/a");
    let fx = sim.step(Input::Dispatch { free: 4 });
    assert_eq!(sim.show(&fx), ["probe ns/a", "metric lag 0ms"]);
    let done = sim.done("ns/a", 1, Some(ok()));
    let next = scheduled(&sim, &done);
    assert_eq!(next - sim.now, 5 * S);
    assert!(on_phase(&sim, "ns/a", next, 10 * S));
    // Settled: one interval from then on.
    let seq = sim.start("ns/a", next);
    let done = sim.done("ns/a", seq, Some(ok()));
    assert_eq!(scheduled(&sim, &done) - next, 10 * S);
}
