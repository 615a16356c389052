//! Part 6: what the per-checker duration histogram costs Prometheus 3
//! itself at 10,000 checkers, classic against native (issue 29). One fleet
//! (part 3's: 3 release replicas on the kit's control plane, checkers on one
//! witness, here at 30 s: a third of part 3's probing, on a shared machine),
//! whose witness holds each answer 20-400 ms so that the native histograms
//! fill as a real endpoint's do. For each configuration,
//! in turn: fresh replicas with its flags, a fresh Prometheus 3 with its
//! scrape settings, N scrapes of every replica, then Prometheus's own
//! figures (RSS, peak RSS, heap, live heap after a forced collection, head
//! series and chunks), what it stored (series per checker, native buckets)
//! and what crossed the wire (each format, plain and gzip, fetched from the
//! replicas; the body Prometheus itself read).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use webchecker_kit::Cluster;

use crate::fleet::Fleet;
use crate::prometheus::{Prometheus, bin_dir, get_raw, version};
use crate::report::Section;
use crate::stats::fmt_int;
use crate::{Res, err};

const JOB: &str = "webchecker-operator";
/// Every checker's interval: what Prometheus stores does not depend on it.
const INTERVAL: u32 = 30;
const TEXT: &str = "text/plain;version=0.0.4";
const PROTO: &str =
    "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited";

/// One configuration: the operator's flags and the scrape job's settings.
struct Mode {
    name: &'static str,
    flags: &'static [&'static str],
    prom: &'static str,
    settings: fn() -> Value,
}

const MODES: [Mode; 4] = [
    Mode {
        name: "classic",
        flags: &[],
        prom: "defaults (text)",
        settings: || json!({}),
    },
    Mode {
        name: "native only",
        flags: &["--native-histograms=true", "--classic-histograms=false"],
        prom: "`scrape_native_histograms: true` (protobuf)",
        settings: || json!({"scrape_native_histograms": true}),
    },
    Mode {
        name: "classic + native, both stored",
        flags: &["--native-histograms=true"],
        prom: "`scrape_native_histograms: true`, `always_scrape_classic_histograms: true` (protobuf)",
        settings: || json!({"scrape_native_histograms": true, "always_scrape_classic_histograms": true}),
    },
    Mode {
        name: "no histogram",
        flags: &["--per-checker-histogram=false"],
        prom: "defaults (text)",
        settings: || json!({}),
    },
];

/// (plain, gzip) bytes of one format, summed over the replicas.
#[derive(Default, Clone, Copy)]
struct Wire {
    plain: f64,
    gzip: f64,
}

struct Row {
    mode: &'static Mode,
    head_series: f64,
    head_chunks: f64,
    /// Series with a `name` label (per-checker series), and those of the
    /// duration histogram.
    checker_series: f64,
    histogram_series: f64,
    /// Mean populated native buckets per checker (native modes).
    native_buckets: Option<f64>,
    /// scrape_body_size_bytes summed over the replicas: what Prometheus read.
    body: f64,
    text: Wire,
    proto: Wire,
    rss: f64,
    peak_rss: f64,
    heap_inuse: f64,
    /// (scrapes, heap in use, heap allocated), each after a forced
    /// collection, at each quarter of the scrapes: whether the head settled.
    trajectory: Vec<(u32, f64, f64)>,
    live_end: f64,
}

pub struct Settings {
    pub checkers: usize,
    /// Scrapes of every replica before the figures are read, and their
    /// interval (also the scrape timeout).
    pub scrapes: u32,
    pub scrape: Duration,
    pub work: PathBuf,
}

