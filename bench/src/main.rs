//! `make bench`: the benchmark driver. Writes `docs/benchmarks.md` and
//! `docs/img/*.png`.
//!
//! Parts:
//! 1. probe engine efficiency (probe.rs): our prober against
//!    prometheus-blackbox-exporter, probes per CPU-second of the prober
//!    process, both pinned to the same core; 1b. the same for the checks
//!    that are not HTTP (kinds.rs): gRPC health (plaintext and TLS) and TCP
//!    connect against blackbox_exporter v0.28's grpc and tcp probers and
//!    grpc-go's health server;
//! 2. ring quality by simulation (ring.rs, pure `webchecker::coordination::ring`);
//! 3. scale on a real control plane (scale.rs: hack/cluster.sh, 3 release
//!    replicas); 3b. a rebalance at scale, 10,000 checkers from 3 to 4
//!    replicas (rebalance.rs); 3c. status writes with an objective on
//!    every checker (slo_writes.rs);
//! 4. failover gaps seen by a witness target (failover.rs: SIGKILL, SIGTERM,
//!    leader loss, rolling restart) with the default lease timings;
//! 5. what confirmation costs, healthy and with one replica's path to the
//!    targets cut (confirm.rs), on and off;
//! 6. what the per-checker duration histogram costs Prometheus 3 itself at
//!    10,000 checkers, classic against native (prom_memory.rs, with the
//!    Prometheus of prometheus.rs);
//! 7. the cost curve of rebalancing, 10,000 and 100,000 checkers over
//!    3 -> 10 -> 30 -> 10 -> 3 members (with BENCH_SIM_LARGE=1 also
//!    1,000,000 over 10 -> 100): the real sharder against a fake API
//!    server with a given write latency and rate (sim/);
//! 8. a replica's heap by component, per owned checker (heap.rs: part 3's
//!    fleets, the first replica under heaptrack).
//!
//! Parts 3 and 4 run on the end-to-end kit the tests use (webchecker-kit:
//! control plane, operator processes, witness, checker creation, ports);
//! fleet.rs adds what only the bench measures.
//!
//! The machine is shared and noisy: every figure is a ratio against a peer
//! measured in the same run, or a distribution over several rounds.
//!
//! Subcommands (internal): `bench prober-worker` (our prober in its own process,
//! driven over stdin/stdout so its CPU time can be read from /proc) and
//! `bench target-server` (the HTTP and HTTPS targets of part 1).
//!
//! Environment: BENCH_QUICK=1 (short runs, for development), BENCH_LARGE=1
//! (adds 30,000 checkers), BENCH_PARTS=probe,kinds,ring,scale,rebalance,slo,failover,confirm,prom,sim,heap
//! (a subset; into an existing report it replaces those parts only: merge.rs),
//! BENCH_OUT=dir (default docs), BENCH_ROUNDS, BENCH_FAILOVER_CHECKERS,
//! BENCH_REBALANCE_CHECKERS (part 3b, default 10,000), BENCH_SIM_RUNS
//! (part 7's scenarios, checkers:latency_ms:rate[:members as 10/100],...),
//! BENCH_SIM_LARGE=1 (part 7 adds 1,000,000 checkers 10 -> 100), BENCH_SIM_MEMBERS
//! (part 7's member counts, default 3,10,30,10,3), BENCH_SIM_STEP_TIMEOUT
//! (seconds, default 900),
//! BENCH_PROM_CHECKERS (part 6's fleet, default 10,000), BENCH_PROM_SCRAPES
//! (part 6's scrapes per configuration, default 60),
//! BENCH_COMMAND (the command line shown in the report),
//! WEBCHECKER_OPERATOR_BIN (the operator; default: the one built next to
//! the bench, target/release/webchecker-operator under `make bench`).

mod common;
mod confirm;
mod crypto;
mod engines;
mod failover;
mod fleet;
mod heap;
mod kinds;
mod merge;
mod plots;
mod probe;
mod probe_floor;
mod prom_memory;
mod prometheus;
mod rebalance;
mod report;
mod ring;
mod runs;
mod scale;
mod sim;
mod slo_writes;
mod stats;
mod sys;
mod syscalls;
mod tls_cost;

use std::path::Path;
use std::time::Instant;

use webchecker_kit::Cluster;

use crate::common::{Cfg, PARTS, Res, caught, err, panic_text};
use crate::fleet::{Fleet, MemVariant};
use crate::merge::Part;
use crate::report::Section;

type ClusterParts = (
    Option<Res<Section>>,
    Option<Res<Section>>,
    Option<Res<Section>>,
    Option<Res<Section>>,
    Option<Res<Section>>,
    Option<Res<Section>>,
    Option<Res<Section>>,
);

