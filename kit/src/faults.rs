//! Fault kit, shared by the randomized campaign (tests/chaos/main.rs) and any test
//! that needs faults:
//!
//! - [`FaultProxy`]: a TLS-terminating HTTP proxy in front of the API server,
//!   one per replica, whose behaviour can be switched at run time (pass,
//!   black-hole, reset every connection, added latency, a share of requests
//!   answered 429/500/503, accept and never answer), and which can answer the
//!   requests of one kind (say the status writes) with an error whatever the
//!   mode (`FaultProxy::refuse`);
//! - process faults on an [`Operator`] (SIGKILL, SIGSTOP/SIGCONT, SIGTERM,
//!   restart under the same identity);
//! - [`ControlPlane`]: faults of etcd and kube-apiserver on a cluster of one's
//!   own (`Cluster::start`, never the shared one): freeze and thaw
//!   (SIGSTOP/SIGCONT of the pid in the cluster directory), restarts,
//!   compaction;
//! - [`Prng`]: a small seeded generator (SplitMix64), so that a schedule drawn
//!   from a seed is the same on every build and platform.
//!
//! Everything listens and connects on 127.0.0.1 only.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{Cluster, Operator, repo};

mod proxy;
pub use proxy::*;

// ============================================================== seeded choices

/// SplitMix64: tiny, specified, and the same everywhere (a schedule replayed
/// from a seed must not depend on the version of a random-number crate).
#[derive(Clone, Debug)]
pub struct Prng(u64);

impl Prng {
    pub fn new(seed: u64) -> Prng {
        Prng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 when n is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len() as u64) as usize]
    }

    /// Uniform in [lo, hi], in whole milliseconds.
    pub fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        let span = hi.saturating_sub(lo).as_millis() as u64;
        lo + Duration::from_millis(self.below(span + 1))
    }

    pub fn shuffle<T>(&mut self, xs: &mut [T]) {
        for i in (1..xs.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            xs.swap(i, j);
        }
    }
}

// ============================================================== process faults

/// SIGKILL (and reap).
pub fn sigkill(op: &mut Operator) {
    op.kill();
}

/// SIGSTOP: the process freezes, its sockets stay open.
pub fn pause(op: &Operator) {
    op.signal(libc::SIGSTOP);
}

/// SIGCONT.
pub fn resume(op: &Operator) {
    op.signal(libc::SIGCONT);
}

/// SIGTERM and wait for the exit, up to `grace`; then SIGKILL. Returns the
/// exit status and how long the exit took, or why it was not clean.
pub async fn sigterm(op: &mut Operator, grace: Duration) -> Result<(ExitStatus, Duration), String> {
    let at = Instant::now();
    op.signal(libc::SIGTERM);
    let deadline = at + grace;
    loop {
        if let Some(st) = op.exited() {
            op.child = None;
            return Ok((st, at.elapsed()));
        }
        if Instant::now() > deadline {
            op.kill();
            return Err(format!(
                "{} did not exit within {grace:?} of SIGTERM (killed)",
                op.identity
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Restart under the same identity and flags (SIGKILL first if it runs).
pub fn restart(op: &mut Operator) {
    if let Some(c) = op.child.as_ref() {
        unsafe {
            libc::kill(c.id() as i32, libc::SIGCONT);
        }
    }
    op.kill();
    op.start();
}

// ============================================================== control plane

/// A part of the control plane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Etcd,
    ApiServer,
}

impl Part {
    fn pid_file(self) -> &'static str {
        match self {
            Part::Etcd => "etcd.pid",
            Part::ApiServer => "apiserver.pid",
        }
    }
}

/// Faults of etcd and kube-apiserver, on a cluster of one's own. Thaws what it
/// froze when dropped.
pub struct ControlPlane {
    pub dir: PathBuf,
    frozen: Mutex<Vec<i32>>,
}

impl ControlPlane {
    pub fn new(cluster: &Cluster) -> ControlPlane {
        ControlPlane {
            dir: cluster.dir.clone(),
            frozen: Mutex::new(Vec::new()),
        }
    }

    pub fn pid(&self, part: Part) -> Option<i32> {
        std::fs::read_to_string(self.dir.join(part.pid_file()))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// SIGSTOP: the process holds its sockets and answers nothing.
    pub fn freeze(&self, part: Part) -> Result<(), String> {
        let pid = self.pid(part).ok_or(format!("no pid for {part:?}"))?;
        if unsafe { libc::kill(pid, libc::SIGSTOP) } != 0 {
            return Err(format!("SIGSTOP {part:?} (pid {pid}) failed"));
        }
        self.frozen.lock().unwrap().push(pid);
        Ok(())
    }

    pub fn thaw(&self, part: Part) -> Result<(), String> {
        let pid = self.pid(part).ok_or(format!("no pid for {part:?}"))?;
        self.frozen.lock().unwrap().retain(|p| *p != pid);
        if unsafe { libc::kill(pid, libc::SIGCONT) } != 0 {
            return Err(format!("SIGCONT {part:?} (pid {pid}) failed"));
        }
        Ok(())
    }

    /// Runs `hack/cluster.sh <sub> <dir>` off the async threads, bounded.
    pub async fn script(&self, sub: &str, limit: Duration) -> Result<(), String> {
        let dir = self.dir.clone();
        let sub = sub.to_string();
        tokio::task::spawn_blocking(move || run_script(&sub, &dir, limit))
            .await
            .map_err(|e| e.to_string())?
    }

    pub async fn restart_etcd(&self) -> Result<(), String> {
        self.script("restart-etcd", Duration::from_secs(120)).await
    }

    pub async fn stop_apiserver(&self) -> Result<(), String> {
        self.script("stop-apiserver", Duration::from_secs(60)).await
    }

    pub async fn start_apiserver(&self) -> Result<(), String> {
        self.script("start-apiserver", Duration::from_secs(120))
            .await
    }

    pub async fn compact(&self) -> Result<(), String> {
        self.script("compact-etcd", Duration::from_secs(60)).await
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        for pid in self.frozen.lock().unwrap().drain(..) {
            unsafe {
                libc::kill(pid, libc::SIGCONT);
            }
        }
    }
}

fn run_script(sub: &str, dir: &Path, limit: Duration) -> Result<(), String> {
    let mut child = Command::new("bash")
        .arg(repo().join("hack/cluster.sh"))
        .arg(sub)
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("hack/cluster.sh {sub}: {e}"))?;
    let deadline = Instant::now() + limit;
    loop {
        if let Some(st) = child.try_wait().map_err(|e| e.to_string())? {
            return if st.success() {
                Ok(())
            } else {
                Err(format!("hack/cluster.sh {sub} failed: {st}"))
            };
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("hack/cluster.sh {sub} took over {limit:?}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prng_is_splitmix64() {
        let mut p = Prng::new(0);
        assert_eq!(p.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(p.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        let mut q = Prng::new(42);
        let d = q.between(Duration::from_secs(5), Duration::from_secs(30));
        assert!(d >= Duration::from_secs(5) && d <= Duration::from_secs(30));
    }
}
