//! Overload: 50,000 checkers on this two-core machine (3 replicas, 10 s
//! interval, API server and targets on the same cores). Too slow for CI, so it
//! is `#[ignore]`d and run by `make overload`; its figures go to the README.
//!
//! What must hold: the operator degrades visibly (schedule lag and missed
//! intervals rise), /healthz keeps answering, readiness stays honest, memory
//! stays bounded, nothing crashes, and it recovers when the load drops.

use webchecker_kit as support;

use std::time::{Duration, Instant};

use kube::api::ListParams;
use support::*;
use webchecker::assignment::OWNER_LABEL;

struct Sample {
    at: Duration,
    owned: f64,
    lag_count: Vec<(f64, f64)>,
    missed: f64,
    rss_mib: Vec<f64>,
    probes: u64,
    healthz_ms: u128,
    scrape_ms: u128,
    ready: usize,
    /// Membership churn: self-fences and checkers moved because an owner was proven dead.
    fences: f64,
    dead_moves: f64,
    events_dropped: f64,
}

/// Prometheus's default scrape timeout: a scrape slower than this is a failed scrape.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);

async fn sample(ops: &[Operator], witness: &Witness, t0: Instant) -> Sample {
    let mut owned = 0.0;
    let mut missed = 0.0;
    let mut rss = Vec::new();
    let mut buckets: Vec<(f64, f64)> = Vec::new();
    let mut healthz_ms = 0;
    let mut scrape_ms = 0;
    let mut ready = 0;
    let (mut fences, mut dead_moves, mut events_dropped) = (0.0, 0.0, 0.0);
    for o in ops {
        let started = Instant::now();
        let h = o.get("/healthz").await;
        healthz_ms = healthz_ms.max(started.elapsed().as_millis());
        assert!(
            matches!(h, Some((200, _))),
            "{}: /healthz did not answer 200: {h:?}",
            o.identity
        );
        if matches!(o.get("/readyz").await, Some((200, _))) {
            ready += 1;
        }
        let started = Instant::now();
        let m = http_get_within(&format!("127.0.0.1:{}", o.port), "/metrics", SCRAPE_TIMEOUT)
            .await
            .unwrap_or_else(|| {
                panic!(
                    "{}: /metrics did not answer within {SCRAPE_TIMEOUT:?}",
                    o.identity
                )
            })
            .1;
        scrape_ms = scrape_ms.max(started.elapsed().as_millis());
        fences += metric(&m, "webchecker_self_fences_total", &[]).unwrap_or(0.0);
        dead_moves += metric(&m, "webchecker_moves_total", &[("cause", "dead")]).unwrap_or(0.0);
        events_dropped += metric(&m, "webchecker_events_dropped_total", &[]).unwrap_or(0.0);
        owned += metric(&m, "webchecker_owned_checkers", &[]).unwrap_or(0.0);
        missed += metric(&m, "webchecker_missed_intervals_total", &[]).unwrap_or(0.0);
        rss.push(metric(&m, "process_resident_memory_bytes", &[]).unwrap_or(0.0) / 1048576.0);
        for line in m
            .lines()
            .filter(|l| l.starts_with("webchecker_schedule_lag_seconds_bucket{"))
        {
            let le = line
                .split("le=\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap();
            let le: f64 = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap()
            };
            let v: f64 = line.rsplit_once(' ').unwrap().1.parse().unwrap();
            match buckets.iter_mut().find(|(b, _)| *b == le) {
                Some(b) => b.1 += v,
                None => buckets.push((le, v)),
            }
        }
    }
    buckets.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
    Sample {
        at: t0.elapsed(),
        owned,
        lag_count: buckets,
        missed,
        rss_mib: rss,
        probes: witness.total(),
        healthz_ms,
        scrape_ms,
        ready,
        fences,
        dead_moves,
        events_dropped,
    }
}

/// p99 of the schedule lag between two samples (bucket upper bound).
fn lag_p99(a: &Sample, b: &Sample) -> f64 {
    let d: Vec<(f64, f64)> = b
        .lag_count
        .iter()
        .map(|(le, v)| {
            (
                *le,
                v - a
                    .lag_count
                    .iter()
                    .find(|(l, _)| l == le)
                    .map(|x| x.1)
                    .unwrap_or(0.0),
            )
        })
        .collect();
    let total = d.last().map(|x| x.1).unwrap_or(0.0);
    if total == 0.0 {
        return 0.0;
    }
    d.iter()
        .find(|(_, c)| *c >= 0.99 * total)
        .map(|x| x.0)
        .unwrap_or(f64::INFINITY)
}

