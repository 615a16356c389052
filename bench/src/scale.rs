//! Part 3: scale on a real control plane: 3 release replicas, 1,000 and
//! 10,000 checkers (30,000 with BENCH_LARGE), steady-state figures.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use webchecker_kit::{bucket_upper, histogram_buckets, metric};

use crate::common::Res;
use crate::fleet::{Fleet, INTERVAL, MemVariant, pid, series};
use crate::report::Section;
use crate::stats::{
    add_buckets, bucket_quantile, bucket_share_le, fmt_int, human_s, median, minmax, ms,
    sub_buckets, yes,
};
use crate::sys::{clk_tck, cpu_ticks, proc_status_kib};

/// Sum of the samples of `name` (0 when there is none).
fn metric_sum(text: &str, name: &str) -> f64 {
    metric(text, name, &[]).unwrap_or(0.0)
}

/// The figures of one fleet size.
pub struct ScaleRow {
    m: usize,
    window_s: f64,
    create_s: f64,
    all_probed_s: f64,
    settle_s: f64,
    /// Probes seen at the witness in the window / (M x window / interval).
    achieved: f64,
    probes_rate: f64,
    missed_window: f64,
    missed_total: f64,
    lag: Vec<(f64, f64)>,
    rss_mib: Vec<f64>,
    rss_pre_mib: Vec<f64>,
    hwm_mib: Vec<f64>,
    cpu_cores: Vec<f64>,
    writes_rate: f64,
    owned: Vec<f64>,
    series: Vec<f64>,
    metrics_mib: Vec<f64>,
}

/// Steady-state figures of a settled fleet over a whole number of intervals.
pub async fn measure(f: &Fleet, quick: bool) -> Res<ScaleRow> {
    let settle_s = f.wait_writes_settled().await? + f.all_probed_s;
    // A whole number of intervals, so every checker is due the same number of times.
    let window = Duration::from_secs(INTERVAL as u64 * if quick { 2 } else { 4 });
    let pids: Vec<u32> = f.ops.iter().filter_map(pid).collect();
    let a = f.scrape_all().await?;
    let cpu_a: Vec<u64> = pids
        .iter()
        .map(|p| cpu_ticks(*p).map(|c| c.0 + c.1).unwrap_or(0))
        .collect();
    let wa = Instant::now();
    tokio::time::sleep(window).await;
    let wb = Instant::now();
    let secs = (wb - wa).as_secs_f64();
    let cpu_b: Vec<u64> = pids
        .iter()
        .map(|p| cpu_ticks(*p).map(|c| c.0 + c.1).unwrap_or(0))
        .collect();
    let b = f.scrape_all().await?;
    let hits = f
        .log()
        .probes
        .iter()
        .filter(|p| p.start >= wa && p.start < wb)
        .count();
    let delta = |name: &str| -> f64 {
        b.iter().map(|t| metric_sum(t, name)).sum::<f64>()
            - a.iter().map(|t| metric_sum(t, name)).sum::<f64>()
    };
    let mut lag = Vec::new();
    for (ta, tb) in a.iter().zip(&b) {
        let d = sub_buckets(
            &histogram_buckets(ta, "webchecker_schedule_lag_seconds"),
            &histogram_buckets(tb, "webchecker_schedule_lag_seconds"),
        );
        add_buckets(&mut lag, &d);
    }
    let hwm: Vec<f64> = pids
        .iter()
        .map(|p| proc_status_kib(*p, "VmHWM:").unwrap_or(0) as f64 / 1024.0)
        .collect();
    Ok(ScaleRow {
        m: f.m,
        window_s: secs,
        create_s: f.create_s,
        all_probed_s: f.all_probed_s,
        settle_s,
        achieved: hits as f64 / (f.m as f64 * secs / INTERVAL as f64),
        probes_rate: delta("webchecker_probes_total") / secs,
        missed_window: delta("webchecker_missed_intervals_total"),
        missed_total: b
            .iter()
            .map(|t| metric_sum(t, "webchecker_missed_intervals_total"))
            .sum(),
        lag,
        rss_mib: b
            .iter()
            .map(|t| metric_sum(t, "process_resident_memory_bytes") / 1048576.0)
            .collect(),
        rss_pre_mib: f.rss_pre_mib.clone(),
        hwm_mib: hwm,
        cpu_cores: cpu_a
            .iter()
            .zip(&cpu_b)
            .map(|(x, y)| (y - x) as f64 / clk_tck() / secs)
            .collect(),
        writes_rate: delta("webchecker_status_writes_total") / secs,
        owned: b
            .iter()
            .map(|t| metric_sum(t, "webchecker_owned_checkers"))
            .collect(),
        series: b.iter().map(|t| series(t)).collect(),
        metrics_mib: b.iter().map(|t| t.len() as f64 / 1048576.0).collect(),
    })
}

