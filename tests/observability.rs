//! Acceptance of the observability issue: the dashboards and alert rules are
//! valid, and they work against the metrics a real fleet exports.
//!
//! Part 1 (no cluster): promtool checks and unit-tests the rules, the dashboard
//! linter and generator agree with the committed JSON.
//!
//! Part 2 (end to end): three operator replicas, then a fourth (scale-out:
//! checkers move through drains), witness targets, and a real Prometheus (the
//! `prometheus` binary) scraping every replica each second with the alert rules
//! loaded. Then every PromQL expression of the dashboards and rules
//! (hack/extract-promql.py) is evaluated through Prometheus' HTTP API, the probe
//! counters are compared with what the witness saw, and the alerts of the
//! failing checkers are checked.

mod support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kube::Api;
use kube::api::ListParams;
use kube::core::DynamicObject;
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use support::*;
use webchecker::api::{DRAIN_ANNOTATION, OWNER_LABEL, WebChecker};

// ------------------------------------------------------------------ tools

/// A program on PATH; fails (never skips) when it is missing.
fn tool(name: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let p = dir.join(name);
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "`{name}` not found on PATH: run hack/install-deps.sh (it installs python3 and \
         Debian's `prometheus` package, which provides `prometheus` and `promtool`)"
    );
}

/// Runs a command in the repository; panics with its output unless it succeeds.
fn run_ok(cmd: &mut Command, what: &str) -> String {
    let out = cmd
        .current_dir(repo())
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{text}",
        out.status
    );
    text
}

// ------------------------------------------------------- part 1: no cluster

#[test]
fn promtool_checks_the_alert_rules() {
    let out = run_ok(
        bounded(tool("promtool"), TOOL_LIMIT).args([
            "check",
            "rules",
            "alerts/webchecker.rules.yaml",
        ]),
        "promtool check rules alerts/webchecker.rules.yaml",
    );
    assert!(out.contains("SUCCESS"), "{out}");
}

#[test]
fn promtool_unit_tests_of_the_alert_rules_pass() {
    let out = run_ok(
        bounded(tool("promtool"), TOOL_LIMIT).args([
            "test",
            "rules",
            "alerts/webchecker.rules.test.yaml",
        ]),
        "promtool test rules alerts/webchecker.rules.test.yaml",
    );
    assert!(out.contains("SUCCESS"), "{out}");
}

#[test]
fn dashboards_pass_the_linter() {
    run_ok(
        bounded(tool("python3"), TOOL_LIMIT).arg("hack/lint-dashboards.py"),
        "python3 hack/lint-dashboards.py",
    );
}

#[test]
fn dashboards_match_their_generator() {
    let script = repo().join("dashboards/generate.py");
    if !script.exists() {
        // The dashboards are then hand-written JSON: nothing to compare with.
        eprintln!("dashboards/generate.py does not exist: no generator to compare with");
        return;
    }
    run_ok(
        bounded(tool("python3"), TOOL_LIMIT).args(["dashboards/generate.py", "--check"]),
        "python3 dashboards/generate.py --check",
    );
}

// --------------------------------------------------------------- Prometheus

const JOB: &str = "webchecker-operator";

/// A real Prometheus server on a loopback port, with its storage in a temporary
/// directory. Killed when dropped.
struct Prometheus {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
}

