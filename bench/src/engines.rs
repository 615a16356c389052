//! Part 1's engines (and part 1b's: kinds.rs), each in a process of its own
//! so that its CPU time can be read from /proc: the target (`bench
//! target-server`), our prober (`bench prober-worker`, driven over
//! stdin/stdout), the floor (`bench prober-worker floor`: only what a probe
//! must do), and the load that drives blackbox_exporter's `/probe`.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use webchecker::api::WebCheckerSpec;
use webchecker::probe::{AddressPolicy, ProbePlan, Prober};
use webchecker_kit::{http_get_within, speaks};

use crate::common::{Res, err};
use crate::stats::quantile;
use crate::sys::{clk_tck, cpu_ticks, pin_command, pin_current_thread};

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

/// The protocols parts 1 and 1b compare the engines on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Proto {
    /// HTTP/1.1 over TCP; the target answers and closes.
    Http1,
    /// HTTP/1.1 over TLS (the target offers only `http/1.1` by ALPN).
    TlsHttp1,
    /// HTTP/2 over TLS (the target offers `h2`, then `http/1.1`).
    TlsHttp2,
    /// gRPC health (`grpc.health.v1.Health/Check`), plaintext HTTP/2.
    Grpc,
    /// gRPC health over TLS (ALPN h2).
    GrpcTls,
    /// A TCP connect, nothing sent.
    Tcp,
}

impl Proto {
    /// Part 1's protocols (HTTP; part 1b's are in kinds.rs).
    pub const ALL: [Proto; 3] = [Proto::Http1, Proto::TlsHttp1, Proto::TlsHttp2];

    pub fn arg(self) -> &'static str {
        match self {
            Proto::Http1 => "http1",
            Proto::TlsHttp1 => "tls-http1",
            Proto::TlsHttp2 => "tls-h2",
            Proto::Grpc => "grpc",
            Proto::GrpcTls => "grpcs",
            Proto::Tcp => "tcp",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Proto::Http1 => "HTTP/1.1",
            Proto::TlsHttp1 => "HTTP/1.1 over TLS",
            Proto::TlsHttp2 => "HTTP/2 over TLS",
            Proto::Grpc => "gRPC health",
            Proto::GrpcTls => "gRPC health over TLS",
            Proto::Tcp => "TCP connect",
        }
    }

    /// The version each engine must report (a probe that negotiated another
    /// one fails and counts as an error): ours, blackbox's.
    pub fn version(self) -> Option<(&'static str, &'static str)> {
        match self {
            Proto::TlsHttp1 => Some(("HTTP/1.1", "HTTP/1.1")),
            Proto::TlsHttp2 => Some(("HTTP/2", "HTTP/2.0")),
            _ => None,
        }
    }

    pub fn module(self) -> &'static str {
        match self {
            Proto::Http1 => "http_2xx",
            Proto::TlsHttp1 => "tls_http1",
            Proto::TlsHttp2 => "tls_h2",
            Proto::Grpc => "grpc_plain",
            Proto::GrpcTls => "grpc_tls",
            Proto::Tcp => "tcp_connect",
        }
    }

    /// blackbox_exporter's target for our URL: the URL for its http
    /// prober, `host:port` for its grpc and tcp probers.
    fn blackbox_target(self, url: &str) -> &str {
        match self {
            Proto::Http1 | Proto::TlsHttp1 | Proto::TlsHttp2 => url,
            _ => url.split_once("://").map_or(url, |(_, rest)| rest),
        }
    }

    fn parse(s: &str) -> Option<Proto> {
        Proto::ALL.into_iter().find(|p| p.arg() == s)
    }
}