/// The operator's default `--heartbeat`, from its `--help` (seconds).
pub fn operator_heartbeat_s(bin: &Path) -> f64 {
    let help = Command::new(bin)
        .arg("--help")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
        .unwrap_or_default();
    let value = help
        .split_once("--heartbeat")
        .and_then(|(_, rest)| rest.split_once("[default: "))
        .and_then(|(_, rest)| rest.split_once(']'))
        .map(|(v, _)| v.trim().to_string())
        .unwrap_or_default();
    let (num, unit) = value.split_at(
        value
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(value.len()),
    );
    let n: f64 = num.parse().unwrap_or(f64::NAN);
    match unit {
        "ms" => n / 1000.0,
        "s" | "" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => f64::NAN,
    }
}

/// The report's section of part 3.
pub fn section(rows: &[ScaleRow], variant: Option<&MemVariant>, heartbeat_s: f64) -> Section {
    let hb_text = human_s(heartbeat_s);
    let mut s = method(&hb_text);
    s.push_str(&probe_table(rows));
    s.push_str(&memory_table(rows, variant));
    s.push_str(&memory_notes(rows, variant));
    s.push_str(&timing_table(rows));
    let mut summary = Vec::new();
    if let Some(r) = rows.iter().find(|r| r.m == 10_000) {
        let (goals, line) = goals(r, heartbeat_s, &hb_text);
        s.push_str(&goals);
        summary.push(line);
    }
    Section { body: s, summary }
}

/// Part 3's method paragraph.
fn method(hb_text: &str) -> String {
    format!(
        "3 replicas of the release build (`target/release/webchecker-operator`, default flags: 1024 workers, \
         heartbeat {hb_text}, leases 10s/7s/2s, per-checker histogram on) against the local control plane \
         (`hack/cluster.sh`), every checker at `intervalSeconds: {INTERVAL}` on a local witness target (in the bench \
         process) that counts probes. Objects are created with 64 concurrent creates through kube. Measured over a \
         steady-state window of a whole number of intervals, after the first status write of every checker went out; \
         counters are deltas over the window, summed over the replicas. *achieved* = probes the witness received in \
         the window / (M x window / interval). Schedule lag quantiles are interpolated within the \
         `webchecker_schedule_lag_seconds` buckets (bounds 1, 5, 10, 25, 50, 100 ms ...); the bucket bound that holds \
         the quantile is given too. CPU is utime+stime from `/proc/PID/stat` (`process_cpu_seconds_total` of the \
         prometheus crate counts whole seconds).\n\n"
    )
}

/// Probes, lag, CPU and status writes per fleet size.
fn probe_table(rows: &[ScaleRow]) -> String {
    let mut s = String::from(
        "| checkers M | nominal probes/s (M/10) | achieved | missed intervals (window / since start) | lag p50 | lag p99 (bucket) | lag <= 50 ms | CPU per replica | status writes/s | writes per 100 probes (window) |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let nominal = r.m as f64 / INTERVAL as f64;
        let (cmin, cmax) = minmax(&r.cpu_cores);
        s.push_str(&format!(
            "| {} | {} | {:.2}% | {} / {} | {:.1} ms | {:.1} ms (<= {}) | {:.2}% | {:.1}–{:.1}% of a core | {:.2} | {:.3} |\n",
            fmt_int(r.m as f64),
            fmt_int(nominal),
            100.0 * r.achieved,
            fmt_int(r.missed_window),
            fmt_int(r.missed_total),
            bucket_quantile(&r.lag, 0.5) * 1000.0,
            bucket_quantile(&r.lag, 0.99) * 1000.0,
            ms(bucket_upper(&r.lag, 0.99).unwrap_or(f64::NAN)),
            100.0 * bucket_share_le(&r.lag, 0.05),
            100.0 * cmin,
            100.0 * cmax,
            r.writes_rate,
            100.0 * r.writes_rate / r.probes_rate.max(1e-9),
        ));
    }
    s
}