/// The part: its own fleet on `cl`, the four configurations in turn.
pub async fn part(cl: &'static Cluster, s: Settings) -> Res<Section> {
    let bin = tokio::task::spawn_blocking(bin_dir).await?;
    let prom_version = version(&bin);
    let mut f =
        Fleet::start_every(cl, &format!("p{}", s.checkers), 3, s.checkers, INTERVAL).await?;
    f.witness
        .set_hold(Duration::from_millis(20), Duration::from_millis(400));
    let (mut rows, mut errors) = (Vec::new(), Vec::new());
    for mode in &MODES {
        eprintln!("bench: part 6, {}: fresh replicas", mode.name);
        let t = Instant::now();
        let row = match f.restart_with(mode.flags).await {
            Ok(_) => {
                eprintln!(
                    "bench: part 6, {}: every checker probed {:.0} s after the restart",
                    mode.name,
                    t.elapsed().as_secs_f64()
                );
                measure(&f, &bin, mode, &s).await
            }
            Err(e) => Err(e),
        };
        // One configuration's failure leaves the others' figures standing.
        match row {
            Ok(r) => rows.push(r),
            Err(e) => errors.push(format!("{}: {e}", mode.name)),
        }
    }
    f.shutdown();
    if rows.is_empty() {
        return Err(err(errors.join("; ")));
    }
    Ok(section(&rows, &errors, &s, &prom_version))
}

