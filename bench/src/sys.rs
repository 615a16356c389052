//! This machine and its processes: /proc figures, CPU pinning, signals,
//! programs on PATH.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

pub fn cmd_out(cmd: &str, args: &[&str]) -> String {
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

pub fn which(names: &[&str]) -> Option<PathBuf> {
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
pub fn cpu_ticks(pid: u32) -> Option<(u64, u64)> {
    cpu_ticks_of(&format!("/proc/{pid}/stat"))
}

/// (utime, stime) from a stat file of /proc (a process's or a thread's).
pub fn cpu_ticks_of(path: &str) -> Option<(u64, u64)> {
    let s = std::fs::read_to_string(path).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some((
        f.get(11)?.parse::<u64>().ok()?,
        f.get(12)?.parse::<u64>().ok()?,
    ))
}

pub fn clk_tck() -> f64 {
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }) as f64
}

/// A field of /proc/PID/status in KiB (VmRSS, VmHWM).
pub fn proc_status_kib(pid: u32, key: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

pub fn ncpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

pub fn cpu_set(cpu: usize) -> libc::cpu_set_t {
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    unsafe { libc::CPU_SET(cpu, &mut set) };
    set
}

pub fn pin_current_thread(cpu: usize) {
    let set = cpu_set(cpu);
    unsafe {
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Pins every thread of a running process to `cpu` (threads it starts
/// later inherit it): for peers the bench does not spawn itself. Twice, for
/// a thread started by one not yet pinned.
pub fn pin_process(pid: u32, cpu: usize) {
    let set = cpu_set(cpu);
    let tasks = (0..2).flat_map(|_| {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten()
    });
    for tid in tasks
        .flatten()
        .filter_map(|t| t.file_name().to_str()?.parse::<i32>().ok())
    {
        unsafe {
            libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
    }
}

/// The child process starts pinned to `cpu` (all its threads inherit it).
pub fn pin_command(cmd: &mut Command, cpu: usize) {
    let set = cpu_set(cpu);
    unsafe {
        cmd.pre_exec(move || {
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
            Ok(())
        });
    }
}

pub fn signal(pid: u32, sig: i32) {
    unsafe {
        libc::kill(pid as i32, sig);
    }
}

/// A child process killed (and reaped) when dropped.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