/// `lo–hi` of `v` with `digits` decimals and `unit`.
fn range(v: &[f64], unit: &str, digits: usize) -> String {
    let (a, b) = minmax(v);
    format!("{a:.digits$}–{b:.digits$}{unit}")
}

/// Memory per replica per fleet size, and the fleet without the
/// per-checker histogram.
fn memory_table(rows: &[ScaleRow], variant: Option<&MemVariant>) -> String {
    let mut s = String::from(
        "\nMemory per replica (min–max over the 3 replicas). *before scrapes*: RSS once every checker had been probed, before the first `/metrics` request; *end*: `process_resident_memory_bytes` at the end of the window, after a dozen scrapes; *peak*: VmHWM.\n\n| checkers M | per replica | RSS before scrapes | RSS end | peak RSS | series in /metrics | /metrics size |\n|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            fmt_int(r.m as f64),
            fmt_int(r.m as f64 / 3.0),
            range(&r.rss_pre_mib, " MiB", 1),
            range(&r.rss_mib, " MiB", 1),
            range(&r.hwm_mib, " MiB", 1),
            range(&r.series, "", 0),
            range(&r.metrics_mib, " MiB", 1),
        ));
    }
    if let Some((pre, post, series)) = variant {
        s.push_str(&format!(
            "| 10,000, `--per-checker-histogram=false` | 3,333 | {} | {} (after one scrape) | – | {} | – |\n",
            range(pre, " MiB", 1),
            range(post, " MiB", 1),
            range(series, "", 0),
        ));
    }
    s
}

/// The marginal memory per checker (1,000 -> 10,000) and where the memory
/// of 10,000 checkers goes (with and without the per-checker histogram).
fn memory_notes(rows: &[ScaleRow], variant: Option<&MemVariant>) -> String {
    let mut s = String::new();
    if let (Some(a), Some(b)) = (
        rows.iter().find(|r| r.m == 1000),
        rows.iter().find(|r| r.m == 10_000),
    ) {
        let per_checker =
            |x: &[f64], y: &[f64]| (median(y) - median(x)) * 1024.0 / ((b.m - a.m) as f64 / 3.0);
        s.push_str(&format!(
            "\nMarginal memory per checker owned (1,000 -> 10,000): {:.1} KiB before any scrape, {:.1} KiB after scrapes; \
             {:.0} exported series per checker.\n",
            per_checker(&a.rss_pre_mib, &b.rss_pre_mib),
            per_checker(&a.rss_mib, &b.rss_mib),
            (median(&b.series) - median(&a.series)) / ((b.m - a.m) as f64 / 3.0)
        ));
    }
    if let (Some(b), Some((pre, post, _))) = (rows.iter().find(|r| r.m == 10_000), variant) {
        let per = b.m as f64 / 3.0;
        let hist_kib = (median(&b.rss_pre_mib) - median(pre)) * 1024.0 / per;
        let hist = if hist_kib.abs() < 1.0 {
            "less than 1 KiB per checker (within the noise)".to_string()
        } else {
            format!(
                "{hist_kib:.1} KiB per checker ({:.1} MiB)",
                hist_kib * per / 1024.0
            )
        };
        s.push_str(&format!(
            "\nWhere the memory goes at 3,333 checkers per replica: {:.1} MiB once every checker is probed, of which the \
             per-checker latency histogram accounts for {hist}; serving `/metrics` (80,000 series, 7 MiB of text, \
             gathered into intermediate structures first) adds {:.1} MiB after one scrape without the histogram and \
             {:.1} MiB after a dozen with it: memory the allocator keeps.\n",
            median(&b.rss_pre_mib),
            median(post) - median(pre),
            median(&b.rss_mib) - median(&b.rss_pre_mib),
        ));
    }
    s
}

