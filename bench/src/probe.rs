//! Part 1: probe engine efficiency. Our prober against
//! prometheus-blackbox-exporter, probes per CPU-second of the prober
//! process, both pinned to the same core; the engines are in engines.rs.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{Cfg, Res, err, panic_text};
use crate::engines::{Aim, FLOOR, Proto, Worker, run_blackbox, run_ours, wait_http};
pub use crate::engines::{EngineRun, target_main, worker_main};
use crate::plots;
use crate::report::Section;
use crate::runs::{AllRuns, CONCURRENCIES, Ratios, Round, Runs, cores, pairs, timings};
use crate::stats::{fmt_int, median, minmax};
use crate::sys::{KillOnDrop, cmd_out, pin_command, signal, which};
use crate::{syscalls, tls_cost};

/// A target process (`bench target-server`) on `cpu`: its port, and for TLS
/// the file with its CA.
pub fn spawn_target(
    proto: Proto,
    cpu: Option<usize>,
    work: &Path,
) -> Res<(KillOnDrop, u16, Option<PathBuf>)> {
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.arg("target-server");
    let ca = (proto != Proto::Http1).then(|| work.join(format!("ca-{}.pem", proto.arg())));
    if let Some(ca) = &ca {
        cmd.arg(proto.arg()).arg(ca);
    }
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
    if let Some(c) = cpu {
        pin_command(&mut cmd, c);
    }
    let mut target = KillOnDrop(cmd.spawn()?);
    let mut line = String::new();
    BufReader::new(target.0.stdout.take().unwrap()).read_line(&mut line)?;
    let port: u16 = line
        .trim()
        .parse()
        .map_err(|_| err(format!("target-server {}: no port", proto.arg())))?;
    Ok((target, port, ca))
}

/// blackbox_exporter's configuration: a module per protocol, the TLS ones
/// verifying against the target's CA and requiring its HTTP version (as ours do).
fn blackbox_config(cas: &BTreeMap<Proto, PathBuf>) -> String {
    let mut y = String::from(
        "modules:\n  http_2xx:\n    prober: http\n    timeout: 5s\n    http:\n      preferred_ip_protocol: ip4\n      ip_protocol_fallback: false\n",
    );
    for (proto, ca) in cas {
        let Some((_, version)) = proto.version() else {
            continue;
        };
        y.push_str(&format!(
            "  {}:\n    prober: http\n    timeout: 5s\n    http:\n      preferred_ip_protocol: ip4\n      ip_protocol_fallback: false\n      valid_http_versions: [\"{version}\"]\n      tls_config:\n        ca_file: {}\n",
            proto.module(),
            ca.display()
        ));
    }
    y
}

/// A blackbox_exporter of a comparison (killed on drop).
struct Peer {
    bb: KillOnDrop,
    port: u16,
}

/// The engines of a comparison, on the probers' core, numbered in this
/// order: our prober's worker with the operator's provider (0), the
/// blackbox_exporters (1 on), workers with other providers (TLS protocols
/// only), and the floor (plain HTTP/1.1 only); and the core of the load
/// that drives blackbox.
pub struct Rig {
    pub worker: Worker,
    peers: Vec<Peer>,
    alts: Vec<Worker>,
    floor: Option<Worker>,
    names: Vec<String>,
    load_cpu: Option<usize>,
}