/// Waits until Prometheus has `n` successful scrapes of every target.
async fn wait_scrapes(p: &Prometheus, targets: usize, n: u32, every: Duration) -> Res<()> {
    // Generous: a starved replica may miss a scrape's timeout now and then.
    let deadline = Instant::now() + every * (3 * n) + Duration::from_secs(600);
    loop {
        let up = p.query("sum_over_time(up[1h])").await?;
        let counts: Vec<f64> = up
            .iter()
            .filter_map(|s| s["value"][1].as_str()?.parse().ok())
            .collect();
        if counts.len() == targets && counts.iter().all(|c| *c >= n as f64) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(err(format!(
                "Prometheus: {counts:?} successful scrapes of {targets} targets, {n} expected"
            )));
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

async fn measure(f: &Fleet, bin: &Path, mode: &'static Mode, s: &Settings) -> Res<Row> {
    let addrs: Vec<String> = f
        .ops
        .iter()
        .filter(|o| o.live())
        .map(|o| format!("{}:{}", o.ip, o.port))
        .collect();
    let dir = s.work.join(format!(
        "prometheus-{}",
        mode.name.replace([' ', ',', '+'], "")
    ));
    let p = Prometheus::start(bin, &dir, JOB, &addrs, s.scrape, &(mode.settings)())?;
    p.wait_ready(Duration::from_secs(60)).await?;
    let mut trajectory = Vec::new();
    let (mut rss, mut heap_inuse, mut peak_rss) = (0.0, 0.0, 0.0);
    for q in 1..=4 {
        let n = s.scrapes * q / 4;
        wait_scrapes(&p, addrs.len(), n, s.scrape).await?;
        if q == 4 {
            // As it is, before the collection and the queries below.
            rss = p.own("process_resident_memory_bytes").await?;
            heap_inuse = p.own("go_memstats_heap_inuse_bytes").await?;
            peak_rss = p.peak_rss_mib() * 1048576.0;
        }
        p.collect_garbage().await?;
        let inuse = p.own("go_memstats_heap_inuse_bytes").await?;
        let alloc = p.own("go_memstats_heap_alloc_bytes").await?;
        eprintln!(
            "bench: part 6, {}: {n} scrapes: live heap {:.0} MiB in use, {:.0} MiB allocated",
            mode.name,
            inuse / 1048576.0,
            alloc / 1048576.0
        );
        trajectory.push((n, inuse, alloc));
    }
    let live_end = trajectory.last().map_or(0.0, |t| t.1);
    let head_series = p.own("prometheus_tsdb_head_series").await?;
    let head_chunks = p.own("prometheus_tsdb_head_chunks").await?;
    let checker_series = p.scalar("count({name!=\"\"})").await?;
    let histogram_series = p
        .scalar("count({__name__=~\"webchecker_probe_duration_seconds.*\", name!=\"\"})")
        .await
        .map(|v| if v.is_nan() { 0.0 } else { v })?;
    let body = p.scalar("sum(scrape_body_size_bytes)").await?;
    let native_buckets = native_buckets(&p).await?;
    drop(p);
    // Its TSDB is no longer needed; four of them add up.
    let _ = std::fs::remove_dir_all(&dir);
    let (mut text, mut proto) = (Wire::default(), Wire::default());
    for a in &addrs {
        text = add(text, wire(a, TEXT, "text/plain").await?);
        proto = add(
            proto,
            wire(a, PROTO, "application/vnd.google.protobuf").await?,
        );
    }
    eprintln!(
        "bench: part 6, {}: {} head series, live heap {:.0} MiB, RSS {:.0} MiB",
        mode.name,
        fmt_int(head_series),
        live_end / 1048576.0,
        rss / 1048576.0
    );
    Ok(Row {
        mode,
        head_series,
        head_chunks,
        checker_series,
        histogram_series,
        native_buckets,
        body,
        text,
        proto,
        rss,
        peak_rss,
        heap_inuse,
        trajectory,
        live_end,
    })
}

fn add(a: Wire, b: Wire) -> Wire {
    Wire {
        plain: a.plain + b.plain,
        gzip: a.gzip + b.gzip,
    }
}

/// /metrics of one replica in one format, plain and gzip; the answer must
/// be in that format.
async fn wire(addr: &str, accept: &str, content_type: &str) -> Res<Wire> {
    let mut out = [0.0; 2];
    for (i, enc) in ["identity", "gzip"].iter().enumerate() {
        let (code, head, len) = get_raw(
            addr,
            "/metrics",
            &[("Accept", accept), ("Accept-Encoding", enc)],
        )
        .await
        .ok_or_else(|| err(format!("no /metrics from {addr}")))?;
        if code != 200 || !head.to_ascii_lowercase().contains(content_type) {
            return Err(err(format!("/metrics of {addr} as {accept}: {head}")));
        }
        out[i] = len as f64;
    }
    Ok(Wire {
        plain: out[0],
        gzip: out[1],
    })
}

/// Mean populated native buckets per checker over c0..c99 (None when the
/// TSDB holds no native histogram).
async fn native_buckets(p: &Prometheus) -> Res<Option<f64>> {
    let r = p
        .query("webchecker_probe_duration_seconds{name=~\"c[0-9]?[0-9]\"}")
        .await?;
    let n: Vec<usize> = r
        .iter()
        .filter_map(|s| s["histogram"][1]["buckets"].as_array().map(Vec::len))
        .collect();
    Ok((!n.is_empty()).then(|| n.iter().sum::<usize>() as f64 / n.len() as f64))
}

fn mib(b: f64) -> String {
    format!("{:.0} MiB", b / 1048576.0)
}

fn ratio(x: f64, of: f64) -> String {
    format!("{:.2}x", x / of)
}

/// The report's section of part 6; `errors`: configurations not measured.
fn section(rows: &[Row], errors: &[String], s: &Settings, prom_version: &str) -> Section {
    let m = s.checkers as f64;
    let mut b = intro(s, prom_version);
    b.push_str(&stored_table(rows, m));
    b.push_str(&wire_table(rows, m));
    b.push_str(&memory_table(rows, s));
    b.push_str(&shares(rows, m));
    let mut summary: Vec<String> = summary_line(rows, s, prom_version).into_iter().collect();
    for e in errors {
        b.push_str(&format!("\n**Not measured:** {e}\n"));
        summary.push(format!(
            "Prometheus {prom_version}, part 6: not measured: {e}"
        ));
    }
    Section { body: b, summary }
}

fn by<'a>(rows: &'a [Row], name: &str) -> Option<&'a Row> {
    rows.iter().find(|r| r.mode.name == name)
}

