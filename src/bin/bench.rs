//! `make bench`: the benchmark driver. Writes `docs/benchmarks.md` and
//! `docs/img/*.png`.
//!
//! Parts:
//! 1. probe engine efficiency: our prober against prometheus-blackbox-exporter,
//!    probes per CPU-second of the prober process, both pinned to the same core;
//! 2. ring quality by simulation (pure `webchecker::ring`);
//! 3. scale on a real control plane (hack/cluster.sh, 3 release replicas);
//! 4. failover gaps seen by a witness target (SIGKILL, SIGTERM, leader loss,
//!    rolling restart) with the default lease timings.
//!
//! The machine is shared and noisy: every figure is a ratio against a peer
//! measured in the same run, or a distribution over several rounds.
//!
//! Subcommands (internal): `bench prober-worker` (our prober in its own process,
//! driven over stdin/stdout so its CPU time can be read from /proc) and
//! `bench target-server` (the HTTP target of part 1).
//!
//! Environment: BENCH_QUICK=1 (short runs, for development), BENCH_LARGE=1
//! (adds 30,000 checkers), BENCH_PARTS=probe,ring,scale,failover (subset),
//! BENCH_OUT=dir (default docs), BENCH_ROUNDS, BENCH_FAILOVER_CHECKERS,
//! BENCH_COMMAND (the command line shown in the report).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::error::Error;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::DynamicObject;
use kube::discovery::ApiResource;
use kube::{Api, Client};
use plotters::coord::Shift;
use plotters::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use webchecker::api::{DRAIN_ANNOTATION, OWNER_LABEL, WebChecker, WebCheckerSpec};
use webchecker::probe::{AddressPolicy, Prober};
use webchecker::ring;

type Res<T> = Result<T, Box<dyn Error + Send + Sync>>;

fn err(msg: impl Into<String>) -> Box<dyn Error + Send + Sync> {
    msg.into().into()
}

// ------------------------------------------------------------------ config

struct Cfg {
    quick: bool,
    large: bool,
    parts: HashSet<String>,
    out: PathBuf,
    rounds: usize,
    failover_checkers: usize,
    command: String,
    operator: PathBuf,
    work: PathBuf,
}

impl Cfg {
    fn from_env() -> Cfg {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let quick = env("BENCH_QUICK").is_some_and(|v| v != "0");
        let large = env("BENCH_LARGE").is_some_and(|v| v != "0");
        let parts = env("BENCH_PARTS")
            .unwrap_or_else(|| "probe,ring,scale,failover".into())
            .split(',')
            .map(|s| s.trim().to_string())
            .collect();
        let repo = repo();
        Cfg {
            quick,
            large,
            parts,
            out: env("BENCH_OUT")
                .map(PathBuf::from)
                .unwrap_or_else(|| repo.join("docs")),
            rounds: env("BENCH_ROUNDS")
                .and_then(|v| v.parse().ok())
                .unwrap_or(if quick { 2 } else { 5 }),
            failover_checkers: env("BENCH_FAILOVER_CHECKERS")
                .and_then(|v| v.parse().ok())
                .unwrap_or(1000),
            command: env("BENCH_COMMAND")
                .unwrap_or_else(|| std::env::args().collect::<Vec<_>>().join(" ")),
            operator: env("BENCH_OPERATOR")
                .map(PathBuf::from)
                .unwrap_or_else(|| repo.join("target/release/webchecker-operator")),
            work: repo
                .join("target")
                .join("bench")
                .join(format!("run-{}", std::process::id())),
        }
    }

    fn part(&self, p: &str) -> bool {
        self.parts.contains(p)
    }
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

// ------------------------------------------------------------------ helpers

fn now_s(t0: Instant) -> f64 {
    t0.elapsed().as_secs_f64()
}

fn median(v: &[f64]) -> f64 {
    quantile(v, 0.5)
}

/// Quantile by linear interpolation between order statistics.
fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let pos = q * (s.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    s[lo] + (s[hi] - s[lo]) * (pos - lo as f64)
}

fn minmax(v: &[f64]) -> (f64, f64) {
    v.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
            (a.min(x), b.max(x))
        })
}

fn fmt_int(x: f64) -> String {
    let n = x.round() as i64;
    let s = n.abs().to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}

fn yes(b: bool) -> &'static str {
    if b { "**met**" } else { "**not met**" }
}

fn cmd_out(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .map(|o| {
            let mut s = String::from_utf8_lossy(&o.stdout).to_string();
            if s.trim().is_empty() {
                s = String::from_utf8_lossy(&o.stderr).to_string();
            }
            s.lines().next().unwrap_or("").trim().to_string()
        })
        .unwrap_or_default()
}

fn which(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    for n in names {
        for dir in path.split(':') {
            let p = Path::new(dir).join(n);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}

/// (utime, stime) of a process, in clock ticks.
fn cpu_ticks(pid: u32) -> Option<(u64, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some((
        f.get(11)?.parse::<u64>().ok()?,
        f.get(12)?.parse::<u64>().ok()?,
    ))
}

fn clk_tck() -> f64 {
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }) as f64
}

/// A field of /proc/PID/status in KiB (VmRSS, VmHWM).
fn proc_status_kib(pid: u32, key: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

fn ncpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

fn cpu_set(cpu: usize) -> libc::cpu_set_t {
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    unsafe { libc::CPU_SET(cpu, &mut set) };
    set
}

fn pin_current_thread(cpu: usize) {
    let set = cpu_set(cpu);
    unsafe {
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// The child process starts pinned to `cpu` (all its threads inherit it).
fn pin_command(cmd: &mut Command, cpu: usize) {
    let set = cpu_set(cpu);
    unsafe {
        cmd.pre_exec(move || {
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
            Ok(())
        });
    }
}

fn signal(pid: u32, sig: i32) {
    unsafe {
        libc::kill(pid as i32, sig);
    }
}

/// A TCP port below the ephemeral range, free now: outgoing probe connections
/// (which take ephemeral ports) cannot grab it before the listener binds.
fn free_port() -> u16 {
    let eph_lo: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(32768);
    let hi = eph_lo.saturating_sub(1).max(20001);
    loop {
        let p = 20000 + (rand::random::<u16>() % (hi - 20000));
        if std::net::TcpListener::bind(("127.0.0.1", p)).is_ok() {
            return p;
        }
    }
}

const OK_RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n";

/// Reads a request head (up to the blank line); false if the peer went away.
async fn read_head(s: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; 2048];
    loop {
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
        if buf.windows(4).any(|w| w == b"\r\n\r\n") {
            return true;
        }
        if buf.len() > 16 * 1024 {
            return false;
        }
    }
}

/// Minimal HTTP/1.0 GET; (status, body).
async fn http_get(addr: &str, path: &str, timeout: Duration) -> Option<(u16, String)> {
    let fut = async {
        let mut s = TcpStream::connect(addr).await.ok()?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        let text = String::from_utf8_lossy(&buf).to_string();
        let code: u16 = text.split_whitespace().nth(1)?.parse().ok()?;
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        Some((code, body))
    };
    tokio::time::timeout(timeout, fut).await.ok().flatten()
}

/// Sum of the samples of `name` whose labels include `labels`.
fn metric_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    let mut total = 0.0;
    for line in text.lines() {
        if line.starts_with('#') || !line.starts_with(name) {
            continue;
        }
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let (n, l) = match series.split_once('{') {
            Some((n, l)) => (n, l.trim_end_matches('}')),
            None => (series, ""),
        };
        if n != name {
            continue;
        }
        if labels
            .iter()
            .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        {
            total += value.parse::<f64>().unwrap_or(0.0);
        }
    }
    total
}

/// Cumulative buckets (le, count) of an unlabelled histogram.
fn buckets(text: &str, name: &str) -> Vec<(f64, f64)> {
    let prefix = format!("{name}_bucket{{");
    let mut out = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix(&prefix) {
            let Some(le) = rest.split("le=\"").nth(1).and_then(|s| s.split('"').next()) else {
                continue;
            };
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap_or(f64::NAN)
            };
            let v: f64 = line
                .rsplit_once(' ')
                .and_then(|(_, v)| v.parse().ok())
                .unwrap_or(0.0);
            out.push((le, v));
        }
    }
    out.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
    out
}

/// Prometheus-style histogram_quantile over cumulative buckets.
fn bucket_quantile(b: &[(f64, f64)], q: f64) -> f64 {
    let Some(total) = b.last().map(|x| x.1) else {
        return f64::NAN;
    };
    if total <= 0.0 {
        return f64::NAN;
    }
    let rank = q * total;
    let mut prev = (0.0, 0.0);
    for &(le, c) in b {
        if c >= rank {
            if le.is_infinite() {
                return prev.0;
            }
            let span = c - prev.1;
            let frac = if span > 0.0 {
                (rank - prev.1) / span
            } else {
                1.0
            };
            return prev.0 + (le - prev.0) * frac;
        }
        prev = (le, c);
    }
    prev.0
}

/// Share of observations at or below `x` (x must be a bucket bound).
fn bucket_share_le(b: &[(f64, f64)], x: f64) -> f64 {
    let total = b.last().map(|x| x.1).unwrap_or(0.0);
    if total <= 0.0 {
        return f64::NAN;
    }
    b.iter()
        .find(|(le, _)| (*le - x).abs() < 1e-9)
        .map(|(_, c)| c / total)
        .unwrap_or(f64::NAN)
}

fn sub_buckets(a: &[(f64, f64)], b: &[(f64, f64)]) -> Vec<(f64, f64)> {
    b.iter()
        .map(|&(le, c)| {
            let before = a
                .iter()
                .find(|(l, _)| *l == le || (l.is_infinite() && le.is_infinite()))
                .map(|x| x.1)
                .unwrap_or(0.0);
            (le, c - before)
        })
        .collect()
}

fn add_buckets(acc: &mut Vec<(f64, f64)>, b: &[(f64, f64)]) {
    if acc.is_empty() {
        *acc = b.to_vec();
        return;
    }
    for (i, &(_, c)) in b.iter().enumerate() {
        if let Some(x) = acc.get_mut(i) {
            x.1 += c;
        }
    }
}

// ------------------------------------------------------------------ report

#[derive(Default)]
struct Section {
    body: String,
    summary: Vec<String>,
}

