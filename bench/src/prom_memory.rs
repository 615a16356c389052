//! Part 6: what the per-checker duration histogram costs Prometheus 3
//! itself at 10,000 checkers: classic buckets, native only, both (issue 29).
//! One fleet (part 3's: 3 release replicas, every checker at 10 s, one
//! witness), whose witness holds each answer 20-400 ms so that the native
//! histograms fill as a real endpoint's do. For each configuration in turn:
//! fresh replicas with its flags, a fresh Prometheus 3 with its scrape
//! settings scraping at the checkers' interval, and after a fixed number of
//! scrapes of every replica Prometheus's own figures (RSS, peak RSS, heap,
//! live heap after a forced collection, head series and chunks), what it
//! stored (series per checker, native buckets) and what the replicas serve
//! (each format, plain and gzip).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use webchecker_kit::Cluster;

use crate::common::{Res, err};
use crate::fleet::{Fleet, INTERVAL};
use crate::prometheus::{Prometheus, bin_dir, version};
use crate::report::Section;
use crate::stats::fmt_int;

const JOB: &str = "webchecker-operator";
const TEXT: &str = "text/plain;version=0.0.4";
const PROTO: &str =
    "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited";
const CLASSIC: &str = "classic";
const NATIVE: &str = "native only";
const BOTH: &str = "native + classic";

/// One configuration: the operator's flags and the scrape job's settings.
struct Mode {
    name: &'static str,
    flags: &'static [&'static str],
    prom: &'static str,
    settings: fn() -> Value,
}

