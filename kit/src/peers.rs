//! Peers of the prober's gRPC health, TCP and TLS checks: real servers and a
//! real client that nobody here wrote, run on loopback.
//!
//! - [`GrpcHealth`]: grpc-go's own health service (`google.golang.org/grpc/health`,
//!   `health.NewServer()`) behind a tiny main (hack/tools/grpc-health), plain
//!   or TLS (ALPN h2, as grpc-go serves it), optionally requiring client
//!   certificates; statuses can be changed while it runs.
//! - [`grpc_health_probe`]: the reference client, grpc-ecosystem's
//!   grpc-health-probe.
//! - [`Smtp`]: Debian's exim (exim4-daemon-light) with a config of its own:
//!   a plain SMTP port that offers STARTTLS and an implicit-TLS (SMTPS) port.
//! - [`blackbox_exporter_bin`]: a current blackbox_exporter, the bench's peer
//!   for its grpc and tcp probers.
//!
//! The Go programs are built by `hack/build-probe-peers.sh` (pinned in
//! hack/versions.env, cached outside the repository); exim is installed by
//! `hack/install-deps.sh`. A missing tool fails the caller with the command
//! that installs it; nothing is skipped.
//!
//! Everything here is blocking (std::process, std::net): from async code,
//! call it through `tokio::task::spawn_blocking` (or [`GrpcHealth::set_async`]).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::{bounded, free_port, script_dir};

/// How long a peer may take to come up (they take milliseconds; the bound is
/// for a loaded machine).
const START_LIMIT: Duration = Duration::from_secs(15);
/// Bound of one grpc-health-probe run.
const PROBE_LIMIT: Duration = Duration::from_secs(30);
/// Attempts at a free port before giving up (another process may take the
/// port between its choice and the peer's bind).
const BIND_ATTEMPTS: usize = 20;

static PEERS_BIN: OnceLock<PathBuf> = OnceLock::new();

/// The bin directory of `hack/build-probe-peers.sh` (grpc-health,
/// grpc-health-probe, blackbox_exporter). The script runs once per process
/// (the first call builds, for a minute or two on a fresh machine, later
/// ones reuse its cache); its progress goes to stderr. Panics, naming the
/// script, when it fails (no Go toolchain, no module proxy).
pub fn peers_bin() -> &'static Path {
    PEERS_BIN.get_or_init(|| {
        let bin = script_dir(
            "build-probe-peers.sh",
            "Go >= the GO_MIN_VERSION of hack/versions.env and the Go module proxy",
        );
        for t in ["grpc-health", "grpc-health-probe", "blackbox_exporter"] {
            assert!(
                bin.join(t).is_file(),
                "{t} missing in {} after hack/build-probe-peers.sh",
                bin.display()
            );
        }
        bin
    })
}

/// blackbox_exporter v`BLACKBOX_VERSION` of hack/versions.env (0.28.0), built
/// by hack/build-probe-peers.sh: the bench's peer for the grpc and tcp
/// probers. (Debian's `prometheus-blackbox-exporter`, 0.23 on bookworm, stays
/// installed by hack/install-deps.sh for the HTTP part of the bench.)
pub fn blackbox_exporter_bin() -> PathBuf {
    peers_bin().join("blackbox_exporter")
}