struct Machine {
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

fn machine() -> Machine {
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
    let dir = repo();
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

// ------------------------------------------------------------------ plots

fn register_font() -> bool {
    let mut candidates: Vec<PathBuf> = std::env::var("BENCH_FONT")
        .ok()
        .map(PathBuf::from)
        .into_iter()
        .collect();
    for p in [
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/TTF/DejaVuSans.ttf",
        "/usr/share/fonts/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
        "/usr/share/fonts/liberation/LiberationSans-Regular.ttf",
        "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
    ] {
        candidates.push(PathBuf::from(p));
    }
    for p in candidates {
        if let Ok(bytes) = std::fs::read(&p) {
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                return true;
            }
        }
    }
    false
}

type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

fn save_png(
    path: &Path,
    (w, h): (u32, u32),
    draw: impl FnOnce(&Area<'_>) -> Result<(), Box<dyn Error>>,
) -> Res<()> {
    let mut buf = vec![0u8; (w * h * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
        draw(&root).map_err(|e| err(e.to_string()))?;
        root.present().map_err(|e| err(e.to_string()))?;
    }
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    let file = std::fs::File::create(path)?;
    let mut enc = png::Encoder::new(std::io::BufWriter::new(file), w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut wr = enc.write_header()?;
    wr.write_image_data(&buf)?;
    Ok(())
}

// ================================================================== part 1

/// `bench target-server`: answers every request 200 "ok\n" and closes.
fn target_main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        println!("{}", l.local_addr().unwrap().port());
        std::io::stdout().flush().unwrap();
        // Exit when the driver closes our stdin (or dies).
        std::thread::spawn(|| {
            let mut b = String::new();
            let _ = std::io::stdin().read_line(&mut b);
            std::process::exit(0);
        });
        loop {
            match l.accept().await {
                Ok((mut s, _)) => {
                    tokio::spawn(async move {
                        let mut buf = Vec::with_capacity(1024);
                        if read_head(&mut s, &mut buf).await {
                            let _ = s.write_all(OK_RESPONSE).await;
                            let _ = s.shutdown().await;
                        }
                    });
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
    });
}

/// `bench prober-worker`: our prober in a process of its own. Protocol on
/// stdin/stdout: `run URL C MILLIS` -> `done PROBES ERRORS`; `report` ->
/// `lat P50_US P99_US` of the last run; EOF ends.
fn worker_main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    // The bench's targets listen on loopback.
    let policy = AddressPolicy::with_loopback();
    let prober = Arc::new(Prober::new(Some("bench-prober"), policy, 65536));
    let mut last: Vec<u32> = Vec::new();
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.first().copied() {
            Some("run") => {
                let url = f[1].to_string();
                let c: usize = f[2].parse().unwrap();
                let d = Duration::from_millis(f[3].parse().unwrap());
                let spec: WebCheckerSpec = serde_json::from_value(serde_json::json!({
                    "host": url, "path": "/", "intervalSeconds": 10, "timeoutSeconds": 5
                }))
                .unwrap();
                let plan = Arc::new(
                    webchecker::probe::plan(&spec, &|_| Err("no secrets".into())).unwrap(),
                );
                let (lat, errors) = rt.block_on(async {
                    let deadline = Instant::now() + d;
                    let mut tasks = Vec::new();
                    for _ in 0..c {
                        let prober = prober.clone();
                        let plan = plan.clone();
                        tasks.push(tokio::spawn(async move {
                            let mut lat = Vec::with_capacity(1 << 14);
                            let mut errors = 0u64;
                            while Instant::now() < deadline {
                                let o = prober
                                    .probe(&plan, "bench", &|| true)
                                    .await
                                    .expect("an open gate always gives an outcome");
                                if o.success() {
                                    lat.push(o.duration.as_micros() as u32);
                                } else {
                                    errors += 1;
                                }
                            }
                            (lat, errors)
                        }));
                    }
                    let mut all = Vec::new();
                    let mut errors = 0;
                    for t in tasks {
                        let (l, e) = t.await.unwrap();
                        all.extend(l);
                        errors += e;
                    }
                    (all, errors)
                });
                writeln!(out, "done {} {}", lat.len() as u64 + errors, errors).unwrap();
                out.flush().unwrap();
                last = lat;
            }
            Some("report") => {
                last.sort_unstable();
                let q = |q: f64| {
                    if last.is_empty() {
                        0
                    } else {
                        last[((last.len() - 1) as f64 * q).round() as usize]
                    }
                };
                writeln!(out, "lat {} {}", q(0.5), q(0.99)).unwrap();
                out.flush().unwrap();
            }
            _ => break,
        }
    }
}

struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Worker {
    fn spawn(cpu: Option<usize>) -> Res<Worker> {
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.arg("prober-worker")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        if let Some(c) = cpu {
            pin_command(&mut cmd, c);
        }
        let mut child = cmd.spawn()?;
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Ok(Worker {
            child,
            stdin,
            stdout,
        })
    }

    fn ask(&mut self, line: &str) -> Res<Vec<String>> {
        writeln!(self.stdin, "{line}")?;
        self.stdin.flush()?;
        let mut answer = String::new();
        self.stdout.read_line(&mut answer)?;
        if answer.is_empty() {
            return Err(err("prober worker exited"));
        }
        Ok(answer.split_whitespace().map(String::from).collect())
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct EngineRun {
    probes: f64,
    errors: f64,
    cpu_s: f64,
    user_s: f64,
    wall_s: f64,
    p50_ms: f64,
    p99_ms: f64,
}

impl EngineRun {
    fn per_cpu_s(&self) -> f64 {
        self.probes / self.cpu_s.max(1e-9)
    }

    fn user_us(&self) -> f64 {
        1e6 * self.user_s / self.probes.max(1.0)
    }

    fn sys_us(&self) -> f64 {
        1e6 * (self.cpu_s - self.user_s) / self.probes.max(1.0)
    }
}

fn run_ours(w: &mut Worker, url: &str, c: usize, warm: Duration, d: Duration) -> Res<EngineRun> {
    let pid = w.child.id();
    w.ask(&format!("run {url} {c} {}", warm.as_millis()))?;
    w.ask("report")?;
    let t = Instant::now();
    let c0 = cpu_ticks(pid).ok_or_else(|| err("no /proc stat"))?;
    let done = w.ask(&format!("run {url} {c} {}", d.as_millis()))?;
    let c1 = cpu_ticks(pid).ok_or_else(|| err("no /proc stat"))?;
    let wall = t.elapsed().as_secs_f64();
    let lat = w.ask("report")?;
    Ok(EngineRun {
        probes: done[1].parse()?,
        errors: done[2].parse()?,
        cpu_s: ((c1.0 + c1.1) - (c0.0 + c0.1)) as f64 / clk_tck(),
        user_s: (c1.0 - c0.0) as f64 / clk_tck(),
        wall_s: wall,
        p50_ms: lat[1].parse::<f64>()? / 1000.0,
        p99_ms: lat[2].parse::<f64>()? / 1000.0,
    })
}

/// Drives blackbox_exporter's /probe at concurrency `c` over keep-alive
/// connections, from a thread of its own (pinned to `cpu`).
fn blackbox_load(
    port: u16,
    target: &str,
    c: usize,
    d: Duration,
    cpu: Option<usize>,
) -> Res<(u64, u64, Vec<f64>)> {
    let path = format!(
        "/probe?module=http_2xx&target={}",
        target
            .replace('%', "%25")
            .replace(':', "%3A")
            .replace('/', "%2F")
    );
    let handle = std::thread::spawn(move || -> Result<(u64, u64, Vec<f64>), String> {
        if let Some(cpu) = cpu {
            pin_current_thread(cpu);
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        rt.block_on(async move {
            let deadline = Instant::now() + d;
            let mut tasks = Vec::new();
            for _ in 0..c {
                let path = path.clone();
                tasks.push(tokio::spawn(async move {
                    let mut durations = Vec::new();
                    let mut probes = 0u64;
                    let mut errors = 0u64;
                    'conn: while Instant::now() < deadline {
                        let Ok(stream) = TcpStream::connect(("127.0.0.1", port)).await else {
                            errors += 1;
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            continue;
                        };
                        let _ = stream.set_nodelay(true);
                        let Ok((mut sender, conn)) =
                            hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(TokioIo::new(
                                stream,
                            ))
                            .await
                        else {
                            errors += 1;
                            continue;
                        };
                        tokio::spawn(conn);
                        while Instant::now() < deadline {
                            if sender.ready().await.is_err() {
                                continue 'conn;
                            }
                            let req = http::Request::get(path.as_str())
                                .header(http::header::HOST, format!("127.0.0.1:{port}"))
                                .body(Empty::<Bytes>::new())
                                .unwrap();
                            let Ok(resp) = sender.send_request(req).await else {
                                errors += 1;
                                continue 'conn;
                            };
                            let Ok(body) = resp.into_body().collect().await else {
                                errors += 1;
                                continue 'conn;
                            };
                            let body = body.to_bytes();
                            let text = String::from_utf8_lossy(&body);
                            let mut ok = false;
                            let mut dur = None;
                            for l in text.lines() {
                                if let Some(v) = l.strip_prefix("probe_success ") {
                                    ok = v.trim() == "1";
                                } else if let Some(v) = l.strip_prefix("probe_duration_seconds ") {
                                    dur = v.trim().parse::<f64>().ok();
                                }
                            }
                            probes += 1;
                            match (ok, dur) {
                                (true, Some(d)) => durations.push(d * 1000.0),
                                _ => errors += 1,
                            }
                        }
                    }
                    (probes, errors, durations)
                }));
            }
            let mut all = Vec::new();
            let (mut p, mut e) = (0, 0);
            for t in tasks {
                let (pp, ee, dd) = t.await.map_err(|e| e.to_string())?;
                p += pp;
                e += ee;
                all.extend(dd);
            }
            Ok((p, e, all))
        })
    });
    handle
        .join()
        .map_err(|_| err("blackbox client panicked"))?
        .map_err(err)
}

fn run_blackbox(
    pid: u32,
    port: u16,
    target: &str,
    c: usize,
    warm: Duration,
    d: Duration,
    cpu: Option<usize>,
) -> Res<EngineRun> {
    blackbox_load(port, target, c, warm, cpu)?;
    let t = Instant::now();
    let c0 = cpu_ticks(pid).ok_or_else(|| err("no /proc stat"))?;
    let (probes, errors, durs) = blackbox_load(port, target, c, d, cpu)?;
    let c1 = cpu_ticks(pid).ok_or_else(|| err("no /proc stat"))?;
    Ok(EngineRun {
        probes: probes as f64,
        errors: errors as f64,
        cpu_s: ((c1.0 + c1.1) - (c0.0 + c0.1)) as f64 / clk_tck(),
        user_s: (c1.0 - c0.0) as f64 / clk_tck(),
        wall_s: t.elapsed().as_secs_f64(),
        p50_ms: quantile(&durs, 0.5),
        p99_ms: quantile(&durs, 0.99),
    })
}

fn wait_http(port: u16, path: &str, timeout: Duration) -> bool {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Some((200, _)) = rt.block_on(http_get(
            &format!("127.0.0.1:{port}"),
            path,
            Duration::from_secs(2),
        )) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

struct ProbeResults {
    /// (concurrency, round) -> (ours, blackbox)
    runs: BTreeMap<usize, Vec<(EngineRun, EngineRun)>>,
}

fn part_probe(cfg: &Cfg, img: &Path) -> Res<Section> {
    let Some(bb_bin) = which(&["prometheus-blackbox-exporter", "blackbox_exporter"]) else {
        return Ok(Section {
            body: "Skipped: prometheus-blackbox-exporter is not installed (`hack/install-deps.sh` installs it).\n".into(),
            summary: vec!["probe engine: skipped (no blackbox_exporter)".into()],
        });
    };
    let pinned = ncpus() >= 2;
    let (target_cpu, prober_cpu) = if pinned {
        (Some(0), Some(1))
    } else {
        (None, None)
    };
    std::fs::create_dir_all(&cfg.work)?;

    // The target: its own process, on the other core.
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.arg("target-server")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    if let Some(c) = target_cpu {
        pin_command(&mut cmd, c);
    }
    let mut target = KillOnDrop(cmd.spawn()?);
    let mut line = String::new();
    BufReader::new(target.0.stdout.take().unwrap()).read_line(&mut line)?;
    let target_port: u16 = line.trim().parse()?;
    let target_url = format!("http://127.0.0.1:{target_port}");

    // blackbox_exporter, pinned to the prober core.
    let bb_port = free_port();
    let bb_cfg = cfg.work.join("blackbox.yml");
    std::fs::write(
        &bb_cfg,
        "modules:\n  http_2xx:\n    prober: http\n    timeout: 5s\n    http:\n      preferred_ip_protocol: ip4\n      ip_protocol_fallback: false\n",
    )?;
    let mut cmd = Command::new(&bb_bin);
    cmd.arg(format!("--config.file={}", bb_cfg.display()))
        .arg(format!("--web.listen-address=127.0.0.1:{bb_port}"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(cfg.work.join("blackbox.log"))?);
    if let Some(c) = prober_cpu {
        pin_command(&mut cmd, c);
    }
    let bb = KillOnDrop(cmd.spawn()?);
    if !wait_http(bb_port, "/-/healthy", Duration::from_secs(20)) {
        return Err(err("blackbox_exporter did not come up"));
    }
    let bb_pid = bb.0.id();
    let mut worker = Worker::spawn(prober_cpu)?;

    let concurrencies: &[usize] = &[1, 16, 128];
    let (warm, d) = if cfg.quick {
        (Duration::from_millis(300), Duration::from_millis(1500))
    } else {
        (Duration::from_millis(500), Duration::from_secs(3))
    };
    let mut res = ProbeResults {
        runs: BTreeMap::new(),
    };
    for &c in concurrencies {
        for round in 0..cfg.rounds {
            // Alternate the order, so slow drifts of the machine hit both alike.
            let (ours, theirs) = if round % 2 == 0 {
                let o = run_ours(&mut worker, &target_url, c, warm, d)?;
                let b = run_blackbox(bb_pid, bb_port, &target_url, c, warm, d, target_cpu)?;
                (o, b)
            } else {
                let b = run_blackbox(bb_pid, bb_port, &target_url, c, warm, d, target_cpu)?;
                let o = run_ours(&mut worker, &target_url, c, warm, d)?;
                (o, b)
            };
            eprintln!(
                "bench: probe C={c} round {round}: ours {:.0}/cpu-s ({:.0} probes, {:.2} cpu-s, {} errors), blackbox {:.0}/cpu-s ({:.0} probes, {:.2} cpu-s, {} errors), ratio {:.2}",
                ours.per_cpu_s(),
                ours.probes,
                ours.cpu_s,
                ours.errors,
                theirs.per_cpu_s(),
                theirs.probes,
                theirs.cpu_s,
                theirs.errors,
                ours.per_cpu_s() / theirs.per_cpu_s()
            );
            res.runs.entry(c).or_default().push((ours, theirs));
        }
    }
    // Where our prober's CPU goes, at the concurrency with the lowest ratio.
    let worst_c = res
        .runs
        .iter()
        .map(|(c, runs)| {
            let r: Vec<f64> = runs
                .iter()
                .map(|r| r.0.per_cpu_s() / r.1.per_cpu_s())
                .collect();
            (*c, median(&r))
        })
        .min_by(|a, b| a.1.partial_cmp(&b.1).unwrap())
        .map(|x| x.0)
        .unwrap_or(1);
    let profile = perf_profile(&mut worker, &target_url, worst_c, d, &cfg.work);
    drop(worker);
    drop(bb);
    drop(target);

    // Report.
    let mut s = String::new();
    let mut summary = Vec::new();
    s.push_str(&format!(
        "Target: a minimal HTTP server (own process{}) answering `200 ok` and closing. \
         Ours: `webchecker::probe::Prober` driven by `plan()` from a spec, in a child process \
         (`bench prober-worker`, tokio multi-thread runtime), a fresh connection per probe, phase timings on. \
         Blackbox: `{}` with an `http` module (`preferred_ip_protocol: ip4`), `/probe` called over \
         keep-alive connections by the bench's own client{}. Both probers are pinned to the same core{}; \
         CPU is utime+stime of the prober process from `/proc/PID/stat` over the measured run only \
         (warm-up excluded). {} rounds of {:.1} s per engine and concurrency, alternating which engine goes first.\n\n",
        if pinned { ", pinned to core 0" } else { "" },
        bb_bin.display(),
        if pinned { " (on core 0)" } else { "" },
        if pinned { " (core 1)" } else { " (not pinned: fewer than 2 cores)" },
        cfg.rounds,
        d.as_secs_f64()
    ));
    s.push_str("| C | ours probes/CPU-s median (min–max) | blackbox probes/CPU-s median (min–max) | ratio ours/blackbox median (min–max) | ours probes/s | blackbox probes/s | ours CPU use | blackbox CPU use | errors ours / blackbox |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    let mut ratio_at = BTreeMap::new();
    for (c, runs) in &res.runs {
        let o: Vec<f64> = runs.iter().map(|r| r.0.per_cpu_s()).collect();
        let b: Vec<f64> = runs.iter().map(|r| r.1.per_cpu_s()).collect();
        let ratio: Vec<f64> = runs
            .iter()
            .map(|r| r.0.per_cpu_s() / r.1.per_cpu_s())
            .collect();
        let ow: Vec<f64> = runs.iter().map(|r| r.0.probes / r.0.wall_s).collect();
        let bw: Vec<f64> = runs.iter().map(|r| r.1.probes / r.1.wall_s).collect();
        let ou: Vec<f64> = runs.iter().map(|r| r.0.cpu_s / r.0.wall_s).collect();
        let bu: Vec<f64> = runs.iter().map(|r| r.1.cpu_s / r.1.wall_s).collect();
        let oe: f64 = runs.iter().map(|r| r.0.errors).sum();
        let be: f64 = runs.iter().map(|r| r.1.errors).sum();
        let (omin, omax) = minmax(&o);
        let (bmin, bmax) = minmax(&b);
        let (rmin, rmax) = minmax(&ratio);
        s.push_str(&format!(
            "| {c} | {} ({}–{}) | {} ({}–{}) | **{:.1}x** ({:.1}–{:.1}) | {} | {} | {:.0}% | {:.0}% | {} / {} |\n",
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
        ratio_at.insert(*c, (median(&ratio), rmin, rmax));
    }
    s.push_str("\nLatency each engine reports for the same target (median over rounds of each round's p50 / p99; ours: `Outcome.duration`, blackbox: `probe_duration_seconds`). At C > 1 both include waiting for the one core the prober has.\n\n| C | ours p50 | blackbox p50 | ours p99 | blackbox p99 |\n|---:|---:|---:|---:|---:|\n");
    for (c, runs) in &res.runs {
        let f = |v: Vec<f64>| median(&v);
        s.push_str(&format!(
            "| {c} | {:.3} ms | {:.3} ms | {:.3} ms | {:.3} ms |\n",
            f(runs.iter().map(|r| r.0.p50_ms).collect()),
            f(runs.iter().map(|r| r.1.p50_ms).collect()),
            f(runs.iter().map(|r| r.0.p99_ms).collect()),
            f(runs.iter().map(|r| r.1.p99_ms).collect()),
        ));
    }
    s.push_str("\nCPU per probe, split into user space and kernel (median over rounds, from utime and stime):\n\n| C | ours user | ours kernel | blackbox user | blackbox kernel | user-space ratio blackbox/ours | ceiling of the ratio if our user time were zero |\n|---:|---:|---:|---:|---:|---:|---:|\n");
    let mut user_ratios = Vec::new();
    for (c, runs) in &res.runs {
        let f = |v: Vec<f64>| median(&v);
        let ou = f(runs.iter().map(|r| r.0.user_us()).collect());
        let os = f(runs.iter().map(|r| r.0.sys_us()).collect());
        let bu = f(runs.iter().map(|r| r.1.user_us()).collect());
        let bs = f(runs.iter().map(|r| r.1.sys_us()).collect());
        user_ratios.push(bu / ou.max(1e-9));
        s.push_str(&format!(
            "| {c} | {ou:.1} µs | {os:.1} µs | {bu:.1} µs | {bs:.1} µs | {:.1}x | {:.1}x |\n",
            bu / ou.max(1e-9),
            (bu + bs) / os.max(1e-9)
        ));
    }
    let user_ratio = minmax(&user_ratios);
    if let Some(p) = &profile {
        s.push_str(&format!("\n{p}\n"));
    }
    let worst = ratio_at.values().map(|x| x.0).fold(f64::INFINITY, f64::min);
    let best = ratio_at.values().map(|x| x.0).fold(0.0, f64::max);
    let goal = worst >= 6.0;
    let met: Vec<String> = ratio_at
        .iter()
        .filter(|(_, r)| r.0 >= 6.0)
        .map(|(c, _)| c.to_string())
        .collect();
    let missed: Vec<String> = ratio_at
        .iter()
        .filter(|(_, r)| r.0 < 6.0)
        .map(|(c, r)| format!("C = {c} ({:.1}x)", r.0))
        .collect();
    let verdict = if goal {
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
    s.push_str(&format!(
        "\nGoal: ours/blackbox probes per CPU-second >= 6x: {verdict} (median ratios {:.1}x to {:.1}x).\n",
        worst, best
    ));
    summary.push(format!(
        "Probe engine: **{:.1}x–{:.1}x** the probes per CPU-second of blackbox_exporter {} (median of {} rounds at \
         C = {}; goal >= 6x: {verdict}). Our user-space CPU per probe is {:.0}x–{:.0}x smaller; the rest is the \
         kernel's work for a fresh TCP connection per probe, which both pay.",
        worst,
        best,
        bb_version_short(),
        cfg.rounds,
        res.runs.keys().map(|c| c.to_string()).collect::<Vec<_>>().join(", "),
        user_ratio.0,
        user_ratio.1,
    ));

    // Plot: probes per CPU-second, per round, both engines.
    let png = img.join("probe-efficiency.png");
    let plotted = save_png(&png, (900, 420), |root| {
        let max = res
            .runs
            .values()
            .flatten()
            .map(|r| r.0.per_cpu_s().max(r.1.per_cpu_s()))
            .fold(0.0, f64::max)
            * 1.15;
        let n = res.runs.len();
        let mut chart = ChartBuilder::on(root)
            .caption(
                "Probes per CPU-second of the prober process (each dot: one round)",
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0f64..max)?;
        let labels: Vec<usize> = res.runs.keys().copied().collect();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n)
            .x_label_formatter(&|x| {
                let i = x.round() as i64;
                if (x - i as f64).abs() < 0.01 && i >= 0 && (i as usize) < labels.len() {
                    format!("C = {}", labels[i as usize])
                } else {
                    String::new()
                }
            })
            .y_desc("probes / CPU-s")
            .y_label_formatter(&|y| fmt_int(*y))
            .draw()?;
        let blue = RGBColor(31, 119, 180);
        let orange = RGBColor(255, 127, 14);
        let pts = |ours: bool| -> Vec<(f64, f64)> {
            res.runs
                .values()
                .enumerate()
                .flat_map(|(i, runs)| {
                    runs.iter().enumerate().map(move |(k, r)| {
                        let (off, v) = if ours {
                            (-0.15, r.0.per_cpu_s())
                        } else {
                            (0.15, r.1.per_cpu_s())
                        };
                        (i as f64 + off + 0.02 * k as f64, v)
                    })
                })
                .collect()
        };
        chart
            .draw_series(
                pts(true)
                    .into_iter()
                    .map(|p| Circle::new(p, 4, blue.filled())),
            )?
            .label("webchecker prober")
            .legend(move |(x, y)| Circle::new((x + 5, y), 4, blue.filled()));
        chart
            .draw_series(
                pts(false)
                    .into_iter()
                    .map(|p| Circle::new(p, 4, orange.filled())),
            )?
            .label("blackbox_exporter")
            .legend(move |(x, y)| Circle::new((x + 5, y), 4, orange.filled()));
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .border_style(BLACK)
            .background_style(WHITE.mix(0.9))
            .draw()?;
        Ok(())
    });
    if plotted.is_ok() {
        s.push_str("\n![probes per CPU-second](img/probe-efficiency.png)\n");
    }
    Ok(Section { body: s, summary })
}

/// Samples our prober with `perf record -e cpu-clock` (a software event: it
/// works where hardware counters do not) during one run; a markdown paragraph.
fn perf_profile(w: &mut Worker, url: &str, c: usize, d: Duration, work: &Path) -> Option<String> {
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
         every handshake. What bounds the ratio is this per-connection kernel work, which both probers pay in full \
         (a fresh TCP connection per probe, as a monitoring probe must): blackbox_exporter spends most of its time in \
         user space, we spend most of ours in the kernel.",
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
    let v = which(&["prometheus-blackbox-exporter", "blackbox_exporter"])
        .map(|p| cmd_out(p.to_str().unwrap(), &["--version"]))
        .unwrap_or_default();
    v.split_whitespace()
        .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .unwrap_or("")
        .to_string()
}

// ================================================================== part 2

struct RingRow {
    n: usize,
    bounded_max: Vec<f64>,
    plain_max: Vec<f64>,
    bounded_moved: Vec<f64>,
    plain_moved: Vec<f64>,
}

fn ring_members(salt: u64, count: usize) -> Vec<String> {
    // Like Deployment pod names: a ReplicaSet hash and a random suffix.
    const ALPHA: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..count)
        .map(|i| {
            let mut h = ring::mix64((salt << 32) ^ (i as u64 + 1));
            let mut suffix = String::new();
            for _ in 0..5 {
                suffix.push(ALPHA[(h % ALPHA.len() as u64) as usize] as char);
                h /= ALPHA.len() as u64;
            }
            format!("webchecker-operator-7d9f8c6b5-{suffix}")
        })
        .collect()
}

/// One step N -> N+1: (N, largest/mean bounded, largest/mean plain, moved bounded, moved plain).
type RingStep = (usize, f64, f64, f64, f64);

fn ring_sim(m: usize, salt: u64, n_max: usize) -> Vec<RingStep> {
    let members = ring_members(salt, n_max + 1);
    let keys: Vec<String> = (0..m)
        .map(|i| format!("team-{}-{salt}/checker-{i}", i % 13))
        .collect();
    let mut placements: Vec<ring::Placement> = keys
        .iter()
        .map(|k| ring::Placement {
            key: k.clone(),
            holder: None,
        })
        .collect();
    let index: HashMap<String, usize> = keys
        .iter()
        .cloned()
        .enumerate()
        .map(|(i, k)| (k, i))
        .collect();
    let apply = |placements: &mut Vec<ring::Placement>, moves: &[ring::Move]| {
        for mv in moves {
            let (key, to) = match mv {
                ring::Move::Assign { key, to } | ring::Move::Drain { key, to, .. } => (key, to),
            };
            placements[index[key]].holder = Some(to.clone());
        }
    };
    let moves = ring::plan(&members[..2], &placements);
    apply(&mut placements, &moves);
    let prefs = |n: usize| -> Vec<usize> {
        keys.iter()
            .map(|k| {
                let p = ring::preferred(&members[..n], k).unwrap();
                members.iter().position(|m| m == p).unwrap()
            })
            .collect()
    };
    let mut plain_now = prefs(2);
    let mut rows = Vec::new();
    for n in 2..=n_max {
        let mean = m as f64 / n as f64;
        let mut load: HashMap<&str, usize> = HashMap::new();
        for p in &placements {
            *load.entry(p.holder.as_deref().unwrap()).or_default() += 1;
        }
        let bounded_max = *load.values().max().unwrap() as f64 / mean;
        let mut plain_load = vec![0usize; n];
        for &i in &plain_now {
            plain_load[i] += 1;
        }
        let plain_max = *plain_load.iter().max().unwrap() as f64 / mean;
        let moves = ring::plan(&members[..n + 1], &placements);
        let bounded_moved = moves.len() as f64 / m as f64;
        apply(&mut placements, &moves);
        let plain_next = prefs(n + 1);
        let plain_moved = plain_now
            .iter()
            .zip(&plain_next)
            .filter(|(a, b)| a != b)
            .count() as f64
            / m as f64;
        plain_now = plain_next;
        rows.push((n, bounded_max, plain_max, bounded_moved, plain_moved));
    }
    rows
}

fn part_ring(cfg: &Cfg, img: &Path) -> Res<Section> {
    let n_max = 50;
    let salts: u64 = if cfg.quick { 2 } else { 5 };
    let mut results: BTreeMap<usize, Vec<RingRow>> = BTreeMap::new();
    let t = Instant::now();
    for m in [10_000usize, 1_000] {
        let per_salt: Vec<Vec<RingStep>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..salts)
                .map(|salt| s.spawn(move || ring_sim(m, salt + 1, n_max)))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let rows = (0..per_salt[0].len())
            .map(|i| RingRow {
                n: per_salt[0][i].0,
                bounded_max: per_salt.iter().map(|r| r[i].1).collect(),
                plain_max: per_salt.iter().map(|r| r[i].2).collect(),
                bounded_moved: per_salt.iter().map(|r| r[i].3).collect(),
                plain_moved: per_salt.iter().map(|r| r[i].4).collect(),
            })
            .collect();
        results.insert(m, rows);
    }
    eprintln!(
        "bench: ring simulation took {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let mut s = String::new();
    s.push_str(&format!(
        "Pure simulation of `webchecker::ring::plan` (rendezvous hashing with bounded loads: every member holds \
         floor(M/N) or ceil(M/N); sticky owners) against plain rendezvous hashing (`webchecker::ring::preferred`, \
         no bound). Replicas are added one at a time, N -> N+1 for N = 2..{n_max}, each step starting from the \
         assignment the previous steps settled to (a chain, so drift between loads would show); drains complete \
         at once. \
         Member names look like Deployment pods, keys like `team-3/checker-17`; {salts} different name sets (salts) \
         per M, the table shows the median over salts and, for the largest shard, the worst salt. \
         *moved* is the fraction of checkers that change owner going N -> N+1; the least any scheme can move is \
         1/(N+1).\n\n"
    ));
    let show = [2usize, 3, 4, 5, 7, 10, 15, 20, 25, 30, 40, 50];
    for (m, rows) in results.iter().rev() {
        s.push_str(&format!("**M = {}**\n\n| N | largest/mean bounded (worst) | largest/mean plain (worst) | moved bounded | moved plain | ideal 1/(N+1) |\n|---:|---:|---:|---:|---:|---:|\n", fmt_int(*m as f64)));
        for r in rows.iter().filter(|r| show.contains(&r.n)) {
            s.push_str(&format!(
                "| {} | {:.3} ({:.3}) | {:.3} ({:.3}) | {:.4} | {:.4} | {:.4} |\n",
                r.n,
                median(&r.bounded_max),
                minmax(&r.bounded_max).1,
                median(&r.plain_max),
                minmax(&r.plain_max).1,
                median(&r.bounded_moved),
                median(&r.plain_moved),
                1.0 / (r.n + 1) as f64
            ));
        }
        let worst_b = rows
            .iter()
            .map(|r| minmax(&r.bounded_max).1)
            .fold(0.0, f64::max);
        let worst_p = rows
            .iter()
            .map(|r| minmax(&r.plain_max).1)
            .fold(0.0, f64::max);
        let over_ideal_b = rows
            .iter()
            .map(|r| minmax(&r.bounded_moved).1 * (r.n + 1) as f64)
            .fold(0.0, f64::max);
        let over_ideal_p = rows
            .iter()
            .map(|r| minmax(&r.plain_moved).1 * (r.n + 1) as f64)
            .fold(0.0, f64::max);
        s.push_str(&format!(
            "\nOver all N = 2..{n_max} and salts: largest shard at most **{:.3}x** the mean with bounded loads, \
             **{:.3}x** with plain rendezvous; moved at most **{:.2}x** the ideal 1/(N+1) with bounded loads, {:.2}x plain.\n\n",
            worst_b, worst_p, over_ideal_b, over_ideal_p
        ));
        let total_ideal: f64 = rows.iter().map(|r| 1.0 / (r.n + 1) as f64).sum();
        let total_b: f64 = rows.iter().map(|r| median(&r.bounded_moved)).sum();
        let total_p: f64 = rows.iter().map(|r| median(&r.plain_moved)).sum();
        let empty = rows
            .iter()
            .filter(|r| median(&r.bounded_moved) == 0.0)
            .count();
        s.push_str(&format!(
            "Summed over the {} scale-out steps, bounded loads moved {:.3}x what the ideal moves in total (plain: {:.3}x). \
             Steps at which the new replica received nothing: {empty}.\n\n",
            rows.len(),
            total_b / total_ideal,
            total_p / total_ideal
        ));
    }
    s.push_str(
        "Why each step moves about the ideal: `plan` gives every member floor(M/N) checkers and the M mod N \
         members that hold the most one more, and a checker moves only when its owner left or is over its target. \
         From a settled assignment a step N -> N+1 therefore leaves only the new replica under its target, and the \
         others shed exactly its share, floor(M/(N+1)) checkers, all towards it.\n\n",
    );
    let r10 = &results[&10_000];
    let r1 = &results[&1_000];
    let worst = |rows: &[RingRow], f: fn(&RingRow) -> &Vec<f64>| {
        rows.iter().map(|r| minmax(f(r)).1).fold(0.0, f64::max)
    };
    let mv = |rows: &[RingRow], f: fn(&RingRow) -> &Vec<f64>| {
        rows.iter()
            .map(|r| minmax(f(r)).1 * (r.n + 1) as f64)
            .fold(0.0, f64::max)
    };
    let total = |rows: &[RingRow]| {
        rows.iter().map(|r| median(&r.bounded_moved)).sum::<f64>()
            / rows.iter().map(|r| 1.0 / (r.n + 1) as f64).sum::<f64>()
    };
    let summary = vec![format!(
        "Ring (simulation, N = 2..{n_max}): largest shard <= **{:.3}x** the mean at M = 10,000 ({:.3}x at M = 1,000) \
         with bounded loads vs up to {:.2}x ({:.2}x) with plain rendezvous hashing; scale-out N -> N+1 moves \
         {:.2}x the ideal 1/(N+1) in total over the steps ({:.2}x at M = 1,000), at most {:.2}x in one step at \
         M = 10,000 ({:.2}x at M = 1,000).",
        worst(r10, |r| &r.bounded_max),
        worst(r1, |r| &r.bounded_max),
        worst(r10, |r| &r.plain_max),
        worst(r1, |r| &r.plain_max),
        total(r10),
        total(r1),
        mv(r10, |r| &r.bounded_moved),
        mv(r1, |r| &r.bounded_moved),
    )];

    let png = img.join("ring.png");
    let plotted = save_png(&png, (1200, 480), |root| {
        let areas = root.split_evenly((1, 2));
        let blue = RGBColor(31, 119, 180);
        let orange = RGBColor(255, 127, 14);
        let green = RGBColor(44, 160, 44);
        {
            let top = r1
                .iter()
                .chain(r10.iter())
                .map(|r| median(&r.plain_max))
                .fold(1.0, f64::max)
                * 1.05;
            let mut c = ChartBuilder::on(&areas[0])
                .caption(
                    "Largest shard / mean (median over salts)",
                    ("sans-serif", 18),
                )
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(55)
                .build_cartesian_2d(2f64..n_max as f64, 0.95f64..top)?;
            c.configure_mesh()
                .x_desc("replicas N")
                .y_desc("largest / mean")
                .x_label_formatter(&|x| format!("{x:.0}"))
                .y_label_formatter(&|y| format!("{y:.2}"))
                .draw()?;
            for (rows, m, style) in [(r10, "10,000", 2u32), (r1, "1,000", 1u32)] {
                let bs = ShapeStyle::from(blue).stroke_width(style);
                let ps = ShapeStyle::from(orange).stroke_width(style);
                c.draw_series(LineSeries::new(
                    rows.iter().map(|r| (r.n as f64, median(&r.bounded_max))),
                    bs,
                ))?
                .label(format!("bounded loads, M = {m}"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], bs));
                c.draw_series(LineSeries::new(
                    rows.iter().map(|r| (r.n as f64, median(&r.plain_max))),
                    ps,
                ))?
                .label(format!("plain rendezvous, M = {m}"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], ps));
            }
            c.configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .border_style(BLACK)
                .background_style(WHITE.mix(0.9))
                .draw()?;
        }
        {
            let top = r1
                .iter()
                .chain(r10.iter())
                .map(|r| median(&r.bounded_moved).max(median(&r.plain_moved)) * (r.n + 1) as f64)
                .fold(1.5, f64::max)
                * 1.05;
            let mut c = ChartBuilder::on(&areas[1])
                .caption(
                    "Moved going N -> N+1, relative to the ideal 1/(N+1)",
                    ("sans-serif", 18),
                )
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(55)
                .build_cartesian_2d(2f64..n_max as f64, 0f64..top)?;
            c.configure_mesh()
                .x_desc("replicas N")
                .y_desc("moved x (N+1)")
                .x_label_formatter(&|x| format!("{x:.0}"))
                .y_label_formatter(&|y| format!("{y:.1}"))
                .draw()?;
            let ideal = ShapeStyle::from(BLACK).stroke_width(1);
            c.draw_series(LineSeries::new(
                vec![(2.0, 1.0), (n_max as f64, 1.0)],
                ideal,
            ))?
            .label("ideal 1/(N+1)")
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], ideal));
            for (rows, m, w, col) in [(r10, "10,000", 2u32, blue), (r1, "1,000", 1u32, green)] {
                let st = ShapeStyle::from(col).stroke_width(w);
                c.draw_series(LineSeries::new(
                    rows.iter()
                        .map(|r| (r.n as f64, median(&r.bounded_moved) * (r.n + 1) as f64)),
                    st,
                ))?
                .label(format!("bounded loads, M = {m}"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], st));
            }
            let ps = ShapeStyle::from(orange).stroke_width(1);
            c.draw_series(r10.iter().map(|r| {
                Circle::new(
                    (r.n as f64, median(&r.plain_moved) * (r.n + 1) as f64),
                    3,
                    ps.filled(),
                )
            }))?
            .label("plain rendezvous, M = 10,000")
            .legend(move |(x, y)| Circle::new((x + 10, y), 3, ps.filled()));
            c.configure_series_labels()
                .position(SeriesLabelPosition::LowerLeft)
                .border_style(BLACK)
                .background_style(WHITE.mix(0.9))
                .draw()?;
        }
        Ok(())
    });
    if plotted.is_ok() {
        s.push_str("![ring quality](img/ring.png)\n");
    }
    Ok(Section { body: s, summary })
}

// ================================================================== cluster

struct ClusterCtx {
    dir: PathBuf,
    kubeconfig: PathBuf,
    bin: PathBuf,
    client: Client,
}

impl ClusterCtx {
    async fn start(work: &Path) -> Res<ClusterCtx> {
        let dir = work.join("cluster");
        std::fs::create_dir_all(&dir)?;
        let out = Command::new("bash")
            .arg(repo().join("hack/cluster.sh"))
            .arg("up")
            .arg(&dir)
            .stderr(Stdio::inherit())
            .output()?;
        if !out.status.success() {
            return Err(err("hack/cluster.sh up failed"));
        }
        let kubeconfig = PathBuf::from(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .last()
                .unwrap_or("")
                .trim(),
        );
        let env = std::fs::read_to_string(dir.join("cluster.env"))?;
        let bin = env
            .lines()
            .find_map(|l| {
                l.strip_prefix("BIN=")
                    .or_else(|| l.strip_prefix("export BIN="))
            })
            .map(|v| PathBuf::from(v.trim_matches(|c| c == '"' || c == '\'')))
            .ok_or_else(|| err("BIN in cluster.env"))?;
        // Reaper: take the control plane down when the bench exits, however it exits.
        let pid = std::process::id();
        let _ = Command::new("bash")
            .arg("-c")
            .arg(format!(
                "while kill -0 {pid} 2>/dev/null; do sleep 1; done; bash '{}' down '{}' >/dev/null 2>&1",
                repo().join("hack/cluster.sh").display(),
                dir.display()
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let kc = Kubeconfig::read_from(&kubeconfig)?;
        let config =
            kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
        let client = Client::try_from(config)?;
        let c = ClusterCtx {
            dir,
            kubeconfig,
            bin,
            client,
        };
        let crd = repo().join("crds/webcheckers.test.network.io.yaml");
        c.kubectl(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            crd.to_str().unwrap(),
        ])?;
        c.kubectl(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/webcheckers.test.network.io",
        ])?;
        Ok(c)
    }

    fn kubectl(&self, args: &[&str]) -> Res<String> {
        let out = Command::new(self.bin.join("kubectl"))
            .env("KUBECONFIG", &self.kubeconfig)
            .args(args)
            .output()?;
        if !out.status.success() {
            return Err(err(format!(
                "kubectl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).to_string())
    }

    async fn namespace(&self, name: &str) -> Res<()> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}
        }))?;
        api.create(&PostParams::default(), &ns).await?;
        Ok(())
    }

    fn down(&self) {
        let _ = Command::new("bash")
            .arg(repo().join("hack/cluster.sh"))
            .arg("down")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// One operator replica, a real process (release build).
struct Op {
    id: String,
    port: u16,
    child: Option<Child>,
}

impl Op {
    fn spawn(
        bin: &Path,
        kubeconfig: &Path,
        ns: &str,
        id: &str,
        logdir: &Path,
        extra: &[String],
    ) -> Res<Op> {
        let port = free_port();
        std::fs::create_dir_all(logdir)?;
        let log = std::fs::File::create(logdir.join(format!("{id}.log")))?;
        let child = Command::new(bin)
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info")
            .env_remove("POD_NAME")
            .env_remove("POD_NAMESPACE")
            .arg(format!("--identity={id}"))
            .arg(format!("--namespace={ns}"))
            .arg(format!("--watch-namespace={ns}"))
            .arg(format!("--listen=127.0.0.1:{port}"))
            .args(extra)
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        Ok(Op {
            id: id.to_string(),
            port,
            child: Some(child),
        })
    }

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    fn live(&self) -> bool {
        self.child.is_some()
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM, then waits for the exit; returns how long it took.
    async fn terminate(&mut self, timeout: Duration) -> Res<Duration> {
        let t = Instant::now();
        let Some(mut c) = self.child.take() else {
            return Err(err("not running"));
        };
        signal(c.id(), libc::SIGTERM);
        loop {
            if c.try_wait()?.is_some() {
                return Ok(t.elapsed());
            }
            if t.elapsed() > timeout {
                let _ = c.kill();
                let _ = c.wait();
                return Err(err(format!(
                    "{} did not exit within {timeout:?} of SIGTERM",
                    self.id
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn get(&self, path: &str) -> Option<(u16, String)> {
        http_get(
            &format!("127.0.0.1:{}", self.port),
            path,
            Duration::from_secs(20),
        )
        .await
    }

    async fn metrics(&self) -> Option<String> {
        match self.get("/metrics").await {
            Some((200, b)) => Some(b),
            _ => None,
        }
    }

    async fn wait_ready(&self, timeout: Duration) -> Res<()> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some((200, _)) = self.get("/readyz").await {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Err(err(format!("{} not ready within {timeout:?}", self.id)))
    }
}

impl Drop for Op {
    fn drop(&mut self) {
        self.kill();
    }
}

#[derive(Clone, Copy)]
struct Hit {
    t: f64,
    checker: u32,
    replica: u16,
}

/// An HTTP target that logs which replica probed which checker when
/// (path `/c/<index>`, header `X-Webchecker-Replica`).
struct Witness {
    addr: std::net::SocketAddr,
    t0: Instant,
    hits: Mutex<Vec<Hit>>,
    replicas: Mutex<Vec<String>>,
    task: Mutex<Option<tokio::task::AbortHandle>>,
}

impl Witness {
    async fn start(t0: Instant) -> Res<Arc<Witness>> {
        let listener = TcpListener::bind(("127.0.0.1", free_port())).await?;
        let w = Arc::new(Witness {
            addr: listener.local_addr()?,
            t0,
            hits: Mutex::new(Vec::with_capacity(1 << 20)),
            replicas: Mutex::new(Vec::new()),
            task: Mutex::new(None),
        });
        let w2 = w.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = listener.accept().await else {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                };
                let w = w2.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::with_capacity(1024);
                    if !read_head(&mut s, &mut buf).await {
                        return;
                    }
                    let t = now_s(w.t0);
                    w.record(&buf, t);
                    let _ = s.write_all(OK_RESPONSE).await;
                    let _ = s.shutdown().await;
                });
            }
        });
        *w.task.lock().unwrap() = Some(task.abort_handle());
        Ok(w)
    }

    fn record(&self, head: &[u8], t: f64) {
        let text = String::from_utf8_lossy(head);
        let mut lines = text.split("\r\n");
        let Some(first) = lines.next() else { return };
        let Some(path) = first.split_whitespace().nth(1) else {
            return;
        };
        let Some(checker) = path.strip_prefix("/c/").and_then(|p| p.parse::<u32>().ok()) else {
            return;
        };
        let replica = lines
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case("x-webchecker-replica")
                    .then(|| v.trim().to_string())
            })
            .unwrap_or_default();
        let rid = {
            let mut r = self.replicas.lock().unwrap();
            match r.iter().position(|x| *x == replica) {
                Some(i) => i as u16,
                None => {
                    r.push(replica);
                    (r.len() - 1) as u16
                }
            }
        };
        self.hits.lock().unwrap().push(Hit {
            t,
            checker,
            replica: rid,
        });
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn now(&self) -> f64 {
        now_s(self.t0)
    }

    fn distinct_since(&self, t: f64) -> usize {
        let h = self.hits.lock().unwrap();
        let mut seen = HashSet::new();
        for x in h.iter().rev().take_while(|x| x.t >= t - 1.0) {
            if x.t >= t {
                seen.insert(x.checker);
            }
        }
        seen.len()
    }

    /// Probe times of every checker, sorted.
    fn times(&self) -> HashMap<u32, Vec<(f64, u16)>> {
        let h = self.hits.lock().unwrap();
        let mut by: HashMap<u32, Vec<(f64, u16)>> = HashMap::new();
        for x in h.iter() {
            by.entry(x.checker).or_default().push((x.t, x.replica));
        }
        for v in by.values_mut() {
            v.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
        }
        by
    }
}

impl Drop for Witness {
    fn drop(&mut self) {
        if let Some(t) = self.task.lock().unwrap().take() {
            t.abort();
        }
    }
}

async fn create_checkers(
    client: &Client,
    ns: &str,
    target: &str,
    range: std::ops::Range<usize>,
    interval: u32,
) -> Res<()> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<WebChecker>(&()));
    let failures = Arc::new(Mutex::new(Vec::new()));
    futures::stream::iter(range)
        .for_each_concurrent(64, |i| {
            let api = api.clone();
            let failures = failures.clone();
            async move {
                let obj: DynamicObject = serde_json::from_value(serde_json::json!({
                    "apiVersion": "test.network.io/v1alpha1",
                    "kind": "WebChecker",
                    "metadata": {"name": format!("c{i}")},
                    "spec": {"host": target, "path": format!("/c/{i}"), "intervalSeconds": interval}
                }))
                .unwrap();
                for attempt in 0..8 {
                    match api.create(&PostParams::default(), &obj).await {
                        Ok(_) => return,
                        Err(kube::Error::Api(e)) if e.code == 409 => return,
                        Err(_) => {
                            tokio::time::sleep(Duration::from_millis(200 << attempt.min(4))).await
                        }
                    }
                }
                failures.lock().unwrap().push(i);
            }
        })
        .await;
    let f = failures.lock().unwrap();
    if f.is_empty() {
        Ok(())
    } else {
        Err(err(format!("could not create {} checkers", f.len())))
    }
}

const INTERVAL: u32 = 10;
const LEASE: f64 = 10.0;
const DESIGN_BOUND: f64 = INTERVAL as f64 + LEASE + 2.0;
const SHARDING_BOUND: f64 = 2.0 * LEASE;

struct Fleet<'a> {
    cl: &'a ClusterCtx,
    bin: PathBuf,
    ns: String,
    prefix: String,
    ops: Vec<Op>,
    spawned: usize,
    w: Arc<Witness>,
    m: usize,
    logdir: PathBuf,
    create_s: f64,
    all_probed_s: f64,
    /// RSS of each replica once every checker was probed, before any /metrics scrape.
    rss_pre_mib: Vec<f64>,
    /// Extra operator flags for replicas spawned from now on.
    extra: Vec<String>,
}

impl<'a> Fleet<'a> {
    async fn start(
        cl: &'a ClusterCtx,
        cfg: &Cfg,
        t0: Instant,
        prefix: &str,
        replicas: usize,
        m: usize,
    ) -> Res<Fleet<'a>> {
        let ns = format!("bench-{prefix}");
        cl.namespace(&ns).await?;
        let w = Witness::start(t0).await?;
        let mut f = Fleet {
            cl,
            bin: cfg.operator.clone(),
            ns,
            prefix: prefix.to_string(),
            ops: Vec::new(),
            spawned: 0,
            w,
            m,
            logdir: cfg.work.join("logs"),
            create_s: 0.0,
            all_probed_s: 0.0,
            rss_pre_mib: Vec::new(),
            extra: Vec::new(),
        };
        for _ in 0..replicas {
            f.spawn()?;
        }
        for o in &f.ops {
            o.wait_ready(Duration::from_secs(90)).await?;
        }
        let t = Instant::now();
        let since = f.w.now();
        create_checkers(&cl.client, &f.ns, &f.w.url(), 0..m, INTERVAL).await?;
        f.create_s = t.elapsed().as_secs_f64();
        eprintln!(
            "bench: {}: created {m} checkers in {:.1} s",
            f.prefix, f.create_s
        );
        f.wait_probed_since(since, Duration::from_secs(240)).await?;
        f.all_probed_s = t.elapsed().as_secs_f64();
        f.rss_pre_mib = f
            .ops
            .iter()
            .filter_map(|o| o.pid())
            .map(|p| proc_status_kib(p, "VmRSS:").unwrap_or(0) as f64 / 1024.0)
            .collect();
        eprintln!(
            "bench: {}: every checker probed {:.1} s after the first create",
            f.prefix, f.all_probed_s
        );
        Ok(f)
    }

