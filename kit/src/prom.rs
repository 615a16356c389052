//! A real Prometheus on a loopback port (the 3.x of hack/build-prometheus.sh
//! by default; WEBCHECKER_PROMETHEUS=2, or [`Prometheus::start_with`], for
//! Debian's 2.42 on PATH: see [`PromVersion`]),
//! scraping operator replicas each second with honor_labels (as the chart's
//! ServiceMonitor does), in one job or in several (one per installation), and
//! evaluating the given rule files each second; and the samples of its HTTP
//! API's answers.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::platform::{PromVersion, scratch};
use crate::{eventually, free_port, http_get};

pub const JOB: &str = "webchecker-operator";

/// One sample of an instant vector: its labels and value.
pub type Sample = (BTreeMap<String, String>, f64);

/// A scrape job: its name and its targets (replica identity, port of its /metrics).
pub type Job = (String, Vec<(String, u16)>);

/// Settings merged into the scrape config of the job of that name, e.g.
/// `{"scrape_native_histograms": true}` (Prometheus 3).
pub type JobSettings = BTreeMap<String, Value>;

fn one_job(targets: &[(String, u16)]) -> Vec<Job> {
    vec![(JOB.to_string(), targets.to_vec())]
}

pub struct Prometheus {
    child: Child,
    pub port: u16,
    pub version: PromVersion,
    dir: tempfile::TempDir,
    rules: Vec<PathBuf>,
    settings: JobSettings,
}

impl Prometheus {
    /// `targets`: (replica identity, port of its /metrics); `rules`: rule
    /// files. The version of WEBCHECKER_PROMETHEUS (3.x by default).
    pub fn start(targets: &[(String, u16)], rules: &[PathBuf]) -> Prometheus {
        Self::start_with(PromVersion::from_env(), targets, rules)
    }

    /// Same, with several scrape jobs.
    pub fn start_jobs(jobs: &[Job], rules: &[PathBuf]) -> Prometheus {
        Self::start_jobs_with(PromVersion::from_env(), jobs, rules)
    }

    /// [`Prometheus::start`] of this version.
    pub fn start_with(
        version: PromVersion,
        targets: &[(String, u16)],
        rules: &[PathBuf],
    ) -> Prometheus {
        Self::start_jobs_with(version, &one_job(targets), rules)
    }

    /// [`Prometheus::start_jobs`] of this version.
    pub fn start_jobs_with(version: PromVersion, jobs: &[Job], rules: &[PathBuf]) -> Prometheus {
        Self::start_jobs_with_settings(version, jobs, rules, JobSettings::new())
    }