/// How long creating, first probes and initial status writes took, and the
/// shard sizes, per fleet size.
fn timing_table(rows: &[ScaleRow]) -> String {
    let mut s = String::from(
        "\n| checkers M | create all (64 concurrent) | all probed after | initial status writes done after | window | shard sizes |\n|---:|---:|---:|---:|---:|---|\n",
    );
    for r in rows {
        s.push_str(&format!(
            "| {} | {:.1} s ({} creates/s) | {:.1} s | {:.0} s | {:.0} s | {} |\n",
            fmt_int(r.m as f64),
            r.create_s,
            fmt_int(r.m as f64 / r.create_s),
            r.all_probed_s,
            r.settle_s,
            r.window_s,
            r.owned
                .iter()
                .map(|x| fmt_int(*x))
                .collect::<Vec<_>>()
                .join(" / ")
        ));
    }
    s
}

/// The goals at 10,000 checkers (row `r`): their table and the summary line.
fn goals(r: &ScaleRow, heartbeat_s: f64, hb_text: &str) -> (String, String) {
    let rss = minmax(&r.rss_mib).1;
    let pre = minmax(&r.rss_pre_mib).1;
    let hwm = minmax(&r.hwm_mib).1;
    let per100 = 100.0 * r.writes_rate / r.probes_rate.max(1e-9);
    let hb = 100.0 * INTERVAL as f64 / heartbeat_s;
    let long_run = per100 + hb;
    let p99 = bucket_quantile(&r.lag, 0.99);
    let share = bucket_share_le(&r.lag, 0.05);
    let table = format!(
        "\nGoals at 10,000 checkers:\n\n\
         | goal | measured | verdict |\n|---|---|---|\n\
         | every probe on time | {:.2}% of the nominal {} probes/s reached the targets | {} |\n\
         | no missed interval | {} in the window, {} since start | {} |\n\
         | p99 schedule lag <= 50 ms | p99 {:.1} ms (bucket <= {}), {:.2}% of probes started <= 50 ms late | {} |\n\
         | <= 64 MiB per replica | {:.1} MiB at most at the end of the window ({:.1} MiB before any /metrics scrape, peak {:.1} MiB) | {} |\n\
         | < 1 status write per 100 probes | {:.3} per 100 in the window; in the long run {:.2} per 100, because the heartbeat rewrites every checker once per {hb_text} = {:.2} per 100 probes at a 10 s interval | between heartbeats: {}; long run: {} |\n",
        100.0 * r.achieved,
        fmt_int(r.m as f64 / INTERVAL as f64),
        yes(r.achieved >= 0.99),
        fmt_int(r.missed_window),
        fmt_int(r.missed_total),
        yes(r.missed_window == 0.0),
        p99 * 1000.0,
        ms(bucket_upper(&r.lag, 0.99).unwrap_or(f64::NAN)),
        100.0 * share,
        yes(share >= 0.99),
        rss,
        pre,
        hwm,
        yes(rss <= 64.0),
        per100,
        long_run,
        hb,
        yes(per100 < 1.0),
        yes(long_run < 1.0),
    );
    let line = format!(
        "Scale, 10,000 checkers on 3 replicas (10 s interval, real API server): {:.1}% of the nominal probe rate, \
         {} missed intervals, schedule lag p99 {:.1} ms (goal <= 50 ms: {}), {:.0} MiB RSS per replica at most \
         (goal <= 64 MiB: {}), {:.0}% of a core per replica at most, {:.3} status writes per 100 probes between \
         heartbeats, {:.2} counting the {hb_text} heartbeat (goal < 1: {}).",
        100.0 * r.achieved,
        fmt_int(r.missed_window),
        p99 * 1000.0,
        yes(share >= 0.99),
        rss,
        yes(rss <= 64.0),
        100.0 * minmax(&r.cpu_cores).1,
        per100,
        long_run,
        if per100 < 1.0 && long_run >= 1.0 {
            "met between heartbeats, **not met** in the long run".to_string()
        } else {
            yes(long_run < 1.0).to_string()
        }
    );
    (table, line)
}
