//! The end-to-end kit shared by the tests (tests/, as `support`),
//! the fault campaign (tests/chaos/main.rs) and the bench (bench/): a real control
//! plane (hack/cluster.sh, the same code path as `make cluster-up`), operator
//! replicas as local processes, witness HTTP targets that log who probed them
//! and when, fleets, faults, and the invariants judged from outside.
//!
//! It panics where a test would fail; the bench turns a panic of one part
//! into that part's error.

pub mod cert_manager;
pub mod checkers;
pub mod cluster;
pub mod dns;
pub mod etcdlog;
pub mod faults;
pub mod fleet;
pub mod gaps;
pub mod gateway_api;
pub mod hostile;
pub mod messages;
pub mod monitoring_crds;
pub mod netns;
pub mod nginx;
pub mod node;
pub mod objlog;
pub mod oci;
pub mod operator;
pub mod oracle;
pub mod peers;
pub mod platform;
pub mod pods;
pub mod ports;
pub mod prom;
pub mod proxy;
pub mod readme;
pub mod registry;
pub mod release;
pub mod scrape;
pub mod speaks;
pub mod targets;
pub mod witness;

pub use checkers::*;
pub use cluster::*;
pub use gaps::*;
pub use gateway_api::*;
pub use operator::*;
pub use ports::*;
pub use proxy::*;
pub use scrape::*;
pub use witness::*;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The repository (this crate lives in `kit/`).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("kit/ has a parent")
        .to_path_buf()
}

/// The cargo target directory of the running binary: a test binary is
/// `<target>/<profile>/deps/<name>-<hash>`, the bench `<target>/<profile>/bench`.
pub fn target_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("CARGO_TARGET_DIR") {
        let d = PathBuf::from(d);
        return if d.is_absolute() { d } else { repo().join(d) };
    }
    profile_dir()
        .parent()
        .expect("a target directory above the profile's")
        .to_path_buf()
}

/// `<target>/<profile>` of the running binary, where cargo puts the
/// package's binaries.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the running binary's path");
    let dir = exe.parent().expect("a directory").to_path_buf();
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.parent().expect("a profile directory").to_path_buf()
    } else {
        dir
    }
}

/// The operator binary: `WEBCHECKER_OPERATOR_BIN`, or the one cargo built
/// next to the running binary (`CARGO_BIN_EXE_*` exists only for the tests
/// of the operator's own package, and cargo builds its binaries for them;
/// the bench's build builds it too). It may be missing: see `Operator::start`.
pub fn operator_bin() -> PathBuf {
    match std::env::var_os("WEBCHECKER_OPERATOR_BIN") {
        Some(p) => PathBuf::from(p),
        None => profile_dir().join("webchecker-operator"),
    }
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

/// Runs `bash <script> down <dir>` once this process has exited, however it
/// ends. The reaper has a process group of its own: a runner that kills the
/// test's group on a timeout (coreutils' `timeout`, hack/test.sh) must not
/// take the reaper with it and leave the control plane or node running.
/// `<dir>.down.log` keeps the output of a teardown that failed.
pub fn reap_at_exit(script: &Path, dir: &Path) {
    use std::os::unix::process::CommandExt;
    let pid = std::process::id();
    let log = dir.with_extension("down.log");
    let _ = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; bash '{}' down '{}' >'{}' 2>&1 && rm -f '{}'",
            script.display(),
            dir.display(),
            log.display(),
            log.display()
        ))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn();
}

/// Starts `cmd` (a daemon of a test: stdin null, its output to
/// `dir/<log>`) in a process group of its own, and a reaper that kills
/// that group and removes `dir` if this process dies while `dir` is there
/// (a drop that ran [`kill_group`] and removed `dir` has cleaned up).
pub fn spawn_reaped(
    mut cmd: Command,
    dir: &Path,
    log: &str,
) -> std::io::Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    let out = std::fs::File::create(dir.join(log))?;
    let child = cmd
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .process_group(0)
        .spawn()?;
    let (pid, me, d) = (child.id(), std::process::id(), dir.display());
    let _ = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "while kill -0 {me} 2>/dev/null && [ -d '{d}' ]; do sleep 1; done; \
             if [ -d '{d}' ]; then kill -KILL -- -{pid} 2>/dev/null; rm -rf '{d}'; fi"
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn();
    Ok(child)
}

/// Kills the process group of a child of [`spawn_reaped`] (its pid is the
/// group's id) and waits for it: only while the child is not reaped, so
/// that its pid cannot have been reused.
pub fn kill_group(child: &mut std::process::Child) {
    if let Ok(None) = child.try_wait() {
        // SAFETY: kill has no memory preconditions.
        unsafe {
            libc::kill(-(child.id() as i32), libc::SIGKILL);
        }
    }
    let _ = child.wait();
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

/// A memory figure of a process from `/proc/<pid>/status`, in KiB: `VmRSS`
/// (resident now) or `VmHWM` (the peak).
pub fn proc_memory_kib(pid: i32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"))
}

/// Resets a process's `VmHWM` to its resident size now (Linux 4.0 and
/// later: `5` in `/proc/<pid>/clear_refs`), so that a later `VmHWM` is the
/// peak of what came after. The resident size then, in KiB.
pub fn reset_peak_memory(pid: i32) -> u64 {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5")
        .unwrap_or_else(|e| panic!("reset the peak memory of {pid}: {e}"));
    proc_memory_kib(pid, "VmRSS")
}

pub fn path_of(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Runs `hack/<script>` (a build or fetch into the tools cache, its progress
/// on stderr) and returns the directory it prints on its last stdout line.
/// Panics naming the script and `needs` when it fails.
pub fn script_dir(script: &str, needs: &str) -> std::path::PathBuf {
    let path = repo().join("hack").join(script);
    let out = bounded("bash", SETUP_LIMIT)
        .arg(&path)
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", path.display()));
    assert!(
        out.status.success(),
        "hack/{script} failed ({}); its output is above. It needs {needs}",
        out.status
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .map(|l| std::path::PathBuf::from(l.trim()))
        .unwrap_or_else(|| panic!("hack/{script} printed no directory"))
}
