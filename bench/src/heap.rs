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

/// Our crates: a frame of theirs names a component.
const OURS: [&str; 5] = [
    "webchecker::",
    "webchecker_core::",
    "webchecker_plan::",
    "webchecker_probe::",
    "webchecker_api::",
];
/// Crates that only carry work (runtimes, the standard library): a
/// library's component is the first other crate from the root.
const CARRIERS: [&str; 8] = [
    "std::",
    "core::",
    "alloc::",
    "tokio::",
    "futures",
    "hashbrown::",
    "__",
    "main",
];
/// Rows of the table: the largest components per owned checker.
const ROWS: usize = 12;

/// What one profiled replica held when killed.
struct Held {
    checkers: usize,
    owned: f64,
    by_component: BTreeMap<String, f64>,
}

/// The component of one stack (`frame;frame;...`, root first).
fn component(stack: &str) -> String {
    let frames: Vec<&str> = stack
        .split(';')
        .map(|f| f.split(" (").next().unwrap_or(f).trim_start_matches('<'))
        .filter(|f| !f.is_empty())
        .collect();
    let module = |f: &str| f.split("::").take(2).collect::<Vec<_>>().join("::");
    if let Some(f) = frames
        .iter()
        .rev()
        .find(|f| OURS.iter().any(|o| f.starts_with(o)))
    {
        return module(f);
    }
    frames
        .iter()
        .find(|f| f.contains("::") && !CARRIERS.iter().any(|c| f.starts_with(c)))
        .map(|f| f.split("::").next().unwrap_or(f).to_string())
        .unwrap_or_else(|| "(no symbol)".to_string())
}

/// Bytes by component of heaptrack's collapsed stacks (`stack bytes` per line).
fn by_component(stacks: &str) -> BTreeMap<String, f64> {
    let mut out: BTreeMap<String, f64> = BTreeMap::new();
    for line in stacks.lines() {
        let Some((stack, bytes)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(bytes) = bytes.trim().parse::<f64>() else {
            continue;
        };
        if bytes > 0.0 {
            *out.entry(component(stack)).or_default() += bytes;
        }
    }
    out
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
    let stacks = work.join(format!("heap-m{m}.stacks"));
    let status =
        Command::new(which(&["heaptrack_print"]).ok_or_else(|| err("no heaptrack_print"))?)
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
            .args(["--flamegraph-cost-type", "leaked", "-F"])
            .arg(&stacks)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
    if !status.success() {
        return Err(err("heaptrack_print failed"));
    }
    Ok(Held {
        checkers: m,
        owned,
        by_component: by_component(&std::fs::read_to_string(&stacks)?),
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

    #[test]
    fn a_stack_is_named_by_our_innermost_frame_else_the_outermost_library() {
        let ours = "0x1;std::rt::lang_start (rt.rs);webchecker::replica::run;webchecker_core::table::Table::insert (table.rs);hashbrown::raw::RawTable::reserve;";
        assert_eq!(component(ours), "webchecker_core::table");
        let lib = "0x1;tokio::runtime::task::harness::poll;kube_runtime::watcher::step;serde_json::de::from_slice;alloc::vec::Vec::push;";
        assert_eq!(component(lib), "kube_runtime");
        let trait_impl = "<webchecker::intake::feed::Feed as core::ops::Drop>::drop;";
        assert_eq!(component(trait_impl), "webchecker::intake");
        assert_eq!(component("0x1;0x2;"), "(no symbol)");
    }

    #[test]
    fn bytes_add_up_by_component() {
        let text = "a;webchecker::engine::x; 100\nb;webchecker::engine::y; 50\nc;rustls::x; 0\nd;rustls::y; 7\n";
        let m = by_component(text);
        assert_eq!(m["webchecker::engine"], 150.0);
        assert_eq!(m["rustls"], 7.0);
        assert_eq!(m.len(), 2);
    }
}
