//! Tenancy of name resolution and of the worker pool, end
//! to end: a real API server, one operator process, the test kit's name
//! server (kit/src/dns.rs) and a witness target.
//!
//! 500 healthy checkers in five namespaces probe names the name server
//! answers; then 50 checkers in a sixth namespace probe names of a zone it
//! never answers. Each of those holds a worker for its whole 3 s timeout, every
//! 4 s: 37.5 workers' worth on a pool of 16, of which their namespace's
//! guaranteed share is 3. Before the per-namespace share they queued ahead
//! of everyone (and, with getaddrinfo on the blocking pool,
//! failed every name-based probe): the healthy probes' lateness must stay
//! what it was without them, relative to the interval, and all of them must
//! still succeed.

use webchecker_kit as support;

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use support::dns::Dns;
use support::*;

const INTERVAL: Duration = Duration::from_secs(4);
const WORKERS: usize = 16;

/// Creates checkers `names` in `ns`: `host(name)` as host, `/c/<name>` as path.
async fn create(
    client: &kube::Client,
    ns: &str,
    names: &[String],
    host: impl Fn(&str) -> String,
    timeout_seconds: u32,
) {
    let extra = serde_json::json!({ "timeoutSeconds": timeout_seconds });
    let objs = names
        .iter()
        .map(|n| checker_object(n, &host(n), INTERVAL.as_secs(), extra.clone()))
        .collect();
    create_all(client, ns, objs, 16).await;
}

/// How late each probe of each checker started, relative to its cadence.
/// A checker's probes lie on a grid of `INTERVAL` steps; a probe's offset
/// from the grid (anchored at the checker's first probe at or after
/// `base.0`) minus the smallest offset of its probes in `base` (its least
/// late probe without the load) is its lateness. Lateness up to half an
/// interval is told apart from skipping; more shows as a gap (see below).
fn lateness(
    hits: &[Hit],
    checkers: &[String],
    base: (Instant, Instant),
    window: (Instant, Instant),
) -> Vec<f64> {
    let step = INTERVAL.as_secs_f64();
    let mut by: HashMap<&str, Vec<Instant>> = HashMap::new();
    for h in hits {
        by.entry(h.checker.as_str()).or_default().push(h.start);
    }
    let mut out = Vec::new();
    for c in checkers {
        let Some(ts) = by.get_mut(c.as_str()) else {
            continue;
        };
        ts.sort();
        let Some(anchor) = ts.iter().find(|t| **t >= base.0).copied() else {
            continue;
        };
        let offset = |t: Instant| {
            let d = if t >= anchor {
                (t - anchor).as_secs_f64()
            } else {
                -(anchor - t).as_secs_f64()
            };
            d - (d / step).round() * step
        };
        let zero = ts
            .iter()
            .filter(|t| **t >= base.0 && **t <= base.1)
            .map(|t| offset(*t))
            .fold(f64::INFINITY, f64::min);
        out.extend(
            ts.iter()
                .filter(|t| **t >= window.0 && **t <= window.1)
                .map(|t| (offset(*t) - zero).max(0.0)),
        );
    }
    out.sort_by(|a, b| a.partial_cmp(b).unwrap());
    out
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// Counts per `le` of a histogram in a metrics text.
fn buckets(text: &str, name: &str) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = text
        .lines()
        .filter_map(|l| l.strip_prefix(&format!("{name}_bucket{{")))
        .filter_map(|rest| {
            let le = rest.split("le=\"").nth(1)?.split('"').next()?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, rest.rsplit_once(' ')?.1.parse().ok()?))
        })
        .collect();
    out.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
    out
}

/// The q-quantile (bucket upper bound) of the observations between two scrapes.
fn histogram_delta_quantile(before: &str, after: &str, name: &str, q: f64) -> f64 {
    let (b, a) = (buckets(before, name), buckets(after, name));
    let d: Vec<(f64, f64)> = a
        .iter()
        .map(|(le, n)| {
            let was = b.iter().find(|(l, _)| l == le).map_or(0.0, |x| x.1);
            (*le, n - was)
        })
        .collect();
    let total = d.last().map_or(0.0, |x| x.1);
    d.into_iter()
        .find(|(_, c)| *c >= q * total)
        .map_or(f64::NAN, |x| x.0)
}