impl Prometheus {
    /// `targets`: (replica identity, port of its /metrics).
    fn start(targets: &[(String, u16)]) -> Prometheus {
        let bin = tool("prometheus");
        std::fs::create_dir_all(repo().join("target")).unwrap();
        let dir = tempfile::Builder::new()
            .prefix("observability-prometheus-")
            .tempdir_in(repo().join("target"))
            .unwrap();
        let mut p = Prometheus {
            child: None,
            port: free_port(),
            dir,
        };
        p.write_config(targets);
        let log = std::fs::File::create(p.dir.path().join("prometheus.log")).unwrap();
        let child = Command::new(bin)
            .arg(format!(
                "--config.file={}",
                p.dir.path().join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                p.dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{}", p.port))
            .arg("--storage.tsdb.retention.time=1h")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        p.child = Some(child);
        p
    }

    /// Scrapes every replica each second, as the chart's ServiceMonitor does
    /// (one target per pod, honor_labels, a `pod` label), and evaluates the
    /// alert rules each second. JSON is YAML.
    fn write_config(&self, targets: &[(String, u16)]) {
        let static_configs: Vec<Value> = targets
            .iter()
            .map(|(id, port)| {
                json!({"targets": [format!("127.0.0.1:{port}")], "labels": {"pod": id}})
            })
            .collect();
        let cfg = json!({
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": [repo().join("alerts/webchecker.rules.yaml").to_str().unwrap()],
            "scrape_configs": [{
                "job_name": JOB,
                "honor_labels": true,
                "static_configs": static_configs,
            }],
        });
        let path = self.dir.path().join("prometheus.yml");
        let tmp = self.dir.path().join("prometheus.yml.tmp");
        std::fs::write(&tmp, serde_json::to_string_pretty(&cfg).unwrap()).unwrap();
        std::fs::rename(tmp, path).unwrap();
    }

    /// New target list, applied with a configuration reload (SIGHUP).
    fn set_targets(&self, targets: &[(String, u16)]) {
        self.write_config(targets);
        let pid = self.child.as_ref().unwrap().id() as i32;
        unsafe {
            libc::kill(pid, libc::SIGHUP);
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    async fn get(&self, path: &str) -> Option<(u16, String)> {
        http_get(&format!("127.0.0.1:{}", self.port), path).await
    }

    /// GET of an API path; the decoded JSON answer (also for errors).
    async fn api(&self, path: &str) -> Value {
        for _ in 0..3 {
            if let Some((_, body)) = self.get(path).await
                && let Ok(v) = serde_json::from_str::<Value>(&body)
            {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!(
            "no JSON answer from Prometheus to {path}\n{}",
            self.log_text()
        );
    }

    /// Instant query; `at`: evaluation time in unix seconds (default: now).
    async fn query_at(&self, expr: &str, at: Option<f64>) -> Value {
        let q: String = url::form_urlencoded::byte_serialize(expr.as_bytes()).collect();
        let mut path = format!("/api/v1/query?query={q}");
        if let Some(t) = at {
            path.push_str(&format!("&time={t:.3}"));
        }
        self.api(&path).await
    }

    /// Instant query that must succeed; its `data`.
    async fn query(&self, expr: &str) -> Value {
        let v = self.query_at(expr, None).await;
        assert_eq!(v["status"], "success", "{expr}: {v}");
        v["data"].clone()
    }

    async fn wait_ready(&self) {
        eventually(Duration::from_secs(60), "Prometheus ready", || async {
            matches!(self.get("/-/ready").await, Some((200, _))).then_some(())
        })
        .await
    }

    /// Waits until Prometheus scrapes exactly these targets and all are up.
    async fn wait_targets_up(&self, targets: &[(String, u16)]) {
        let want: BTreeSet<String> = targets
            .iter()
            .map(|(_, p)| format!("127.0.0.1:{p}"))
            .collect();
        eventually(
            Duration::from_secs(30),
            "Prometheus scrapes every replica",
            || async {
                let v = self.api("/api/v1/targets?state=active").await;
                let active = v["data"]["activeTargets"].as_array()?;
                let up: BTreeSet<String> = active
                    .iter()
                    .filter(|t| t["health"] == "up")
                    .filter_map(|t| t["labels"]["instance"].as_str().map(String::from))
                    .collect();
                (active.len() == want.len() && up == want).then_some(())
            },
        )
        .await
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Samples of an instant vector: (labels, value).
fn vector(data: &Value) -> Vec<(BTreeMap<String, String>, f64)> {
    match data["resultType"].as_str() {
        Some("vector") => data["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| (labels(&s["metric"]), num(&s["value"][1])))
            .collect(),
        Some("scalar") => vec![(BTreeMap::new(), num(&data["result"][1]))],
        other => panic!("not a vector: {other:?}"),
    }
}

fn labels(v: &Value) -> BTreeMap<String, String> {
    v.as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

fn num(v: &Value) -> f64 {
    match v.as_str() {
        Some("NaN") => f64::NAN,
        Some("+Inf") => f64::INFINITY,
        Some("-Inf") => f64::NEG_INFINITY,
        Some(s) => s.parse().unwrap(),
        None => v.as_f64().unwrap_or(f64::NAN),
    }
}

fn single(data: &Value, what: &str) -> f64 {
    let v = vector(data);
    assert_eq!(v.len(), 1, "{what}: one sample expected: {data}");
    v[0].1
}

// ----------------------------------------------- the expressions' contract

/// Expressions allowed to return nothing (no sample, or only NaN) at the end of
/// the end-to-end scenario, and why: each needs a condition the healthy
/// scenario does not create. Matched as substrings of the `source` printed by
/// hack/extract-promql.py. Every other expression must return at least one
/// sample that is not NaN: a new expression has to be classified here.
const MAY_BE_EMPTY: &[(&str, &str)] = &[
    (
        ":Certificates expiring within 30 days/",
        "certificate expiry exists for https checkers only; the witness targets are plain http \
         (and a real certificate would rarely expire within 30 days)",
    ),
    (
        ":Watch restarts/",
        "webchecker_watch_restarts_total gets a series on the first watch error or relist; \
         a healthy run has none",
    ),
    (
        "alert=WebCheckerCertificateExpiring",
        "no https checker (and it needs a certificate expiring within 14 days)",
    ),
    (
        "record=probe_ssl_earliest_cert_expiry",
        "blackbox name of the certificate expiry: https checkers only, the witness targets are \
         plain http",
    ),
    (
        "record=probe_tls_version_info",
        "blackbox name of webchecker_tls_info: https checkers only",
    ),
    (
        "alert=WebCheckerNoLeader",
        "needs a fault: no replica holding the leader Lease, or no replica scraped",
    ),
    (
        "alert=WebCheckerOrphaned",
        "needs a fault: checkers nobody serves for longer than a lease (a sharder that cannot assign or prove)",
    ),
    (
        "alert=WebCheckerReplicaMissing",
        "needs a fault: a scrape target down, or a Lease holder that is not scraped",
    ),
    (
        "alert=WebCheckerShardImbalance",
        "needs at least 100 checkers and a shard above 1.2x the average; the test runs 44 \
         checkers, balanced by the sharder",
    ),
    (
        "alert=WebCheckerScheduleLagHigh",
        "needs an overloaded replica (p99 schedule lag above 500ms)",
    ),
    (
        "alert=WebCheckerStatusWritesFailing",
        "needs more than 10% of a replica's status writes to fail (error or conflict)",
    ),
    (
        "alert=WebCheckerSelfFencing",
        "needs a fault: a replica that lost its Lease or was paused",
    ),
    (
        "alert=WebCheckerLeaseRenewFailing",
        "needs a fault: Lease renewals failing (API server unreachable or Lease lost)",
    ),
    (
        "alert=WebCheckerAddressDiscoveryFailing",
        "needs a replica that cannot list a source of the forgery guard (tests/egress.rs \
         shows the metric at 0 without permission on Nodes)",
    ),
];

fn may_be_empty(source: &str) -> Option<&'static str> {
    MAY_BE_EMPTY
        .iter()
        .find(|(pat, _)| source.contains(pat))
        .map(|(_, why)| *why)
}

// -------------------------------------------------------------- the fleet

const RESOURCE: &str = "test.network.io/v1alpha1";
const HEALTHY: usize = 24;
const FAILING: usize = 8;
const SLOW: usize = 3;
const SLOW_FAILING: usize = 3;
const BREAKING: usize = 4;
const LATE: usize = 2;
const SLOW_HANG: Duration = Duration::from_millis(600);

/// The scenario's checkers. All probe one witness, path /c/<name>.
struct Spec {
    name: String,
    interval: u32,
    extra: Value,
}

fn fleet_specs() -> Vec<Spec> {
    let mut v = Vec::new();
    let mut add = |prefix: &str, n: usize, interval: u32, extra: Value| {
        for i in 0..n {
            v.push(Spec {
                name: format!("{prefix}-{i}"),
                interval,
                extra: extra.clone(),
            });
        }
    };
    // Answer 200 at once.
    add("ok", HEALTHY, 2, json!({}));
    // Answer 503: UnexpectedStatus, never Ready.
    add("down", FAILING, 2, json!({}));
    // Answer 200 after 600ms: Ready, but slow (p90 above 500ms).
    add("slow", SLOW, 3, json!({"timeoutSeconds": 2}));
    // Same, with a 300ms limit: SlowResponse, never Ready.
    add(
        "sla",
        SLOW_FAILING,
        3,
        json!({"timeoutSeconds": 2, "maxResponseTimeMillis": 300}),
    );
    // Answer 200, then 500 from the middle of the test: down after a success.
    add("brk", BREAKING, 2, json!({}));
    // Created after the scale-out: the sharder assigns them (cause `new`),
    // which feeds the assignment latency histogram in the last minute.
    add("new", LATE, 2, json!({}));
    v
}

/// Unix time of a witness Instant.
struct Clock {
    i0: Instant,
    w0: f64,
}

impl Clock {
    fn now() -> Clock {
        Clock {
            i0: Instant::now(),
            w0: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_secs_f64(),
        }
    }
    fn wall(&self, i: Instant) -> f64 {
        self.w0 + i.saturating_duration_since(self.i0).as_secs_f64()
    }
}

fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

async fn create(api: &Api<DynamicObject>, witness: &Witness, s: &Spec) {
    let mut spec = json!({
        "host": witness.url(),
        "path": format!("/c/{}", s.name),
        "intervalSeconds": s.interval,
    });
    for (k, v) in s.extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": RESOURCE, "kind": "WebChecker",
        "metadata": {"name": s.name}, "spec": spec,
    }))
    .unwrap();
    api.create(&Default::default(), &obj).await.unwrap();
}

/// Owner label of every checker; a checker with a drain in progress counts as unassigned.
async fn owners(api: &Api<DynamicObject>) -> HashMap<String, Option<String>> {
    let list = api.list(&ListParams::default()).await.unwrap();
    list.items
        .into_iter()
        .map(|o| {
            let draining = o
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(DRAIN_ANNOTATION));
            let owner = o
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(OWNER_LABEL))
                .cloned();
            (o.metadata.name.unwrap(), owner.filter(|_| !draining))
        })
        .collect()
}

/// Every checker assigned, no drain in progress, no shard above ceil(M/N).
async fn settled(
    api: &Api<DynamicObject>,
    live: &[String],
    total: usize,
) -> Option<HashMap<String, String>> {
    let o = owners(api).await;
    if o.len() != total
        || !o
            .values()
            .all(|v| v.as_ref().is_some_and(|v| live.contains(v)))
    {
        return None;
    }
    let o: HashMap<String, String> = o.into_iter().map(|(k, v)| (k, v.unwrap())).collect();
    let mut sizes: HashMap<&str, usize> = HashMap::new();
    for v in o.values() {
        *sizes.entry(v).or_default() += 1;
    }
    let cap = total.div_ceil(live.len());
    (sizes.len() == live.len() && sizes.values().all(|s| *s <= cap)).then_some(o)
}

/// Lines of a /metrics text that belong to one checker.
fn checker_lines<'a>(text: &'a str, ns: &str, name: &str) -> Vec<&'a str> {
    let n = format!("namespace=\"{ns}\"");
    let m = format!("name=\"{name}\"");
    text.lines()
        .filter(|l| !l.starts_with('#') && l.contains(&n) && l.contains(&m))
        .collect()
}

/// Metric names of the contract (docs/operator-interface.md, section Metrics).
fn contract_metrics() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo().join("docs/operator-interface.md")).unwrap();
    let section = text.split("## Metrics").nth(1).expect("a Metrics section");
    let section = section.split("\n## ").next().unwrap();
    let mut out = Vec::new();
    for line in section.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 3 || !cells[1].starts_with("`webchecker_") {
            continue;
        }
        let name = cells[1].trim_matches('`').to_string();
        out.push((name, cells[2].to_string()));
    }
    assert!(
        out.len() >= 20,
        "metrics table of operator-interface.md: {out:?}"
    );
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_sees_a_scaled_out_fleet_through_the_dashboards_and_alerts() {
    let started = Instant::now();
    let clock = Clock::now();
    let cluster = Cluster::shared("observability");
    let ns = cluster.namespace("obs");
    let client = cluster.client().await;
    let api: Api<DynamicObject> =
        Api::namespaced_with(client, &ns, &ApiResource::erase::<WebChecker>(&()));
    let witness = Witness::start().await;
    let specs = fleet_specs();
    let names: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
    let total = names.len();
    let group = |prefix: &str| -> Vec<String> {
        names
            .iter()
            .filter(|n| n.starts_with(&format!("{prefix}-")))
            .cloned()
            .collect()
    };
    for n in group("down") {
        witness.set_mode(&n, Mode::Status(503));
    }
    for n in group("slow").into_iter().chain(group("sla")) {
        witness.set_mode(&n, Mode::Hang(SLOW_HANG));
    }

    // Three replicas, Prometheus scraping them, the checkers.
    let mut ops: Vec<Operator> = (0..3)
        .map(|i| Operator::spawn(cluster, &format!("obs-r{i}"), &ns, FAST_LEASES))
        .collect();
    let targets = |ops: &[Operator]| -> Vec<(String, u16)> {
        ops.iter().map(|o| (o.identity.clone(), o.port)).collect()
    };
    let prom = Prometheus::start(&targets(&ops));
    for s in specs.iter().filter(|s| !s.name.starts_with("new-")) {
        create(&api, &witness, s).await;
    }
    for o in &ops {
        o.wait_ready(Duration::from_secs(60)).await;
    }
    prom.wait_ready().await;
    prom.wait_targets_up(&targets(&ops)).await;
    let live: Vec<String> = ops.iter().map(|o| o.identity.clone()).collect();
    let initial: Vec<String> = names
        .iter()
        .filter(|n| !n.starts_with("new-"))
        .cloned()
        .collect();
    let before = eventually(Duration::from_secs(60), "every checker assigned", || {
        settled(&api, &live, initial.len())
    })
    .await;
    eventually(Duration::from_secs(30), "every checker probed", || async {
        let seen: BTreeSet<String> = witness.all_hits().into_iter().map(|h| h.checker).collect();
        initial.iter().all(|n| seen.contains(n)).then_some(())
    })
    .await;
    println!(
        "fleet of {} checkers on 3 replicas after {:?}",
        initial.len(),
        started.elapsed()
    );

    // Let it run; the brk-* checkers break in the middle (down after successes).
    tokio::time::sleep(Duration::from_secs(12)).await;
    for n in group("brk") {
        witness.set_mode(&n, Mode::Status(500));
    }
    tokio::time::sleep(Duration::from_secs(8)).await;

    // Scale 3 -> 4: the sharder drains about a quarter of the checkers to obs-r3.
    let before = {
        // Owners may not change without a ring change; re-read to be sure.
        let now = settled(&api, &live, initial.len())
            .await
            .expect("still settled");
        assert_eq!(now, before, "owners changed without a ring change");
        now
    };
    let move_at = now_unix();
    ops.push(Operator::spawn(cluster, "obs-r3", &ns, FAST_LEASES));
    prom.set_targets(&targets(&ops));
    let live: Vec<String> = ops.iter().map(|o| o.identity.clone()).collect();
    let after = eventually(
        Duration::from_secs(60),
        "the fourth replica holds its share",
        || settled(&api, &live, initial.len()),
    )
    .await;
    let moved: Vec<String> = initial
        .iter()
        .filter(|n| before[*n] != after[*n])
        .cloned()
        .collect();
    assert!(
        moved.iter().all(|n| after[n] == "obs-r3"),
        "scale-out moves checkers to the new replica only"
    );
    assert!(!moved.is_empty(), "the scale-out moved nothing");
    let settle_secs = now_unix() - move_at;
    eventually(
        Duration::from_secs(20),
        "moved checkers probed by the new replica",
        || async {
            let hits = witness.all_hits();
            moved
                .iter()
                .all(|n| {
                    hits.iter()
                        .any(|h| &h.checker == n && h.replica == "obs-r3")
                })
                .then_some(())
        },
    )
    .await;
    prom.wait_targets_up(&targets(&ops)).await;
    // Late checkers, assigned as new ones; nothing else moves.
    for s in specs.iter().filter(|s| s.name.starts_with("new-")) {
        create(&api, &witness, s).await;
    }
    let after = {
        let all = eventually(Duration::from_secs(30), "late checkers assigned", || {
            settled(&api, &live, total)
        })
        .await;
        for n in &initial {
            assert_eq!(all[n], after[n], "{n} moved when the late checkers came");
        }
        all
    };
    eventually(Duration::from_secs(20), "late checkers probed", || async {
        let seen: BTreeSet<String> = witness.all_hits().into_iter().map(|h| h.checker).collect();
        names.iter().all(|n| seen.contains(n)).then_some(())
    })
    .await;
    println!(
        "scale 3->4: {} of {} moved ({:?}), settled {:.1}s after the new replica started",
        moved.len(),
        initial.len(),
        moved,
        settle_secs
    );
    // Run a while on four replicas.
    tokio::time::sleep(Duration::from_secs(20)).await;

    // ------------------------------------------------ (a) every expression
    let out = run_ok(
        bounded(tool("python3"), TOOL_LIMIT).arg("hack/extract-promql.py"),
        "python3 hack/extract-promql.py",
    );
    let exprs: Vec<(String, String)> = out
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (
                v["source"].as_str().unwrap().to_string(),
                v["expr"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(
        exprs.len() > 50,
        "extract-promql printed {} expressions",
        exprs.len()
    );
    let mut failures = Vec::new();
    let mut empty_allowed = Vec::new();
    let mut with_data = 0;
    for (source, expr) in &exprs {
        let v = prom.query_at(expr, None).await;
        if v["status"] != "success" {
            failures.push(format!(
                "{source}: {} {}\n    {expr}",
                v["errorType"], v["error"]
            ));
            continue;
        }
        let data = &v["data"];
        let values: Vec<f64> = match data["resultType"].as_str() {
            Some("vector") | Some("scalar") => vector(data).into_iter().map(|(_, x)| x).collect(),
            Some("matrix") => vec![0.0; data["result"].as_array().unwrap().len()],
            _ => Vec::new(),
        };
        let has_data = values.iter().any(|x| !x.is_nan());
        match (has_data, may_be_empty(source)) {
            (true, _) => with_data += 1,
            (false, Some(why)) => empty_allowed.push(format!("{source}: {why}")),
            (false, None) => failures.push(format!(
                "{source}: no data ({} samples, all NaN or none)\n    {expr}",
                values.len()
            )),
        }
    }
    println!(
        "expressions: {} evaluated, {with_data} with data, {} empty (allowed):",
        exprs.len(),
        empty_allowed.len()
    );
    for e in &empty_allowed {
        println!("  empty: {e}");
    }
    assert!(
        failures.is_empty(),
        "{} expression(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );

    let sel = format!("namespace=\"{ns}\"");
    // "Uptime over the range" is the mean over checkers of each checker's
    // fraction of Ready samples, the samples of all its owners together: a
    // moved checker counts once, not once per owner.
    let uptime = &exprs
        .iter()
        .find(|(s, _)| s.contains(":Uptime over the range/"))
        .expect("the uptime stat")
        .1;
    let at = now_unix();
    let panel = prom.query_at(uptime, Some(at)).await;
    let panel = single(&panel["data"], "uptime");
    let raw = prom
        .query_at(&format!("webchecker_up{{{sel}}}[1h]"), Some(at))
        .await;
    let mut per_checker: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    let mut per_series = Vec::new();
    for s in raw["data"]["result"].as_array().unwrap() {
        let vals: Vec<f64> = s["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| num(&v[1]))
            .collect();
        let e = per_checker
            .entry(labels(&s["metric"])["name"].clone())
            .or_default();
        e.0 += vals.iter().sum::<f64>();
        e.1 += vals.len() as f64;
        per_series.push(vals.iter().sum::<f64>() / vals.len() as f64);
    }
    assert_eq!(per_checker.len(), total);
    let want = per_checker.values().map(|(s, c)| s / c).sum::<f64>() / total as f64;
    let by_series = per_series.iter().sum::<f64>() / per_series.len() as f64;
    println!(
        "uptime stat {panel:.4}: per checker {want:.4} (an average per series would say {by_series:.4} over {} series)",
        per_series.len()
    );
    assert!(
        (panel - want).abs() < 1e-9,
        "uptime stat {panel} vs per-checker uptime {want}"
    );

    // The rules evaluate without error inside Prometheus.
    let rules = prom.api("/api/v1/rules").await;
    let mut nrules = 0;
    for g in rules["data"]["groups"].as_array().unwrap() {
        for r in g["rules"].as_array().unwrap() {
            nrules += 1;
            assert_eq!(r["health"], "ok", "rule {}: {}", r["name"], r["lastError"]);
        }
    }
    let in_file = std::fs::read_to_string(repo().join("alerts/webchecker.rules.yaml"))
        .unwrap()
        .lines()
        .filter(|l| {
            l.trim_start().starts_with("- alert:") || l.trim_start().starts_with("- record:")
        })
        .count();
    assert!(in_file >= 11, "the rule file lists its alerts ({in_file})");
    assert_eq!(nrules, in_file, "every rule of the file loaded: {rules}");

    // What the panels say matches the scenario.
    let down_now = FAILING + SLOW_FAILING + BREAKING;
    assert_eq!(
        single(
            &prom
                .query(&format!(
                    "count(max by (namespace, name) (webchecker_up{{{sel}}}))"
                ))
                .await,
            "checkers"
        ),
        total as f64
    );
    assert_eq!(
        single(
            &prom
                .query(&format!(
                    "count(max by (namespace, name) (webchecker_up{{{sel}}}) == 0)"
                ))
                .await,
            "checkers down"
        ),
        down_now as f64
    );
    let codes: BTreeMap<String, f64> = vector(
        &prom.query(&format!(
            "count_values(\"code\", max by (namespace, name) (webchecker_last_status_code{{{sel}}}))"
        ))
        .await,
    )
    .into_iter()
    .map(|(l, v)| (l["code"].clone(), v))
    .collect();
    let want: BTreeMap<String, f64> = [
        (
            "200".to_string(),
            (HEALTHY + SLOW + SLOW_FAILING + LATE) as f64,
        ),
        ("500".to_string(), BREAKING as f64),
        ("503".to_string(), FAILING as f64),
    ]
    .into();
    assert_eq!(codes, want, "checkers by last status code");
    let j = format!("job=\"{JOB}\"");
    assert_eq!(
        single(
            &prom
                .query(&format!("count(webchecker_build_info{{{j}}})"))
                .await,
            "replicas"
        ),
        4.0
    );
    assert_eq!(
        single(
            &prom.query(&format!("sum(webchecker_leader{{{j}}})")).await,
            "leaders"
        ),
        1.0
    );
    assert_eq!(
        single(
            &prom
                .query(&format!("sum(webchecker_owned_checkers{{{j}}})"))
                .await,
            "owned"
        ),
        total as f64
    );
    for (l, v) in vector(&prom.query(&format!("webchecker_ring_members{{{j}}}")).await) {
        assert_eq!(v, 4.0, "ring members seen by {l:?}");
    }
    let shard: BTreeMap<String, f64> = vector(
        &prom.query(&format!(
            "webchecker_owned_checkers{{{j}}} * on (job, instance) group_left (replica) webchecker_build_info{{{j}}}"
        ))
        .await,
    )
    .into_iter()
    .map(|(l, v)| (l["replica"].clone(), v))
    .collect();
    let mut want = BTreeMap::new();
    for o in after.values() {
        *want.entry(o.clone()).or_insert(0.0) += 1.0;
    }
    assert_eq!(
        shard, want,
        "shard sizes by replica (Prometheus vs owner labels)"
    );
    let new_moves = single(
        &prom
            .query(&format!(
                "sum(webchecker_moves_total{{{j}, cause=\"new\"}})"
            ))
            .await,
        "new assignments",
    );
    assert_eq!(
        new_moves as usize, total,
        "every checker assigned once as new"
    );
    let moves: f64 = vector(
        &prom
            .query(&format!(
                "sum(webchecker_moves_total{{{j}, cause=\"rebalance\"}})"
            ))
            .await,
    )
    .first()
    .map(|(_, v)| *v)
    .unwrap_or(0.0);
    assert_eq!(
        moves as usize,
        moved.len(),
        "rebalance moves counted by the leader"
    );
    let drains = single(
        &prom
            .query(&format!("sum(webchecker_drains_total{{{j}}})"))
            .await,
        "drains",
    );
    assert_eq!(
        drains as usize,
        moved.len(),
        "drains completed by the old owners"
    );

    // ------------------------------------------------------------ (c) alerts
    let alerts = prom.api("/api/v1/alerts").await;
    let alerts = alerts["data"]["alerts"].as_array().unwrap().clone();
    let of = |alertname: &str, name: &str| -> Vec<Value> {
        alerts
            .iter()
            .filter(|a| {
                a["labels"]["alertname"] == alertname
                    && a["labels"]["namespace"] == ns.as_str()
                    && a["labels"]["name"] == name
            })
            .cloned()
            .collect()
    };
    let active_at = |a: &Value| -> f64 {
        let s = a["activeAt"].as_str().unwrap();
        chrono::DateTime::parse_from_rfc3339(s)
            .unwrap()
            .timestamp_millis() as f64
            / 1000.0
    };
    let mut down_alerts = BTreeMap::new();
    for n in group("down").iter().chain(group("sla").iter()) {
        let a = of("WebCheckerDown", n);
        assert_eq!(a.len(), 1, "one WebCheckerDown alert for {n}: {a:?}");
        let state = a[0]["state"].as_str().unwrap().to_string();
        assert!(state == "pending" || state == "firing", "{n}: {state}");
        let reason = if n.starts_with("down-") {
            "UnexpectedStatus"
        } else {
            "SlowResponse"
        };
        let desc = a[0]["annotations"]["description"].as_str().unwrap();
        assert!(
            desc.contains(&format!(
                "Most frequent failure reason over the last 10 minutes: {reason}."
            )),
            "{n}: {desc}"
        );
        down_alerts.insert(n.clone(), state);
        // A move neither resolves the alert nor restarts its `for` timer.
        if moved.contains(n) {
            assert!(
                active_at(&a[0]) < move_at,
                "{n} moved and its WebCheckerDown alert restarted: {}",
                a[0]
            );
        }
    }
    let moved_down: Vec<&String> = moved
        .iter()
        .filter(|n| n.starts_with("down-") || n.starts_with("sla-"))
        .collect();
    println!("WebCheckerDown: {down_alerts:?}; kept across the move: {moved_down:?}");
    for n in group("ok").iter().chain(group("slow").iter()) {
        assert!(of("WebCheckerDown", n).is_empty(), "{n} is healthy");
    }
    for n in group("slow") {
        let a = of("WebCheckerSlow", &n);
        assert!(
            a.iter().any(|a| a["labels"]["signal"] == "p90_latency"),
            "WebCheckerSlow p90_latency for {n}: {a:?}"
        );
    }
    for n in group("sla") {
        let a = of("WebCheckerSlow", &n);
        assert!(
            a.iter().any(|a| a["labels"]["signal"] == "slow_response"),
            "WebCheckerSlow slow_response for {n}: {a:?}"
        );
    }
    for n in group("ok").iter().chain(group("down").iter()) {
        assert!(of("WebCheckerSlow", n).is_empty(), "{n} answers fast");
    }

    // ------------------------------------- (b) probe counts vs the witness
    // Series on exactly one replica, as Prometheus sees it.
    eventually(
        Duration::from_secs(10),
        "each checker's webchecker_up on exactly one replica",
        || async {
            let v = vector(
                &prom
                    .query(&format!("count by (name) (webchecker_up{{{sel}}})"))
                    .await,
            );
            let m: BTreeMap<String, f64> =
                v.into_iter().map(|(l, x)| (l["name"].clone(), x)).collect();
            (m.len() == total && m.values().all(|x| *x == 1.0)).then_some(())
        },
    )
    .await;

    // Direct: snapshot the witness, then read every replica's /metrics. The
    // owner's counter equals the probes the witness saw from it since it took
    // the checker over, give or take the one probe in flight; no other replica
    // exports the checker.
    let owners_now = settled(&api, &live, total).await.expect("still settled");
    assert_eq!(owners_now, after, "no move after the scale-out settled");
    let hits = witness.all_hits();
    let mut texts = Vec::new();
    for o in &ops {
        texts.push((o.identity.clone(), o.metrics().await.expect("metrics")));
    }
    assert_eq!(exclusivity_violation(&hits), None);
    assert_eq!(reappearance(&hits), None);
    let mut by_checker: HashMap<&str, Vec<&Hit>> = HashMap::new();
    for h in &hits {
        by_checker.entry(&h.checker).or_default().push(h);
    }
    for hs in by_checker.values_mut() {
        hs.sort_by_key(|h| h.start);
    }
    let mut off_by_one = 0;
    for n in &names {
        let exporters: Vec<&(String, String)> = texts
            .iter()
            .filter(|(_, t)| !checker_lines(t, &ns, n).is_empty())
            .collect();
        let ids: Vec<&str> = exporters.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(
            ids,
            vec![after[n].as_str()],
            "{n}: series exported by {ids:?}"
        );
        let text = &exporters[0].1;
        let count = metric(
            text,
            "webchecker_probes_total",
            &[("namespace", &ns), ("name", n)],
        )
        .expect("probes_total") as i64;
        let hs = &by_checker[n.as_str()];
        let run = hs
            .iter()
            .rev()
            .take_while(|h| h.replica == after[n])
            .count() as i64;
        assert!(
            (count - run).abs() <= 1,
            "{n}: owner {} counts {count} probes, the witness saw {run} from it",
            after[n]
        );
        if count != run {
            off_by_one += 1;
        }
        // The series of docs/metrics.md "Series per checker": 25 + k for http.
        let lines = checker_lines(text, &ns, n);
        let k = lines
            .iter()
            .filter(|l| l.starts_with("webchecker_probes_total{"))
            .count();
        assert_eq!(
            lines.len(),
            25 + k,
            "{n}: series of an http checker (docs/metrics.md):\n{}",
            lines.join("\n")
        );
    }
    println!(
        "direct: {total} checkers, owner counter = witness count, {off_by_one} off by one (probe in flight)"
    );

    // Through Prometheus: the last scraped value of each replica's counters
    // (sum over result and reason) against the probes the witness saw from that
    // replica up to that scrape. A counter restarts on a new owner and the old
    // owner's series disappear, so the fleet total is the sum of the last
    // values of every replica's series: the query of the issue.
    let at = now_unix();
    let agg = prom
        .query_at(
            &format!("sum by (name) (last_over_time(webchecker_probes_total{{{sel}}}[10m]))"),
            Some(at),
        )
        .await;
    assert_eq!(agg["status"], "success", "{agg}");
    let agg: BTreeMap<String, f64> = vector(&agg["data"])
        .into_iter()
        .map(|(l, v)| (l["name"].clone(), v))
        .collect();
    let raw = prom
        .query_at(&format!("webchecker_probes_total{{{sel}}}[10m]"), Some(at))
        .await;
    assert_eq!(raw["status"], "success", "{raw}");
    // Every probe that ended by the last scrape is in this snapshot.
    let hits = witness.all_hits();
    let mut by_checker: HashMap<&str, Vec<&Hit>> = HashMap::new();
    for h in &hits {
        by_checker.entry(&h.checker).or_default().push(h);
    }
    // (name, pod) -> (timestamp of the last scrape, sum of the last values)
    let mut last: BTreeMap<(String, String), (f64, f64)> = BTreeMap::new();
    for s in raw["data"]["result"].as_array().unwrap() {
        let l = labels(&s["metric"]);
        let vals = s["values"].as_array().unwrap();
        let lastv = vals.last().unwrap();
        let (t, v) = (lastv[0].as_f64().unwrap(), num(&lastv[1]));
        let e = last
            .entry((l["name"].clone(), l["pod"].clone()))
            .or_insert((t, 0.0));
        assert!(
            (e.0 - t).abs() < 1e-6,
            "{l:?}: series of one owner end at different scrapes"
        );
        e.1 += v;
    }
    let mut unexported_old = 0;
    let mut unscraped_current = 0;
    for n in &names {
        let owners_of: Vec<&(String, String)> = last.keys().filter(|(c, _)| c == n).collect();
        let sum: f64 = owners_of.iter().map(|k| last[*k].1).sum();
        assert_eq!(agg.get(n).copied(), Some(sum), "{n}: last_over_time sum");
        let hs = &by_checker[n.as_str()];
        let replicas: BTreeSet<&str> = hs.iter().map(|h| h.replica.as_str()).collect();
        let pods: BTreeSet<&str> = owners_of.iter().map(|(_, p)| p.as_str()).collect();
        assert_eq!(
            pods, replicas,
            "{n}: replicas with series vs replicas seen by the witness"
        );
        for k in owners_of {
            let (t, v) = last[k];
            let seen = hs
                .iter()
                .filter(|h| h.replica == k.1 && clock.wall(h.end) <= t)
                .count() as f64;
            assert!(
                (v - seen).abs() <= 1.0,
                "{n} on {}: Prometheus' last value {v} at {t:.3}, the witness saw {seen} probes from it by then",
                k.1
            );
            let after_scrape = hs
                .iter()
                .filter(|h| h.replica == k.1 && clock.wall(h.end) > t)
                .count();
            if k.1 == after[n] {
                unscraped_current += after_scrape;
            } else {
                unexported_old += after_scrape;
            }
        }
    }
    let witness_total = hits.len();
    let prom_total: f64 = agg.values().sum();
    println!(
        "Prometheus: sum of last values {prom_total} vs {witness_total} probes at the witness; \
         old owners' probes after their last scrape (never exported) {unexported_old}, \
         current owners' probes after the last scrape {unscraped_current}"
    );

    // ------------------------------------------------------ the catalogue
    let all: String = texts
        .iter()
        .map(|(_, t)| t.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let absent_ok = [
        (
            "webchecker_certificate_expiry_timestamp_seconds",
            "https checkers only",
        ),
        ("webchecker_tls_info", "https checkers only"),
        ("webchecker_certificate_info", "https checkers only"),
        (
            "webchecker_watch_restarts_total",
            "appears with the first watch error",
        ),
    ];
    for (name, kind) in contract_metrics() {
        let sample = if kind == "histogram" {
            format!("{name}_bucket{{")
        } else {
            name.clone()
        };
        let present = all.lines().any(|l| l.starts_with(&sample));
        match absent_ok.iter().find(|(n, _)| *n == name) {
            Some(_) => {}
            None => assert!(present, "{name} ({kind}) of the catalogue is not exported"),
        }
    }
    for p in ["process_cpu_seconds_total", "process_resident_memory_bytes"] {
        assert!(all.lines().any(|l| l.starts_with(p)), "{p} not exported");
    }
    println!("end-to-end test took {:?}", started.elapsed());
    drop(prom);
}
