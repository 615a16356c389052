//! A real Prometheus (the `prometheus` binary on PATH) on a loopback port,
//! scraping operator replicas each second with honor_labels (as the chart's
//! ServiceMonitor does) and evaluating the given rule files each second.
//! Included with `#[path]` (next to `mod support;` and `mod platform;`).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::platform::{scratch, tool};
use crate::support::{eventually, free_port, http_get};

pub const JOB: &str = "webchecker-operator";

pub struct Prometheus {
    child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
}

impl Prometheus {
    /// `targets`: (replica identity, port of its /metrics); `rules`: rule files.
    pub fn start(targets: &[(String, u16)], rules: &[PathBuf]) -> Prometheus {
        let dir = scratch("prometheus-");
        let static_configs: Vec<Value> = targets
            .iter()
            .map(|(id, port)| json!({"targets": [format!("127.0.0.1:{port}")], "labels": {"pod": id}}))
            .collect();
        let cfg = json!({
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": rules.iter().map(|r| r.to_str().unwrap()).collect::<Vec<_>>(),
            "scrape_configs": [{"job_name": JOB, "honor_labels": true, "static_configs": static_configs}],
        });
        // JSON is YAML.
        std::fs::write(dir.path().join("prometheus.yml"), cfg.to_string()).unwrap();
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = Command::new(tool("prometheus"))
            .arg(format!(
                "--config.file={}",
                dir.path().join("prometheus.yml").display()
            ))
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
        Prometheus { child, port, dir }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    pub async fn wait_ready(&self) {
        let addr = format!("127.0.0.1:{}", self.port);
        eventually(Duration::from_secs(60), "Prometheus ready", || async {
            matches!(http_get(&addr, "/-/ready").await, Some((200, _))).then_some(())
        })
        .await
    }

    /// Instant query: its samples as (labels, value); None when Prometheus
    /// did not answer or refused the query.
    pub async fn query(&self, expr: &str) -> Option<Vec<(BTreeMap<String, String>, f64)>> {
        let q: String = url::form_urlencoded::byte_serialize(expr.as_bytes()).collect();
        let (_, body) = http_get(
            &format!("127.0.0.1:{}", self.port),
            &format!("/api/v1/query?query={q}"),
        )
        .await?;
        let v: Value = serde_json::from_str(&body).ok()?;
        if v["status"] != "success" {
            return None;
        }
        v["data"]["result"].as_array().map(|a| {
            a.iter()
                .map(|s| {
                    let labels = s["metric"]
                        .as_object()
                        .map(|m| {
                            m.iter()
                                .map(|(k, v)| {
                                    (k.clone(), v.as_str().unwrap_or_default().to_string())
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    let value = s["value"][1]
                        .as_str()
                        .and_then(|x| x.parse().ok())
                        .unwrap_or(f64::NAN);
                    (labels, value)
                })
                .collect()
        })
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
