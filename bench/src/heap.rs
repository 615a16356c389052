//! Part 8: where a replica's heap goes, by component, per owned checker.
//! Two fleets of 3 release replicas (1,000 and 10,000 checkers, part 3's),
//! the first replica of each under heaptrack. Once every checker was
//! probed and two intervals passed, that replica is killed (SIGKILL:
//! nothing is freed on the way out), and what it held (the allocations
//! heaptrack saw made and never freed) is grouped by the code that made
//! them: the innermost frame of the operator's own crates names the
//! component (its crate and module), else the outermost library's crate.
//! The difference between the fleets over the difference of checkers
//! owned is each component's cost of one more owned checker.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use webchecker_kit::{Cluster, metric};

use crate::common::{Res, err};
use crate::fleet::{Fleet, INTERVAL};
use crate::report::Section;
use crate::stats::fmt_int;
use crate::sys::which;

/// Crates that only carry work (runtimes, the standard library, maps):
/// a library's component is the outermost other crate.
const CARRIERS: [&str; 11] = [
    "std",
    "core",
    "alloc",
    "tokio",
    "futures",
    "futures-util",
    "futures-core",
    "futures-channel",
    "hashbrown",
    "tower",
    "tracing",
];
/// Rows of the table: the largest components per owned checker.
const ROWS: usize = 12;

/// What one profiled replica held when killed.
struct Held {
    checkers: usize,
    owned: f64,
    by_component: BTreeMap<String, f64>,
}

/// One backtrace of what was never freed: its bytes and the source file
/// of each frame, innermost first.
struct Trace {
    bytes: f64,
    files: Vec<String>,
    /// A merged location's own list, which its backtraces replace.
    merged: bool,
}