fn intro(s: &Settings, prom_version: &str) -> String {
    let m = fmt_int(s.checkers as f64);
    format!(
        "Prometheus {prom_version} (hack/build-prometheus.sh) scraping {m} checkers on 3 release replicas (part 3's fleet, \
         but every checker at `intervalSeconds: {INTERVAL}`, a third of part 3's probing on this shared machine: \
         what Prometheus stores does not depend on it; the witness holds each answer 20-400 ms, uniformly at \
         random, so that native histograms fill as a real endpoint's do). For each configuration in \
         turn: fresh replicas with its flags (each checker probed again before Prometheus starts), a fresh \
         Prometheus with a new TSDB, one job over the 3 replicas (`honor_labels`, `scrape_interval: {}s`, \
         `extra_scrape_metrics: true` for `scrape_body_size_bytes`), {} successful scrapes of every replica (enough \
         for every series to fill and cut its first head chunk: 120 float samples, about 1 KiB of a native \
         histogram's), then \
         Prometheus's own `/metrics`: `process_resident_memory_bytes` (RSS), VmHWM of the process (peak RSS), \
         `go_memstats_heap_inuse_bytes` (heap in use, as it was, and after a garbage collection forced through \
         `/debug/pprof/heap?gc=1`, twice: the live heap; at each quarter of the scrapes too, to show whether the \
         head settled), \
         `prometheus_tsdb_head_series` and `prometheus_tsdb_head_chunks`. Prometheus runs with its defaults \
         (GOGC 75, GOMEMLIMIT 90% of the machine's memory, no limit in reach here). Series per checker is the \
         head's total / {m}: it includes the replicas' own series (a few hundred each) and the 8 per target \
         Prometheus adds. Wire bytes are `/metrics` fetched from the 3 replicas after the scrapes, in each format, \
         plain and with `Accept-Encoding: gzip` (Prometheus asks for gzip, so that is what crosses the network), \
         summed and divided by {m}.\n\n",
        s.scrape.as_secs(),
        s.scrapes,
    )
}

fn stored_table(rows: &[Row], m: f64) -> String {
    let mut b = String::from(
        "| configuration | operator flags | Prometheus scrape settings | head series | per checker | of which the duration histogram | head chunks | native buckets per checker (mean, c0..c99) |\n\
         |---|---|---|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let flags = if r.mode.flags.is_empty() {
            "defaults".to_string()
        } else {
            let f: Vec<String> = r.mode.flags.iter().map(|f| format!("`{f}`")).collect();
            f.join(" ")
        };
        b.push_str(&format!(
            "| {} | {flags} | {} | {} | {:.2} ({:.2} with a `name` label) | {:.2} | {} | {} |\n",
            r.mode.name,
            r.mode.prom,
            fmt_int(r.head_series),
            r.head_series / m,
            r.checker_series / m,
            r.histogram_series / m,
            fmt_int(r.head_chunks),
            r.native_buckets
                .map(|n| format!("{n:.1}"))
                .unwrap_or_else(|| "–".into()),
        ));
    }
    b
}

fn wire_table(rows: &[Row], m: f64) -> String {
    let mut b = String::from(
        "\nBytes per checker on the wire (the whole exposition over the checkers: every per-checker series, \
         and the replicas' own series spread over them):\n\n\
         | configuration | text | text, gzip | protobuf | protobuf, gzip | Prometheus read (`scrape_body_size_bytes`) |\n\
         |---|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        b.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            r.mode.name,
            fmt_int(r.text.plain / m),
            fmt_int(r.text.gzip / m),
            fmt_int(r.proto.plain / m),
            fmt_int(r.proto.gzip / m),
            fmt_int(r.body / m),
        ));
    }
    b
}

