//! Native histograms end to end (issue 29), against the real Prometheus 3
//! (PROMETHEUS3_VERSION of hack/versions.env) scraping one operator replica
//! run with `--native-histograms` in two jobs: `native` with
//! `scrape_native_histograms: true` (it asks for protobuf first) and
//! `classic` without (text). Then:
//!
//! - the TSDB holds native histogram samples for every checker (the query
//!   API answers `histogram`, not `value`);
//! - per checker the duration histogram is one series in `native`, 14 in
//!   `classic`;
//! - p50 and p99 over native buckets fall in the classic bucket that holds
//!   the classic estimate (give or take one native bucket, a factor 2^(1/8)),
//!   both computed at a moment when the two jobs hold the same probes;
//! - `promtool check metrics` (Debian's 2.42 and 3.x) is clean on /metrics
//!   with the histogram (classic + native, native only) and without it.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;

use crate::platform::PromVersion;
use crate::prom::{Job, JobSettings, Prometheus};
use crate::support::*;

const CLASSIC_BOUNDS: [f64; 12] = [
    0.0, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// One native bucket at schema 3.
const NATIVE_FACTOR: f64 = 1.090_507_732_665_257_7;

fn checker(name: &str, host: &str) -> String {
    format!(
        "apiVersion: test.network.io/v1alpha1\nkind: WebChecker\nmetadata:\n  name: {name}\nspec:\n  host: {host}\n  path: \"/c/{name}\"\n  intervalSeconds: 1\n---\n"
    )
}

fn apply(cluster: &Cluster, ns: &str, yaml: &str) {
    let out = cluster.kubectl_stdin(&["apply", "-n", ns, "-f", "-"], yaml);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `promtool check metrics` of this version on a /metrics text: its output.
fn promtool_check(version: PromVersion, text: &str) -> (bool, String) {
    let mut child = Command::new(version.program("promtool"))
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

/// A moment in the last 20 s when both jobs hold the same probes of
/// checker `name`: the same count of one process's histogram, so the same
/// observations. Each job scrapes once a second at its own offset and the
/// checker is probed once a second, so of the two spans between the jobs'
/// scrapes in a second one holds no probe of it: such a moment recurs
/// every second. The moments end 3 s back: a sample is stamped when its
/// scrape starts and appended when it ends (scrape_timeout 1 s), so a later
/// query at a more recent moment could see a sample this one did not.
async fn same_probes_at(prom: &Prometheus, ns: &str, name: &str) -> f64 {
    let native = format!(
        "histogram_count(webchecker_probe_duration_seconds{{job=\"native\",namespace=\"{ns}\",name=\"{name}\"}})"
    );
    let classic = format!(
        "webchecker_probe_duration_seconds_count{{job=\"classic\",namespace=\"{ns}\",name=\"{name}\"}}"
    );
    let expr = format!("{native} - on (name) {classic}");
    eventually(
        Duration::from_secs(30),
        &format!("a moment when both jobs hold the same probes of {name}"),
        || async {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs_f64();
            let v = prom.query_range(&expr, now - 20.0, now - 3.0, 0.05).await;
            let values = v["data"]["result"][0]["values"].as_array()?.clone();
            values.iter().rev().find_map(|p| {
                (p[1].as_str() == Some("0"))
                    .then(|| p[0].as_f64())
                    .flatten()
            })
        },
    )
    .await
}

/// The one value of an instant query at `at`.
async fn single_at(prom: &Prometheus, expr: &str, at: f64) -> f64 {
    let v = prom.query_at(expr, Some(at)).await;
    let s = crate::prom::samples(&v["data"]);
    assert_eq!(s.len(), 1, "{expr} at {at}: {v}");
    s[0].1
}

/// Value by checker name of an instant query.
async fn by_name(prom: &Prometheus, expr: &str) -> Option<BTreeMap<String, f64>> {
    let v = prom.query(expr).await?;
    Some(v.into_iter().map(|(l, x)| (l["name"].clone(), x)).collect())
}

/// Three replicas on a witness with three latencies: one with native
/// histograms (three checkers, scraped by both jobs of a Prometheus 3), one
/// without the per-checker histogram, one with native histograms only.
struct Setup {
    /// The namespace of the replica both jobs scrape.
    ns: String,
    prom: Prometheus,
    op: Operator,
    op_off: Operator,
    op_only: Operator,
    _witness: Witness,
}

async fn setup() -> Setup {
    let cluster = Cluster::shared("metric-labels");
    let witness = Witness::start().await;
    let host = witness.url();
    // Three latencies: the loopback's (~1 ms), 15 ms and 60 ms.
    witness.set_mode("mid", Mode::Hang(Duration::from_millis(15)));
    witness.set_mode("slow", Mode::Hang(Duration::from_millis(60)));
    let spawn = |prefix: &str, extra: &[&str]| {
        let ns = cluster.namespace(prefix);
        let mut flags: Vec<&str> = FAST_LEASES.to_vec();
        flags.extend_from_slice(extra);
        let op = Operator::spawn(cluster, &format!("{prefix}-r0"), &ns, &flags);
        (ns, op)
    };
    let (ns, op) = spawn("native", &["--native-histograms=true"]);
    let (ns_off, op_off) = spawn("nohist", &["--per-checker-histogram=false"]);
    let (ns_only, op_only) = spawn(
        "nativeonly",
        &["--native-histograms=true", "--classic-histograms=false"],
    );
    apply(
        cluster,
        &ns,
        &[
            checker("fast", &host),
            checker("mid", &host),
            checker("slow", &host),
        ]
        .concat(),
    );
    apply(cluster, &ns_off, &checker("fast", &host));
    apply(cluster, &ns_only, &checker("mid", &host));
    for o in [&op, &op_off, &op_only] {
        o.wait_ready(Duration::from_secs(60)).await;
    }
    let targets = vec![(op.identity.clone(), op.port)];
    let jobs: Vec<Job> = vec![
        ("native".into(), targets.clone()),
        ("classic".into(), targets),
    ];
    let settings: JobSettings = [(
        "native".to_string(),
        json!({"scrape_native_histograms": true}),
    )]
    .into();
    let prom = Prometheus::start_jobs_with_settings(PromVersion::V3, &jobs, &[], settings);
    prom.wait_ready().await;
    prom.wait_jobs_up(&jobs).await;
    Setup {
        ns,
        prom,
        op,
        op_off,
        op_only,
        _witness: witness,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_3_stores_native_histograms_that_agree_with_the_classic_ones() {
    let s = setup().await;
    wait_twenty_probes_in_both_jobs(&s).await;
    the_tsdb_holds_native_samples(&s).await;
    one_native_series_per_checker_fourteen_classic(&s).await;
    native_and_classic_quantiles_agree(&s).await;
    promtool_accepts_every_metrics_text(&s).await;
}

/// 20 probes of each checker in both jobs' TSDB (each job scrapes at
/// its own moments: one may hold a probe the other has not seen yet).
async fn wait_twenty_probes_in_both_jobs(s: &Setup) {
    let (prom, ns) = (&s.prom, &s.ns);
    let counts = [
        format!("webchecker_probe_duration_seconds_count{{job=\"classic\",namespace=\"{ns}\"}}"),
        format!(
            "histogram_count(webchecker_probe_duration_seconds{{job=\"native\",namespace=\"{ns}\"}})"
        ),
    ];
    eventually(
        Duration::from_secs(90),
        "20 probes of each checker in both jobs",
        || async {
            for count in &counts {
                let v = by_name(prom, count).await?;
                if v.len() != 3 || v.values().any(|n| *n < 20.0) {
                    return None;
                }
            }
            Some(())
        },
    )
    .await;
}

/// Native samples: the API answers `histogram` (a native histogram) for
/// each checker, where a float sample has `value`.
async fn the_tsdb_holds_native_samples(s: &Setup) {
    let (prom, ns) = (&s.prom, &s.ns);
    let raw = prom
        .query_at(
            &format!("webchecker_probe_duration_seconds{{job=\"native\",namespace=\"{ns}\"}}"),
            None,
        )
        .await;
    let result = raw["data"]["result"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(result.len(), 3, "{raw}");
    for s in &result {
        assert!(
            s.get("histogram").is_some() && s.get("value").is_none(),
            "a native histogram sample: {s}"
        );
        assert_eq!(
            s["histogram"][1]["count"]
                .as_str()
                .map(|c| c.parse::<f64>().unwrap() >= 20.0),
            Some(true),
            "{s}"
        );
    }
}

/// Series per checker: 1 native, 14 classic (12 buckets, sum, count).
async fn one_native_series_per_checker_fourteen_classic(s: &Setup) {
    let (prom, ns) = (&s.prom, &s.ns);
    for (job, want) in [("native", 1.0), ("classic", 14.0)] {
        let series = by_name(
            prom,
            &format!(
                "count by (name) ({{__name__=~\"webchecker_probe_duration_seconds.*\",job=\"{job}\",namespace=\"{ns}\"}})"
            ),
        )
        .await
        .expect("series count");
        assert_eq!(series.len(), 3, "{job}: {series:?}");
        assert!(series.values().all(|n| *n == want), "{job}: {series:?}");
        println!("{job}: series per checker {series:?}");
    }
}

/// p50 and p99 agree within bucket resolution, computed from the same
/// probes: each job scrapes at its own moments, and with ~60 probes one
/// outlier seen by one job alone moves p99 a whole classic bucket.
async fn native_and_classic_quantiles_agree(s: &Setup) {
    let (prom, ns) = (&s.prom, &s.ns);
    let mut natives: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    for name in ["fast", "mid", "slow"] {
        let at = same_probes_at(prom, ns, name).await;
        for q in [0.5, 0.99] {
            let sel = format!("job=\"native\",namespace=\"{ns}\",name=\"{name}\"");
            let native = single_at(
                prom,
                &format!("histogram_quantile({q}, webchecker_probe_duration_seconds{{{sel}}})"),
                at,
            )
            .await;
            let sel = format!("job=\"classic\",namespace=\"{ns}\",name=\"{name}\"");
            let c = single_at(
                prom,
                &format!(
                    "histogram_quantile({q}, sum by (le) (webchecker_probe_duration_seconds_bucket{{{sel}}}))"
                ),
                at,
            )
            .await;
            let hi = CLASSIC_BOUNDS
                .iter()
                .position(|b| *b >= c)
                .unwrap_or(CLASSIC_BOUNDS.len() - 1);
            let (lo, hi) = (CLASSIC_BOUNDS[hi.saturating_sub(1)], CLASSIC_BOUNDS[hi]);
            println!(
                "p{}: {name}: native {native:.4} classic {c:.4} (bucket {lo}..{hi})",
                q * 100.0
            );
            assert!(
                lo / NATIVE_FACTOR <= native && native <= hi * NATIVE_FACTOR,
                "p{q} of {name}: native {native}, classic {c} in ({lo}, {hi}]"
            );
            natives
                .entry(format!("p{q}"))
                .or_default()
                .insert(name.to_string(), native);
        }
    }
    // The latencies the witness made: slow above 60 ms, mid above 15 ms.
    for native in natives.values() {
        assert!(
            native["slow"] >= 0.055 && native["mid"] >= 0.0135,
            "{native:?}"
        );
    }
}

/// promtool: clean with the histogram (classic + native, native only:
/// +Inf, sum and count) and without it, for both versions.
async fn promtool_accepts_every_metrics_text(s: &Setup) {
    let texts = [
        ("classic + native", s.op.scrape().await),
        ("native only", s.op_only.scrape().await),
        ("no histogram", s.op_off.scrape().await),
    ];
    assert!(
        texts[0]
            .1
            .contains("webchecker_probe_duration_seconds_bucket{")
    );
    // Native only: the duration histogram's text keeps +Inf, sum and count
    // (the replica's own histograms keep their buckets).
    let duration: Vec<&str> = texts[1]
        .1
        .lines()
        .filter(|l| l.starts_with("webchecker_probe_duration_seconds_bucket{"))
        .collect();
    assert!(
        !duration.is_empty() && duration.iter().all(|l| l.contains("le=\"+Inf\"")),
        "native only, duration buckets: {duration:?}"
    );
    assert!(!texts[2].1.contains("webchecker_probe_duration_seconds"));
    for version in PromVersion::ALL {
        for (what, text) in &texts {
            let (ok, said) = promtool_check(version, text);
            assert!(
                ok && said.trim().is_empty(),
                "{} promtool check metrics, {what}: {said}",
                version.name()
            );
        }
    }
}