    fn spawn(&mut self) -> Res<usize> {
        let id = format!("{}-r{}", self.prefix, self.spawned);
        self.spawned += 1;
        self.ops.push(Op::spawn(
            &self.bin,
            &self.cl.kubeconfig,
            &self.ns,
            &id,
            &self.logdir,
            &self.extra,
        )?);
        Ok(self.ops.len() - 1)
    }

    /// Replaces every replica by a new one started with `extra` flags (the
    /// objects stay); returns (RSS once every checker was probed again, RSS
    /// after one /metrics scrape, series exported), per replica.
    async fn restart_with(&mut self, extra: &[&str]) -> Res<MemVariant> {
        let n = self.live_ids().len();
        for o in self.ops.iter().filter(|o| o.live()) {
            signal(o.pid().unwrap(), libc::SIGTERM);
        }
        for o in self.ops.iter_mut().filter(|o| o.live()) {
            o.terminate(Duration::from_secs(30)).await?;
        }
        self.extra = extra.iter().map(|s| s.to_string()).collect();
        let first = self.ops.len();
        for _ in 0..n {
            self.spawn()?;
        }
        for o in &self.ops[first..] {
            o.wait_ready(Duration::from_secs(90)).await?;
        }
        let since = self.w.now();
        self.wait_probed_since(since, Duration::from_secs(240))
            .await?;
        let rss = |ops: &[Op]| -> Vec<f64> {
            ops.iter()
                .filter_map(|o| o.pid())
                .map(|p| proc_status_kib(p, "VmRSS:").unwrap_or(0) as f64 / 1024.0)
                .collect()
        };
        let pre = rss(&self.ops[first..]);
        let texts = scrape_all(self).await?;
        let post = rss(&self.ops[first..]);
        let series = texts
            .iter()
            .map(|t| {
                t.lines()
                    .filter(|l| !l.starts_with('#') && !l.is_empty())
                    .count() as f64
            })
            .collect();
        Ok((pre, post, series))
    }

