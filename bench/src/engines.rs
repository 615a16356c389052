//! Part 1's engines, each in a process of its own so that its CPU time can
//! be read from /proc: the target (`bench target-server`), our prober
//! (`bench prober-worker`, driven over stdin/stdout), and the load that
//! drives blackbox_exporter's `/probe`.

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
use webchecker::probe::{AddressPolicy, Prober};
use webchecker_kit::http_get_within;

use crate::stats::quantile;
use crate::sys::{clk_tck, cpu_ticks, pin_command, pin_current_thread};
use crate::{Res, err};

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

/// `bench target-server`: answers every request 200 "ok\n" and closes.
pub fn target_main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let l = webchecker_kit::listener().await;
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
pub fn worker_main() {
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

pub struct Worker {
    pub child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Worker {
    pub fn spawn(cpu: Option<usize>) -> Res<Worker> {
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

pub fn run_ours(
    w: &mut Worker,
    url: &str,
    c: usize,
    warm: Duration,
    d: Duration,
) -> Res<EngineRun> {
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

pub fn run_blackbox(
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