/// `bench target-server [PROTO CA_FILE]`: answers every request 200. Over
/// plain HTTP/1.1 a minimal server that answers and closes; over TLS the
/// kit's protocol target, with a certificate for 127.0.0.1 from a CA whose
/// PEM it writes to CA_FILE. Prints its port.
pub fn target_main(args: &[String]) {
    let proto = args.first().map(|a| Proto::parse(a).expect("a protocol"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // Exit when the driver closes our stdin (or dies).
        std::thread::spawn(|| {
            let mut b = String::new();
            let _ = std::io::stdin().read_line(&mut b);
            std::process::exit(0);
        });
        if let Some(p @ (Proto::TlsHttp1 | Proto::TlsHttp2)) = proto {
            let ca = webchecker_kit::targets::TestCa::new();
            std::fs::write(&args[1], &ca.pem).expect("write the CA file");
            let alpn: Vec<&'static [u8]> = if p == Proto::TlsHttp2 {
                vec![b"h2", b"http/1.1"]
            } else {
                vec![b"http/1.1"]
            };
            let cert = speaks::SwapCert::new(&ca.leaf(&["127.0.0.1"]));
            let t = speaks::Target::start(speaks::Speaks::Tls(cert, alpn), |_| {
                webchecker_kit::targets::Answer::ok()
            })
            .await;
            println!("{}", t.addr.port());
            std::io::stdout().flush().unwrap();
            std::future::pending::<()>().await;
        }
        let l = webchecker_kit::listener().await;
        println!("{}", l.local_addr().unwrap().port());
        std::io::stdout().flush().unwrap();
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

/// `bench prober-worker [PROVIDER [timed] | floor]`: our prober in a process
/// of its own, with the rustls provider PROVIDER (crypto.rs; the operator's
/// by default), timed if asked; or the floor (plain HTTP/1.1 only). Protocol on stdin/stdout: `run URL C MILLIS
/// [CA_FILE [VERSION]]` -> `done PROBES ERRORS` (with a CA file the probes
/// verify the target's certificate against it, `tls.caBundle`; with a
/// version they require that HTTP version); `report` -> `lat P50_US P99_US`
/// of the last run; `cost` -> `cost KX_NS KX_CALLS SIG_NS SIG_CALLS`, what
/// the timed provider counted in the last run; EOF ends.
pub fn worker_main(args: &[String]) {
    let floor = args.first().is_some_and(|a| a == FLOOR);
    if !floor {
        install_worker_provider(args);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    // The bench's targets listen on loopback.
    let policy = AddressPolicy::with_loopback();
    let prober = (!floor).then(|| Arc::new(Prober::new(Some("bench-prober"), policy, 65536)));
    let mut last: Vec<u32> = Vec::new();
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.first().copied() {
            Some("run") if floor => {
                let c: usize = f[2].parse().unwrap();
                let d = Duration::from_millis(f[3].parse().unwrap());
                let (lat, errors) = rt.block_on(floor_for(f[1], c, d));
                writeln!(out, "done {} {}", lat.len() as u64 + errors, errors).unwrap();
                out.flush().unwrap();
                last = lat;
            }
            Some("run") => {
                let (plan, c, d) = worker_run_plan(&f);
                let prober = prober.as_ref().expect("a prober unless the floor");
                let (lat, errors) = rt.block_on(probe_for(prober, plan, c, d));
                writeln!(out, "done {} {}", lat.len() as u64 + errors, errors).unwrap();
                out.flush().unwrap();
                last = lat;
            }
            Some("cost") => {
                let [kx, kxn, sig, sign] = crate::crypto::counted();
                writeln!(out, "cost {kx} {kxn} {sig} {sign}").unwrap();
                out.flush().unwrap();
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

/// The worker's rustls provider, the process default: `args[0]` (the
/// operator's when none is named), timed when `args[1]` is `timed`.
fn install_worker_provider(args: &[String]) {
    let name = args
        .first()
        .map_or(crate::crypto::names()[0], String::as_str);
    let provider = crate::crypto::provider(name).expect("a provider compiled into the bench");
    let provider = if args.get(1).is_some_and(|a| a == "timed") {
        crate::crypto::timed_provider(provider)
    } else {
        provider
    };
    provider
        .install_default()
        .expect("the worker installs the only provider");
}

/// The probe plan, concurrency and duration of a `run URL C MILLIS
/// [CA_FILE [VERSION]]` line (split into words); resets the timed
/// provider's counts for the run.
fn worker_run_plan(f: &[&str]) -> (Arc<ProbePlan>, usize, Duration) {
    let url = f[1].to_string();
    let c: usize = f[2].parse().unwrap();
    let d = Duration::from_millis(f[3].parse().unwrap());
    let mut spec = serde_json::json!({
        "host": url, "path": "/", "intervalSeconds": 10, "timeoutSeconds": 5
    });
    let ca = f
        .get(4)
        .map(|p| std::fs::read(p).expect("read the CA file"));
    if ca.is_some() {
        spec["tls"] = serde_json::json!({
            "caBundle": {"configMapKeyRef": {"name": "bench", "key": "ca.crt"}}
        });
    }
    if let Some(version) = f.get(5) {
        spec["httpVersions"] = serde_json::json!([version]);
    }
    let spec: WebCheckerSpec = serde_json::from_value(spec).unwrap();
    crate::crypto::reset();
    let plan =
        Arc::new(webchecker::probe::plan(&spec, &|_| ca.clone().ok_or("no CA".into())).unwrap());
    (plan, c, d)
}

/// `c` probe loops on `plan` for `d`: the successful probes' durations (µs)
/// and the number of failed ones.
async fn probe_for(
    prober: &Arc<Prober>,
    plan: Arc<ProbePlan>,
    c: usize,
    d: Duration,
) -> (Vec<u32>, u64) {
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
    joined(tasks).await
}

/// The probe loops' successful durations (µs) and failures, together.
async fn joined(tasks: Vec<tokio::task::JoinHandle<(Vec<u32>, u64)>>) -> (Vec<u32>, u64) {
    let mut all = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (l, e) = t.await.unwrap();
        all.extend(l);
        errors += e;
    }
    (all, errors)
}

/// The worker argument that makes it the floor.
pub const FLOOR: &str = "floor";

/// What one HTTP/1.1 probe must do and nothing more: connect to the address
/// (nothing to resolve), send the request, read the status line and the
/// headers, close. True on a 200.
async fn floor_probe(addr: std::net::SocketAddr, request: &[u8], buf: &mut Vec<u8>) -> bool {
    let Ok(mut s) = TcpStream::connect(addr).await else {
        return false;
    };
    if s.write_all(request).await.is_err() {
        return false;
    }
    buf.clear();
    read_head(&mut s, buf).await && buf.starts_with(b"HTTP/1.1 200 ")
}

/// `c` loops of [`floor_probe`] on `url` (`http://IP:PORT`) for `d`, as
/// [`probe_for`] runs ours.
async fn floor_for(url: &str, c: usize, d: Duration) -> (Vec<u32>, u64) {
    let authority = url.trim_start_matches("http://").trim_end_matches('/');
    let addr: std::net::SocketAddr = authority.parse().expect("the floor takes http://IP:PORT");
    let request: Arc<[u8]> =
        format!("GET / HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n")
            .into_bytes()
            .into();
    let deadline = Instant::now() + d;
    let tasks: Vec<_> = (0..c)
        .map(|_| {
            let request = request.clone();
            tokio::spawn(async move {
                let (mut lat, mut errors) = (Vec::with_capacity(1 << 14), 0u64);
                let mut buf = Vec::with_capacity(1024);
                while Instant::now() < deadline {
                    let t = Instant::now();
                    if floor_probe(addr, &request, &mut buf).await {
                        lat.push(t.elapsed().as_micros() as u32);
                    } else {
                        errors += 1;
                    }
                }
                (lat, errors)
            })
        })
        .collect();
    joined(tasks).await
}

pub struct Worker {
    pub child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Worker {
    /// A worker on `cpu` with the arguments of [`worker_main`].
    pub fn spawn(cpu: Option<usize>, args: &[&str]) -> Res<Worker> {
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.arg("prober-worker")
            .args(args)
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

    pub fn ask(&mut self, line: &str) -> Res<Vec<String>> {
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

/// One measured run of an engine.
#[derive(Clone, Copy, Debug, Default)]
pub struct EngineRun {
    pub probes: f64,
    pub errors: f64,
    pub cpu_s: f64,
    pub user_s: f64,
    pub wall_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

impl EngineRun {
    pub fn per_cpu_s(&self) -> f64 {
        self.probes / self.cpu_s.max(1e-9)
    }

    pub fn user_us(&self) -> f64 {
        1e6 * self.user_s / self.probes.max(1.0)
    }

    pub fn sys_us(&self) -> f64 {
        1e6 * (self.cpu_s - self.user_s) / self.probes.max(1.0)
    }
}

/// Where an engine probes: the URL, and for TLS the CA file and protocol.
pub struct Aim<'a> {
    pub url: &'a str,
    pub proto: Proto,
    pub ca_file: Option<&'a std::path::Path>,
}

pub fn run_ours(
    w: &mut Worker,
    aim: &Aim<'_>,
    c: usize,
    warm: Duration,
    d: Duration,
) -> Res<EngineRun> {
    let pid = w.child.id();
    let url = aim.url;
    let tls = match (aim.ca_file, aim.proto.version()) {
        (Some(ca), Some((v, _))) => format!(" {} {v}", ca.display()),
        (Some(ca), None) => format!(" {}", ca.display()),
        _ => String::new(),
    };
    w.ask(&format!("run {url} {c} {}{tls}", warm.as_millis()))?;
    w.ask("report")?;
    let t = Instant::now();
    let c0 = cpu_ticks(pid).ok_or_else(|| err("no /proc stat"))?;
    let done = w.ask(&format!("run {url} {c} {}{tls}", d.as_millis()))?;
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

/// blackbox_exporter's `/probe` path for `aim`.
fn probe_path(aim: &Aim<'_>) -> String {
    let target = aim.proto.blackbox_target(aim.url);
    format!(
        "/probe?module={}&target={}",
        aim.proto.module(),
        target
            .replace('%', "%25")
            .replace(':', "%3A")
            .replace('/', "%2F")
    )
}

/// Drives blackbox_exporter's /probe at concurrency `c` over keep-alive
/// connections, from a thread of its own (pinned to `cpu`).
fn blackbox_load(
    port: u16,
    aim: &Aim<'_>,
    c: usize,
    d: Duration,
    cpu: Option<usize>,
) -> Res<(u64, u64, Vec<f64>)> {
    let path = probe_path(aim);
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

pub fn run_blackbox(
    pid: u32,
    port: u16,
    aim: &Aim<'_>,
    c: usize,
    warm: Duration,
    d: Duration,
    cpu: Option<usize>,
) -> Res<EngineRun> {
    blackbox_load(port, aim, c, warm, cpu)?;
    let t = Instant::now();
    let c0 = cpu_ticks(pid).ok_or_else(|| err("no /proc stat"))?;
    let (probes, errors, durs) = blackbox_load(port, aim, c, d, cpu)?;
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

pub fn wait_http(port: u16, path: &str, timeout: Duration) -> bool {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Some((200, _)) = rt.block_on(http_get_within(
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