    /// [`Prometheus::start_jobs_with`], some jobs with settings of their own.
    pub fn start_jobs_with_settings(
        version: PromVersion,
        jobs: &[Job],
        rules: &[PathBuf],
        settings: JobSettings,
    ) -> Prometheus {
        let dir = scratch("prometheus-");
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let config = dir.path().join("prometheus.yml");
        write_config(&config, jobs, rules, &settings);
        let child = Command::new(version.program("prometheus"))
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--storage.tsdb.retention.time=1h")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        Prometheus {
            child,
            port,
            version,
            dir,
            rules: rules.to_vec(),
            settings,
        }
    }

    /// New target list, applied with a configuration reload (SIGHUP).
    pub fn set_targets(&self, targets: &[(String, u16)]) {
        self.set_jobs(&one_job(targets))
    }

    /// New scrape jobs, applied with a configuration reload (SIGHUP).
    pub fn set_jobs(&self, jobs: &[Job]) {
        write_config(
            &self.dir.path().join("prometheus.yml"),
            jobs,
            &self.rules,
            &self.settings,
        );
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGHUP);
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    async fn get(&self, path: &str) -> Option<(u16, String)> {
        http_get(&format!("127.0.0.1:{}", self.port), path).await
    }

    pub async fn wait_ready(&self) {
        eventually(Duration::from_secs(60), "Prometheus ready", || async {
            matches!(self.get("/-/ready").await, Some((200, _))).then_some(())
        })
        .await
    }

    /// Waits until Prometheus scrapes exactly these targets and all are up.
    pub async fn wait_targets_up(&self, targets: &[(String, u16)]) {
        self.wait_jobs_up(&one_job(targets)).await
    }

    /// Waits until Prometheus scrapes exactly the targets of these jobs and
    /// all are up.
    pub async fn wait_jobs_up(&self, jobs: &[Job]) {
        // (job, instance): one target may be in several jobs.
        let want: BTreeSet<(String, String)> = jobs
            .iter()
            .flat_map(|(job, targets)| {
                targets
                    .iter()
                    .map(move |(_, p)| (job.clone(), format!("127.0.0.1:{p}")))
            })
            .collect();
        let of = |t: &Value| {
            (
                t["labels"]["job"].as_str().unwrap_or_default().to_string(),
                t["labels"]["instance"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let mut shown = BTreeMap::new();
        loop {
            let v = self.api("/api/v1/targets?state=active").await;
            let active = v["data"]["activeTargets"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let up: BTreeSet<(String, String)> = active
                .iter()
                .filter(|t| t["health"] == "up")
                .map(of)
                .collect();
            if active.len() == want.len() && up == want {
                return;
            }
            // Why a target is not up, when that changes.
            for t in active.iter().filter(|t| t["health"] != "up") {
                let why = format!("{} {}", t["health"], t["lastError"]);
                if shown.insert(of(t), why.clone()).as_ref() != Some(&why) {
                    println!("{} {:?} not up: {why}", self.version.name(), of(t));
                }
            }
            if std::time::Instant::now() > deadline {
                let log = self.log_text();
                let tail: Vec<&str> = log.lines().rev().take(40).collect();
                panic!(
                    "{} does not scrape every replica after 30 s: want {want:?}, targets {}\n\
                     its log's end:\n{}",
                    self.version.name(),
                    serde_json::to_string_pretty(&active).unwrap_or_default(),
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// GET of an API path: the decoded JSON answer (also for errors); panics
    /// with Prometheus' log after three attempts without one.
    pub async fn api(&self, path: &str) -> Value {
        for _ in 0..3 {
            if let Some((_, body)) = self.get(path).await
                && let Ok(v) = serde_json::from_str::<Value>(&body)
            {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!(
            "no JSON answer from {} to {path}\n{}",
            self.version.name(),
            self.log_text()
        );
    }

    /// Instant query, its whole answer (an error included); `at`: evaluation
    /// time in unix seconds (default: now).
    pub async fn query_at(&self, expr: &str, at: Option<f64>) -> Value {
        self.api(&query_path(expr, at)).await
    }

    /// Two instant queries at one time `at` that saw the same samples. A
    /// sample is stamped when its scrape starts and appended when the scrape
    /// ends, so one stamped just before `at` can land between two queries;
    /// `first` is read again after `second` until both of its reads agree.
    pub async fn query_pair_at(&self, first: &str, second: &str, at: f64) -> (Value, Value) {
        for _ in 0..20 {
            let a = self.query_at(first, Some(at)).await;
            let b = self.query_at(second, Some(at)).await;
            if self.query_at(first, Some(at)).await["data"] == a["data"] {
                return (a, b);
            }
        }
        panic!("{first} at {at}: a scrape landed between every pair of reads in 20 tries");
    }

    /// Range query (`start`..`end` in unix seconds, `step` seconds), its
    /// whole answer.
    pub async fn query_range(&self, expr: &str, start: f64, end: f64, step: f64) -> Value {
        let q: String = url::form_urlencoded::byte_serialize(expr.as_bytes()).collect();
        self.api(&format!(
            "/api/v1/query_range?query={q}&start={start:.3}&end={end:.3}&step={step}"
        ))
        .await
    }

    /// Instant query: its samples; None when Prometheus did not answer or
    /// refused the query (for polling).
    pub async fn query(&self, expr: &str) -> Option<Vec<Sample>> {
        let (_, body) = self.get(&query_path(expr, None)).await?;
        let v: Value = serde_json::from_str(&body).ok()?;
        (v["status"] == "success").then(|| samples(&v["data"]))
    }

    /// Instant query that must succeed: its samples.
    pub async fn samples(&self, expr: &str) -> Vec<Sample> {
        let v = self.query_at(expr, None).await;
        assert_eq!(v["status"], "success", "{expr}: {v}");
        samples(&v["data"])
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The scrape jobs (each target with a `pod` label) and the rule files.
/// Written whole then renamed, so that a reload never reads half of it.
fn write_config(path: &std::path::Path, jobs: &[Job], rules: &[PathBuf], settings: &JobSettings) {
    let scrape_configs: Vec<Value> = jobs
        .iter()
        .map(|(job, targets)| {
            let static_configs: Vec<Value> = targets
                .iter()
                .map(|(id, port)| {
                    json!({"targets": [format!("127.0.0.1:{port}")], "labels": {"pod": id}})
                })
                .collect();
            let mut job_config =
                json!({"job_name": job, "honor_labels": true, "static_configs": static_configs});
            if let (Some(Value::Object(extra)), Some(c)) =
                (settings.get(job), job_config.as_object_mut())
            {
                c.extend(extra.clone());
            }
            job_config
        })
        .collect();
    let cfg = json!({
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": rules.iter().map(|r| r.to_str().unwrap()).collect::<Vec<_>>(),
        "scrape_configs": scrape_configs,
    });
    // JSON is YAML.
    let tmp = path.with_extension("yml.tmp");
    std::fs::write(&tmp, serde_json::to_string_pretty(&cfg).unwrap()).unwrap();
    std::fs::rename(tmp, path).unwrap();
}

fn query_path(expr: &str, at: Option<f64>) -> String {
    let q: String = url::form_urlencoded::byte_serialize(expr.as_bytes()).collect();
    match at {
        Some(t) => format!("/api/v1/query?query={q}&time={t:.3}"),
        None => format!("/api/v1/query?query={q}"),
    }
}

/// The shipped alerts/webchecker.rules.yaml, but WebCheckerDown fires
/// `seconds` after Ready turned False instead of two minutes (its wait is
/// measured in its expression): a test that only needs the alert to fire
/// need not last that long. Only that number differs.
pub fn rules_with_down_wait(seconds: u64) -> PathBuf {
    let shipped = std::fs::read_to_string(crate::repo().join("alerts/webchecker.rules.yaml"))
        .expect("alerts/webchecker.rules.yaml");
    assert_eq!(
        shipped.matches(DOWN_WAIT).count(),
        1,
        "WebCheckerDown's wait"
    );
    let dir = scratch("rules").keep();
    let file = dir.join("webchecker.rules.yaml");
    std::fs::write(&file, with_down_wait(&shipped, seconds)).expect("the rules");
    file
}

/// WebCheckerDown's wait as the shipped rules write it.
const DOWN_WAIT: &str = ">= 120 # threshold: forSeconds";

/// `text` (the rules, or one expression of them) with WebCheckerDown's
/// wait set to `seconds`.
pub fn with_down_wait(text: &str, seconds: u64) -> String {
    text.replace(DOWN_WAIT, &format!(">= {seconds} # threshold: forSeconds"))
}

/// Samples of the `data` of an instant query (a vector, or a scalar as one
/// sample without labels).
pub fn samples(data: &Value) -> Vec<Sample> {
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

/// The labels of a series (`metric` of a result).
pub fn labels(v: &Value) -> BTreeMap<String, String> {
    v.as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// A sample value as the API writes it (a string, `NaN` and `±Inf` included).
pub fn num(v: &Value) -> f64 {
    match v.as_str() {
        Some("NaN") => f64::NAN,
        Some("+Inf") => f64::INFINITY,
        Some("-Inf") => f64::NEG_INFINITY,
        Some(s) => s.parse().unwrap(),
        None => v.as_f64().unwrap_or(f64::NAN),
    }
}

/// The value of the one sample there must be.
pub fn single(samples: &[Sample], what: &str) -> f64 {
    assert_eq!(samples.len(), 1, "{what}: one sample expected: {samples:?}");
    samples[0].1
}

/// Sample values by one of their labels.
pub fn by_label(samples: Vec<Sample>, label: &str) -> BTreeMap<String, f64> {
    samples
        .into_iter()
        .map(|(l, v)| (l[label].clone(), v))
        .collect()
}