    fn live_ids(&self) -> Vec<String> {
        self.ops
            .iter()
            .filter(|o| o.live())
            .map(|o| o.id.clone())
            .collect()
    }

    async fn wait_probed_since(&self, since: f64, timeout: Duration) -> Res<()> {
        let deadline = Instant::now() + timeout;
        loop {
            // Cheap check first: the number of distinct checkers in the tail of the log.
            if self.w.distinct_since(since) >= self.m {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(err(format!(
                    "{}: only {} of {} checkers probed within {timeout:?}",
                    self.prefix,
                    self.w.distinct_since(since),
                    self.m
                )));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Owner of every checker (index); None while unassigned or draining.
    async fn owners(&self) -> Res<HashMap<u32, Option<String>>> {
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.cl.client.clone(),
            &self.ns,
            &ApiResource::erase::<WebChecker>(&()),
        );
        let list = api.list(&ListParams::default()).await?;
        Ok(list
            .items
            .into_iter()
            .filter_map(|o| {
                let idx: u32 = o
                    .metadata
                    .name
                    .as_deref()?
                    .strip_prefix('c')?
                    .parse()
                    .ok()?;
                let draining = o
                    .metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key(DRAIN_ANNOTATION));
                let owner = o
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(OWNER_LABEL))
                    .cloned()
                    .filter(|_| !draining);
                Some((idx, owner))
            })
            .collect())
    }