struct Window {
    lateness_p50: f64,
    lateness_p99: f64,
    lateness_max: f64,
    gap: Duration,
    healthy_probes: usize,
    lag_p99_all: f64,
    missed: f64,
    max_inflight: f64,
}

async fn scrape(op: &Operator) -> String {
    eventually(Duration::from_secs(10), "metrics", || op.metrics()).await
}

/// Watches `length`, sampling the in-flight gauge; the figures of the window.
async fn window(
    op: &Operator,
    witness: &Witness,
    healthy: &[String],
    base: Option<(Instant, Instant)>,
    length: Duration,
) -> (Window, (Instant, Instant)) {
    let m0 = scrape(op).await;
    let from = Instant::now();
    let mut max_inflight: f64 = 0.0;
    while from.elapsed() < length {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let m = scrape(op).await;
        max_inflight =
            max_inflight.max(metric(&m, "webchecker_inflight_probes", &[]).unwrap_or(0.0));
    }
    let to = Instant::now();
    let m1 = scrape(op).await;
    let hits = witness.hits();
    let base = base.unwrap_or((from, to));
    let late = lateness(&hits, healthy, base, (from, to));
    let missed = metric(&m1, "webchecker_missed_intervals_total", &[]).unwrap_or(0.0)
        - metric(&m0, "webchecker_missed_intervals_total", &[]).unwrap_or(0.0);
    let w = Window {
        lateness_p50: quantile(&late, 0.5),
        lateness_p99: quantile(&late, 0.99),
        lateness_max: late.last().copied().unwrap_or(f64::NAN),
        gap: largest_gap(&hits, healthy, from, to).0,
        healthy_probes: late.len(),
        lag_p99_all: histogram_delta_quantile(&m0, &m1, "webchecker_schedule_lag_seconds", 0.99),
        missed,
        max_inflight,
    };
    (w, (from, to))
}