const MODES: [Mode; 3] = [
    Mode {
        name: CLASSIC,
        flags: &[],
        prom: "defaults (asks for text)",
        settings: || json!({}),
    },
    Mode {
        name: NATIVE,
        flags: &["--native-histograms=true", "--classic-histograms=false"],
        prom: "`scrape_native_histograms: true` (asks for protobuf)",
        settings: || json!({"scrape_native_histograms": true}),
    },
    Mode {
        name: BOTH,
        flags: &["--native-histograms=true"],
        prom: "`scrape_native_histograms: true`, `always_scrape_classic_histograms: true` (protobuf)",
        settings: || json!({"scrape_native_histograms": true, "always_scrape_classic_histograms": true}),
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
    /// Series with a `name` label (the per-checker ones), and those of the
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
    /// Heap in use after a forced collection at each quarter of the
    /// scrapes: whether only the open chunks still grow.
    live: Vec<f64>,
}

impl Row {
    fn live_end(&self) -> f64 {
        self.live.last().copied().unwrap_or(f64::NAN)
    }
}

pub struct Settings {
    pub checkers: usize,
    /// Scrapes of every replica, at the checkers' interval, before the
    /// figures are read.
    pub scrapes: u32,
    pub work: PathBuf,
}

/// The part: its own fleet on `cl`, the configurations in turn.
pub async fn part(cl: &'static Cluster, s: Settings) -> Res<Section> {
    let bin = tokio::task::spawn_blocking(bin_dir).await?;
    let prom_version = version(&bin);
    let mut f = Fleet::start(cl, &format!("p{}", s.checkers), 3, s.checkers).await?;
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

/// Waits, when an even UTC hour falls within `window` from now, until it
/// has passed: Prometheus cuts every head chunk there (the boundary of its
/// 2 h blocks), and a configuration read just after that cut would have
/// near-empty chunks where the others have half-full ones.
async fn clear_of_block_boundary(window: Duration) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let left = 7200 - now % 7200;
    if left < window.as_secs() {
        eprintln!("bench: part 6: {left} s to the next 2 h block boundary; starting after it");
        // A wait for a time of day, not for another process.
        tokio::time::sleep(Duration::from_secs(left + 5)).await;
    }
}

/// Waits until Prometheus has `n` successful scrapes of every target.
async fn wait_scrapes(p: &Prometheus, targets: usize, n: u32) -> Res<()> {
    // Generous: a starved replica may miss a scrape's timeout now and then.
    let deadline = Instant::now() + Duration::from_secs(3 * n as u64 * INTERVAL as u64 + 600);
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
        // A poll of the condition, a fifth of a scrape interval apart.
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
    let dir = s
        .work
        .join(format!("prometheus-{}", mode.name.replace([' ', '+'], "")));
    let every = Duration::from_secs(INTERVAL.into());
    // The scrapes, with room for slow ones and for Prometheus's start.
    clear_of_block_boundary(every * s.scrapes * 6 / 5 + Duration::from_secs(120)).await;
    let p = Prometheus::start(bin, &dir, JOB, &addrs, every, &(mode.settings)())?;
    p.wait_ready(Duration::from_secs(60)).await?;
    let mut live = Vec::new();
    let (mut rss, mut heap_inuse, mut peak_rss) = (0.0, 0.0, 0.0);
    for q in 1..=4 {
        let n = s.scrapes * q / 4;
        wait_scrapes(&p, addrs.len(), n).await?;
        if q == 4 {
            // As it is, before the collection and the queries below.
            rss = p.own("process_resident_memory_bytes").await?;
            heap_inuse = p.own("go_memstats_heap_inuse_bytes").await?;
            peak_rss = p.peak_rss_mib() * 1048576.0;
        }
        p.collect_garbage().await?;
        let inuse = p.own("go_memstats_heap_inuse_bytes").await?;
        eprintln!(
            "bench: part 6, {}: {n} scrapes: live heap {:.0} MiB",
            mode.name,
            inuse / 1048576.0
        );
        live.push(inuse);
    }
    let head_series = p.own("prometheus_tsdb_head_series").await?;
    let head_chunks = p.own("prometheus_tsdb_head_chunks").await?;
    let checker_series = p.scalar("count({name!=\"\"})").await?;
    // Classic buckets are `_bucket`, `_sum`, `_count`; a native histogram is
    // one series under the bare name.
    let histogram_series = p
        .scalar("count({__name__=~\"webchecker_probe_duration_seconds.*\", name!=\"\"})")
        .await?;
    let body = p.scalar("sum(scrape_body_size_bytes)").await?;
    let native_buckets = native_buckets(&p).await?;
    drop(p);
    // Its TSDB is no longer needed; three of them add up.
    let _ = std::fs::remove_dir_all(&dir);
    let (mut text, mut proto) = (Wire::default(), Wire::default());
    for a in &addrs {
        let t = wire(a, TEXT, "text/plain").await?;
        let p = wire(a, PROTO, "application/vnd.google.protobuf").await?;
        text = Wire {
            plain: text.plain + t.plain,
            gzip: text.gzip + t.gzip,
        };
        proto = Wire {
            plain: proto.plain + p.plain,
            gzip: proto.gzip + p.gzip,
        };
    }
    eprintln!(
        "bench: part 6, {}: {} head series, RSS {:.0} MiB",
        mode.name,
        fmt_int(head_series),
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
        live,
    })
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
        let head = head.to_ascii_lowercase();
        let gzipped = head.contains("content-encoding: gzip");
        if code != 200 || !head.contains(content_type) || gzipped != (*enc == "gzip") {
            return Err(err(format!(
                "/metrics of {addr} as {accept}, {enc}: {head}"
            )));
        }
        out[i] = len as f64;
    }
    Ok(Wire {
        plain: out[0],
        gzip: out[1],
    })
}

/// The raw response of a GET with these request headers: (status, response
/// headers, body bytes as sent, compressed or not). HTTP/1.0, so the body is
/// everything after the headers (the kit's GET decodes it as text).
async fn get_raw(addr: &str, path: &str, headers: &[(&str, &str)]) -> Option<(u16, String, usize)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fut = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        let extra: String = headers
            .iter()
            .map(|(k, v)| format!("{k}: {v}\r\n"))
            .collect();
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n{extra}\r\n").as_bytes())
            .await
            .ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
        let head = String::from_utf8_lossy(&buf[..end]).to_string();
        let code = head.split_whitespace().nth(1)?.parse().ok()?;
        Some((code, head, buf.len() - end - 4))
    };
    // A starved replica renders 3,333 checkers' series slowly.
    tokio::time::timeout(Duration::from_secs(60), fut)
        .await
        .ok()
        .flatten()
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