    async fn leader(&self) -> Option<String> {
        let api: Api<Lease> = Api::namespaced(self.cl.client.clone(), &self.ns);
        api.get("webchecker-leader")
            .await
            .ok()?
            .spec?
            .holder_identity
    }

    /// Every checker owned by a live replica, none draining, shards within the bound,
    /// and every checker probed since.
    async fn wait_stable(&self, timeout: Duration) -> Res<HashMap<u32, String>> {
        let deadline = Instant::now() + timeout;
        let live = self.live_ids();
        let cap = ring::capacity(self.m, live.len());
        loop {
            let owners = self.owners().await?;
            let mut sizes: HashMap<&str, usize> = HashMap::new();
            let ok = owners.len() == self.m
                && owners.values().all(|o| {
                    o.as_ref().is_some_and(|o| {
                        *sizes.entry(o.as_str()).or_default() += 1;
                        live.contains(o)
                    })
                })
                && sizes.values().all(|&s| s <= cap);
            if ok {
                let since = self.w.now();
                self.wait_probed_since(
                    since,
                    deadline
                        .saturating_duration_since(Instant::now())
                        .max(Duration::from_secs(15)),
                )
                .await?;
                return Ok(owners.into_iter().map(|(k, v)| (k, v.unwrap())).collect());
            }
            if Instant::now() > deadline {
                return Err(err(format!(
                    "{}: not stable within {timeout:?}",
                    self.prefix
                )));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    fn shutdown(&mut self) {
        for o in &mut self.ops {
            o.kill();
        }
    }
}

// ================================================================== part 3

struct ScaleRow {
    m: usize,
    window_s: f64,
    create_s: f64,
    all_probed_s: f64,
    settle_s: f64,
    /// Probes seen at the witness in the window / (M x window / interval).
    achieved: f64,
    probes_rate: f64,
    missed_window: f64,
    missed_total: f64,
    lag: Vec<(f64, f64)>,
    rss_mib: Vec<f64>,
    rss_pre_mib: Vec<f64>,
    hwm_mib: Vec<f64>,
    cpu_cores: Vec<f64>,
    writes_rate: f64,
    owned: Vec<f64>,
    series: Vec<f64>,
    metrics_mib: Vec<f64>,
}

async fn scrape_all(f: &Fleet<'_>) -> Res<Vec<String>> {
    let mut out = Vec::new();
    for o in f.ops.iter().filter(|o| o.live()) {
        out.push(
            o.metrics()
                .await
                .ok_or_else(|| err(format!("no metrics from {}", o.id)))?,
        );
    }
    Ok(out)
}

fn writes_total(texts: &[String]) -> f64 {
    texts
        .iter()
        .map(|t| metric_sum(t, "webchecker_status_writes_total", &[]))
        .sum()
}

async fn measure_scale(f: &Fleet<'_>, cfg: &Cfg) -> Res<ScaleRow> {
    // Settle: the first probe of every checker writes its status once; wait
    // until that backlog is written before measuring the steady state.
    let t = Instant::now();
    let mut last = writes_total(&scrape_all(f).await?);
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let now = writes_total(&scrape_all(f).await?);
        let settled = now >= f.m as f64 && now - last <= (f.m as f64 / 500.0).max(3.0);
        last = now;
        if settled || t.elapsed() > Duration::from_secs(240) {
            break;
        }
    }
    let settle_s = t.elapsed().as_secs_f64() + f.all_probed_s;
    // A whole number of intervals, so every checker is due the same number of times.
    let window = Duration::from_secs(INTERVAL as u64 * if cfg.quick { 2 } else { 4 });
    let pids: Vec<u32> = f.ops.iter().filter_map(|o| o.pid()).collect();
    let a = scrape_all(f).await?;
    let cpu_a: Vec<u64> = pids
        .iter()
        .map(|p| cpu_ticks(*p).map(|c| c.0 + c.1).unwrap_or(0))
        .collect();
    let wa = f.w.now();
    let ta = Instant::now();
    tokio::time::sleep(window).await;
    let wb = f.w.now();
    let secs = ta.elapsed().as_secs_f64();
    let cpu_b: Vec<u64> = pids
        .iter()
        .map(|p| cpu_ticks(*p).map(|c| c.0 + c.1).unwrap_or(0))
        .collect();
    let b = scrape_all(f).await?;
    let hits = {
        let h = f.w.hits.lock().unwrap();
        h.iter().filter(|x| x.t >= wa && x.t < wb).count()
    };
    let delta = |name: &str| -> f64 {
        b.iter().map(|t| metric_sum(t, name, &[])).sum::<f64>()
            - a.iter().map(|t| metric_sum(t, name, &[])).sum::<f64>()
    };
    let mut lag = Vec::new();
    for (ta, tb) in a.iter().zip(&b) {
        let d = sub_buckets(
            &buckets(ta, "webchecker_schedule_lag_seconds"),
            &buckets(tb, "webchecker_schedule_lag_seconds"),
        );
        add_buckets(&mut lag, &d);
    }
    let hwm: Vec<f64> = pids
        .iter()
        .map(|p| proc_status_kib(*p, "VmHWM:").unwrap_or(0) as f64 / 1024.0)
        .collect();
    Ok(ScaleRow {
        m: f.m,
        window_s: secs,
        create_s: f.create_s,
        all_probed_s: f.all_probed_s,
        settle_s,
        achieved: hits as f64 / (f.m as f64 * (wb - wa) / INTERVAL as f64),
        probes_rate: delta("webchecker_probes_total") / secs,
        missed_window: delta("webchecker_missed_intervals_total"),
        missed_total: b
            .iter()
            .map(|t| metric_sum(t, "webchecker_missed_intervals_total", &[]))
            .sum(),
        lag,
        rss_mib: b
            .iter()
            .map(|t| metric_sum(t, "process_resident_memory_bytes", &[]) / 1048576.0)
            .collect(),
        rss_pre_mib: f.rss_pre_mib.clone(),
        hwm_mib: hwm,
        cpu_cores: cpu_a
            .iter()
            .zip(&cpu_b)
            .map(|(x, y)| (y - x) as f64 / clk_tck() / secs)
            .collect(),
        writes_rate: delta("webchecker_status_writes_total") / secs,
        owned: b
            .iter()
            .map(|t| metric_sum(t, "webchecker_owned_checkers", &[]))
            .collect(),
        series: b
            .iter()
            .map(|t| {
                t.lines()
                    .filter(|l| !l.starts_with('#') && !l.is_empty())
                    .count() as f64
            })
            .collect(),
        metrics_mib: b.iter().map(|t| t.len() as f64 / 1048576.0).collect(),
    })
}

/// Upper bound of the bucket that holds quantile `q`.
fn bucket_upper(b: &[(f64, f64)], q: f64) -> f64 {
    let total = b.last().map(|x| x.1).unwrap_or(0.0);
    b.iter()
        .find(|(_, c)| *c >= q * total)
        .map(|x| x.0)
        .unwrap_or(f64::NAN)
}

fn ms(x: f64) -> String {
    if x.is_infinite() {
        "> 10 s".into()
    } else {
        format!("{:.0} ms", x * 1000.0)
    }
}

type MemVariant = (Vec<f64>, Vec<f64>, Vec<f64>);

/// The operator's default `--heartbeat`, from its `--help` (seconds).
fn operator_heartbeat_s(bin: &Path) -> f64 {
    let help = Command::new(bin)
        .arg("--help")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
        .unwrap_or_default();
    let value = help
        .split_once("--heartbeat")
        .and_then(|(_, rest)| rest.split_once("[default: "))
        .and_then(|(_, rest)| rest.split_once(']'))
        .map(|(v, _)| v.trim().to_string())
        .unwrap_or_default();
    let (num, unit) = value.split_at(
        value
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(value.len()),
    );
    let n: f64 = num.parse().unwrap_or(f64::NAN);
    match unit {
        "ms" => n / 1000.0,
        "s" | "" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => f64::NAN,
    }
}

fn human_s(s: f64) -> String {
    if s >= 3600.0 && s % 3600.0 == 0.0 {
        format!("{} h", s / 3600.0)
    } else if s >= 60.0 && s % 60.0 == 0.0 {
        format!("{} min", s / 60.0)
    } else {
        format!("{s} s")
    }
}

fn scale_section(rows: &[ScaleRow], variant: Option<&MemVariant>, heartbeat_s: f64) -> Section {
    let hb_text = human_s(heartbeat_s);
    let mut s = String::new();
    s.push_str(&format!(
        "3 replicas of the release build (`target/release/webchecker-operator`, default flags: 1024 workers, \
         heartbeat {hb_text}, leases 10s/7s/2s, per-checker histogram on) against the local control plane \
         (`hack/cluster.sh`), every checker at `intervalSeconds: {INTERVAL}` on a local witness target (in the bench \
         process) that counts probes. Objects are created with 64 concurrent creates through kube. Measured over a \
         steady-state window of a whole number of intervals, after the first status write of every checker went out; \
         counters are deltas over the window, summed over the replicas. *achieved* = probes the witness received in \
         the window / (M x window / interval). Schedule lag quantiles are interpolated within the \
         `webchecker_schedule_lag_seconds` buckets (bounds 1, 5, 10, 25, 50, 100 ms ...); the bucket bound that holds \
         the quantile is given too. CPU is utime+stime from `/proc/PID/stat` (`process_cpu_seconds_total` of the \
         prometheus crate counts whole seconds).\n\n"
    ));
    s.push_str("| checkers M | nominal probes/s (M/10) | achieved | missed intervals (window / since start) | lag p50 | lag p99 (bucket) | lag <= 50 ms | CPU per replica | status writes/s | writes per 100 probes (window) |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for r in rows {
        let nominal = r.m as f64 / INTERVAL as f64;
        let (cmin, cmax) = minmax(&r.cpu_cores);
        s.push_str(&format!(
            "| {} | {} | {:.2}% | {} / {} | {:.1} ms | {:.1} ms (<= {}) | {:.2}% | {:.1}–{:.1}% of a core | {:.2} | {:.3} |\n",
            fmt_int(r.m as f64),
            fmt_int(nominal),
            100.0 * r.achieved,
            fmt_int(r.missed_window),
            fmt_int(r.missed_total),
            bucket_quantile(&r.lag, 0.5) * 1000.0,
            bucket_quantile(&r.lag, 0.99) * 1000.0,
            ms(bucket_upper(&r.lag, 0.99)),
            100.0 * bucket_share_le(&r.lag, 0.05),
            100.0 * cmin,
            100.0 * cmax,
            r.writes_rate,
            100.0 * r.writes_rate / r.probes_rate.max(1e-9),
        ));
    }
    s.push_str("\nMemory per replica (min–max over the 3 replicas). *before scrapes*: RSS once every checker had been probed, before the first `/metrics` request; *end*: `process_resident_memory_bytes` at the end of the window, after a dozen scrapes; *peak*: VmHWM.\n\n| checkers M | per replica | RSS before scrapes | RSS end | peak RSS | series in /metrics | /metrics size |\n|---:|---:|---:|---:|---:|---:|---:|\n");
    let range = |v: &[f64], unit: &str, digits: usize| {
        let (a, b) = minmax(v);
        format!("{a:.digits$}–{b:.digits$}{unit}")
    };
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            fmt_int(r.m as f64),
            fmt_int(r.m as f64 / 3.0),
            range(&r.rss_pre_mib, " MiB", 1),
            range(&r.rss_mib, " MiB", 1),
            range(&r.hwm_mib, " MiB", 1),
            range(&r.series, "", 0),
            range(&r.metrics_mib, " MiB", 1),
        ));
    }
    if let Some((pre, post, series)) = variant {
        s.push_str(&format!(
            "| 10,000, `--per-checker-histogram=false` | 3,333 | {} | {} (after one scrape) | – | {} | – |\n",
            range(pre, " MiB", 1),
            range(post, " MiB", 1),
            range(series, "", 0),
        ));
    }
    if let (Some(a), Some(b)) = (
        rows.iter().find(|r| r.m == 1000),
        rows.iter().find(|r| r.m == 10_000),
    ) {
        let per_checker =
            |x: &[f64], y: &[f64]| (median(y) - median(x)) * 1024.0 / ((b.m - a.m) as f64 / 3.0);
        s.push_str(&format!(
            "\nMarginal memory per checker owned (1,000 -> 10,000): {:.1} KiB before any scrape, {:.1} KiB after scrapes; \
             {:.0} exported series per checker.\n",
            per_checker(&a.rss_pre_mib, &b.rss_pre_mib),
            per_checker(&a.rss_mib, &b.rss_mib),
            (median(&b.series) - median(&a.series)) / ((b.m - a.m) as f64 / 3.0)
        ));
    }
    if let (Some(b), Some((pre, post, _))) = (rows.iter().find(|r| r.m == 10_000), variant) {
        let per = b.m as f64 / 3.0;
        let hist_kib = (median(&b.rss_pre_mib) - median(pre)) * 1024.0 / per;
        let hist = if hist_kib.abs() < 1.0 {
            "less than 1 KiB per checker (within the noise)".to_string()
        } else {
            format!(
                "{hist_kib:.1} KiB per checker ({:.1} MiB)",
                hist_kib * per / 1024.0
            )
        };
        s.push_str(&format!(
            "\nWhere the memory goes at 3,333 checkers per replica: {:.1} MiB once every checker is probed, of which the \
             per-checker latency histogram accounts for {hist}; serving `/metrics` (80,000 series, 7 MiB of text, \
             gathered into intermediate structures first) adds {:.1} MiB after one scrape without the histogram and \
             {:.1} MiB after a dozen with it: memory the allocator keeps.\n",
            median(&b.rss_pre_mib),
            median(post) - median(pre),
            median(&b.rss_mib) - median(&b.rss_pre_mib),
        ));
    }
    s.push_str("\n| checkers M | create all (64 concurrent) | all probed after | initial status writes done after | window | shard sizes |\n|---:|---:|---:|---:|---:|---|\n");
    for r in rows {
        s.push_str(&format!(
            "| {} | {:.1} s ({} creates/s) | {:.1} s | {:.0} s | {:.0} s | {} |\n",
            fmt_int(r.m as f64),
            r.create_s,
            fmt_int(r.m as f64 / r.create_s),
            r.all_probed_s,
            r.settle_s,
            r.window_s,
            r.owned
                .iter()
                .map(|x| fmt_int(*x))
                .collect::<Vec<_>>()
                .join(" / ")
        ));
    }
    let mut summary = Vec::new();
    if let Some(r) = rows.iter().find(|r| r.m == 10_000) {
        let rss = minmax(&r.rss_mib).1;
        let pre = minmax(&r.rss_pre_mib).1;
        let hwm = minmax(&r.hwm_mib).1;
        let per100 = 100.0 * r.writes_rate / r.probes_rate.max(1e-9);
        let hb = 100.0 * INTERVAL as f64 / heartbeat_s;
        let long_run = per100 + hb;
        let p99 = bucket_quantile(&r.lag, 0.99);
        let share = bucket_share_le(&r.lag, 0.05);
        s.push_str(&format!(
            "\nGoals at 10,000 checkers:\n\n\
             | goal | measured | verdict |\n|---|---|---|\n\
             | every probe on time | {:.2}% of the nominal {} probes/s reached the targets | {} |\n\
             | no missed interval | {} in the window, {} since start | {} |\n\
             | p99 schedule lag <= 50 ms | p99 {:.1} ms (bucket <= {}), {:.2}% of probes started <= 50 ms late | {} |\n\
             | <= 64 MiB per replica | {:.1} MiB at most at the end of the window ({:.1} MiB before any /metrics scrape, peak {:.1} MiB) | {} |\n\
             | < 1 status write per 100 probes | {:.3} per 100 in the window; in the long run {:.2} per 100, because the heartbeat rewrites every checker once per {hb_text} = {:.2} per 100 probes at a 10 s interval | between heartbeats: {}; long run: {} |\n",
            100.0 * r.achieved,
            fmt_int(r.m as f64 / INTERVAL as f64),
            yes(r.achieved >= 0.99),
            fmt_int(r.missed_window),
            fmt_int(r.missed_total),
            yes(r.missed_window == 0.0),
            p99 * 1000.0,
            ms(bucket_upper(&r.lag, 0.99)),
            100.0 * share,
            yes(share >= 0.99),
            rss,
            pre,
            hwm,
            yes(rss <= 64.0),
            per100,
            long_run,
            hb,
            yes(per100 < 1.0),
            yes(long_run < 1.0),
        ));
        summary.push(format!(
            "Scale, 10,000 checkers on 3 replicas (10 s interval, real API server): {:.1}% of the nominal probe rate, \
             {} missed intervals, schedule lag p99 {:.1} ms (goal <= 50 ms: {}), {:.0} MiB RSS per replica at most \
             (goal <= 64 MiB: {}), {:.0}% of a core per replica at most, {:.3} status writes per 100 probes between \
             heartbeats, {:.2} counting the {hb_text} heartbeat (goal < 1: {}).",
            100.0 * r.achieved,
            fmt_int(r.missed_window),
            p99 * 1000.0,
            yes(share >= 0.99),
            rss,
            yes(rss <= 64.0),
            100.0 * minmax(&r.cpu_cores).1,
            per100,
            long_run,
            if per100 < 1.0 && long_run >= 1.0 {
                "met between heartbeats, **not met** in the long run".to_string()
            } else {
                yes(long_run < 1.0).to_string()
            }
        ));
    }
    Section { body: s, summary }
}