fn report(what: &str, w: &Window) {
    println!(
        "{what}: healthy probes {}, lateness p50 {:.3}s p99 {:.3}s max {:.3}s, largest gap {:.2}s; \
         schedule lag p99 (all checkers) {}s, missed intervals {}, most probes in flight {}",
        w.healthy_probes,
        w.lateness_p50,
        w.lateness_p99,
        w.lateness_max,
        w.gap.as_secs_f64(),
        w.lag_p99_all,
        w.missed,
        w.max_inflight
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_holed_zone_in_one_namespace_does_not_delay_the_others() {
    let c = Cluster::shared("tenancy-dns");
    let client = c.client().await;
    let dns = Dns::shared();
    let run = rand_suffix();
    let good_zone = format!("good-{run}.tenancy.test");
    let bad_zone = format!("bad-{run}.tenancy.test");
    dns.add_zone(&good_zone, &["127.0.0.1".parse::<IpAddr>().unwrap()]);
    dns.black_hole(&bad_zone);
    let witness = Witness::start().await;

    let leases = c.namespace("tenancy-leases");
    let op = Operator::spawn_all_namespaces_with(
        c,
        &format!("op-{leases}"),
        &leases,
        &[&format!("--workers={WORKERS}")],
    );
    op.wait_ready(Duration::from_secs(60)).await;
    let (healthy, good_namespaces) = healthy_checkers(c, &client, &good_zone, &witness).await;

    // Without the black-holed namespace.
    let (without, base) = window(&op, &witness, &healthy, None, 4 * INTERVAL).await;
    report("without the 50", &without);

    let bad_ns = c.namespace("tenancy-bad");
    black_holed_checkers(&client, &bad_ns, &bad_zone).await;
    // Let the backlog of the black-holed namespace build up.
    tokio::time::sleep(INTERVAL).await;

    let (with, _) = window(&op, &witness, &healthy, Some(base), 4 * INTERVAL).await;
    report("with the 50", &with);

    // The load was real: the 50 wanted more workers than there are, held
    // their namespace's guaranteed share of the pool (their 3 s probes may
    // not borrow beyond it: six namespaces have checkers), and missed
    // intervals for want of more.
    let share = WORKERS.div_ceil(6);
    assert!(
        with.max_inflight >= share as f64,
        "the black-holed probes never held their share of the pool: {}",
        with.max_inflight
    );
    assert!(with.missed > 0.0, "no interval was missed: no contention");

    // Probe results: every healthy probe succeeded, with and without; the
    // black-holed ones all failed with DNSError.
    probe_results(&op, &good_namespaces, &bad_ns).await;
    // Schedule: the healthy probes kept their cadence, relative to the interval.
    cadence_kept(&with, &without);
}

/// 500 checkers in five namespaces, probing names of `good_zone` at the
/// witness, each probed twice; their names and namespaces.
async fn healthy_checkers(
    c: &Cluster,
    client: &kube::Client,
    good_zone: &str,
    witness: &Witness,
) -> (Vec<String>, Vec<String>) {
    let port = witness.addr.port();
    let mut healthy = Vec::new();
    let mut good_namespaces = Vec::new();
    for k in 0..5 {
        let ns = c.namespace("tenancy-good");
        let names: Vec<String> = (0..100).map(|i| format!("g{}", k * 100 + i)).collect();
        create(
            client,
            &ns,
            &names,
            |n| format!("http://{n}.{good_zone}:{port}"),
            1,
        )
        .await;
        healthy.extend(names);
        good_namespaces.push(ns);
    }
    eventually(
        Duration::from_secs(120),
        "every healthy checker probed twice",
        || async {
            let hits = witness.hits();
            let mut n: HashMap<&str, usize> = HashMap::new();
            for h in &hits {
                *n.entry(h.checker.as_str()).or_default() += 1;
            }
            healthy
                .iter()
                .all(|c| n.get(c.as_str()).copied().unwrap_or(0) >= 2)
                .then_some(())
        },
    )
    .await;

    (healthy, good_namespaces)
}

/// 50 checkers in `bad_ns`, probing names of `bad_zone` (3 s timeout), each
/// name asked at the name server.
async fn black_holed_checkers(client: &kube::Client, bad_ns: &str, bad_zone: &str) {
    let dns = Dns::shared();
    let bad: Vec<String> = (0..50).map(|i| format!("b{i}")).collect();
    create(
        client,
        bad_ns,
        &bad,
        |n| format!("http://{n}.{bad_zone}"),
        3,
    )
    .await;
    eventually(
        Duration::from_secs(60),
        "every black-holed name asked",
        || async {
            bad.iter()
                .all(|n| dns.queries(&format!("{n}.{bad_zone}")) > 0)
                .then_some(())
        },
    )
    .await;
}

async fn probe_results(op: &Operator, good_namespaces: &[String], bad_ns: &str) {
    let m = scrape(op).await;
    for ns in good_namespaces {
        let failed = metric(
            &m,
            "webchecker_probes_total",
            &[("namespace", ns), ("result", "failure")],
        );
        assert_eq!(failed, None, "{ns}: healthy probes failed");
    }
    let bad_total = metric(&m, "webchecker_probes_total", &[("namespace", bad_ns)]);
    let bad_dns = metric(
        &m,
        "webchecker_probes_total",
        &[("namespace", bad_ns), ("reason", "DNSError")],
    );
    assert!(bad_dns.is_some_and(|n| n >= 50.0), "{bad_dns:?}");
    assert_eq!(bad_total, bad_dns, "only DNSError in {bad_ns}");
}

fn cadence_kept(with: &Window, without: &Window) {
    let step = INTERVAL.as_secs_f64();
    assert!(
        with.healthy_probes as f64 >= 0.95 * without.healthy_probes as f64,
        "fewer healthy probes: {} against {}",
        with.healthy_probes,
        without.healthy_probes
    );
    assert!(
        with.gap <= INTERVAL + INTERVAL / 4,
        "a healthy checker waited {:?} between two probes",
        with.gap
    );
    assert!(
        with.lateness_p99 <= without.lateness_p99 + step / 20.0,
        "healthy probes late: p99 {:.3}s with the 50, {:.3}s without",
        with.lateness_p99,
        without.lateness_p99
    );
    assert!(
        with.lateness_max <= step / 4.0,
        "a healthy probe started {:.3}s late",
        with.lateness_max
    );
}