/// Parts 3 to 6 and 8 on one control plane: 1,000 checkers (scale figures,
/// then the failover scenarios on the same fleet), then 10,000 (and
/// 30,000), then part 6's own 10,000, then part 8's fleets.
async fn cluster_parts(cfg: &Cfg, img: &Path) -> ClusterParts {
    let cl = match start_cluster(cfg) {
        Ok(cl) => cl,
        Err(msg) => {
            return (
                cfg.part("scale").then(|| Err(err(msg.clone()))),
                cfg.part("rebalance").then(|| Err(err(msg.clone()))),
                cfg.part("slo").then(|| Err(err(msg.clone()))),
                cfg.part("failover").then(|| Err(err(msg.clone()))),
                cfg.part("confirm").then(|| Err(err(msg.clone()))),
                cfg.part("prom").then(|| Err(err(msg.clone()))),
                cfg.part("heap").then(|| Err(err(msg))),
            );
        }
    };
    let mut scale_runs = ScaleRuns::default();
    let confirmation = if cfg.part("confirm") {
        Some(confirm::part(cl).await)
    } else {
        None
    };
    let failover = small_fleet(cl, cfg, img, &mut scale_runs).await;
    if cfg.part("scale") {
        large_fleets(cl, cfg, &mut scale_runs).await;
    }
    let rebalance = if cfg.part("rebalance") {
        let m = std::env::var("BENCH_REBALANCE_CHECKERS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(if cfg.quick { 2_000 } else { 10_000 });
        Some(Ok(rebalance::section(&caught(rebalance::run(cl, m)).await)))
    } else {
        None
    };
    let slo = if cfg.part("slo") {
        Some(caught(slo_writes::part(cl, cfg.quick)).await)
    } else {
        None
    };
    let prom = if cfg.part("prom") {
        let settings = prom_memory::Settings {
            checkers: cfg.prom_checkers,
            scrapes: cfg.prom_scrapes,
            work: cfg.work.join("prom"),
        };
        Some(caught(prom_memory::part(cl, settings)).await)
    } else {
        None
    };
    let heap = if cfg.part("heap") {
        let dir = cfg.work.join("heap");
        Some(caught(async move { heap::part(cl, &dir).await }).await)
    } else {
        None
    };
    cl.down();
    let scale = cfg
        .part("scale")
        .then(|| Ok(scale_section(cfg, scale_runs)));
    (scale, rebalance, slo, failover, confirmation, prom, heap)
}

/// The control plane, for the rest of the run; why it did not start.
fn start_cluster(cfg: &Cfg) -> Result<&'static Cluster, String> {
    let dir = cfg.work.join("cluster");
    match std::panic::catch_unwind(|| Cluster::start_in(dir, "")) {
        Ok(c) => Ok(Box::leak(Box::new(c))),
        Err(p) => Err(format!("control plane did not start: {}", panic_text(&*p))),
    }
}

/// What part 3's fleets gave: a row per fleet size, the 10,000-checker
/// fleet again without the per-checker histogram, the last error.
#[derive(Default)]
struct ScaleRuns {
    rows: Vec<scale::ScaleRow>,
    mem_variant: Option<MemVariant>,
    err: Option<String>,
}

/// The first fleet, 1,000 checkers (BENCH_FAILOVER_CHECKERS when failover
/// runs without scale): part 3's first row, then part 4 on the same fleet;
/// part 4's section.
async fn small_fleet(
    cl: &'static Cluster,
    cfg: &Cfg,
    img: &Path,
    scale_runs: &mut ScaleRuns,
) -> Option<Res<Section>> {
    let small = if cfg.part("failover") && !cfg.part("scale") {
        cfg.failover_checkers
    } else {
        1000
    };
    let (c, i) = (cfg.clone(), img.to_path_buf());
    let first = caught(async move {
        if !(c.part("scale") || c.part("failover")) {
            return Ok((None, None));
        }
        let mut f = Fleet::start(cl, &format!("m{small}"), 3, small).await?;
        let scale = if c.part("scale") {
            Some(scale::measure(&f, c.quick).await)
        } else {
            None
        };
        let failover = if c.part("failover") {
            Some(failover::run(&mut f, &i).await)
        } else {
            None
        };
        f.shutdown();
        Ok((scale, failover))
    })
    .await;
    match first {
        Ok((scale, fo)) => {
            match scale {
                Some(Ok(r)) => scale_runs.rows.push(r),
                Some(Err(e)) => scale_runs.err = Some(e.to_string()),
                None => {}
            }
            fo
        }
        Err(e) => {
            scale_runs.err = Some(e.to_string());
            cfg.part("failover").then_some(Err(e))
        }
    }
}