fn report(a: &Sample, b: &Sample, phase: &str) -> (f64, f64) {
    let secs = (b.at - a.at).as_secs_f64();
    let rate = (b.probes - a.probes) as f64 / secs;
    let nominal = b.owned / 10.0;
    let p99 = lag_p99(a, b);
    println!(
        "| {phase} | {:.0} | {:.0}/s | {:.0}/s | {:.3} s | {:.0}/s | {:?} MiB | {} ms | {} ms | {}/3 | {:.0} / {:.0} | {:.0} |",
        b.owned,
        rate,
        nominal,
        p99,
        (b.missed - a.missed) / secs,
        b.rss_mib.iter().map(|x| x.round()).collect::<Vec<_>>(),
        b.healthz_ms,
        b.scrape_ms,
        b.ready,
        b.fences - a.fences,
        b.dead_moves - a.dead_moves,
        b.events_dropped - a.events_dropped,
    );
    (p99, (b.missed - a.missed) / secs)
}

/// The installation under load: 3 replicas over all namespaces, the
/// checkers' names (a tenth steady, the rest the burst), the witness.
struct Load {
    cluster: &'static Cluster,
    client: kube::Client,
    steady_ns: String,
    burst_ns: String,
    witness: Witness,
    ops: Vec<Operator>,
    total: usize,
    steady: Vec<String>,
    burst: Vec<String>,
    /// When the first checker was created: the samples' time origin.
    t0: Instant,
}

/// What the overload phase measured.
struct Overloaded {
    /// Time from the first checker created to the last.
    created_all: Duration,
    worst_rss: f64,
    p99: f64,
    missed: f64,
}

