//! nginx, Debian's, as a test's web server: HTTP and HTTPS virtual hosts
//! on the addresses and ports a test chooses (port 443 of a loopback address
//! of its own, as a manifest names it), with a config of the test's own,
//! logging every request. Installed by hack/install-deps.sh; a missing nginx
//! fails the caller with the command that installs it.
//!
//! Blocking (std::process): from async code, start it in
//! `tokio::task::spawn_blocking`.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The nginx of Debian's package.
const NGINX: &str = "/usr/sbin/nginx";
/// How long nginx may take to listen (milliseconds; the bound is for a
/// loaded machine).
const START_LIMIT: Duration = Duration::from_secs(15);

/// One nginx (master and worker, a process group of their own), killed on
/// drop with its directory.
pub struct Nginx {
    child: Child,
    dir: PathBuf,
}

impl Nginx {
    /// Starts nginx with `files` (relative path, content: certificates,
    /// keys, an htpasswd file, pages) in its directory and `servers`, the `server { ... }`
    /// blocks of its `http` block, where relative paths name those files.
    /// Every request is logged as `<host> <user> "<request>" <status>` (see
    /// [`Nginx::access_log`]). Returns once every address of `listens`
    /// accepts connections; panics with nginx's error log if it exits first.
    pub fn start(files: &[(&str, &str)], servers: &str, listens: &[SocketAddr]) -> Nginx {
        assert!(
            Path::new(NGINX).is_file(),
            "{NGINX} is missing: install it with hack/install-deps.sh (apt-get install nginx)"
        );
        let dir = scratch();
        for (name, text) in files {
            let path = dir.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        std::fs::write(dir.join("nginx.conf"), config(servers)).unwrap();
        let mut cmd = Command::new(NGINX);
        cmd.arg("-p")
            .arg(&dir)
            .arg("-c")
            .arg(dir.join("nginx.conf"))
            .arg("-e")
            .arg(dir.join("error.log"));
        let child = crate::spawn_reaped(cmd, &dir, "stderr.log")
            .unwrap_or_else(|e| panic!("run {NGINX}: {e}"));
        let mut nginx = Nginx { child, dir };
        nginx.wait_listening(listens);
        nginx
    }

    /// The requests so far, one line each: `<host> <user> "<request>" <status>`
    /// (`-` for no user).
    pub fn access_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("access.log")).unwrap_or_default()
    }

    fn error_log(&self) -> String {
        let read = |f: &str| std::fs::read_to_string(self.dir.join(f)).unwrap_or_default();
        format!("{}{}", read("stderr.log"), read("error.log"))
    }

    fn wait_listening(&mut self, listens: &[SocketAddr]) {
        let deadline = Instant::now() + START_LIMIT;
        for addr in listens {
            loop {
                if let Ok(Some(st)) = self.child.try_wait() {
                    panic!("nginx exited ({st}):\n{}", self.error_log());
                }
                if TcpStream::connect_timeout(addr, Duration::from_millis(200)).is_ok() {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "nginx does not listen on {addr} after {START_LIMIT:?}:\n{}",
                    self.error_log()
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        crate::kill_group(&mut self.child);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The whole config: in the foreground, everything under the prefix (its
/// directory), workers as the caller (root, for ports below 1024).
fn config(servers: &str) -> String {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let user = if unsafe { libc::geteuid() } == 0 {
        "user root root;\n"
    } else {
        ""
    };
    format!(
        "# Written by kit/src/nginx.rs for one test.
daemon off;
{user}worker_processes 1;
pid nginx.pid;
error_log error.log info;
events {{ worker_connections 256; }}
http {{
  log_format line '$host $remote_user \"$request\" $status';
  access_log access.log line;
  client_body_temp_path tmp/body;
  proxy_temp_path tmp/proxy;
  fastcgi_temp_path tmp/fastcgi;
  uwsgi_temp_path tmp/uwsgi;
  scgi_temp_path tmp/scgi;
  default_type text/plain;
{servers}
}}
"
    )
}

/// A fresh directory of this process under the system's temp directory.
fn scratch() -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!("webchecker-nginx-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("tmp"))
        .unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    dir
}
