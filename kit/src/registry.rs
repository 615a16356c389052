//! A real OCI registry for the install tests: Debian's `docker-registry` (the
//! CNCF distribution) on an address of the caller's choice (the node's, so
//! that its containerd pulls from it), TLS with a certificate of a test CA,
//! storage in a directory of its own, no authentication. Its access log
//! (Apache's combined format, on stdout) shows who asked for what.
//!
//! Host tools (skopeo, helm) trust it through `SSL_CERT_FILE` =
//! [`Registry::trust_bundle`]; the node's containerd through its registry
//! hosts directory (`hack/node.sh trust-registry`).

use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::ports::free_port_on;
use crate::targets::TestCa;

/// The program of Debian's package `docker-registry` (hack/install-deps.sh).
const PROGRAM: &str = "docker-registry";
/// Debian's CA roots, kept in the bundle beside the test CA.
const SYSTEM_ROOTS: &str = "/etc/ssl/certs/ca-certificates.crt";

pub struct Registry {
    /// `ip:port`, the registry's host as image references name it.
    pub addr: SocketAddr,
    pub dir: PathBuf,
    /// The test CA's certificate (PEM) that signed the registry's.
    pub ca_file: PathBuf,
    child: Child,
}

impl Registry {
    /// Starts a registry on `ip` (a free port) with its state in `dir`
    /// (created; removed on drop); returns once it accepts connections.
    pub fn start(ip: IpAddr, dir: &Path) -> Registry {
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let ca = TestCa::new();
        let leaf = ca.leaf(&[&ip.to_string()]);
        let ca_file = dir.join("ca.crt");
        std::fs::write(&ca_file, &ca.pem).unwrap();
        std::fs::write(dir.join("tls.crt"), &leaf.cert_pem).unwrap();
        std::fs::write(dir.join("tls.key"), &leaf.key_pem).unwrap();
        let mut bundle = std::fs::read_to_string(SYSTEM_ROOTS).unwrap_or_default();
        bundle.push_str(&ca.pem);
        std::fs::write(dir.join("trust.pem"), bundle).unwrap();
        let addr = SocketAddr::new(ip, free_port_on(&ip.to_string()));
        let d = dir.display();
        std::fs::write(
            dir.join("config.yml"),
            format!(
                "version: 0.1\nlog:\n  level: info\n  formatter: text\n\
                 storage:\n  filesystem:\n    rootdirectory: {d}/data\n  delete:\n    enabled: true\n\
                 http:\n  addr: {addr}\n  secret: test-only\n  tls:\n    certificate: {d}/tls.crt\n    key: {d}/tls.key\n"
            ),
        )
        .unwrap();
        // In a process group of its own, killed (and `dir` removed) if this
        // process dies without dropping the Registry.
        let mut cmd = Command::new(PROGRAM);
        cmd.arg("serve").arg(dir.join("config.yml"));
        let child = crate::spawn_reaped(cmd, dir, "registry.log")
            .unwrap_or_else(|e| panic!("run {PROGRAM} (hack/install-deps.sh installs it): {e}"));
        let r = Registry {
            addr,
            dir: dir.to_path_buf(),
            ca_file,
            child,
        };
        r.wait_listening();
        r
    }

    fn wait_listening(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect_timeout(&self.addr, Duration::from_millis(200)).is_err() {
            assert!(
                Instant::now() < deadline,
                "{PROGRAM} not listening on {} after 30 s:\n{}",
                self.addr,
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `ip:port`, as image references and `oci://` URLs name the registry.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// The machine's CA roots and the test CA, for `SSL_CERT_FILE` of host
    /// tools (Go's crypto/x509 reads it: skopeo, helm).
    pub fn trust_bundle(&self) -> PathBuf {
        self.dir.join("trust.pem")
    }

    /// The registry's log so far (its access log included).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.dir.join("registry.log")).unwrap_or_default()
    }

    /// Access log lines of requests for `repository`'s manifests (GET or
    /// HEAD) whose user agent contains `agent`.
    pub fn manifest_requests(&self, repository: &str, agent: &str) -> Vec<String> {
        let path = format!(" /v2/{repository}/manifests/");
        self.log_text()
            .lines()
            .filter(|l| {
                (l.contains("\"GET") || l.contains("\"HEAD"))
                    && l.contains(&path)
                    && l.contains(agent)
            })
            .map(str::to_string)
            .collect()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        crate::kill_group(&mut self.child);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
