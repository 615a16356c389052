//! End-to-end test world: a real control plane (hack/cluster.sh, the same code
//! path as `make cluster-up`), operator replicas as local processes, and witness
//! HTTP targets that log who probed them and when.
#![allow(dead_code)]

pub mod dns;
pub mod faults;
pub mod fleet;
pub mod node;
pub mod objlog;
pub mod oci;
pub mod oracle;
pub mod release;
pub mod speaks;
pub mod targets;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use tokio::net::TcpListener;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `program` under coreutils' `timeout`: no external command can hang the
/// suite (killed `limit` after its start, SIGKILL 10 s later if it lingers;
/// exit status 124 then).
pub fn bounded(program: impl AsRef<std::ffi::OsStr>, limit: Duration) -> Command {
    let mut c = Command::new("timeout");
    c.arg("--kill-after=10s")
        .arg(format!("{}s", limit.as_secs().max(1)))
        .arg(program);
    c
}

/// Bound of one kubectl or helm call (a `--wait` included).
pub const TOOL_LIMIT: Duration = Duration::from_secs(300);
/// Bound of bringing a control plane up (it may build the tools first).
pub const SETUP_LIMIT: Duration = Duration::from_secs(3600);

/// Polls `f` until it returns Some, or panics with `what` after `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub struct Cluster {
    pub dir: PathBuf,
    pub kubeconfig: PathBuf,
    pub bin: PathBuf,
}

static SHARED: OnceLock<Cluster> = OnceLock::new();