/// `10.65M`, `612.00K`, `48B` (heaptrack's units, powers of 1024).
fn bytes(v: &str) -> Option<f64> {
    let (n, unit) = v.split_at(v.find(|c: char| c.is_ascii_alphabetic())?);
    let k = match unit {
        "B" => 1.0,
        "K" => 1024.0,
        "M" => 1024.0 * 1024.0,
        "G" => 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    Some(n.parse::<f64>().ok()? * k)
}

/// The backtraces of `heaptrack_print --print-leaks`: each merged location
/// (`X leaked over N calls from`) lists its backtraces (`... from:`), whose
/// frames (`at FILE:LINE`) run from the allocation out to the thread's root.
fn traces(text: &str) -> Vec<Trace> {
    let mut out: Vec<Trace> = Vec::new();
    for line in text.lines() {
        if let Some((amount, rest)) = line.trim().split_once(" leaked over ") {
            let Some(b) = bytes(amount) else { continue };
            let merged = !rest.ends_with(':');
            if !merged && out.last().is_some_and(|t| t.merged) {
                out.pop();
            }
            out.push(Trace {
                bytes: b,
                files: Vec::new(),
                merged,
            });
        } else if let Some(at) = line.trim().strip_prefix("at ")
            && let Some(t) = out.last_mut()
        {
            let file = at.rsplit_once(':').map_or(at, |(f, _)| f);
            t.files.push(file.to_string());
        }
    }
    out
}

/// `webchecker::engine` of `src/engine/writer.rs`, `webchecker_core::table`
/// of `crates/core/src/table/entry.rs`: our crate and its module.
fn module_of(file: &str) -> String {
    let (krate, rest) = match file.strip_prefix("crates/") {
        Some(r) => {
            let (c, rest) = r.split_once("/src/").unwrap_or((r, ""));
            (format!("webchecker_{c}"), rest)
        }
        None => (
            "webchecker".to_string(),
            file.strip_prefix("src/").unwrap_or(file),
        ),
    };
    let module = rest
        .split('/')
        .next()
        .unwrap_or_default()
        .trim_end_matches(".rs");
    match module {
        "" | "lib" => krate,
        m => format!("{krate}::{m}"),
    }
}

/// The crate of a library's file: `kube-runtime` of
/// `/root/.cargo/registry/src/index.../kube-runtime-3.0.1/src/watcher.rs`,
/// `std` of `/rustc/HASH/library/std/src/...`.
fn library(file: &str) -> Option<String> {
    if let Some(rest) = file.split_once("/library/").map(|(_, r)| r) {
        return Some(rest.split('/').next()?.to_string());
    }
    let dir = file
        .split_once("/registry/src/")
        .and_then(|(_, r)| r.split('/').nth(1))
        .or_else(|| {
            file.split_once("/deps/")
                .and_then(|(_, r)| r.split('/').next())
        })?;
    let (name, version) = dir.rsplit_once('-')?;
    version
        .starts_with(|c: char| c.is_ascii_digit())
        .then(|| name.to_string())
}

/// A backtrace's component: the module of our innermost frame, else the
/// outermost library crate that does more than carry work.
fn component(files: &[String], ours: &dyn Fn(&str) -> bool) -> String {
    if let Some(f) = files.iter().find(|f| ours(f)) {
        return module_of(f);
    }
    files
        .iter()
        .rev()
        .filter_map(|f| library(f))
        .find(|c| !CARRIERS.contains(&c.as_str()))
        .unwrap_or_else(|| "(runtime)".to_string())
}

/// Bytes by component of `heaptrack_print --print-leaks`'s text.
fn by_component(text: &str, ours: &dyn Fn(&str) -> bool) -> BTreeMap<String, f64> {
    let mut out: BTreeMap<String, f64> = BTreeMap::new();
    for t in traces(text) {
        *out.entry(component(&t.files, ours)).or_default() += t.bytes;
    }
    out
}

/// Whether a file (as the line tables name it) is of this repository:
/// each name looked up once (a profile names a few hundred files in
/// hundreds of thousands of frames).
fn in_repo() -> impl Fn(&str) -> bool {
    let repo = webchecker_kit::repo();
    let known = std::cell::RefCell::new(std::collections::HashMap::<String, bool>::new());
    move |file: &str| {
        if let Some(ours) = known.borrow().get(file) {
            return *ours;
        }
        let ours = !file.starts_with('/') && repo.join(file).is_file()
            || Path::new(file).starts_with(&repo);
        known.borrow_mut().insert(file.to_string(), ours);
        ours
    }
}

/// `bench heap-components LEAKS`: the bytes by component of the output of
/// `heaptrack_print --print-leaks`, largest first.
pub fn print_components(path: &str) {
    let text = std::fs::read_to_string(path).expect("read heaptrack_print's output");
    let mut all: Vec<(String, f64)> = by_component(&text, &in_repo()).into_iter().collect();
    all.sort_by(|a, b| b.1.total_cmp(&a.1));
    for (c, b) in all {
        println!("{:>10.1} KiB  {c}", b / 1024.0);
    }
}

/// A fleet of `m` checkers with its first replica under heaptrack; what
/// that replica held.
async fn profile(cl: &'static Cluster, m: usize, work: &Path) -> Res<Held> {
    let heaptrack = which(&["heaptrack"])
        .ok_or_else(|| err("heaptrack not found (hack/install-deps.sh installs it)"))?;
    let out: PathBuf = work.join(format!("heap-m{m}"));
    let ours = |p: &Path| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(&format!("heap-m{m}.")))
    };
    for old in std::fs::read_dir(work)?.filter_map(|e| e.ok().map(|e| e.path())) {
        if ours(&old) {
            std::fs::remove_file(old)?;
        }
    }
    let wrap = vec![
        heaptrack.display().to_string(),
        "-o".to_string(),
        out.display().to_string(),
    ];
    let mut f = Fleet::start_wrapped(cl, &format!("heap{m}"), 3, m, wrap).await?;
    f.wait_stable(Duration::from_secs(240)).await?;
    tokio::time::sleep(Duration::from_secs(2 * INTERVAL as u64)).await;
    let text = f.scrape_all().await?;
    let owned = metric(&text[0], "webchecker_owned_checkers", &[]).unwrap_or(0.0);
    let mut wrapper = f.ops[0]
        .child
        .take()
        .ok_or_else(|| err("no profiled replica"))?;
    kill_operator_under(wrapper.id())?;
    f.shutdown();
    // heaptrack's script writes its data once the operator is gone.
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    while wrapper.try_wait()?.is_none() {
        if std::time::Instant::now() > deadline {
            let _ = wrapper.kill();
            return Err(err("heaptrack did not finish its data within 300 s"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let data = std::fs::read_dir(work)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| ours(p))
        .ok_or_else(|| err(format!("no heaptrack data for {m} checkers")))?;
    let print = Command::new(which(&["heaptrack_print"]).ok_or_else(|| err("no heaptrack_print"))?)
        .arg("-f")
        .arg(&data)
        .args([
            "--print-peaks",
            "0",
            "--print-allocators",
            "0",
            "--print-temporary",
            "0",
        ])
        .args(["--print-leaks", "1", "-n", "1000000", "-s", "1000000"])
        .stderr(Stdio::null())
        .output()?;
    if !print.status.success() {
        return Err(err("heaptrack_print failed"));
    }
    let text = String::from_utf8_lossy(&print.stdout);
    std::fs::write(work.join(format!("heap-m{m}.leaks")), text.as_bytes())?;
    Ok(Held {
        checkers: m,
        owned,
        by_component: by_component(&text, &in_repo()),
    })
}

/// SIGKILL to the operator that heaptrack's script started (its child).
fn kill_operator_under(wrapper: u32) -> Res<()> {
    let children = std::fs::read_to_string(format!("/proc/{wrapper}/task/{wrapper}/children"))?;
    let mut killed = false;
    for pid in children
        .split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
    {
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
        if exe.to_string_lossy().contains("webchecker-operator") {
            // SAFETY: kill only sends a signal.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            killed = true;
        }
    }
    if killed {
        Ok(())
    } else {
        Err(err("no operator under heaptrack"))
    }
}

/// Part 8's section.
pub async fn part(cl: &'static Cluster, work: &Path) -> Res<Section> {
    std::fs::create_dir_all(work)?;
    let small = profile(cl, 1_000, work).await?;
    let large = profile(cl, 10_000, work).await?;
    Ok(section(&small, &large))
}

fn section(small: &Held, large: &Held) -> Section {
    let per = (large.owned - small.owned).max(1.0);
    let total = |h: &Held| h.by_component.values().sum::<f64>();
    let mut rows: Vec<(String, f64, f64, f64)> = large
        .by_component
        .iter()
        .map(|(c, b)| {
            let a = small.by_component.get(c).copied().unwrap_or(0.0);
            (c.clone(), a, *b, (b - a) / per)
        })
        .collect();
    rows.sort_by(|x, y| y.3.total_cmp(&x.3));
    let kib = |b: f64| b / 1024.0;
    let mut body = format!(
        "Two fleets of part 3 (3 release replicas, every checker at a {INTERVAL} s interval), the first replica of each \
         run under heaptrack (`heaptrack -o`); once every checker was placed and probed and two intervals passed, \
         that replica is killed with SIGKILL, so nothing is freed on the way out, and what it held (the allocations \
         it made and never freed) is grouped by the code that made them: the innermost frame of the operator's own \
         crates names the component (crate and module), else the outermost library's crate. *per owned checker*: \
         the difference between the fleets over the difference of checkers owned ({} and {}). Heap only: the \
         binary's code and the allocator's free pages are in RSS (part 3), not here. A replica also keeps state for \
         every checker of the fleet (the dependency graph, the leader's sharder): with 3 replicas that counts a \
         third per owned checker.\n\n\
         | component | {} checkers | {} checkers | per owned checker |\n|---|---:|---:|---:|\n",
        fmt_int(small.owned),
        fmt_int(large.owned),
        fmt_int(small.checkers as f64),
        fmt_int(large.checkers as f64),
    );
    let shown = rows.len().min(ROWS);
    for (c, a, b, p) in &rows[..shown] {
        body.push_str(&format!(
            "| `{c}` | {:.1} MiB | {:.1} MiB | {:.2} KiB |\n",
            kib(*a) / 1024.0,
            kib(*b) / 1024.0,
            kib(*p)
        ));
    }
    let rest = |h: &Held| -> f64 {
        total(h)
            - rows[..shown]
                .iter()
                .map(|r| h.by_component.get(&r.0).copied().unwrap_or(0.0))
                .sum::<f64>()
    };
    let all = (total(large) - total(small)) / per;
    body.push_str(&format!(
        "| the rest ({} components) | {:.1} MiB | {:.1} MiB | {:.2} KiB |\n| **all** | **{:.1} MiB** | **{:.1} MiB** | **{:.2} KiB** |\n",
        rows.len() - shown,
        kib(rest(small)) / 1024.0,
        kib(rest(large)) / 1024.0,
        kib((rest(large) - rest(small)) / per),
        kib(total(small)) / 1024.0,
        kib(total(large)) / 1024.0,
        kib(all),
    ));
    let top: Vec<String> = rows[..rows.len().min(3)]
        .iter()
        .map(|(c, _, _, p)| format!("{c} {:.1} KiB", kib(*p)))
        .collect();
    let summary = format!(
        "Heap by component (heaptrack, 10,000 checkers on 3 replicas): **{:.1} KiB per owned checker** held on the \
         heap ({:.1} MiB in all at {} owned); the largest: {}.",
        kib(all),
        kib(total(large)) / 1024.0,
        fmt_int(large.owned),
        top.join(", ")
    );
    Section {
        body,
        summary: vec![summary],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEAKS: &str = "MEMORY LEAKS\n\
        12.00M leaked over 30 calls from\n\
        alloc\n  at /rustc/abc/library/std/src/sys/alloc/unix.rs:14\n  in /bin/op\n\
        10.00M leaked over 10 calls from:\n\
        \x20   reserve<>\n      at /rust/deps/hashbrown-0.16.1/src/raw/mod.rs:962\n\
        \x20   insert\n      at crates/core/src/table/entries.rs:40\n\
        \x20   apply\n      at src/engine/mod.rs:300\n\
        \x20   run\n      at /root/.cargo/registry/src/index.crates.io-1/tokio-1.54.1/src/runtime/task.rs:1\n\
        2.00M leaked over 20 calls from:\n\
        \x20   from_slice\n      at /root/.cargo/registry/src/index.crates.io-1/serde_json-1.0.1/src/de.rs:1\n\
        \x20   step\n      at /root/.cargo/registry/src/index.crates.io-1/kube-runtime-3.0.1/src/watcher.rs:1\n\
        \x20   poll\n      at /root/.cargo/registry/src/index.crates.io-1/tokio-1.54.1/src/runtime/task.rs:1\n\
        512.00K leaked over 1 calls from\n\
        alloc\n  at src/main.rs:13\n";

    fn ours(f: &str) -> bool {
        f.starts_with("src/") || f.starts_with("crates/")
    }

    #[test]
    fn a_backtrace_is_named_by_our_innermost_frame_else_the_outermost_library() {
        let m = by_component(LEAKS, &ours);
        assert_eq!(m["webchecker_core::table"], 10.0 * 1024.0 * 1024.0, "{m:?}");
        assert_eq!(m["kube-runtime"], 2.0 * 1024.0 * 1024.0);
        assert_eq!(
            m["webchecker::main"],
            512.0 * 1024.0,
            "a location without backtraces counts itself"
        );
        assert_eq!(
            m.len(),
            3,
            "a merged location with backtraces counts only them: {m:?}"
        );
    }

    #[test]
    fn files_name_modules_and_crates() {
        assert_eq!(module_of("src/engine/writer.rs"), "webchecker::engine");
        assert_eq!(module_of("src/lib.rs"), "webchecker");
        assert_eq!(
            module_of("crates/plan/src/plan/http.rs"),
            "webchecker_plan::plan"
        );
        assert_eq!(
            module_of("crates/core/src/table.rs"),
            "webchecker_core::table"
        );
        assert_eq!(
            library("/rustc/abc/library/alloc/src/vec/mod.rs").as_deref(),
            Some("alloc")
        );
        assert_eq!(
            library("/x/registry/src/index-1/kube-runtime-3.0.1/src/a.rs").as_deref(),
            Some("kube-runtime")
        );
        assert_eq!(library("src/runtime/builder.rs"), None);
        assert_eq!(bytes("612.00K"), Some(612.0 * 1024.0));
        assert_eq!(bytes("48B"), Some(48.0));
    }
}