fn by<'a>(rows: &'a [Row], name: &str) -> Option<&'a Row> {
    rows.iter().find(|r| r.mode.name == name)
}

/// `x` against the classic row's figure, "–" without one.
fn vs_classic(rows: &[Row], r: &Row, f: fn(&Row) -> f64) -> String {
    by(rows, CLASSIC).map_or_else(|| "–".into(), |c| format!("{:.2}x", f(r) / f(c)))
}

/// The report's section of part 6; `errors`: configurations not measured.
fn section(rows: &[Row], errors: &[String], s: &Settings, prom_version: &str) -> Section {
    let m = s.checkers as f64;
    let mut b = intro(s, prom_version);
    b.push_str(&stored_table(rows, m));
    b.push_str(&wire_table(rows, m));
    b.push_str(&memory_table(rows, s));
    let mut summary: Vec<String> = summary_line(rows, s, prom_version).into_iter().collect();
    for e in errors {
        b.push_str(&format!("\n**Not measured:** {e}\n"));
        summary.push(format!(
            "Prometheus {prom_version}, part 6: not measured: {e}"
        ));
    }
    Section { body: b, summary }
}

fn intro(s: &Settings, prom_version: &str) -> String {
    let m = fmt_int(s.checkers as f64);
    format!(
        "Prometheus {prom_version} (hack/build-prometheus.sh) scraping {m} checkers on 3 release replicas (part 3's \
         fleet: every checker at `intervalSeconds: {INTERVAL}`; the witness holds each answer 20-400 ms, uniformly \
         at random, so that native histograms fill as a real endpoint's do). For each configuration in turn: fresh \
         replicas with its flags (every checker probed again before Prometheus starts), a fresh Prometheus with a \
         new TSDB and its defaults otherwise (GOGC 75), one job over the 3 replicas (`honor_labels`, \
         `scrape_interval: {INTERVAL}s`, the checkers' interval, so that every sample is a new probe; \
         `extra_scrape_metrics: true` for `scrape_body_size_bytes`), then {} successful scrapes of every replica. \
         Why: every series exists from the first scrape, and from then on the head grows only by its open \
         chunks, which it cuts at 120 samples (native histograms at a predicted 1 KiB, after at least 10 samples) \
         and memory-maps to disk; {}, the mean over a chunk's life (the live heap at each quarter of the scrapes \
         shows the chunks' growth; a cut shows as more head chunks than series). Every \
         configuration's scrapes stay clear of an even UTC hour, where Prometheus cuts every chunk at once (its \
         2 h block boundary). Then Prometheus's own `/metrics`: \
         `process_resident_memory_bytes` (RSS), VmHWM (peak RSS), `go_memstats_heap_inuse_bytes` (heap in use as \
         it is, and after a garbage collection forced through `/debug/pprof/heap?gc=1`, twice: the *live heap*), \
         `prometheus_tsdb_head_series` and `prometheus_tsdb_head_chunks`. Series per checker is the head's total \
         / {m}: it includes the replicas' own series (a few hundred each) and the few Prometheus adds per target.\n\n",
        s.scrapes,
        if s.scrapes % 120 == 60 {
            "half a chunk past a cut, as here, float chunks are half full"
        } else {
            "half a chunk past a cut (60, 180, ... scrapes; not this run) float chunks are half full"
        },
    )
}