impl Cluster {
    /// The control plane shared by the tests of one test binary. Started once,
    /// stopped by a reaper when the test process exits.
    pub fn shared(name: &str) -> &'static Cluster {
        SHARED.get_or_init(|| Cluster::start(name))
    }

    /// A control plane of one's own (for tests that stop the API server).
    pub fn start(name: &str) -> Cluster {
        Self::start_with(name, "")
    }

    /// Same, with extra kube-apiserver flags (space separated).
    pub fn start_with(name: &str, apiserver_args: &str) -> Cluster {
        let dir = repo()
            .join("target")
            .join("e2e")
            .join(format!("{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = bounded("bash", SETUP_LIMIT)
            .arg(repo().join("hack/cluster.sh"))
            .arg("up")
            .arg(&dir)
            .env("CLUSTER_APISERVER_EXTRA_ARGS", apiserver_args)
            .stderr(Stdio::inherit())
            .output()
            .expect("run hack/cluster.sh");
        assert!(out.status.success(), "hack/cluster.sh up failed");
        let kubeconfig = PathBuf::from(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .last()
                .unwrap()
                .trim(),
        );
        let env = std::fs::read_to_string(dir.join("cluster.env")).unwrap();
        let bin = env
            .lines()
            .find_map(|l| {
                l.strip_prefix("BIN=")
                    .or_else(|| l.strip_prefix("export BIN="))
            })
            .map(|v| PathBuf::from(v.trim_matches(|c| c == '"' || c == '\'')))
            .expect("BIN in cluster.env");
        // Reaper: take the control plane down when this test process exits.
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
        let c = Cluster {
            dir,
            kubeconfig,
            bin,
        };
        c.install_crd();
        c
    }

    pub fn script(&self, sub: &str) {
        let st = bounded("bash", TOOL_LIMIT)
            .arg(repo().join("hack/cluster.sh"))
            .arg(sub)
            .arg(&self.dir)
            .status()
            .unwrap();
        assert!(st.success(), "hack/cluster.sh {sub} failed");
    }

    pub fn kubectl(&self, args: &[&str]) -> std::process::Output {
        bounded(self.bin.join("kubectl"), TOOL_LIMIT)
            .env("KUBECONFIG", &self.kubeconfig)
            .args(args)
            .output()
            .expect("run kubectl")
    }

    pub fn kubectl_stdin(&self, args: &[&str], input: &str) -> std::process::Output {
        use std::io::Write;
        let mut child = bounded(self.bin.join("kubectl"), TOOL_LIMIT)
            .env("KUBECONFIG", &self.kubeconfig)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run kubectl");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    }

    pub fn install_crd(&self) {
        let crd = repo().join("crds/webcheckers.test.network.io.yaml");
        let out = self.kubectl(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            crd.to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = self.kubectl(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/webcheckers.test.network.io",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub async fn client(&self) -> Client {
        let kc = Kubeconfig::read_from(&self.kubeconfig).unwrap();
        let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .unwrap();
        Client::try_from(cfg).unwrap()
    }

    /// A fresh namespace (never deleted: there is no namespace controller).
    pub fn namespace(&self, prefix: &str) -> String {
        let ns = format!("{prefix}-{}", rand_suffix());
        let out = self.kubectl(&["create", "namespace", &ns]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        ns
    }
}

pub fn rand_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{:x}{}", t & 0xfffff, N.fetch_add(1, Ordering::Relaxed))
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One operator replica, a real process.
pub struct Operator {
    pub identity: String,
    pub port: u16,
    pub child: Option<Child>,
    pub log: PathBuf,
    args: Vec<String>,
    kubeconfig: PathBuf,
}

/// Lease timings that keep the tests short; the defaults are 10s/7s/2s.
pub const FAST_LEASES: &[&str] = &[
    "--lease-duration=3s",
    "--renew-deadline=2s",
    "--retry-period=500ms",
];

impl Operator {
    pub fn spawn(cluster: &Cluster, identity: &str, namespace: &str, extra: &[&str]) -> Operator {
        Self::spawn_with_kubeconfig(cluster, identity, namespace, extra, &cluster.kubeconfig)
    }

    pub fn spawn_with_kubeconfig(
        cluster: &Cluster,
        identity: &str,
        namespace: &str,
        extra: &[&str],
        kubeconfig: &Path,
    ) -> Operator {
        let mut args: Vec<String> = vec![
            format!("--identity={identity}"),
            format!("--namespace={namespace}"),
            format!("--watch-namespace={namespace}"),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut op = Operator {
            identity: identity.to_string(),
            port: 0,
            child: None,
            log: cluster.dir.join(format!("operator-{identity}.log")),
            args,
            kubeconfig: kubeconfig.to_path_buf(),
        };
        op.start();
        op
    }

    fn rust_log(&self) -> String {
        match self
            .args
            .iter()
            .find_map(|a| a.strip_prefix("--log-level="))
        {
            Some(level) => level.to_string(),
            None => "info,webchecker=debug".to_string(),
        }
    }

    /// A replica that watches every namespace (default Lease timings).
    pub fn spawn_all_namespaces(
        cluster: &Cluster,
        identity: &str,
        lease_namespace: &str,
    ) -> Operator {
        Self::spawn_all_namespaces_with(cluster, identity, lease_namespace, &[])
    }

    /// Same, with extra flags.
    pub fn spawn_all_namespaces_with(
        cluster: &Cluster,
        identity: &str,
        lease_namespace: &str,
        extra: &[&str],
    ) -> Operator {
        let mut args = vec![
            format!("--identity={identity}"),
            format!("--namespace={lease_namespace}"),
            "--log-level=info".to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut op = Operator {
            identity: identity.to_string(),
            port: 0,
            child: None,
            log: cluster.dir.join(format!("operator-{identity}.log")),
            args,
            kubeconfig: cluster.kubeconfig.clone(),
        };
        op.start();
        op
    }

    /// Starts (or restarts) the process with the same identity and flags.
    pub fn start(&mut self) {
        self.port = free_port();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_webchecker-operator"))
            .env("KUBECONFIG", &self.kubeconfig)
            // Debug logs (every probe) unless the test chose a level.
            .env("RUST_LOG", self.rust_log())
            .env_remove("POD_NAME")
            .env_remove("POD_NAMESPACE")
            // Test targets listen on loopback, which the operator denies by
            // default; a test that wants the default passes --allow-loopback=false.
            .env("WEBCHECKER_ALLOW_LOOPBACK", "true")
            // Names resolve through the test's own name server, never the machine's.
            .envs(dns::Dns::shared().operator_env())
            .args(&self.args)
            .arg(format!("--listen=127.0.0.1:{}", self.port))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start the operator");
        self.child = Some(child);
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("running").id() as i32
    }

    pub fn signal(&self, sig: i32) {
        unsafe {
            libc::kill(self.pid(), sig);
        }
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM, then waits for a clean exit.
    pub fn terminate(&mut self, timeout: Duration) -> std::process::ExitStatus {
        self.signal(libc::SIGTERM);
        let mut c = self.child.take().unwrap();
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = c.try_wait().unwrap() {
                return st;
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                panic!(
                    "{} did not exit within {timeout:?} of SIGTERM",
                    self.identity
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    pub async fn get(&self, path: &str) -> Option<(u16, String)> {
        http_get(&format!("127.0.0.1:{}", self.port), path).await
    }

    pub async fn metrics(&self) -> Option<String> {
        self.get("/metrics").await.map(|(_, b)| b)
    }

    pub async fn wait_ready(&self, timeout: Duration) {
        eventually(timeout, &format!("{} ready", self.identity), || async {
            match self.get("/readyz").await {
                Some((200, _)) => Some(()),
                _ => None,
            }
        })
        .await
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            unsafe {
                libc::kill(c.id() as i32, libc::SIGCONT);
            }
        }
        self.kill();
    }
}

/// Minimal HTTP/1.0 GET for the tests (no client library needed).
pub async fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    http_get_within(addr, path, Duration::from_secs(5)).await
}

/// `http_get` with its own deadline (for example Prometheus's scrape timeout).
pub async fn http_get_within(addr: &str, path: &str, limit: Duration) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fut = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
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
    tokio::time::timeout(limit, fut).await.ok().flatten()
}

/// Value of one sample in Prometheus text format: `name{labels}` with labels as given (subset match).
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut total = None;
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let (series, value) = match line.rsplit_once(' ') {
            Some(x) => x,
            None => continue,
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
            let v: f64 = value.parse().ok()?;
            total = Some(total.unwrap_or(0.0) + v);
        }
    }
    total
}

/// Quantile from a histogram's cumulative buckets (upper bound of the bucket holding it).
pub fn histogram_quantile(text: &str, name: &str, q: f64) -> Option<f64> {
    let mut buckets: Vec<(f64, f64)> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix(&format!("{name}_bucket{{")) {
            let le = rest.split("le=\"").nth(1)?.split('"').next()?;
            let le: f64 = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            let v: f64 = line.rsplit_once(' ')?.1.parse().ok()?;
            buckets.push((le, v));
        }
    }
    buckets.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
    let total = buckets.last()?.1;
    if total == 0.0 {
        return None;
    }
    buckets
        .into_iter()
        .find(|(_, c)| *c >= q * total)
        .map(|(le, _)| le)
}

/// How a witness target answers a checker.
#[derive(Clone, Debug)]
pub enum Mode {
    Ok,
    Status(u16),
    Hang(Duration),
}

#[derive(Clone, Debug)]
pub struct Hit {
    pub checker: String,
    pub replica: String,
    pub start: Instant,
    pub end: Instant,
    pub headers: HashMap<String, String>,
}

#[derive(Default)]
struct WitnessState {
    hits: Vec<Hit>,
    /// Count probes only (no log): for load scenarios.
    quiet: bool,
    count: u64,
    modes: HashMap<String, Mode>,
    default_mode: Option<Mode>,
    /// Exchanges the client abandoned before the answer (for example a probe
    /// that timed out on a hanging target): `end` is when the witness saw the
    /// connection close.
    abandoned: Vec<Hit>,
}

/// Records an exchange as abandoned if its future is dropped before it answered.
struct AbandonGuard {
    state: Arc<Mutex<WitnessState>>,
    hit: Option<Hit>,
}

impl Drop for AbandonGuard {
    fn drop(&mut self) {
        if let Some(mut h) = self.hit.take() {
            h.end = Instant::now();
            if let Ok(mut s) = self.state.lock() {
                s.abandoned.push(h);
            }
        }
    }
}

/// An HTTP target that logs every probe: path `/c/<checker>`, header
/// `X-Webchecker-Replica`, start and end of the exchange.
pub struct Witness {
    pub addr: SocketAddr,
    state: Arc<Mutex<WitnessState>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Witness {
    pub async fn start() -> Witness {
        Self::start_on("127.0.0.1").await
    }

    /// A witness on another local address (a real node's pods cannot reach
    /// the host's loopback; they reach the node's address).
    pub async fn start_on(ip: &str) -> Witness {
        let listener = TcpListener::bind((ip, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut w = Witness {
            addr,
            state: Arc::new(Mutex::new(WitnessState::default())),
            stop: None,
        };
        w.serve(listener);
        w
    }

    fn serve(&mut self, listener: TcpListener) {
        let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
        self.stop = Some(tx);
        let state = self.state.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = &mut rx => return,
                    acc = listener.accept() => {
                        let Ok((stream, _)) = acc else { continue };
                        let state = state.clone();
                        tokio::spawn(async move {
                            let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                                let state = state.clone();
                                async move {
                                    let start = Instant::now();
                                    let path = req.uri().path().to_string();
                                    let checker = path.strip_prefix("/c/").unwrap_or(&path).split('/').next().unwrap_or("").to_string();
                                    let headers: HashMap<String, String> = req
                                        .headers()
                                        .iter()
                                        .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
                                        .collect();
                                    let replica = headers.get("x-webchecker-replica").cloned().unwrap_or_default();
                                    let mut guard = AbandonGuard {
                                        state: state.clone(),
                                        hit: Some(Hit { checker: checker.clone(), replica: replica.clone(), start, end: start, headers: headers.clone() }),
                                    };
                                    let mode = {
                                        let s = state.lock().unwrap();
                                        s.modes.get(&checker).cloned().or(s.default_mode.clone()).unwrap_or(Mode::Ok)
                                    };
                                    let code = match mode {
                                        Mode::Ok => 200,
                                        Mode::Status(c) => c,
                                        Mode::Hang(d) => {
                                            tokio::time::sleep(d).await;
                                            200
                                        }
                                    };
                                    guard.hit = None;
                                    {
                                        let mut s = state.lock().unwrap();
                                        s.count += 1;
                                        if !s.quiet {
                                            s.hits.push(Hit { checker, replica, start, end: Instant::now(), headers });
                                        }
                                    }
                                    Ok::<_, std::convert::Infallible>(
                                        hyper::Response::builder().status(code).body(Full::new(Bytes::from_static(b"ok\n"))).unwrap(),
                                    )
                                }
                            });
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(TokioIo::new(stream), svc)
                                .await;
                        });
                    }
                }
            }
        });
    }

    /// Stop logging hits (only count them), for load scenarios.
    pub fn set_quiet(&self) {
        self.state.lock().unwrap().quiet = true;
    }

    pub fn total(&self) -> u64 {
        self.state.lock().unwrap().count
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn set_mode(&self, checker: &str, mode: Mode) {
        self.state
            .lock()
            .unwrap()
            .modes
            .insert(checker.to_string(), mode);
    }

    pub fn set_default_mode(&self, mode: Mode) {
        self.state.lock().unwrap().default_mode = Some(mode);
    }

    /// Exchanges abandoned by the client before the answer (see `abandoned`).
    pub fn abandoned_hits(&self) -> Vec<Hit> {
        self.state.lock().unwrap().abandoned.clone()
    }

    /// Every exchange that reached the witness: answered and abandoned.
    pub fn all_hits(&self) -> Vec<Hit> {
        let s = self.state.lock().unwrap();
        s.hits.iter().chain(s.abandoned.iter()).cloned().collect()
    }

    pub fn hits(&self) -> Vec<Hit> {
        self.state.lock().unwrap().hits.clone()
    }

    /// Takes every exchange logged so far (answered and abandoned) out of the
    /// witness, for long runs that keep their own compact log.
    pub fn take_hits(&self) -> Vec<Hit> {
        let mut s = self.state.lock().unwrap();
        let mut out = std::mem::take(&mut s.hits);
        out.append(&mut s.abandoned);
        out
    }

    pub fn hits_for(&self, checker: &str) -> Vec<Hit> {
        self.hits()
            .into_iter()
            .filter(|h| h.checker == checker)
            .collect()
    }

    pub fn count_for(&self, checker: &str) -> usize {
        self.state
            .lock()
            .unwrap()
            .hits
            .iter()
            .filter(|h| h.checker == checker)
            .count()
    }

    /// Stops listening (connections are refused) until `resume`.
    pub fn pause(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }

    pub async fn resume(&mut self) {
        let listener = loop {
            match TcpListener::bind(self.addr).await {
                Ok(l) => break l,
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        };
        self.serve(listener);
    }
}

/// Checks exclusivity from the witness log: no two replicas probe one checker
/// at overlapping times, and once a new owner started, the old one never
/// probes again. Returns a description of the first violation.
pub fn exclusivity_violation(hits: &[Hit]) -> Option<String> {
    let mut by: HashMap<&str, Vec<&Hit>> = HashMap::new();
    for h in hits {
        by.entry(&h.checker).or_default().push(h);
    }
    for (checker, mut hs) in by {
        hs.sort_by_key(|h| h.start);
        for w in hs.windows(2) {
            if w[0].replica != w[1].replica && w[1].start < w[0].end {
                return Some(format!(
                    "{checker}: {} and {} overlapped",
                    w[0].replica, w[1].replica
                ));
            }
        }
    }
    None
}

/// Strict form of the second half of invariant 2, for scenarios where no
/// checker may legitimately move back: a replica never probes a checker again
/// after another replica started probing it.
pub fn reappearance(hits: &[Hit]) -> Option<String> {
    let mut by: HashMap<&str, Vec<&Hit>> = HashMap::new();
    for h in hits {
        by.entry(&h.checker).or_default().push(h);
    }
    for (checker, mut hs) in by {
        hs.sort_by_key(|h| h.start);
        let mut runs: Vec<&str> = Vec::new();
        for h in &hs {
            if runs.last() != Some(&h.replica.as_str()) {
                if runs.contains(&h.replica.as_str()) {
                    return Some(format!(
                        "{checker}: {} probed again after {:?} took over",
                        h.replica,
                        runs.last()
                    ));
                }
                runs.push(&h.replica);
            }
        }
    }
    None
}

/// Largest gap between consecutive probes of each checker, over `[from, to]`.
pub fn largest_gap(
    hits: &[Hit],
    checkers: &[String],
    from: Instant,
    to: Instant,
) -> (Duration, String) {
    let mut worst = (Duration::ZERO, String::new());
    for c in checkers {
        let mut ts: Vec<Instant> = hits
            .iter()
            .filter(|h| &h.checker == c)
            .map(|h| h.start)
            .collect();
        ts.sort();
        let mut prev = from;
        for t in ts.into_iter().filter(|t| *t >= from && *t <= to) {
            if t - prev > worst.0 {
                worst = (t - prev, c.clone());
            }
            prev = t;
        }
        if to - prev > worst.0 {
            worst = (to - prev, c.clone());
        }
    }
    worst
}

pub fn checker_yaml(name: &str, host: &str, path: &str, interval: u32, extra: &str) -> String {
    format!(
        "apiVersion: test.network.io/v1alpha1\nkind: WebChecker\nmetadata:\n  name: {name}\nspec:\n  host: {host}\n  path: {path}\n  intervalSeconds: {interval}\n{extra}"
    )
}

/// Creates many checkers quickly through the API; returns when each create returned.
pub async fn create_checkers(
    client: &Client,
    ns: &str,
    target: &str,
    names: &[String],
    interval: u32,
) -> HashMap<String, Instant> {
    let created = Arc::new(Mutex::new(HashMap::new()));
    use futures::StreamExt;
    let api: Api<kube::core::DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &kube::discovery::ApiResource::erase::<webchecker::api::WebChecker>(&()),
    );
    futures::stream::iter(names.iter())
        .for_each_concurrent(32, |n| {
            let api = api.clone();
            let created = created.clone();
            async move {
                let obj: kube::core::DynamicObject = serde_json::from_value(serde_json::json!({
                    "apiVersion": "test.network.io/v1alpha1",
                    "kind": "WebChecker",
                    "metadata": {"name": n},
                    "spec": {
                        "host": target,
                        "path": format!("/c/{n}"),
                        "intervalSeconds": interval,
                        // The timeout must stay below the interval.
                        "timeoutSeconds": if interval > 1 { 1.0 } else { 0.5 },
                    }
                }))
                .unwrap();
                for _ in 0..5 {
                    if api.create(&Default::default(), &obj).await.is_ok() {
                        created.lock().unwrap().insert(n.clone(), Instant::now());
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                panic!("could not create {n}");
            }
        })
        .await;
    created.lock().unwrap().clone()
}

/// A TCP proxy in front of the API server that a test can cut and restore,
/// to cut one replica off while the others still reach the API server.
pub struct TcpProxy {
    pub kubeconfig: PathBuf,
    cut: Arc<std::sync::atomic::AtomicBool>,
    conns: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl TcpProxy {
    pub async fn start(kubeconfig: &Path) -> TcpProxy {
        let text = std::fs::read_to_string(kubeconfig).unwrap();
        let server = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("server: "))
            .expect("server in kubeconfig")
            .trim()
            .to_string();
        let upstream = server.trim_start_matches("https://").to_string();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let path = kubeconfig.with_file_name(format!("kubeconfig-proxy-{port}"));
        std::fs::write(
            &path,
            text.replace(&server, &format!("https://127.0.0.1:{port}")),
        )
        .unwrap();
        let cut = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::new(Mutex::new(Vec::new()));
        let (c2, k2) = (cut.clone(), conns.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                if c2.load(std::sync::atomic::Ordering::SeqCst) {
                    drop(inbound);
                    continue;
                }
                let upstream = upstream.clone();
                let task = tokio::spawn(async move {
                    if let Ok(mut out) = tokio::net::TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                    }
                });
                k2.lock().unwrap().push(task.abort_handle());
            }
        });
        TcpProxy {
            kubeconfig: path,
            cut,
            conns,
        }
    }

    /// Drops every connection and refuses new ones.
    pub fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        for c in self.conns.lock().unwrap().drain(..) {
            c.abort();
        }
    }

    pub fn restore(&self) {
        self.cut.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

pub fn path_of(p: &Path) -> &str {
    p.to_str().unwrap()
}