// ================================================================== part 4

struct GapResult {
    scenario: String,
    moved: usize,
    gap_max: f64,
    gap_p50: f64,
    others_max: f64,
    note: String,
    /// Over the moved checkers, the largest of: event minus the last probe
    /// before it, event to reassignment (seen by a watch), reassignment to the
    /// first probe; and the parts of the checker with the largest gap.
    parts: Option<GapParts>,
}

#[derive(Clone, Copy)]
struct GapParts {
    since_last_max: f64,
    to_assign_max: f64,
    to_probe_max: f64,
    worst: (f64, f64, f64),
}

/// Watches the namespace and records, for each checker in `of`, when it first
/// shows an owner other than `victim` (not draining). Returns once the watch
/// has synced.
async fn watch_reassignments(
    f: &Fleet<'_>,
    victim: &str,
    of: &[u32],
) -> (Arc<Mutex<HashMap<u32, f64>>>, tokio::task::AbortHandle) {
    use kube::runtime::watcher;
    let api: Api<DynamicObject> = Api::namespaced_with(
        f.cl.client.clone(),
        &f.ns,
        &ApiResource::erase::<WebChecker>(&()),
    );
    let seen: Arc<Mutex<HashMap<u32, f64>>> = Default::default();
    let (synced_tx, synced_rx) = tokio::sync::oneshot::channel::<()>();
    let want: HashSet<u32> = of.iter().copied().collect();
    let victim = victim.to_string();
    let w = f.w.clone();
    let seen2 = seen.clone();
    let task = tokio::spawn(async move {
        let mut synced = Some(synced_tx);
        let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
        while let Some(ev) = stream.next().await {
            let o = match ev {
                Ok(watcher::Event::InitDone) => {
                    if let Some(tx) = synced.take() {
                        let _ = tx.send(());
                    }
                    continue;
                }
                Ok(watcher::Event::Apply(o)) | Ok(watcher::Event::InitApply(o)) => o,
                _ => continue,
            };
            let Some(idx) = o
                .metadata
                .name
                .as_deref()
                .and_then(|n| n.strip_prefix('c'))
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            if !want.contains(&idx) {
                continue;
            }
            let draining = o
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(DRAIN_ANNOTATION));
            let owner = o.metadata.labels.as_ref().and_then(|l| l.get(OWNER_LABEL));
            if !draining && owner.is_some_and(|o| *o != victim) {
                seen2.lock().unwrap().entry(idx).or_insert_with(|| w.now());
            }
        }
    });
    let _ = tokio::time::timeout(Duration::from_secs(30), synced_rx).await;
    (seen, task.abort_handle())
}

