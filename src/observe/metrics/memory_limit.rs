//! `webchecker_memory_limit_bytes`: the memory the replica may use, beside
//! `process_resident_memory_bytes`, so that WebCheckerReplicaMemoryHigh can
//! warn before the kernel kills it. The limit is the one it was given
//! (`--memory-limit`; the chart passes the container's `limits.memory`),
//! else its cgroup's, read at each scrape (a pod's limit can be resized in
//! place). No limit known: no series.

use std::path::Path;

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntGauge, Registry};

use super::family::Family;

const MEMORY_LIMIT: Family = (
    "webchecker_memory_limit_bytes",
    "The replica's memory limit: --memory-limit (the chart passes limits.memory), else its cgroup's; absent when unlimited",
);

/// At or above this a cgroup v1 limit means none (the kernel's "unlimited"
/// is the largest page-aligned i64).
const V1_UNLIMITED: u64 = 1 << 62;

struct MemoryLimit {
    given: Option<u64>,
    gauge: IntGauge,
}

impl Collector for MemoryLimit {
    fn desc(&self) -> Vec<&Desc> {
        self.gauge.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let Some(limit) = self.given.or_else(|| cgroup_limit(Path::new("/"))) else {
            return Vec::new();
        };
        self.gauge.set(i64::try_from(limit).unwrap_or(i64::MAX));
        self.gauge.collect()
    }
}

/// Registers the family; `given` is `--memory-limit`.
pub fn register(r: &Registry, given: Option<u64>) {
    let (name, help) = MEMORY_LIMIT;
    let gauge = IntGauge::new(name, help).expect("a valid metric");
    r.register(Box::new(MemoryLimit { given, gauge }))
        .expect("metric names are unique");
}

/// The memory limit of this process's cgroup under `root` (the file
/// system's root; a test's directory): the smallest `memory.max` (cgroup
/// v2) of its cgroup and its parents, else the smallest
/// `memory.limit_in_bytes` of the v1 memory controller's (a container's
/// own cgroup is the root of what it sees).
pub fn cgroup_limit(root: &Path) -> Option<u64> {
    let own = std::fs::read_to_string(root.join("proc/self/cgroup")).ok()?;
    let fs = root.join("sys/fs/cgroup");
    let v2 = own.lines().find_map(|l| l.strip_prefix("0::"));
    let v1 = own.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
        controllers
            .split(',')
            .any(|c| c == "memory")
            .then_some(path)
    });
    v2.and_then(|p| smallest_along(&fs, p, "memory.max"))
        .or_else(|| {
            let memory = fs.join("memory");
            smallest_along(&memory, v1.unwrap_or("/"), "memory.limit_in_bytes")
        })
        .filter(|l| *l < V1_UNLIMITED)
}

/// The smallest limit in `file` of `base` and each directory down `path`.
fn smallest_along(base: &Path, path: &str, file: &str) -> Option<u64> {
    let mut dir = base.to_path_buf();
    let mut limit = read_limit(&dir.join(file));
    for part in path.split('/').filter(|p| !p.is_empty()) {
        dir.push(part);
        limit = min(limit, read_limit(&dir.join(file)));
    }
    limit
}

/// A limit file's value; `max` (or a missing file) is none.
fn read_limit(file: &Path) -> Option<u64> {
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

fn min(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1_MAX: &str = "9223372036854771712";

    /// The limit `cgroup_limit` reads from a tree of these files (path
    /// under the root, content).
    fn limit_of(files: &[(&str, &str)]) -> Option<u64> {
        let root = tempfile::tempdir().unwrap();
        for (rel, text) in files {
            let p = root.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, format!("{text}\n")).unwrap();
        }
        cgroup_limit(root.path())
    }

    #[test]
    fn the_smallest_v2_limit_of_the_cgroup_and_its_parents_binds() {
        let files = [
            ("proc/self/cgroup", "0::/kubepods/pod1/c1"),
            ("sys/fs/cgroup/kubepods/memory.max", "max"),
            ("sys/fs/cgroup/kubepods/pod1/memory.max", "268435456"),
            ("sys/fs/cgroup/kubepods/pod1/c1/memory.max", "536870912"),
        ];
        assert_eq!(limit_of(&files), Some(268_435_456));
    }

    #[test]
    fn a_container_s_own_namespace_reads_the_root_file() {
        let files = [
            ("proc/self/cgroup", "0::/"),
            ("sys/fs/cgroup/memory.max", "134217728"),
        ];
        assert_eq!(limit_of(&files), Some(134_217_728));
    }

    #[test]
    fn unlimited_is_no_limit_in_v2_and_v1() {
        let v2 = [
            ("proc/self/cgroup", "0::/user.slice/session-1.scope"),
            ("sys/fs/cgroup/user.slice/memory.max", "max"),
        ];
        assert_eq!(limit_of(&v2), None);
        let v1 = |limit| {
            limit_of(&[
                ("proc/self/cgroup", "4:memory:/"),
                ("sys/fs/cgroup/memory/memory.limit_in_bytes", limit),
            ])
        };
        assert_eq!(v1(V1_MAX), None);
        assert_eq!(v1("67108864"), Some(67_108_864));
        assert_eq!(limit_of(&[]), None);
    }

    #[test]
    fn a_host_with_v2_without_memory_reads_v1_along_its_path() {
        let files = [
            ("proc/self/cgroup", "4:memory:/app/x\n1:cpu:/\n0::/"),
            ("sys/fs/cgroup/memory/memory.limit_in_bytes", V1_MAX),
            ("sys/fs/cgroup/memory/app/memory.limit_in_bytes", "33554432"),
            ("sys/fs/cgroup/memory/app/x/memory.limit_in_bytes", V1_MAX),
        ];
        assert_eq!(limit_of(&files), Some(33_554_432));
    }

    #[test]
    fn the_given_limit_is_the_series() {
        let r = Registry::new();
        register(&r, Some(1 << 30));
        let text = prometheus::TextEncoder::new()
            .encode_to_string(&r.gather())
            .unwrap();
        assert!(
            text.contains("\nwebchecker_memory_limit_bytes 1073741824\n"),
            "{text}"
        );
    }
}