/// A fresh directory of this process under the system's temp directory
/// (short paths: exim puts sockets and locks there).
fn scratch(kind: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!("webchecker-{kind}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    dir
}

fn read_text(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

/// The pipes of a running grpc-health: its stdin, and its stdout after the
/// `listening` line (one answer line per command).
struct Control {
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Control {
    fn set(&mut self, name: &str, status: &str) {
        writeln!(self.stdin, "{name}={status}")
            .and_then(|_| self.stdin.flush())
            .unwrap_or_else(|e| panic!("grpc-health: write {name}={status} to its stdin: {e}"));
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .unwrap_or_else(|e| panic!("grpc-health: read its answer to {name}={status}: {e}"));
        let want = format!("set {name}={status}");
        assert!(
            line.trim_end() == want,
            "grpc-health answered {:?} to {name}={status} (want {want:?})",
            line.trim_end()
        );
    }
}

/// grpc-go's health server (`health.NewServer()`) on 127.0.0.1, a process of
/// its own, killed on drop.
///
/// Statuses are `"SERVING"`, `"NOT_SERVING"`, `"UNKNOWN"` or
/// `"SERVICE_UNKNOWN"`; the service name `""` is the server overall. A
/// service never set is unknown to the server: Check answers the gRPC status
/// NOT_FOUND. Caveat of grpc-go itself: `health.NewServer()` starts with `""`
/// SERVING, so the overall status is SERVING unless set otherwise.
pub struct GrpcHealth {
    child: Child,
    addr: SocketAddr,
    control: Arc<Mutex<Control>>,
    dir: PathBuf,
}

impl GrpcHealth {
    /// Starts it with these `(service, status)` pairs. `tls`: `(cert, key)`
    /// PEM files, then it speaks TLS only (ALPN h2); `client_ca`: with `tls`,
    /// a PEM CA whose certificates clients must present (the handshake fails
    /// without one). Returns once it listens. Blocks (the first call of the
    /// process may build the peers: see [`peers_bin`]).
    pub fn start(
        statuses: &[(&str, &str)],
        tls: Option<(&Path, &Path)>,
        client_ca: Option<&Path>,
    ) -> GrpcHealth {
        let mut last = String::new();
        for _ in 0..BIND_ATTEMPTS {
            let listen = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()));
            match Self::try_start(listen, statuses, tls, client_ca) {
                Ok(s) => return s,
                Err(e) if e.contains("address already in use") => last = e,
                Err(e) => panic!("grpc-health did not start: {e}"),
            }
        }
        panic!("grpc-health found no free port in {BIND_ATTEMPTS} attempts: {last}");
    }

    /// [`GrpcHealth::start`] on `listen`, an address and port of the caller's
    /// choice (a manifest's port, on a loopback address of the test's own).
    pub fn start_at(
        listen: SocketAddr,
        statuses: &[(&str, &str)],
        tls: Option<(&Path, &Path)>,
        client_ca: Option<&Path>,
    ) -> GrpcHealth {
        Self::try_start(listen, statuses, tls, client_ca)
            .unwrap_or_else(|e| panic!("grpc-health did not start on {listen}: {e}"))
    }

    fn try_start(
        listen: SocketAddr,
        statuses: &[(&str, &str)],
        tls: Option<(&Path, &Path)>,
        client_ca: Option<&Path>,
    ) -> Result<GrpcHealth, String> {
        assert!(
            client_ca.is_none() || tls.is_some(),
            "GrpcHealth: a client CA needs TLS"
        );
        let mut cmd = Command::new(peers_bin().join("grpc-health"));
        cmd.arg("-listen").arg(listen.to_string());
        if let Some((cert, key)) = tls {
            cmd.arg("-tls-cert").arg(cert).arg("-tls-key").arg(key);
        }
        if let Some(ca) = client_ca {
            cmd.arg("-client-ca").arg(ca);
        }
        for (name, status) in statuses {
            cmd.arg("-status").arg(format!("{name}={status}"));
        }
        let dir = scratch("grpc-health");
        match Self::spawn(cmd, &dir) {
            Ok((child, addr, control)) => Ok(GrpcHealth {
                child,
                addr,
                control: Arc::new(Mutex::new(control)),
                dir,
            }),
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                Err(e)
            }
        }
    }

    /// Runs `cmd` and reads its `listening ADDR` line (within START_LIMIT);
    /// Err: its stderr, when it exited first.
    fn spawn(mut cmd: Command, dir: &Path) -> Result<(Child, SocketAddr, Control), String> {
        let log = dir.join("stderr.log");
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("run {:?}: {e}", cmd.get_program()));
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        // Read the first line on a thread: a deadline even if it hangs.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let r = stdout.read_line(&mut line).map(|_| line);
            let _ = tx.send((r, stdout));
        });
        let Ok((line, stdout)) = rx.recv_timeout(START_LIMIT) else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("grpc-health printed no address within {START_LIMIT:?}");
        };
        let line = line.unwrap_or_default();
        let Some(addr) = line.trim().strip_prefix("listening ") else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("{:?}; stderr: {}", line.trim(), read_text(&log)));
        };
        let addr = addr.parse().expect("grpc-health's address");
        let stdin = child.stdin.take().unwrap();
        Ok((child, addr, Control { stdin, stdout }))
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sets the status of `service` (`""`: the server overall) while it runs,
    /// through its stdin; returns once the server has applied it (it answers
    /// on stdout), so the next Check sees it. Blocks for that round trip
    /// (well under a millisecond): see [`GrpcHealth::set_async`].
    pub fn set(&self, service: &str, status: &str) {
        self.control.lock().unwrap().set(service, status);
    }

    /// [`GrpcHealth::set`] off the async worker threads.
    pub async fn set_async(&self, service: &str, status: &str) {
        let (control, service, status) = (
            self.control.clone(),
            service.to_string(),
            status.to_string(),
        );
        tokio::task::spawn_blocking(move || control.lock().unwrap().set(&service, &status))
            .await
            .unwrap();
    }

    /// Its process id (for faults: SIGSTOP makes a server that accepts and
    /// never answers).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for GrpcHealth {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs the real grpc-health-probe against `addr`: `service` (None: the