fn gap_parts(
    times: &HashMap<u32, Vec<(f64, u16)>>,
    assigned: &HashMap<u32, f64>,
    of: &[u32],
    at: f64,
) -> Option<GapParts> {
    let mut p = GapParts {
        since_last_max: 0.0,
        to_assign_max: 0.0,
        to_probe_max: 0.0,
        worst: (0.0, 0.0, 0.0),
    };
    let mut worst_gap = -1.0;
    for c in of {
        let ts = times.get(c).map(Vec::as_slice).unwrap_or(&[]);
        let last = ts.iter().rev().find(|t| t.0 <= at)?.0;
        let first = ts.iter().find(|t| t.0 > at)?.0;
        let a = *assigned.get(c)?;
        let parts = (at - last, a - at, first - a);
        p.since_last_max = p.since_last_max.max(parts.0);
        p.to_assign_max = p.to_assign_max.max(parts.1);
        p.to_probe_max = p.to_probe_max.max(parts.2);
        if first - last > worst_gap {
            worst_gap = first - last;
            p.worst = parts;
        }
    }
    Some(p)
}

/// For checkers in `of`: last probe at or before `at` to first probe after it.
fn failover_gaps(times: &HashMap<u32, Vec<(f64, u16)>>, of: &[u32], at: f64) -> Vec<f64> {
    of.iter()
        .map(|c| {
            let ts = times.get(c).map(Vec::as_slice).unwrap_or(&[]);
            let before = ts
                .iter()
                .rev()
                .find(|t| t.0 <= at)
                .map(|t| t.0)
                .unwrap_or(at);
            match ts.iter().find(|t| t.0 > at) {
                Some(t) => t.0 - before,
                None => f64::INFINITY,
            }
        })
        .collect()
}

/// Largest gap between consecutive probes of each checker in `of` over
/// [from, to] (the probe before `from` counts as the start).
fn largest_gap(times: &HashMap<u32, Vec<(f64, u16)>>, of: &[u32], from: f64, to: f64) -> f64 {
    let mut worst: f64 = 0.0;
    for c in of {
        let ts = times.get(c).map(Vec::as_slice).unwrap_or(&[]);
        let mut prev = ts
            .iter()
            .rev()
            .find(|t| t.0 <= from)
            .map(|t| t.0)
            .unwrap_or(from);
        for t in ts.iter().filter(|t| t.0 > from && t.0 <= to) {
            worst = worst.max(t.0 - prev);
            prev = t.0;
        }
        worst = worst.max(to - prev);
    }
    worst
}