fn memory_table(rows: &[Row], s: &Settings) -> String {
    let m = s.checkers as f64;
    let classic = by(rows, "classic");
    let to_classic =
        |f: fn(&Row) -> f64, r: &Row| classic.map_or_else(|| "–".into(), |c| ratio(f(r), f(c)));
    let at: Vec<String> = (1..=4).map(|q| (s.scrapes * q / 4).to_string()).collect();
    let mut b = format!(
        "\nPrometheus's memory after {} scrapes (ratio: to classic). *Live heap*: heap in use after a forced \
         collection, at {} scrapes (the last one bold); *live objects*: `go_memstats_heap_alloc_bytes` after the \
         last collection, without the partly used spans that heap in use counts whole.\n\n\
         | configuration | RSS | peak RSS | heap in use | live heap | live objects | live heap per checker | RSS ratio | live heap ratio |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        s.scrapes,
        at.join(", ")
    );
    for r in rows {
        let steps: Vec<String> = r
            .trajectory
            .iter()
            .map(|t| format!("{:.0}", t.1 / 1048576.0))
            .collect();
        let (last, before) = steps
            .split_last()
            .map_or(("", &[][..]), |(l, b)| (l.as_str(), b));
        b.push_str(&format!(
            "| {} | {} | {} | {} | {} → **{last}** MiB | {} | {:.1} KiB | {} | {} |\n",
            r.mode.name,
            mib(r.rss),
            mib(r.peak_rss),
            mib(r.heap_inuse),
            before.join(" → "),
            mib(r.trajectory.last().map_or(0.0, |t| t.2)),
            r.live_end / m / 1024.0,
            to_classic(|r| r.rss, r),
            to_classic(|r| r.live_end, r),
        ));
    }
    b
}

/// What the histogram alone costs: each configuration less *no histogram*.
fn shares(rows: &[Row], m: f64) -> String {
    let Some(none) = by(rows, "no histogram") else {
        return String::new();
    };
    let parts: Vec<String> = rows
        .iter()
        .filter(|r| r.mode.name != none.mode.name)
        .map(|r| {
            format!(
                "{} {:.1} series and {:.2} KiB of live heap",
                r.mode.name,
                (r.head_series - none.head_series) / m,
                (r.live_end - none.live_end) / m / 1024.0
            )
        })
        .collect();
    format!(
        "\nThe duration histogram's own share (each configuration less *no histogram*), per checker: {}. RSS \
         follows the live heap with the collector's slack (GOGC 75) and what the Go runtime has not yet returned \
         to the system; the peak is the first scrapes', when every series is created at once.\n",
        parts.join("; ")
    )
}

fn summary_line(rows: &[Row], s: &Settings, prom_version: &str) -> Option<String> {
    let m = s.checkers as f64;
    let (classic, native) = (by(rows, "classic")?, by(rows, "native only")?);
    let both = by(rows, "classic + native, both stored").map_or_else(String::new, |b| {
        format!(
            "; both stored {:.1} series, live heap {} ({})",
            b.head_series / m,
            mib(b.live_end),
            ratio(b.live_end, classic.live_end)
        )
    });
    Some(format!(
        "Prometheus {prom_version} at {} checkers on 3 replicas, {} scrapes at {} s: classic histograms {:.1} series \
         per checker, live heap {} (RSS {}); native only **{:.1}** series (**{}**), live heap {} (**{}**), RSS {} \
         ({}){both}. Per checker on the wire (gzip): classic text {} B, native-only protobuf {} B.",
        fmt_int(m),
        s.scrapes,
        s.scrape.as_secs(),
        classic.head_series / m,
        mib(classic.live_end),
        mib(classic.rss),
        native.head_series / m,
        ratio(native.head_series, classic.head_series),
        mib(native.live_end),
        ratio(native.live_end, classic.live_end),
        mib(native.rss),
        ratio(native.rss, classic.rss),
        fmt_int(classic.text.gzip / m),
        fmt_int(native.proto.gzip / m),
    ))
}
