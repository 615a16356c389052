//! What every part of the bench uses: the parts and their order, the
//! configuration from the BENCH_* variables (main.rs lists them), the error
//! type, and running a part so that a panic becomes its error.

use std::collections::HashSet;
use std::error::Error;
use std::path::PathBuf;

/// The parts in the report's order: key (BENCH_PARTS), title, and how its
/// summary lines begin (merge.rs).
pub const PARTS: [(&str, &str, &[&str]); 10] = [
    (
        "probe",
        "1. Probe engine efficiency: webchecker prober vs blackbox_exporter",
        &["probe engine:", "probe floor"],
    ),
    (
        "kinds",
        "1b. Probe engine efficiency: gRPC health and TCP connect vs blackbox_exporter 0.28",
        &["probe engine, checks"],
    ),
    ("ring", "2. Ring quality (simulation)", &["ring"]),
    ("scale", "3. Scale on a real control plane", &["scale"]),
    (
        "rebalance",
        "3b. Rebalance at scale: 3 -> 4 replicas",
        &["rebalance"],
    ),
    (
        "slo",
        "3c. Status writes with an objective on every checker",
        &["status writes with spec.slo"],
    ),
    ("failover", "4. Failover", &["failover", "planned moves"]),
    ("confirm", "5. Confirmation", &["confirmation"]),
    (
        "prom",
        "6. Prometheus 3's own memory: classic vs native histograms",
        &["prometheus 3"],
    ),
    (
        "sim",
        "7. Rebalancing cost curve (simulation): 10,000 and 100,000 checkers",
        &["rebalancing cost curve"],
    ),
];

pub type Res<T> = Result<T, Box<dyn Error + Send + Sync>>;

pub fn err(msg: impl Into<String>) -> Box<dyn Error + Send + Sync> {
    msg.into().into()
}

#[derive(Clone)]
pub struct Cfg {
    pub quick: bool,
    pub large: bool,
    pub parts: HashSet<String>,
    /// BENCH_PARTS named a subset: merged into an existing report.
    pub subset: bool,
    pub prom_checkers: usize,
    pub prom_scrapes: u32,
    pub out: PathBuf,
    pub rounds: usize,
    pub failover_checkers: usize,
    pub command: String,
    pub operator: PathBuf,
    pub work: PathBuf,
}

impl Cfg {
    pub fn from_env() -> Cfg {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let quick = env("BENCH_QUICK").is_some_and(|v| v != "0");
        let large = env("BENCH_LARGE").is_some_and(|v| v != "0");
        let parts: HashSet<String> = env("BENCH_PARTS")
            .unwrap_or_else(|| PARTS.map(|p| p.0).join(","))
            .split(',')
            .map(|s| s.trim().to_string())
            .collect();
        let subset = PARTS.iter().any(|p| !parts.contains(p.0));
        let repo = webchecker_kit::repo();
        Cfg {
            quick,
            large,
            parts,
            subset,
            prom_checkers: env("BENCH_PROM_CHECKERS")
                .and_then(|v| v.parse().ok())
                .unwrap_or(10_000),
            // Half of a head chunk's 120 samples: prom_memory.rs says why.
            prom_scrapes: env("BENCH_PROM_SCRAPES")
                .and_then(|v| v.parse().ok())
                .unwrap_or(if quick { 8 } else { 60 }),
            out: env("BENCH_OUT")
                .map(PathBuf::from)
                .unwrap_or_else(|| repo.join("docs")),
            rounds: env("BENCH_ROUNDS")
                .and_then(|v| v.parse().ok())
                .unwrap_or(if quick { 2 } else { 5 }),
            failover_checkers: env("BENCH_FAILOVER_CHECKERS")
                .and_then(|v| v.parse().ok())
                .unwrap_or(1000),
            command: env("BENCH_COMMAND")
                .unwrap_or_else(|| std::env::args().collect::<Vec<_>>().join(" ")),
            operator: webchecker_kit::operator_bin(),
            work: webchecker_kit::target_dir()
                .join("bench")
                .join(format!("run-{}", std::process::id())),
        }
    }

    pub fn part(&self, p: &str) -> bool {
        self.parts.contains(p)
    }
}

/// The text of a panic (the kit panics where a test would fail).
pub fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panic".into())
}

/// Runs `f` as a task of its own: a panic in it (a kit timeout, a create
/// that failed) becomes an error of the part, and the fleet it held is
/// dropped, its replicas killed.
pub async fn caught<T: Send + 'static>(f: impl Future<Output = Res<T>> + Send + 'static) -> Res<T> {
    match tokio::spawn(f).await {
        Ok(r) => r,
        Err(e) if e.is_panic() => Err(err(panic_text(&*e.into_panic()))),
        Err(e) => Err(err(e.to_string())),
    }
}