async fn wait_reprobed(f: &Fleet<'_>, of: &[u32], at: f64, timeout: Duration) -> Res<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let times = f.w.times();
        if failover_gaps(&times, of, at).iter().all(|g| g.is_finite()) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(err("failover: moved checkers not probed again in time"));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn failover_once(f: &mut Fleet<'_>, kind: &str) -> Res<GapResult> {
    let owners = f.wait_stable(Duration::from_secs(120)).await?;
    let leader = f.leader().await.unwrap_or_default();
    let victim_idx = f
        .ops
        .iter()
        .position(|o| {
            o.live()
                && (if kind == "leader" {
                    o.id == leader
                } else {
                    o.id != leader
                })
        })
        .ok_or_else(|| err("no victim"))?;
    let victim = f.ops[victim_idx].id.clone();
    let moved: Vec<u32> = owners
        .iter()
        .filter(|(_, o)| **o == victim)
        .map(|(k, _)| *k)
        .collect();
    let others: Vec<u32> = owners
        .iter()
        .filter(|(_, o)| **o != victim)
        .map(|(k, _)| *k)
        .collect();
    let (assigned, watch) = watch_reassignments(f, &victim, &moved).await;
    let at = f.w.now();
    let mut note = String::new();
    match kind {
        "sigterm" => {
            let took = f.ops[victim_idx].terminate(Duration::from_secs(30)).await?;
            note = format!("clean exit {:.1} s after SIGTERM", took.as_secs_f64());
        }
        _ => f.ops[victim_idx].kill(),
    }
    if kind == "leader" {
        let t = Instant::now();
        let live = f.live_ids();
        loop {
            if let Some(l) = f.leader().await
                && live.contains(&l)
            {
                note = format!("new leader {l} after {:.1} s", t.elapsed().as_secs_f64());
                break;
            }
            if t.elapsed() > Duration::from_secs(60) {
                note = "no new leader within 60 s".into();
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    wait_reprobed(f, &moved, at, Duration::from_secs(90)).await?;
    let end = f.w.now();
    let times = f.w.times();
    let gaps = failover_gaps(&times, &moved, at);
    let others_max = largest_gap(&times, &others, at, end);
    // The reassignment may be seen a moment after the first probe's write; give the watch a second.
    tokio::time::sleep(Duration::from_secs(1)).await;
    watch.abort();
    let parts = gap_parts(&times, &assigned.lock().unwrap().clone(), &moved, at);
    // Replace the victim (new identity), as a Deployment would.
    let i = f.spawn()?;
    f.ops[i].wait_ready(Duration::from_secs(60)).await?;
    f.wait_stable(Duration::from_secs(180)).await?;
    Ok(GapResult {
        scenario: match kind {
            "sigkill" => "SIGKILL of a replica (not the leader)".into(),
            "sigterm" => "SIGTERM of a replica (not the leader)".into(),
            _ => "leader loss (SIGKILL of the leader)".into(),
        },
        moved: moved.len(),
        gap_max: minmax(&gaps).1,
        gap_p50: median(&gaps),
        others_max,
        note,
        parts,
    })
}

struct RollResult {
    gap: GapResult,
    from: f64,
    to: f64,
    events: Vec<(f64, String)>,
    points: Vec<(f64, f64)>,
    moves_per_checker: f64,
}

async fn rolling_restart(f: &mut Fleet<'_>) -> Res<RollResult> {
    f.wait_stable(Duration::from_secs(120)).await?;
    let from = f.w.now();
    let mut events = Vec::new();
    let old: Vec<usize> = (0..f.ops.len()).filter(|&i| f.ops[i].live()).collect();
    for (k, &old_i) in old.iter().enumerate() {
        // As a Deployment does: a new pod (new identity) first, then the old one goes.
        let i = f.spawn()?;
        f.ops[i].wait_ready(Duration::from_secs(60)).await?;
        events.push((f.w.now() - from, format!("+{}", k + 1)));
        f.ops[old_i].terminate(Duration::from_secs(30)).await?;
        events.push((f.w.now() - from, format!("-{}", k + 1)));
        let t = Instant::now();
        loop {
            let owners = f.owners().await?;
            let live = f.live_ids();
            if owners.len() == f.m
                && owners
                    .values()
                    .all(|o| o.as_ref().is_some_and(|o| live.contains(o)))
            {
                break;
            }
            if t.elapsed() > Duration::from_secs(120) {
                return Err(err("rolling restart: checkers not reassigned"));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    f.wait_stable(Duration::from_secs(180)).await?;
    let to = f.w.now();
    let all: Vec<u32> = (0..f.m as u32).collect();
    let times = f.w.times();
    let gap = largest_gap(&times, &all, from, to);
    let mut points = Vec::new();
    let mut gaps_all = Vec::new();
    let mut owners_seen = 0usize;
    for c in &all {
        let ts = times.get(c).map(Vec::as_slice).unwrap_or(&[]);
        let mut seen = HashSet::new();
        for w in ts.windows(2) {
            if w[1].0 > from - 15.0 && w[1].0 <= to {
                points.push((w[1].0 - from, w[1].0 - w[0].0));
            }
            if w[1].0 > from && w[1].0 <= to {
                gaps_all.push(w[1].0 - w[0].0);
                seen.insert(w[1].1);
            }
        }
        owners_seen += seen.len().saturating_sub(1);
    }
    let over_interval = gaps_all
        .iter()
        .filter(|g| **g > INTERVAL as f64 + 1.0)
        .count();
    Ok(RollResult {
        gap: GapResult {
            scenario: "rolling restart of all 3 replicas (new identities)".into(),
            moved: f.m,
            gap_max: gap,
            gap_p50: median(&gaps_all),
            others_max: f64::NAN,
            parts: None,
            note: format!(
                "{over_interval} of {} probe intervals longer than {} s; {:.2} owner changes per checker",
                gaps_all.len(),
                INTERVAL + 1,
                owners_seen as f64 / f.m as f64
            ),
        },
        from,
        to,
        events,
        points,
        moves_per_checker: owners_seen as f64 / f.m as f64,
    })
}

fn failover_section(
    results: &[GapResult],
    roll: Option<&RollResult>,
    m: usize,
    img: &Path,
) -> Section {
    let mut s = String::new();
    s.push_str(&format!(
        "3 replicas, {} checkers at a {INTERVAL} s interval, default lease timings (duration 10 s, renew deadline 7 s, \
         retry 2 s). Gaps are measured at the witness target: for the checkers of the replica that went away, from \
         their last probe before the event to their first probe after it (the normal cadence is {INTERVAL} s, so a gap \
         of {INTERVAL} s means no interruption at all). After each event a replacement replica (new identity) joins and \
         the fleet is allowed to settle before the next one. Bounds: the DESIGN bound interval + lease duration + 2 s \
         = {DESIGN_BOUND:.0} s, and 2 x lease duration = {SHARDING_BOUND:.0} s, the failover bound of timebertt's \
         controller-sharding (which counts from the failure to the reassignment, not to the next probe).\n\n",
        fmt_int(m as f64)
    ));
    s.push_str(&format!("| scenario | checkers moved | largest gap | median gap (moved) | other checkers' largest gap | <= {DESIGN_BOUND:.0} s (DESIGN) | <= {SHARDING_BOUND:.0} s (2 x lease) | note |\n|---|---:|---:|---:|---:|---|---|---|\n"));
    let mut all: Vec<&GapResult> = results.iter().collect();
    if let Some(r) = roll {
        all.push(&r.gap);
    }
    for g in &all {
        s.push_str(&format!(
            "| {} | {} | **{:.1} s** | {:.1} s | {} | {} | {} | {} |\n",
            g.scenario,
            fmt_int(g.moved as f64),
            g.gap_max,
            g.gap_p50,
            if g.others_max.is_nan() {
                "–".to_string()
            } else {
                format!("{:.1} s", g.others_max)
            },
            yes(g.gap_max <= DESIGN_BOUND),
            yes(g.gap_max <= SHARDING_BOUND),
            g.note
        ));
    }
    let with_parts: Vec<&&GapResult> = all.iter().filter(|g| g.parts.is_some()).collect();
    if !with_parts.is_empty() {
        s.push_str(
            "\nWhere the gap comes from, for the checkers that moved (a watch records when each one shows its new \
             owner): *before* = the event minus the checker's last probe before it (up to one interval, a matter of \
             phase); *reassigned* = the event to the new owner label; *first probe* = the new owner label to the first \
             probe by the new owner. The gap is their sum; the DESIGN bound allows one interval for *before*, the lease \
             duration + 2 s for *reassigned*, and nothing for *first probe*.\n\n\
             | scenario | before (max) | reassigned (max) | first probe (max) | the largest gap = before + reassigned + first probe |\n|---|---:|---:|---:|---|\n",
        );
        for g in with_parts {
            let p = g.parts.unwrap();
            s.push_str(&format!(
                "| {} | {:.1} s | {:.1} s | {:.1} s | {:.1} s = {:.1} + {:.1} + {:.1} s |\n",
                g.scenario,
                p.since_last_max,
                p.to_assign_max,
                p.to_probe_max,
                p.worst.0 + p.worst.1 + p.worst.2,
                p.worst.0,
                p.worst.1,
                p.worst.2
            ));
        }
        let reassign = all
            .iter()
            .filter_map(|g| g.parts.map(|p| p.to_assign_max))
            .fold(0.0, f64::max);
        s.push_str(&format!(
            "\nThe like-for-like comparison with controller-sharding's 2 x lease = {SHARDING_BOUND:.0} s (failure to \
             reassignment) is the *reassigned* column: at most {reassign:.1} s here ({}). The probe gap adds the phase \
             of the checker's interval on top, which is why the gap itself can exceed 2 x lease.\n",
            if reassign <= SHARDING_BOUND {
                "within it"
            } else {
                "over it"
            }
        ));
    }
    let mut summary = vec![format!(
        "Failover ({} checkers, 10 s interval, leases 10s/7s/2s), largest probe gap: {}; DESIGN bound {DESIGN_BOUND:.0} s, 2 x lease {SHARDING_BOUND:.0} s.",
        fmt_int(m as f64),
        all.iter()
            .map(|g| format!(
                "{} **{:.1} s**",
                g.scenario
                    .split(" (")
                    .next()
                    .unwrap_or("")
                    .replace(" of a replica", "")
                    .replace(" of all 3 replicas", ""),
                g.gap_max
            ))
            .collect::<Vec<_>>()
            .join(", ")
    )];
    if let Some(r) = roll {
        let png = img.join("rolling-restart-gaps.png");
        let plotted = save_png(&png, (1100, 460), |root| {
            let x1 = r.to - r.from + 2.0;
            let ymax = r.points.iter().map(|p| p.1).fold(DESIGN_BOUND, f64::max) + 3.0;
            let mut c = ChartBuilder::on(root)
                .caption(
                    "Rolling restart: time since the previous probe of the same checker, per probe",
                    ("sans-serif", 18),
                )
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(55)
                .build_cartesian_2d(-15f64..x1, 0f64..ymax)?;
            c.configure_mesh()
                .x_desc("seconds since the rolling restart began")
                .y_desc("gap (s)")
                .x_label_formatter(&|x| format!("{x:.0}"))
                .y_label_formatter(&|y| format!("{y:.0}"))
                .draw()?;
            let blue = RGBColor(31, 119, 180).mix(0.35);
            c.draw_series(r.points.iter().map(|p| Circle::new(*p, 2, blue.filled())))?
                .label("probe (gap since the previous one)")
                .legend(move |(x, y)| Circle::new((x + 10, y), 3, RGBColor(31, 119, 180).filled()));
            let red = ShapeStyle::from(RED).stroke_width(2);
            c.draw_series(LineSeries::new(
                vec![(-15.0, DESIGN_BOUND), (x1, DESIGN_BOUND)],
                red,
            ))?
            .label(format!("DESIGN bound {DESIGN_BOUND:.0} s"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], red));
            let purple = ShapeStyle::from(MAGENTA).stroke_width(1);
            c.draw_series(LineSeries::new(
                vec![(-15.0, SHARDING_BOUND), (x1, SHARDING_BOUND)],
                purple,
            ))?
            .label(format!("2 x lease {SHARDING_BOUND:.0} s"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], purple));
            let grey = ShapeStyle::from(BLACK.mix(0.5)).stroke_width(1);
            for (k, (t, label)) in r.events.iter().enumerate() {
                c.draw_series(LineSeries::new(vec![(*t, 0.0), (*t, ymax)], grey))?;
                c.draw_series(std::iter::once(Text::new(
                    label.clone(),
                    (*t + 0.3, ymax - 1.0 - 1.3 * (k % 2) as f64),
                    ("sans-serif", 14),
                )))?;
            }
            c.configure_series_labels()
                .position(SeriesLabelPosition::LowerRight)
                .border_style(BLACK)
                .background_style(WHITE.mix(0.9))
                .draw()?;
            Ok(())
        });
        if plotted.is_ok() {
            s.push_str("\nVertical lines: `+k` the k-th new replica is ready, `-k` the k-th old replica exited after SIGTERM.\n\n![rolling restart gaps](img/rolling-restart-gaps.png)\n");
        }
        let _ = r.moves_per_checker;
    }
    let worst = all.iter().map(|g| g.gap_max).fold(0.0, f64::max);
    summary.push(format!(
        "Failover worst case {:.1} s: within the DESIGN bound: {}; within 2 x lease: {}.",
        worst,
        yes(worst <= DESIGN_BOUND),
        yes(worst <= SHARDING_BOUND)
    ));
    Section { body: s, summary }
}

// ================================================================== driver

async fn cluster_parts(
    cfg: &Cfg,
    img: &Path,
    t0: Instant,
) -> (Option<Res<Section>>, Option<Res<Section>>) {
    let cl = match ClusterCtx::start(&cfg.work).await {
        Ok(c) => c,
        Err(e) => {
            let msg = format!("control plane did not start: {e}");
            return (
                cfg.part("scale").then(|| Err(err(msg.clone()))),
                cfg.part("failover").then(|| Err(err(msg))),
            );
        }
    };
    let mut scale_rows = Vec::new();
    let mut scale_err = None;
    let mut mem_variant = None;
    let mut failover: Option<Res<Section>> = None;
    let small = if cfg.part("failover") && !cfg.part("scale") {
        cfg.failover_checkers
    } else {
        1000
    };
    // 1,000 checkers: scale figures, then the failover scenarios on the same fleet.
    match Fleet::start(&cl, cfg, t0, &format!("m{small}"), 3, small).await {
        Ok(mut f) => {
            if cfg.part("scale") {
                match measure_scale(&f, cfg).await {
                    Ok(r) => scale_rows.push(r),
                    Err(e) => scale_err = Some(e.to_string()),
                }
            }
            if cfg.part("failover") {
                failover = Some(run_failover(&mut f, img).await);
            }
            f.shutdown();
        }
        Err(e) => scale_err = Some(e.to_string()),
    }
    if cfg.part("scale") {
        let mut sizes = vec![10_000usize];
        if cfg.large {
            sizes.push(30_000);
        }
        for m in sizes {
            match Fleet::start(&cl, cfg, t0, &format!("m{m}"), 3, m).await {
                Ok(mut f) => {
                    match measure_scale(&f, cfg).await {
                        Ok(r) => scale_rows.push(r),
                        Err(e) => scale_err = Some(e.to_string()),
                    }
                    if m == 10_000 {
                        // What the per-checker histogram costs: the same objects,
                        // new replicas without it.
                        match f.restart_with(&["--per-checker-histogram=false"]).await {
                            Ok(v) => mem_variant = Some(v),
                            Err(e) => scale_err = Some(e.to_string()),
                        }
                    }
                    f.shutdown();
                }
                Err(e) => scale_err = Some(e.to_string()),
            }
        }
    }
    cl.down();
    let scale = cfg.part("scale").then(|| {
        let mut sec = scale_section(
            &scale_rows,
            mem_variant.as_ref(),
            operator_heartbeat_s(&cfg.operator),
        );
        if let Some(e) = scale_err {
            sec.body
                .push_str(&format!("\n**Error during this part:** {e}\n"));
            sec.summary.push(format!("Scale: error: {e}"));
        }
        Ok(sec)
    });
    (scale, failover)
}

async fn run_failover(f: &mut Fleet<'_>, img: &Path) -> Res<Section> {
    let mut results = Vec::new();
    let mut errors = Vec::new();
    for kind in ["sigkill", "sigterm", "leader"] {
        match failover_once(f, kind).await {
            Ok(r) => {
                eprintln!(
                    "bench: failover {}: {} moved, largest gap {:.1} s, others {:.1} s, {}",
                    r.scenario, r.moved, r.gap_max, r.others_max, r.note
                );
                results.push(r)
            }
            Err(e) => errors.push(format!("{kind}: {e}")),
        }
    }
    let roll = match rolling_restart(f).await {
        Ok(r) => {
            eprintln!(
                "bench: rolling restart: largest gap {:.1} s, {}",
                r.gap.gap_max, r.gap.note
            );
            Some(r)
        }
        Err(e) => {
            errors.push(format!("rolling restart: {e}"));
            None
        }
    };
    let mut sec = failover_section(&results, roll.as_ref(), f.m, img);
    for e in errors {
        sec.body.push_str(&format!("\n**Error:** {e}\n"));
        sec.summary.push(format!("Failover error: {e}"));
    }
    Ok(sec)
}

fn driver_main() {
    let cfg = Cfg::from_env();
    let t_start = Instant::now();
    let m = machine();
    let img = cfg.out.join("img");
    std::fs::create_dir_all(&img).expect("create the output directory");
    std::fs::create_dir_all(&cfg.work).expect("create the work directory");
    let fonts = register_font();
    if !fonts {
        eprintln!(
            "bench: no TrueType font found (apt-get install fonts-dejavu-core): plots are skipped"
        );
    }
    if !cfg.operator.is_file() && (cfg.part("scale") || cfg.part("failover")) {
        eprintln!(
            "bench: {} not found: build it with `cargo build --release` (make bench does)",
            cfg.operator.display()
        );
        std::process::exit(2);
    }

    let probe = cfg.part("probe").then(|| {
        eprintln!("bench: part 1, probe engine vs blackbox_exporter");
        part_probe(&cfg, &img)
    });
    let ring = cfg.part("ring").then(|| {
        eprintln!("bench: part 2, ring simulation");
        part_ring(&cfg, &img)
    });
    let (scale, failover) = if cfg.part("scale") || cfg.part("failover") {
        eprintln!("bench: parts 3 and 4, real control plane");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        let t0 = Instant::now();
        rt.block_on(cluster_parts(&cfg, &img, t0))
    } else {
        (None, None)
    };

    let load_end = std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ");
    let took = t_start.elapsed().as_secs_f64();
    let mut doc = String::new();
    doc.push_str("# Benchmarks\n\n");
    doc.push_str(&format!(
        "Written by `{}` ({}, src/bin/bench.rs); do not edit by hand. The machine is shared and noisy, so every \
         figure is either a ratio against a peer measured in the same run or a distribution over several rounds.\n\n",
        cfg.command,
        if cfg.quick { "quick mode: short runs, figures indicative only" } else { "full run" }
    ));
    let mut failures = 0;
    let mut summary = Vec::new();
    let mut sections = Vec::new();
    for (title, part) in [
        (
            "1. Probe engine efficiency: webchecker prober vs blackbox_exporter",
            probe,
        ),
        ("2. Ring quality (simulation)", ring),
        ("3. Scale on a real control plane", scale),
        ("4. Failover", failover),
    ] {
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
    let path = cfg.out.join("benchmarks.md");
    std::fs::write(&path, doc).expect("write the report");
    eprintln!("bench: wrote {} in {:.1} min", path.display(), took / 60.0);
    if failures > 0 {
        std::process::exit(1);
    }
}

fn method_notes() -> String {
    "## Method notes\n\n\
     - Part 1 counts every probe the prober finished in the measured run and divides by the CPU time \
       (user + system, all threads) the prober *process* used meanwhile, read from `/proc/PID/stat` before \
       and after. The kernel's TCP work on loopback is partly charged to whichever process sends, so both \
       probers also pay for part of the target's handshakes; that is the same for both. blackbox_exporter's \
       figure includes serving `/probe` and encoding its metrics, which is how it is used; ours includes \
       producing an `Outcome` with phase timings, not the operator's metric and status bookkeeping.\n\
     - Part 3's achieved rate is counted at the witness (what the targets see), not from the operator's own \
       counters. Writes per 100 probes compares `webchecker_status_writes_total` with \
       `webchecker_probes_total` over the same window.\n\
     - Part 4's gaps are the witness's receive times, so they include connection setup; the normal cadence \
       shows as gaps of about the interval.\n\
     - `BENCH_QUICK=1` shortens every part (for development); `BENCH_LARGE=1` adds 30,000 checkers to part 3; \
       `BENCH_PARTS=probe,ring,scale,failover` runs a subset; `BENCH_OUT=DIR` writes elsewhere.\n"
        .to_string()
}

fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("prober-worker") => worker_main(),
        Some("target-server") => target_main(),
        Some("-h") | Some("--help") | Some("help") => {
            eprintln!(
                "usage: bench            run the benchmarks, write docs/benchmarks.md (see the module docs for BENCH_* variables)\n       bench prober-worker  (internal)\n       bench target-server  (internal)"
            );
        }
        _ => driver_main(),
    }
}