/// server overall, `""`), over TLS verified with the CA file `tls` if given
/// (the server name is `addr`'s IP: the certificate needs it as an IP SAN).
/// Returns its exit code and its stdout + stderr. Exit codes: 0 SERVING,
/// 1 bad arguments, 2 connection failed, 3 RPC failed (NOT_FOUND for an
/// unknown service included), 4 status not SERVING. Timeouts are 5 s.
///
/// Blocks until it exits: from async code, call it in `spawn_blocking`.
pub fn grpc_health_probe(
    addr: SocketAddr,
    service: Option<&str>,
    tls: Option<&Path>,
) -> (i32, String) {
    let mut args = vec!["-addr".to_string(), addr.to_string()];
    if let Some(s) = service {
        args.extend(["-service".to_string(), s.to_string()]);
    }
    if let Some(ca) = tls {
        args.extend(["-tls".to_string(), "-tls-ca-cert".to_string()]);
        args.push(ca.to_str().expect("a UTF-8 path").to_string());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    grpc_health_probe_args(&args)
}

/// grpc-health-probe with these arguments (e.g. `-tls-client-cert`,
/// `-tls-client-key`, `-tls-server-name`, `-tls-no-verify`, `-gzip`), plus
/// 5 s connect and RPC timeouts unless given. Blocks like [`grpc_health_probe`].
pub fn grpc_health_probe_args(args: &[&str]) -> (i32, String) {
    let mut c = bounded(peers_bin().join("grpc-health-probe"), PROBE_LIMIT);
    c.args(args);
    for t in ["-connect-timeout", "-rpc-timeout"] {
        if !args.contains(&t) {
            c.args([t, "5s"]);
        }
    }
    let out = c.output().expect("run grpc-health-probe");
    let mut text = String::from_utf8_lossy(&out.stdout).to_string();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

/// The exim of Debian's exim4-daemon-light.
const EXIM: &str = "/usr/sbin/exim4";

/// A real SMTP server, exim, on 127.0.0.1 (or another loopback address): one port speaking plain SMTP that
/// advertises STARTTLS (and completes it with the given certificate), one
/// implicit-TLS port (SMTPS, exim's `tls_on_connect_ports`) with the same
/// certificate. It accepts no mail (every RCPT is refused: no relaying, no
/// delivery) and looks nothing up (no reverse DNS, no ident), so its 220
/// greeting is immediate. Exim serves the certificate as given, an expired
/// one included. Killed on drop, with its spool and logs.
pub struct Smtp {
    child: Child,
    dir: PathBuf,
    ip: Ipv4Addr,
    smtp_port: u16,
    smtps_port: u16,
}

impl Smtp {
    /// Starts exim with `cert_pem` (the certificate, or chain, PEM) and
    /// `key_pem` (its key; both are copied) and returns once the plain port
    /// greets with 220. Panics, naming the install command, if exim is not
    /// installed. Blocks (tens of milliseconds).
    pub fn start(cert_pem: &Path, key_pem: &Path) -> Smtp {
        let mut last = String::new();
        for _ in 0..BIND_ATTEMPTS {
            let (smtp_port, smtps_port) = (free_port(), free_port());
            if smtp_port == smtps_port {
                continue;
            }
            let ports = (Ipv4Addr::LOCALHOST, smtp_port, smtps_port);
            match Self::try_start(ports, cert_pem, key_pem) {
                Ok(smtp) => return smtp,
                Err(e) if e.contains("Address already in use") => last = e,
                Err(e) => panic!("exim did not start: {e}"),
            }
        }
        panic!("exim found no free ports in {BIND_ATTEMPTS} attempts: {last}");
    }

    /// [`Smtp::start`] on `ip` at the ports of the caller's choice (a
    /// manifest's ports, 25 and 465, on a loopback address of the test's own).
    pub fn start_at(
        (ip, smtp_port, smtps_port): (Ipv4Addr, u16, u16),
        cert_pem: &Path,
        key_pem: &Path,
    ) -> Smtp {
        Self::try_start((ip, smtp_port, smtps_port), cert_pem, key_pem)
            .unwrap_or_else(|e| panic!("exim did not start on {ip}: {e}"))
    }

    fn try_start(
        (ip, smtp_port, smtps_port): (Ipv4Addr, u16, u16),
        cert_pem: &Path,
        key_pem: &Path,
    ) -> Result<Smtp, String> {
        assert!(
            Path::new(EXIM).is_file(),
            "{EXIM} is missing: install exim with hack/install-deps.sh \
             (apt-get install exim4-daemon-light)"
        );
        let dir = scratch("smtp");
        for (from, to) in [(cert_pem, "cert.pem"), (key_pem, "key.pem")] {
            std::fs::copy(from, dir.join(to))
                .unwrap_or_else(|e| panic!("copy {} for exim: {e}", from.display()));
        }
        for d in ["spool", "log"] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
        }
        let conf = exim_config(&dir, ip, smtp_port, smtps_port);
        std::fs::write(dir.join("exim.conf"), conf).unwrap();
        let mut smtp = Smtp {
            child: spawn_exim(&dir, smtp_port, smtps_port),
            dir,
            ip,
            smtp_port,
            smtps_port,
        };
        // On an error its drop kills it and removes its directory.
        smtp.wait_ready().map(|()| smtp)
    }

    /// The port of plain SMTP with STARTTLS.
    pub fn smtp_port(&self) -> u16 {
        self.smtp_port
    }

    /// The port of implicit TLS (SMTPS).
    pub fn smtps_port(&self) -> u16 {
        self.smtps_port
    }

    /// Exim's main log so far (connections, TLS errors, refused commands).
    pub fn log(&self) -> String {
        read_text(&self.dir.join("log/mainlog"))
    }

    /// Polls the plain port for the 220 greeting until START_LIMIT. Err:
    /// exim exited (with its stderr and panic log) or never greeted.
    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + START_LIMIT;
        let addr = SocketAddr::from((self.ip, self.smtp_port));
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Err(format!(
                    "exim exited ({st}): {}{}",
                    read_text(&self.dir.join("stderr.log")),
                    read_text(&self.dir.join("log/paniclog"))
                ));
            }
            let seen = match greeting(addr) {
                Ok(line) if line.starts_with("220 ") => return Ok(()),
                Ok(line) => format!("it greeted {line:?}"),
                Err(e) => e.to_string(),
            };
            if Instant::now() > deadline {
                return Err(format!(
                    "no 220 greeting on {addr} within {START_LIMIT:?} ({seen})"
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Connects to `addr`, reads its first line and says QUIT.
fn greeting(addr: SocketAddr) -> std::io::Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut line = String::new();
    BufReader::new(s.try_clone()?).read_line(&mut line)?;
    let _ = s.write_all(b"QUIT\r\n");
    let _ = s.read(&mut [0; 256]);
    Ok(line.trim_end().to_string())
}

/// exim as a foreground daemon (`-bdf`) with the config of `dir`, in a
/// process group of its own (its per-connection children with it), and a
/// reaper that kills that group and removes `dir` if this process dies
/// without dropping the [`Smtp`].
fn spawn_exim(dir: &Path, smtp_port: u16, smtps_port: u16) -> Child {
    let mut cmd = Command::new(EXIM);
    cmd.arg("-C")
        .arg(dir.join("exim.conf"))
        .arg("-bdf")
        .arg("-oX")
        .arg(format!("{smtp_port}:{smtps_port}"));
    crate::spawn_reaped(cmd, dir, "stderr.log").unwrap_or_else(|e| panic!("run {EXIM}: {e}"))
}

/// The config of a test exim: loopback only, the two ports, the certificate
/// for both STARTTLS and SMTPS, no lookups, every recipient refused.
fn exim_config(dir: &Path, ip: Ipv4Addr, smtp_port: u16, smtps_port: u16) -> String {
    // SAFETY: geteuid and getegid have no preconditions and cannot fail.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let d = dir.display();
    format!(
        "# Written by kit/src/peers.rs for one test: not a mail server.
keep_environment =
primary_hostname = smtp.webchecker.test
# Run as the caller (exim drops its privileges for -C anyway).
exim_user = {uid}
exim_group = {gid}
spool_directory = {d}/spool
log_file_path = {d}/log/%slog
pid_file_path = {d}/exim.pid
notifier_socket =
local_interfaces = {ip}
daemon_smtp_ports = {smtp_port} : {smtps_port}
tls_on_connect_ports = {smtps_port}
tls_advertise_hosts = *
tls_certificate = {d}/cert.pem
tls_privatekey = {d}/key.pem
# No Diffie-Hellman parameters to generate (ECDHE still works).
tls_dhparam = none
# Nothing looked up: no reverse DNS, no ident, no HELO lookups.
host_lookup =
rfc1413_hosts =
rfc1413_query_timeout = 0s
helo_lookup_domains =
# No connection limit a bench could hit.
smtp_accept_max = 0
acl_smtp_rcpt = acl_rcpt

begin acl

acl_rcpt:
  deny message = relay not permitted
"
    )
}

impl Drop for Smtp {
    fn drop(&mut self) {
        crate::kill_group(&mut self.child);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    //! The peers themselves, checked with real clients: grpc-health-probe
    //! for the gRPC server, openssl s_client for exim's TLS.

    use super::*;
    use crate::targets::TestCa;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    /// openssl s_client with `args`, `input` on its stdin; its stdout + stderr.
    fn s_client(args: &[&str], input: &str) -> String {
        let mut c = bounded("openssl", Duration::from_secs(30));
        c.arg("s_client").args(args);
        let out = crate::output_with_stdin(c, input);
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }

    #[test]
    fn grpc_health_answers_as_set_and_flips_at_run_time() {
        let s = GrpcHealth::start(&[("up", "SERVING"), ("down", "NOT_SERVING")], None, None);
        let probe = |svc: Option<&str>| grpc_health_probe(s.addr(), svc, None);
        // grpc-go's health.NewServer() starts the server overall SERVING.
        assert_eq!(probe(None).0, 0, "{:?}", probe(None));
        assert_eq!(probe(Some("up")).0, 0, "{:?}", probe(Some("up")));
        let (code, out) = probe(Some("down"));
        assert_eq!(code, 4, "{out}");
        assert!(out.contains("NOT_SERVING"), "{out}");
        // A service never set: the RPC fails with NOT_FOUND (exit 3).
        let (code, out) = probe(Some("nobody"));
        assert_eq!(code, 3, "{out}");
        assert!(
            out.contains("NotFound") || out.contains("NOT_FOUND"),
            "{out}"
        );

        s.set("up", "NOT_SERVING");
        s.set("down", "SERVING");
        s.set("", "NOT_SERVING");
        s.set("late", "SERVING");
        assert_eq!(probe(Some("up")).0, 4);
        assert_eq!(probe(Some("down")).0, 0);
        assert_eq!(probe(None).0, 4);
        assert_eq!(probe(Some("late")).0, 0);
        // Nothing listening once it is dropped: a connection failure (exit 2).
        let addr = s.addr();
        drop(s);
        let (code, out) = grpc_health_probe(addr, None, None);
        assert_eq!(code, 2, "{out}");
    }

    #[test]
    fn grpc_health_over_tls_with_and_without_client_certificates() {
        let ca = TestCa::new();
        let leaf = ca.leaf(&["127.0.0.1", "localhost"]);
        let client = ca.leaf(&["client.webchecker.test"]);
        let dir = scratch("grpc-tls-test");
        let ca_pem = write(&dir, "ca.pem", &ca.pem);
        let cert = write(&dir, "cert.pem", &leaf.cert_pem);
        let key = write(&dir, "key.pem", &leaf.key_pem);
        let ccert = write(&dir, "client.pem", &client.cert_pem);
        let ckey = write(&dir, "client-key.pem", &client.key_pem);

        let s = GrpcHealth::start(&[("svc", "SERVING")], Some((&cert, &key)), None);
        let (code, out) = grpc_health_probe(s.addr(), Some("svc"), Some(&ca_pem));
        assert_eq!(code, 0, "{out}");
        // Plain text against a TLS server: no connection.
        let (code, out) = grpc_health_probe(s.addr(), Some("svc"), None);
        assert_ne!(code, 0, "{out}");
        // grpc-go's ALPN: h2.
        let addr = s.addr().to_string();
        let out = s_client(
            &["-connect", &addr, "-alpn", "h2", "-CAfile", path(&ca_pem)],
            "",
        );
        assert!(out.contains("ALPN protocol: h2"), "{out}");
        assert!(out.contains("Verify return code: 0 (ok)"), "{out}");
        drop(s);

        let s = GrpcHealth::start(&[("svc", "SERVING")], Some((&cert, &key)), Some(&ca_pem));
        let addr = s.addr().to_string();
        let (code, out) = grpc_health_probe(s.addr(), Some("svc"), Some(&ca_pem));
        assert_ne!(code, 0, "a client without a certificate got through: {out}");
        let args = [
            "-addr",
            &addr,
            "-service",
            "svc",
            "-tls",
            "-tls-ca-cert",
            path(&ca_pem),
            "-tls-client-cert",
            path(&ccert),
            "-tls-client-key",
            path(&ckey),
        ];
        let (code, out) = grpc_health_probe_args(&args);
        assert_eq!(code, 0, "{out}");
        drop(s);
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn path(p: &Path) -> &str {
        p.to_str().unwrap()
    }

    /// A plain SMTP session on `port`: the greeting, then each command and
    /// its (possibly multi-line) reply, one at a time (exim refuses commands
    /// sent ahead of its replies without PIPELINING).
    fn chat(port: u16, commands: &[&str]) -> String {
        let mut s = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        let mut text = String::new();
        let mut reply = |text: &mut String| loop {
            let mut l = String::new();
            if r.read_line(&mut l).unwrap() == 0 {
                break;
            }
            text.push_str(&l);
            if l.as_bytes().get(3) != Some(&b'-') {
                break;
            }
        };
        reply(&mut text);
        for c in commands {
            s.write_all(format!("{c}\r\n").as_bytes()).unwrap();
            reply(&mut text);
        }
        text
    }

    #[test]
    fn exim_offers_starttls_and_smtps_with_an_expired_certificate() {
        let ca = TestCa::new();
        // Valid from 400 days ago until 30 days ago: expired.
        let leaf = ca.leaf_valid(&["localhost", "127.0.0.1"], -400, -30);
        let dir = scratch("smtp-test");
        let ca_pem = write(&dir, "ca.pem", &ca.pem);
        let cert = write(&dir, "cert.pem", &leaf.cert_pem);
        let key = write(&dir, "key.pem", &leaf.key_pem);

        let started = Instant::now();
        let smtp = Smtp::start(&cert, &key);
        let took = started.elapsed();
        assert!(took < Duration::from_secs(3), "exim took {took:?} to greet");

        let text = chat(smtp.smtp_port(), &["EHLO probe.webchecker.test", "QUIT"]);
        assert!(text.starts_with("220 "), "{text}");
        assert!(text.contains("250-STARTTLS"), "{text}");

        // STARTTLS completes; the certificate served is the expired one.
        let port = smtp.smtp_port().to_string();
        let connect = format!("127.0.0.1:{port}");
        let args = [
            "-starttls",
            "smtp",
            "-connect",
            &connect,
            "-CAfile",
            path(&ca_pem),
            "-crlf",
        ];
        let out = s_client(&args, "EHLO again\nQUIT\n");
        assert!(
            out.contains("Verify return code: 10 (certificate has expired)"),
            "{out}"
        );
        assert!(out.contains("250 HELP"), "no EHLO answer over TLS: {out}");

        // SMTPS: TLS first, then the greeting.
        let connect = format!("127.0.0.1:{}", smtp.smtps_port());
        let args = [
            "-connect",
            &connect,
            "-CAfile",
            path(&ca_pem),
            "-crlf",
            "-ign_eof",
        ];
        let out = s_client(&args, "QUIT\n");
        assert!(
            out.contains("Verify return code: 10 (certificate has expired)"),
            "{out}"
        );
        assert!(out.contains("220 smtp.webchecker.test ESMTP"), "{out}");
        assert!(out.contains("221 "), "{out}");

        // No relaying.
        let commands = [
            "HELO probe.webchecker.test",
            "MAIL FROM:<a@example.invalid>",
            "RCPT TO:<b@example.invalid>",
            "QUIT",
        ];
        let text = chat(smtp.smtp_port(), &commands);
        assert!(text.contains("550 relay not permitted"), "{text}");

        let spool = smtp.dir.clone();
        assert!(smtp.log().contains("daemon started"), "{}", smtp.log());
        drop(smtp);
        assert!(!spool.exists(), "{} left behind", spool.display());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