fn stored_table(rows: &[Row], m: f64) -> String {
    let mut b = String::from(
        "| configuration | operator flags | Prometheus scrape settings | head series | per checker | with a `name` label | of the duration histogram | head chunks | native buckets per checker (mean, c0..c99) |\n\
         |---|---|---|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let flags: Vec<String> = r.mode.flags.iter().map(|f| format!("`{f}`")).collect();
        b.push_str(&format!(
            "| {} | {} | {} | {} | **{:.2}** | {:.2} | {:.2} | {} | {} |\n",
            r.mode.name,
            if flags.is_empty() {
                "defaults".to_string()
            } else {
                flags.join(" ")
            },
            r.mode.prom,
            fmt_int(r.head_series),
            r.head_series / m,
            r.checker_series / m,
            r.histogram_series / m,
            fmt_int(r.head_chunks),
            r.native_buckets
                .map_or_else(|| "–".into(), |n| format!("{n:.1}")),
        ));
    }
    b
}

fn wire_table(rows: &[Row], m: f64) -> String {
    let mut b = String::from(
        "\nBytes per checker that the replicas serve, fetched from the 3 after the scrapes in each format, plain \
         and with `Accept-Encoding: gzip` (Prometheus asks for gzip: that is what crosses the network), summed \
         and divided by the checkers: every per-checker series and the replicas' own series spread over them. \
         *Prometheus read*: `scrape_body_size_bytes`, the uncompressed body of its own last scrapes, in the format \
         it asked for.\n\n\
         | configuration | text | text, gzip | protobuf | protobuf, gzip | Prometheus read |\n\
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
    let at: Vec<String> = (1..=4).map(|q| (s.scrapes * q / 4).to_string()).collect();
    let mut b = format!(
        "\nPrometheus's memory after {} scrapes; *live heap* at {} scrapes (the last bold); ratios to classic.\n\n\
         | configuration | RSS | peak RSS | heap in use | live heap | RSS per checker | live heap per checker | RSS ratio | heap in use ratio | live heap ratio |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        s.scrapes,
        at.join(", ")
    );
    for r in rows {
        let mut steps: Vec<String> = r
            .live
            .iter()
            .map(|v| format!("{:.0}", v / 1048576.0))
            .collect();
        if let Some(last) = steps.last_mut() {
            *last = format!("**{last}**");
        }
        b.push_str(&format!(
            "| {} | {} | {} | {} | {} MiB | {:.1} KiB | {:.1} KiB | {} | {} | {} |\n",
            r.mode.name,
            mib(r.rss),
            mib(r.peak_rss),
            mib(r.heap_inuse),
            steps.join(" → "),
            r.rss / m / 1024.0,
            r.live_end() / m / 1024.0,
            vs_classic(rows, r, |r| r.rss),
            vs_classic(rows, r, |r| r.heap_inuse),
            vs_classic(rows, r, Row::live_end),
        ));
    }
    b
}

fn summary_line(rows: &[Row], s: &Settings, prom_version: &str) -> Option<String> {
    let m = s.checkers as f64;
    let (classic, native) = (by(rows, CLASSIC)?, by(rows, NATIVE)?);
    let one = |r: &Row| {
        format!(
            "{:.1} series per checker, RSS {}, live heap {}",
            r.head_series / m,
            mib(r.rss),
            mib(r.live_end())
        )
    };
    let ratios = |r: &Row| {
        format!(
            "{:.2}x the series, {:.2}x the RSS, {:.2}x the live heap",
            r.head_series / classic.head_series,
            r.rss / classic.rss,
            r.live_end() / classic.live_end()
        )
    };
    let both = by(rows, BOTH).map_or_else(String::new, |b| {
        format!("; both stored {} ({})", one(b), ratios(b))
    });
    Some(format!(
        "Prometheus {prom_version}, {} checkers on 3 replicas, {} scrapes at {INTERVAL} s: classic histograms {}; \
         native only {} (**{}**){both}. Served per checker: text {} B classic, {} B native only; protobuf {} B \
         classic, {} B native only.",
        fmt_int(m),
        s.scrapes,
        one(classic),
        one(native),
        ratios(native),
        fmt_int(classic.text.plain / m),
        fmt_int(native.text.plain / m),
        fmt_int(classic.proto.plain / m),
        fmt_int(native.proto.plain / m),
    ))
}