/// Part 3's fleets of 10,000 (and 30,000 with BENCH_LARGE) checkers.
async fn large_fleets(cl: &'static Cluster, cfg: &Cfg, scale_runs: &mut ScaleRuns) {
    let mut sizes = vec![10_000usize];
    if cfg.large {
        sizes.push(30_000);
    }
    for m in sizes {
        let c = cfg.clone();
        let run = caught(async move {
            let mut f = Fleet::start(cl, &format!("m{m}"), 3, m).await?;
            let row = scale::measure(&f, c.quick).await;
            // What the per-checker histogram costs: the same objects,
            // new replicas without it.
            let variant = match (m == 10_000, &row) {
                (true, Ok(_)) => Some(f.restart_with(&["--per-checker-histogram=false"]).await),
                _ => None,
            };
            f.shutdown();
            Ok((row, variant))
        })
        .await;
        match run {
            Ok((row, variant)) => {
                match row {
                    Ok(r) => scale_runs.rows.push(r),
                    Err(e) => scale_runs.err = Some(e.to_string()),
                }
                match variant {
                    Some(Ok(v)) => scale_runs.mem_variant = Some(v),
                    Some(Err(e)) => scale_runs.err = Some(e.to_string()),
                    None => {}
                }
            }
            Err(e) => scale_runs.err = Some(e.to_string()),
        }
    }
}

/// Part 3's section, with the last error of its fleets if there was one.
fn scale_section(cfg: &Cfg, runs: ScaleRuns) -> Section {
    let mut sec = scale::section(
        &runs.rows,
        runs.mem_variant.as_ref(),
        scale::operator_heartbeat_s(&cfg.operator),
    );
    if let Some(e) = runs.err {
        sec.body
            .push_str(&format!("\n**Error during this part:** {e}\n"));
        sec.summary.push(format!("Scale: error: {e}"));
    }
    sec
}

fn driver_main() {
    let cfg = Cfg::from_env();
    let t_start = Instant::now();
    let m = report::machine();
    let img = cfg.out.join("img");
    std::fs::create_dir_all(&img).expect("create the output directory");
    std::fs::create_dir_all(&cfg.work).expect("create the work directory");
    if !plots::register_font() {
        eprintln!(
            "bench: no TrueType font found (apt-get install fonts-dejavu-core): plots are skipped"
        );
    }
    let on_cluster = [
        "scale",
        "rebalance",
        "slo",
        "failover",
        "confirm",
        "prom",
        "heap",
    ]
    .iter()
    .any(|p| cfg.part(p));
    if !cfg.operator.is_file() && on_cluster {
        eprintln!(
            "bench: {} not found: build it with `cargo build --release` (make bench does)",
            cfg.operator.display()
        );
        std::process::exit(2);
    }

    let probe = cfg.part("probe").then(|| {
        eprintln!("bench: part 1, probe engine vs blackbox_exporter");
        probe::part(&cfg, &img)
    });
    let kinds = cfg.part("kinds").then(|| {
        eprintln!("bench: part 1b, gRPC health and TCP connect vs blackbox_exporter 0.28");
        kinds::part(&cfg, &img)
    });
    let ring = cfg.part("ring").then(|| {
        eprintln!("bench: part 2, ring simulation");
        ring::part(&cfg, &img)
    });
    let sim = cfg.part("sim").then(|| {
        eprintln!("bench: part 7, rebalancing cost curve (simulation)");
        sim::part(&cfg, &img)
    });
    let (scale, rebalance, slo, failover, confirmation, prom, heap) = if on_cluster {
        eprintln!("bench: parts 3 to 6, real control plane");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(cluster_parts(&cfg, &img))
    } else {
        (None, None, None, None, None, None, None)
    };

    let took = t_start.elapsed().as_secs_f64();
    let results = [
        probe,
        kinds,
        ring,
        scale,
        rebalance,
        slo,
        failover,
        confirmation,
        prom,
        sim,
        heap,
    ];
    let (doc, failures) = report::document(
        &cfg,
        &m,
        took,
        PARTS.iter().map(|p| p.1).zip(results).collect(),
    );
    let path = cfg.out.join("benchmarks.md");
    let doc = match std::fs::read_to_string(&path) {
        Ok(old) if cfg.subset => {
            let parts: Vec<Part<'_>> = PARTS
                .iter()
                .map(|p| Part {
                    title: p.1,
                    prefixes: p.2,
                    ran: cfg.part(p.0),
                })
                .collect();
            merge::merge(&old, &doc, &parts, &report::partial_note(&cfg, &m, took))
        }
        _ => doc,
    };
    std::fs::write(&path, doc).expect("write the report");
    eprintln!("bench: wrote {} in {:.1} min", path.display(), took / 60.0);
    if failures > 0 {
        std::process::exit(1);
    }
}

fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("prober-worker") => probe::worker_main(&std::env::args().skip(2).collect::<Vec<_>>()),
        Some("heap-components") => {
            heap::print_components(&std::env::args().nth(2).unwrap_or_default())
        }
        Some("target-server") => probe::target_main(&std::env::args().skip(2).collect::<Vec<_>>()),
        Some("-h") | Some("--help") | Some("help") => {
            eprintln!(
                "usage: bench            run the benchmarks, write docs/benchmarks.md (see the module docs for BENCH_* variables)\n       bench prober-worker  (internal)\n       bench target-server [PROTO CA_FILE]  (internal)"
            );
        }
        _ => {
            // kube's clients (the kit's) take the process's provider: with
            // the `aws-lc` feature rustls has two and would not pick one.
            let _ = webchecker::probe::crypto_provider().install_default();
            driver_main()
        }
    }
}