/// blackbox_exporter `bin` with the configuration `yaml` (written to
/// WORK/NAME.yml, its log to WORK/NAME.log), once it is healthy.
fn start_blackbox(bin: &Path, yaml: &str, work: &Path, name: &str) -> Res<Peer> {
    let (_, _, cpu) = cores();
    let port = webchecker_kit::free_port();
    let file = work.join(format!("{name}.yml"));
    std::fs::write(&file, yaml)?;
    let mut cmd = Command::new(bin);
    cmd.arg(format!("--config.file={}", file.display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(work.join(format!("{name}.log")))?);
    if let Some(c) = cpu {
        pin_command(&mut cmd, c);
    }
    let bb = KillOnDrop(cmd.spawn()?);
    if !wait_http(port, "/-/healthy", Duration::from_secs(20)) {
        return Err(err(format!("{} did not come up", bin.display())));
    }
    Ok(Peer { bb, port })
}

impl Rig {
    /// blackbox_exporter `bin` (see [`start_blackbox`]) and a worker with
    /// the operator's provider.
    pub fn start(bin: &Path, yaml: &str, work: &Path, name: &str) -> Res<Rig> {
        let (_, load_cpu, cpu) = cores();
        let peer = start_blackbox(bin, yaml, work, name)?;
        Ok(Rig {
            worker: Worker::spawn(cpu, &[])?,
            peers: vec![peer],
            alts: Vec::new(),
            floor: None,
            names: vec!["ours".into(), name.into()],
            load_cpu,
        })
    }

    /// Another blackbox_exporter; call before [`Rig::add_worker`].
    pub fn add_blackbox(&mut self, bin: &Path, yaml: &str, work: &Path, name: &str) -> Res<()> {
        assert!(
            self.alts.is_empty(),
            "peers are numbered before other workers"
        );
        self.peers.push(start_blackbox(bin, yaml, work, name)?);
        self.names.insert(self.peers.len(), name.into());
        Ok(())
    }

    /// Another worker of ours, with the rustls provider `provider` (crypto.rs).
    pub fn add_worker(&mut self, provider: &str) -> Res<()> {
        assert!(self.floor.is_none(), "the floor is numbered last");
        self.alts.push(Worker::spawn(cores().2, &[provider])?);
        self.names.push(format!("ours with {provider}"));
        Ok(())
    }

    /// The floor (engines.rs, `floor_probe`), the last engine; its number.
    pub fn add_floor(&mut self) -> Res<usize> {
        self.floor = Some(Worker::spawn(cores().2, &[FLOOR])?);
        self.names.push("floor".into());
        Ok(self.engines() - 1)
    }

    /// Our worker with the operator's provider against the first blackbox
    /// (see [`Rig::measure_all`]).
    pub fn measure(
        &mut self,
        urls: &[(Proto, String)],
        cas: &BTreeMap<Proto, PathBuf>,
        cfg: &Cfg,
    ) -> Res<Runs> {
        Ok(pairs(&self.measure_all(urls, cas, cfg)?, 0, 1))
    }

    /// Every engine on each of `urls` (verifying TLS against the CA file of
    /// its protocol in `cas`, if any) at every concurrency, `cfg.rounds`
    /// rounds each.
    pub fn measure_all(
        &mut self,
        urls: &[(Proto, String)],
        cas: &BTreeMap<Proto, PathBuf>,
        cfg: &Cfg,
    ) -> Res<AllRuns> {
        let aims: Vec<Aim<'_>> = urls
            .iter()
            .map(|(proto, url)| Aim {
                url,
                proto: *proto,
                ca_file: cas.get(proto).map(|p| p.as_path()),
            })
            .collect();
        measure(self, &aims, CONCURRENCIES, cfg.rounds, timings(cfg))
    }

    fn engines(&self) -> usize {
        1 + self.peers.len() + self.alts.len() + usize::from(self.floor.is_some())
    }

    /// Whether engine `e` runs on `aim`: other providers over TLS only, the
    /// floor over plain HTTP/1.1 only.
    fn runs_on(&self, e: usize, aim: &Aim<'_>) -> bool {
        if self.floor.is_some() && e + 1 == self.engines() {
            aim.proto == Proto::Http1
        } else {
            e <= self.peers.len() || aim.ca_file.is_some()
        }
    }

    /// One run of engine `e`.
    fn run(
        &mut self,
        e: usize,
        aim: &Aim<'_>,
        c: usize,
        t: (Duration, Duration),
    ) -> Res<EngineRun> {
        let (warm, d) = t;
        let peers = self.peers.len();
        match e {
            0 => run_ours(&mut self.worker, aim, c, warm, d),
            e if e <= peers => {
                let p = &self.peers[e - 1];
                run_blackbox(p.bb.0.id(), p.port, aim, c, warm, d, self.load_cpu)
            }
            e if e - 1 - peers < self.alts.len() => {
                run_ours(&mut self.alts[e - 1 - peers], aim, c, warm, d)
            }
            _ => run_ours(self.floor.as_mut().expect("the floor"), aim, c, warm, d),
        }
    }
}

/// Every aim at every concurrency, `rounds` rounds each of every engine
/// (warm-up `warm`, measured `d`; other providers only over TLS), the
/// engine that goes first moving on by one each round.
fn measure(
    rig: &mut Rig,
    aims: &[Aim<'_>],
    concurrencies: &[usize],
    rounds: usize,
    t: (Duration, Duration),
) -> Res<AllRuns> {
    let mut runs = AllRuns::new();
    for aim in aims {
        let engines: Vec<usize> = (0..rig.engines())
            .filter(|e| rig.runs_on(*e, aim))
            .collect();
        for &c in concurrencies {
            for round in 0..rounds {
                let mut got: Round = vec![None; rig.engines()];
                // Rotate the order, so slow drifts of the machine hit all alike.
                for i in 0..engines.len() {
                    let e = engines[(i + round) % engines.len()];
                    got[e] = Some(rig.run(e, aim, c, t)?);
                }
                let line: Vec<String> = engines
                    .iter()
                    .filter_map(|e| {
                        let r = got[*e]?;
                        Some(format!(
                            "{} {:.0}/cpu-s ({:.0} probes, {:.2} cpu-s, {} errors)",
                            rig.names[*e],
                            r.per_cpu_s(),
                            r.probes,
                            r.cpu_s,
                            r.errors
                        ))
                    })
                    .collect();
                eprintln!(
                    "bench: probe {} C={c} round {round}: {}",
                    aim.proto.label(),
                    line.join(", ")
                );
                runs.entry(aim.proto)
                    .or_default()
                    .entry(c)
                    .or_default()
                    .push(got);
            }
        }
    }
    Ok(runs)
}

/// The targets (a process each, on the other core), the CA file of each TLS
/// one, and the URL of each.
#[allow(clippy::type_complexity)]
fn start_targets(
    cpu: Option<usize>,
    work: &Path,
) -> Res<(
    Vec<KillOnDrop>,
    BTreeMap<Proto, PathBuf>,
    Vec<(Proto, String)>,
)> {
    let mut procs = Vec::new();
    let mut cas = BTreeMap::new();
    let mut urls = Vec::new();
    for proto in Proto::ALL {
        let (t, port, ca) = spawn_target(proto, cpu, work)?;
        procs.push(t);
        let scheme = if let Some(ca) = ca {
            cas.insert(proto, ca);
            "https"
        } else {
            "http"
        };
        urls.push((proto, format!("{scheme}://127.0.0.1:{port}")));
    }
    Ok((procs, cas, urls))
}

/// What part 1 measured.
struct Measured {
    all: AllRuns,
    /// Engine of each provider of ours (the operator's is 0).
    engines: BTreeMap<String, usize>,
    /// Engine and version of the newest blackbox_exporter.
    latest: (usize, String),
    /// Engine of the floor.
    floor: usize,
    split: tls_cost::Split,
    profile: Option<String>,
    /// System calls per probe of ours and of the floor, and at which C.
    syscalls: (syscalls::Counts, syscalls::Counts, usize),
}

pub fn part(cfg: &Cfg, img: &Path) -> Res<Section> {
    let Some(bb_bin) = which(&["prometheus-blackbox-exporter", "blackbox_exporter"]) else {
        return Ok(Section {
            body: "Skipped: prometheus-blackbox-exporter is not installed (`hack/install-deps.sh` installs it).\n".into(),
            summary: vec!["probe engine: skipped (no blackbox_exporter)".into()],
        });
    };
    let (pinned, target_cpu, _) = cores();
    std::fs::create_dir_all(&cfg.work)?;
    let (targets, cas, urls) = start_targets(target_cpu, &cfg.work)?;

    // Debian's blackbox_exporter (engine 1) and the newest one (engine 2),
    // pinned to the prober core; then our worker with each other provider.
    let yaml = blackbox_config(&cas);
    let mut rig = Rig::start(&bb_bin, &yaml, &cfg.work, "blackbox")?;
    let latest_bin = std::panic::catch_unwind(webchecker_kit::peers::blackbox_exporter_bin)
        .map_err(|p| err(panic_text(&*p)))?;
    rig.add_blackbox(&latest_bin, &yaml, &cfg.work, "blackbox-latest")?;
    let providers = crate::crypto::names();
    let mut engines = BTreeMap::from([(providers[0].to_string(), 0)]);
    for p in &providers[1..] {
        rig.add_worker(p)?;
        engines.insert(p.to_string(), rig.engines() - 1);
    }
    let floor = rig.add_floor()?;
    let all = rig.measure_all(&urls, &cas, cfg)?;
    let (_, d) = timings(cfg);
    // Where our prober's CPU goes, at the concurrency with the lowest ratio.
    let worst_c = worst_concurrency(&pairs(&all, 0, 1)[&Proto::Http1]);
    let profile = perf_profile(&mut rig.worker, &urls[0].1, worst_c, d, &cfg.work);
    let url = &urls[0].1;
    let ours = syscalls::count(&mut rig.worker, url, worst_c, d, &cfg.work, "ours")?;
    let floor_worker = rig.floor.as_mut().ok_or_else(|| err("no floor"))?;
    let floor_calls = syscalls::count(floor_worker, url, worst_c, d, &cfg.work, "floor")?;
    drop(rig);
    let split = tls_cost::measure_split(&providers, &urls, &cas, cfg)?;
    drop(targets);
    let m = Measured {
        all,
        engines,
        latest: (2, version_of(&latest_bin)),
        floor,
        split,
        profile,
        syscalls: (ours, floor_calls, worst_c),
    };
    report(cfg, img, pinned, &bb_bin, &m)
}

/// Part 1's section from what it measured.
fn report(cfg: &Cfg, img: &Path, pinned: bool, bb_bin: &Path, m: &Measured) -> Res<Section> {
    let (_, d) = timings(cfg);
    let runs = pairs(&m.all, 0, 1);
    let plain = runs[&Proto::Http1].clone();
    let mut s = method(pinned, bb_bin, cfg.rounds, d);
    let (table, ratio_at) = efficiency_table(&runs);
    s.push_str(&table);
    s.push_str(&latency_table(&runs));
    let (split, user_ratios) = cpu_split_table(&runs);
    s.push_str(&split);
    let user_ratio = minmax(&user_ratios[&Proto::Http1]);
    let (latest, latest_at) = tls_cost::latest_table(&m.all, m.latest.0, &m.latest.1);
    s.push_str(&latest);
    let (providers, provider_ratios) = tls_cost::provider_table(&m.all, &m.engines);
    s.push_str(&providers);
    s.push_str(&tls_cost::split_table(&m.split, &m.all, &m.engines));
    if let Some(p) = &m.profile {
        s.push_str(&format!(
            "\n{p} What bounds the ratio is this per-connection kernel work, which both probers pay in full \
             (a fresh TCP connection per probe, as a monitoring probe must): blackbox_exporter spends most of its \
             time in user space, we spend most of ours in the kernel.\n"
        ));
    }
    let (verdict, worst, best) = goal_verdict(&ratio_at[&Proto::Http1], 6.0);
    s.push_str(&format!(
        "\nGoal: ours/blackbox probes per CPU-second >= 6x over plain HTTP/1.1: {verdict} (median ratios {:.1}x to {:.1}x).\n",
        worst, best
    ));
    let mut tls_verdicts = Vec::new();
    for proto in [Proto::TlsHttp1, Proto::TlsHttp2] {
        let (v, lo, hi) = goal_verdict(&ratio_at[&proto], TLS_GOAL);
        s.push_str(&format!(
            "\nGoal: ours/blackbox probes per CPU-second >= {TLS_GOAL}x, {}: {v} (median ratios {lo:.1}x to {hi:.1}x).\n",
            proto.label()
        ));
        tls_verdicts.push(format!("{} {}", proto.label(), short_verdict(&v)));
    }
    let range = |r: &Ratios, p: Proto| format!("{} {}", p.label(), ratio_range(&r[&p]));
    let tls: Vec<String> = [Proto::TlsHttp1, Proto::TlsHttp2]
        .into_iter()
        .map(|p| range(&ratio_at, p))
        .collect();
    let newest: Vec<String> = Proto::ALL
        .into_iter()
        .map(|p| range(&latest_at, p))
        .collect();
    let alt: Vec<String> = provider_ratios
        .iter()
        .map(|((name, p), r)| {
            let (lo, hi) = minmax(r);
            format!("{lo:.2}x–{hi:.2}x with {name} over {}", p.label())
        })
        .collect();
    let (floor_table, floor_line) = crate::probe_floor::report(&m.all, m.floor, cfg.rounds);
    s.push_str(&floor_table);
    let (ours, floor, at) = &m.syscalls;
    s.push_str(&syscalls::table(*at, ours, floor));
    let floor_line = format!(
        "{floor_line} System calls per probe at C = {at}: ours {:.1}, the floor {:.1} (`strace -c`).",
        ours.total_per_probe(),
        floor.total_per_probe()
    );
    let summary = vec![
        format!(
            "Probe engine: **{:.1}x–{:.1}x** the probes per CPU-second of blackbox_exporter {} over HTTP/1.1 (median of {} \
         rounds at C = {}; goal >= 6x: {verdict}); {} (goal >= {TLS_GOAL}x: {}; a full handshake per probe on both \
         sides; ours builds a chain it verified before only once: docs/probes.md). Against blackbox_exporter {}: {}. \
         Ours with another TLS provider, probes per CPU-second against the operator's aws-lc-rs: {}. Our user-space CPU \
         per probe over HTTP/1.1 is {:.0}x–{:.0}x smaller; the rest is the kernel's work for a fresh TCP connection \
         per probe, which both pay.",
            worst,
            best,
            bb_version_short(),
            cfg.rounds,
            list(CONCURRENCIES),
            tls.join(", "),
            tls_verdicts.join(", "),
            m.latest.1,
            newest.join(", "),
            if alt.is_empty() {
                "not measured (the bench was built without its `ring` feature)".to_string()
            } else {
                alt.join(", ")
            },
            user_ratio.0,
            user_ratio.1,
        ),
        floor_line,
    ];

    let plotted = plots::probe_efficiency(&img.join("probe-efficiency.png"), &plain);
    if plotted.is_ok() {
        s.push_str("\n![probes per CPU-second over HTTP/1.1](img/probe-efficiency.png)\n");
    }
    Ok(Section { body: s, summary })
}

/// The bar over TLS: ours/blackbox 0.23 probes per CPU-second.
const TLS_GOAL: f64 = 5.0;

/// `**met**` or `**not met**` at every concurrency, shorter.
fn short_verdict(v: &str) -> String {
    v.replace(" at every concurrency", "")
}

/// Part 1's method paragraph.
fn method(pinned: bool, bb_bin: &Path, rounds: usize, d: Duration) -> String {
    format!(
        "Targets, each a process of its own{}, answering `200`: over plain HTTP/1.1 a minimal server that \
         answers and closes; over TLS the kit's protocol target (rustls, a certificate for 127.0.0.1 from a test \
         CA, ALPN `http/1.1` only, or `h2` then `http/1.1`). \
         Ours: `webchecker::probe::Prober` driven by `plan()` from a spec, in a child process \
         (`bench prober-worker`, tokio multi-thread runtime), a fresh connection per probe, phase timings on. \
         Blackbox: `{}` with an `http` module (`preferred_ip_protocol: ip4`), `/probe` called over \
         keep-alive connections by the bench's own client{}. Over TLS both verify the certificate against the \
         test CA (ours `tls.caBundle`, blackbox `tls_config.ca_file`), do a full handshake per probe (ours never \
         resumes; blackbox's client keeps no session cache) and require the protocol's HTTP version \
         (`httpVersions`, `valid_http_versions`): a probe that negotiated another version counts as an error. \
         \"blackbox\" in the first tables is Debian's 0.23; the newest release runs in the same rounds, with the \
         same configuration, and has a table of its own, as has our worker with each rustls provider the bench \
         was built with (ring beside the operator's aws-lc-rs, over TLS only). \
         {}",
        if pinned { ", pinned to core 0" } else { "" },
        bb_bin.display(),
        if pinned { " (on core 0)" } else { "" },
        measure_note(pinned, rounds, d, "protocol and concurrency"),
    )
}

/// `1, 16, 128`.
pub fn list(v: &[usize]) -> String {
    v.iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `**lo x–hi x**` over the median ratios at each concurrency.
pub fn ratio_range(by_c: &BTreeMap<usize, (f64, f64, f64)>) -> String {
    let r: Vec<f64> = by_c.values().map(|x| x.0).collect();
    let (lo, hi) = minmax(&r);
    format!("**{lo:.1}x–{hi:.1}x**")
}

/// The end of the method paragraph: pinning, what CPU is, rounds.
pub fn measure_note(pinned: bool, rounds: usize, d: Duration, per: &str) -> String {
    format!(
        "Both probers are pinned to the same core{}; \
         CPU is utime+stime of the prober process from `/proc/PID/stat` over the measured run only \
         (warm-up excluded). {} rounds of {:.1} s per engine, {per}, alternating which engine goes first.\n\n",
        if pinned {
            " (core 1)"
        } else {
            " (not pinned: fewer than 2 cores)"
        },
        rounds,
        d.as_secs_f64()
    )
}

/// The concurrency with the lowest median ratio.
pub fn worst_concurrency(by_c: &BTreeMap<usize, Vec<(EngineRun, EngineRun)>>) -> usize {
    by_c.iter()
        .map(|(c, runs)| {
            let r: Vec<f64> = runs
                .iter()
                .map(|r| r.0.per_cpu_s() / r.1.per_cpu_s())
                .collect();
            (*c, median(&r))
        })
        .min_by(|a, b| a.1.partial_cmp(&b.1).unwrap())
        .map(|x| x.0)
        .unwrap_or(1)
}

/// The main table (probes per CPU-second of each, the ratio, throughput,
/// CPU use, errors), and the ratios it shows.
pub fn efficiency_table(runs: &Runs) -> (String, Ratios) {
    let mut s = String::from(
        "| protocol | C | ours probes/CPU-s median (min–max) | blackbox probes/CPU-s median (min–max) | ratio ours/blackbox median (min–max) | ours probes/s | blackbox probes/s | ours CPU use | blackbox CPU use | errors ours / blackbox |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let mut ratio_at = Ratios::new();
    for (proto, by_c) in runs {
        for (c, runs) in by_c {
            let col = |f: &dyn Fn(&(EngineRun, EngineRun)) -> f64| -> Vec<f64> {
                runs.iter().map(f).collect()
            };
            let o = col(&|r| r.0.per_cpu_s());
            let b = col(&|r| r.1.per_cpu_s());
            let ratio = col(&|r| r.0.per_cpu_s() / r.1.per_cpu_s());
            let ow = col(&|r| r.0.probes / r.0.wall_s);
            let bw = col(&|r| r.1.probes / r.1.wall_s);
            let ou = col(&|r| r.0.cpu_s / r.0.wall_s);
            let bu = col(&|r| r.1.cpu_s / r.1.wall_s);
            let oe: f64 = col(&|r| r.0.errors).iter().sum();
            let be: f64 = col(&|r| r.1.errors).iter().sum();
            let (omin, omax) = minmax(&o);
            let (bmin, bmax) = minmax(&b);
            let (rmin, rmax) = minmax(&ratio);
            s.push_str(&format!(
                "| {} | {c} | {} ({}–{}) | {} ({}–{}) | **{:.1}x** ({:.1}–{:.1}) | {} | {} | {:.0}% | {:.0}% | {} / {} |\n",
                proto.label(),
                fmt_int(median(&o)),
                fmt_int(omin),
                fmt_int(omax),
                fmt_int(median(&b)),
                fmt_int(bmin),
                fmt_int(bmax),
                median(&ratio),
                rmin,
                rmax,
                fmt_int(median(&ow)),
                fmt_int(median(&bw)),
                100.0 * median(&ou),
                100.0 * median(&bu),
                oe,
                be
            ));
            ratio_at
                .entry(*proto)
                .or_default()
                .insert(*c, (median(&ratio), rmin, rmax));
        }
    }
    (s, ratio_at)
}

/// The latency each engine reported.
pub fn latency_table(runs: &Runs) -> String {
    let mut s = String::from(
        "\nLatency each engine reports for the same target (median over rounds of each round's p50 / p99; ours: `Outcome.duration`, blackbox: `probe_duration_seconds`). At C > 1 both include waiting for the one core the prober has.\n\n| protocol | C | ours p50 | blackbox p50 | ours p99 | blackbox p99 |\n|---|---:|---:|---:|---:|---:|\n",
    );
    for (proto, by_c) in runs {
        for (c, runs) in by_c {
            let f = |v: Vec<f64>| median(&v);
            s.push_str(&format!(
                "| {} | {c} | {:.3} ms | {:.3} ms | {:.3} ms | {:.3} ms |\n",
                proto.label(),
                f(runs.iter().map(|r| r.0.p50_ms).collect()),
                f(runs.iter().map(|r| r.1.p50_ms).collect()),
                f(runs.iter().map(|r| r.0.p99_ms).collect()),
                f(runs.iter().map(|r| r.1.p99_ms).collect()),
            ));
        }
    }
    s
}

/// CPU per probe in user space and in the kernel; with the user-space
/// ratios blackbox/ours of each protocol (one per concurrency).
pub fn cpu_split_table(runs: &Runs) -> (String, BTreeMap<Proto, Vec<f64>>) {
    let mut s = String::from(
        "\nCPU per probe, split into user space and kernel (median over rounds, from utime and stime):\n\n| protocol | C | ours user | ours kernel | blackbox user | blackbox kernel | user-space ratio blackbox/ours | ceiling of the ratio if our user time were zero |\n|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let mut user_ratios: BTreeMap<Proto, Vec<f64>> = BTreeMap::new();
    for (proto, by_c) in runs {
        for (c, runs) in by_c {
            let f = |v: Vec<f64>| median(&v);
            let ou = f(runs.iter().map(|r| r.0.user_us()).collect());
            let os = f(runs.iter().map(|r| r.0.sys_us()).collect());
            let bu = f(runs.iter().map(|r| r.1.user_us()).collect());
            let bs = f(runs.iter().map(|r| r.1.sys_us()).collect());
            user_ratios
                .entry(*proto)
                .or_default()
                .push(bu / ou.max(1e-9));
            s.push_str(&format!(
                "| {} | {c} | {ou:.1} µs | {os:.1} µs | {bu:.1} µs | {bs:.1} µs | {:.1}x | {:.1}x |\n",
                proto.label(),
                bu / ou.max(1e-9),
                (bu + bs) / os.max(1e-9)
            ));
        }
    }
    (s, user_ratios)
}

/// Whether the median ratio reaches `goal` at each concurrency: the
/// verdict, the lowest and the highest median ratio.
pub fn goal_verdict(by_c: &BTreeMap<usize, (f64, f64, f64)>, goal: f64) -> (String, f64, f64) {
    let worst = by_c.values().map(|x| x.0).fold(f64::INFINITY, f64::min);
    let best = by_c.values().map(|x| x.0).fold(0.0, f64::max);
    let met: Vec<String> = by_c
        .iter()
        .filter(|(_, r)| r.0 >= goal)
        .map(|(c, _)| c.to_string())
        .collect();
    let missed: Vec<String> = by_c
        .iter()
        .filter(|(_, r)| r.0 < goal)
        .map(|(c, r)| format!("C = {c} ({:.1}x)", r.0))
        .collect();
    let verdict = if worst >= goal {
        "**met** at every concurrency".to_string()
    } else if met.is_empty() {
        "**not met** at any concurrency".to_string()
    } else {
        format!(
            "**met** at C = {}, **not met** at {}",
            met.join(", "),
            missed.join(", ")
        )
    };
    (verdict, worst, best)
}

/// Samples our prober with `perf record -e cpu-clock` (a software event: it
/// works where hardware counters do not) during one run; a markdown paragraph.
pub fn perf_profile(
    w: &mut Worker,
    url: &str,
    c: usize,
    d: Duration,
    work: &Path,
) -> Option<String> {
    let perf = which(&["perf"])?;
    let data = work.join("perf-prober.data");
    let mut rec = Command::new(&perf)
        .args(["record", "-e", "cpu-clock", "-F", "1999", "-g", "-o"])
        .arg(&data)
        .arg("-p")
        .arg(w.child.id().to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    std::thread::sleep(Duration::from_millis(500));
    let done = w.ask(&format!("run {url} {c} {}", d.as_millis())).ok()?;
    signal(rec.id(), libc::SIGINT);
    let _ = rec.wait();
    let probes: f64 = done.get(1)?.parse().ok()?;
    let report = |args: &[&str]| -> String {
        Command::new(&perf)
            .arg("report")
            .arg("-i")
            .arg(&data)
            .args(args)
            .args(["--stdio"])
            .stderr(Stdio::null())
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
            .unwrap_or_default()
    };
    let dso = report(&["--no-children", "--sort", "dso", "-g", "none"]);
    let pct = |line: &str| -> Option<f64> {
        line.split_whitespace()
            .next()?
            .trim_end_matches('%')
            .parse()
            .ok()
    };
    let kernel = dso.lines().find(|l| l.contains("[kernel")).and_then(pct)?;
    let syms = report(&["--children", "--sort", "sym", "-g", "none"]);
    let child_pct = |sym: &str| -> f64 {
        syms.lines()
            .find(|l| l.trim_end().ends_with(&format!("] {sym}")))
            .and_then(pct)
            .unwrap_or(0.0)
    };
    let calls = [
        ("connect", "__x64_sys_connect"),
        ("shutdown", "__x64_sys_shutdown"),
        ("writev/write", "__x64_sys_writev"),
        ("write", "__x64_sys_write"),
        ("read/recvfrom", "__x64_sys_read"),
        ("recvfrom", "__x64_sys_recvfrom"),
        ("close", "__x64_sys_close"),
        ("socket", "__x64_sys_socket"),
        ("epoll_wait", "__x64_sys_epoll_wait"),
        ("epoll_ctl", "__x64_sys_epoll_ctl"),
        ("futex", "__x64_sys_futex"),
        ("setsockopt", "__x64_sys_setsockopt"),
        ("getsockopt", "__x64_sys_getsockopt"),
    ];
    let mut parts: Vec<(String, f64)> = calls
        .iter()
        .map(|(n, sym)| (n.to_string(), child_pct(sym)))
        .filter(|(_, p)| *p >= 0.5)
        .collect();
    parts.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap());
    let softirq = child_pct("handle_softirqs");
    let counters = Command::new(&perf)
        .args(["stat", "-e", "instructions", "true"])
        .output()
        .map(|o| {
            !String::from_utf8_lossy(&o.stderr).contains("not supported") && o.status.success()
        })
        .unwrap_or(false);
    Some(format!(
        "Profile of our prober at C = {c} (`perf record -e cpu-clock -g`, {} probes; {}; callgrind would \
         see only the user-space part): **{kernel:.0}% of its CPU time is in the kernel**, by system call (inclusive): {}. \
         {softirq:.0}% is loopback packet processing run in our context (softirq), which includes the target's side of \
         every handshake.",
        fmt_int(probes),
        if counters {
            "sampling the CPU clock"
        } else {
            "hardware counters are not available on this machine"
        },
        parts
            .iter()
            .map(|(n, p)| format!("{n} {p:.0}%"))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

fn bb_version_short() -> String {
    which(&["prometheus-blackbox-exporter", "blackbox_exporter"])
        .map(|p| version_of(&p))
        .unwrap_or_default()
}

/// `0.28.0` of a blackbox_exporter binary.
fn version_of(bin: &Path) -> String {
    let v = cmd_out(bin.to_str().unwrap_or_default(), &["--version"]);
    v.split_whitespace()
        .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .unwrap_or("")
        .to_string()
}