impl Load {
    async fn start() -> Load {
        let total: usize = std::env::var("OVERLOAD_CHECKERS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(50_000);
        let cluster: &'static Cluster = Box::leak(Box::new(Cluster::start("overload")));
        let client = cluster.client().await;
        let steady_ns = cluster.namespace("steady");
        let burst_ns = cluster.namespace("burst");
        let witness = Witness::start().await;
        witness.set_quiet();
        let ops: Vec<Operator> = (0..3)
            .map(|i| Operator::spawn_all_namespaces(cluster, &format!("over-r{i}"), "default"))
            .collect();
        for o in &ops {
            o.wait_ready(Duration::from_secs(60)).await;
        }
        let t0 = Instant::now();
        Load {
            cluster,
            client,
            steady_ns,
            burst_ns,
            witness,
            ops,
            total,
            steady: (0..total / 10).map(|i| format!("s{i}")).collect(),
            burst: (0..total - total / 10).map(|i| format!("b{i}")).collect(),
            t0,
        }
    }

    async fn sample(&self) -> Sample {
        sample(&self.ops, &self.witness, self.t0).await
    }

    /// The steady tenth alone: how long creating it took, and its lag p99
    /// over 20 s (the table's header and first row printed).
    async fn calm(&self) -> (Duration, f64) {
        create_checkers(
            &self.client,
            &self.steady_ns,
            &self.witness.url(),
            &self.steady,
            10,
        )
        .await;
        let created_steady = self.t0.elapsed();
        let base = self.sample().await;
        tokio::time::sleep(Duration::from_secs(20)).await;
        let calm = self.sample().await;
        println!(
            "| phase | checkers owned | probes at targets | nominal | lag p99 | missed intervals | RSS per replica | slowest /healthz | slowest /metrics | ready | self-fences / moved from dead owners | Events dropped |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
        let (calm_p99, _) = report(&base, &calm, &format!("{} checkers", self.steady.len()));
        (created_steady, calm_p99)
    }

    /// The burst on top, then two minutes of overload in 20 s rows; no
    /// replica may exit.
    async fn overload(&mut self) -> Overloaded {
        for chunk in self.burst.chunks(5000) {
            create_checkers(&self.client, &self.burst_ns, &self.witness.url(), chunk, 10).await;
        }
        let created_all = self.t0.elapsed();
        // Let the overload run.
        let mut prev = self.sample().await;
        let mut worst_rss: f64 = 0.0;
        let mut overloaded_p99: f64 = 0.0;
        let mut overloaded_missed: f64 = 0.0;
        for _ in 0..6 {
            tokio::time::sleep(Duration::from_secs(20)).await;
            let s = self.sample().await;
            let (p, m) = report(&prev, &s, &format!("{} checkers", self.total));
            overloaded_p99 = overloaded_p99.max(p);
            overloaded_missed = overloaded_missed.max(m);
            worst_rss = worst_rss.max(s.rss_mib.iter().cloned().fold(0.0, f64::max));
            prev = s;
        }
        for o in self.ops.iter_mut() {
            assert!(o.exited().is_none(), "{} exited under overload", o.identity);
        }
        Overloaded {
            created_all,
            worst_rss,
            p99: overloaded_p99,
            missed: overloaded_missed,
        }
    }

    /// Nothing lost: every checker is owned and probed by some replica.
    async fn wait_every_checker_owned(&self) {
        let total = self.total;
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let s = self.sample().await;
            if s.owned as usize == total {
                break;
            }
            if Instant::now() > deadline {
                let stuck = self.without_owner().await;
                panic!(
                    "{} of {total} checkers owned 2 minutes after the burst; without an owner: {stuck:?}",
                    s.owned
                );
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }

    /// The checkers without an owner label, with their annotations.
    async fn without_owner(&self) -> Vec<String> {
        let mut stuck = Vec::new();
        for ns in [&self.steady_ns, &self.burst_ns] {
            let api = checkers_api(&self.client, ns);
            let unassigned = ListParams::default().labels(&format!("!{OWNER_LABEL}"));
            if let Ok(list) = api.list_metadata(&unassigned).await {
                stuck.extend(list.items.into_iter().map(|o| {
                    format!(
                        "{ns}/{} {:?}",
                        o.metadata.name.unwrap_or_default(),
                        o.metadata.annotations
                    )
                }));
            }
        }
        stuck
    }

    /// Drops the load, then measures 20 s once the replicas let go of the
    /// deleted checkers: the lag p99 and missed intervals per second.
    async fn recover(&self) -> (f64, f64) {
        // Drop the load: delete the burst namespace's checkers. One DeleteCollection
        // of 45,000 objects outlasts the API server's request timeout, so repeat it
        // until the namespace is empty (each call gets further).
        let api = checkers_api(&self.client, &self.burst_ns);
        eventually(
            Duration::from_secs(600),
            "the burst checkers are deleted",
            || async {
                let _ = api
                    .delete_collection(&Default::default(), &Default::default())
                    .await;
                let left = api
                    .list_metadata(&ListParams::default().limit(1))
                    .await
                    .ok()?;
                left.items.is_empty().then_some(())
            },
        )
        .await;
        eventually(
            Duration::from_secs(300),
            "the replicas dropped the deleted checkers",
            || async {
                let s = self.sample().await;
                (s.owned as usize == self.steady.len()).then_some(())
            },
        )
        .await;
        tokio::time::sleep(Duration::from_secs(15)).await;
        let a = self.sample().await;
        tokio::time::sleep(Duration::from_secs(20)).await;
        let b = self.sample().await;
        report(&a, &b, "after the load dropped")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a load scenario (minutes); run by `make overload`"]
async fn fifty_thousand_checkers_degrade_visibly_and_recover() {
    let mut load = Load::start().await;
    let (created_steady, calm_p99) = load.calm().await;
    let over = load.overload().await;
    load.wait_every_checker_owned().await;
    let (recovered_p99, recovered_missed) = load.recover().await;
    let (total, worst_rss) = (load.total, over.worst_rss);
    println!(
        "created {} checkers in {created_steady:?}, {total} in {:?}; calm lag p99 {calm_p99} s, overloaded lag p99 {} s, missed/s {:.0}, worst RSS {worst_rss:.0} MiB, recovered lag p99 {recovered_p99} s, missed/s {recovered_missed:.1}",
        load.steady.len(),
        over.created_all,
        over.p99,
        over.missed,
    );
    assert!(worst_rss < 512.0, "memory stays bounded: {worst_rss} MiB");
    assert!(recovered_p99 <= 0.25, "recovered: lag p99 {recovered_p99}");
    assert!(
        recovered_missed < 1.0,
        "recovered: no more missed intervals ({recovered_missed}/s)"
    );
    for o in load.ops.iter_mut() {
        assert!(o.exited().is_none(), "{} exited", o.identity);
    }
    let cluster = load.cluster;
    drop(load);
    cluster.script("down");
}
