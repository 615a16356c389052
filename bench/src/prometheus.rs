//! A real Prometheus 3 (hack/build-prometheus.sh) for part 6: one scrape job
//! over the replicas at the checkers' interval, its HTTP API and its own
//! /metrics. The tests' helper (webchecker_kit::prom) scrapes every second
//! with settings fit for assertions; the
//! bench needs a production-like interval and a fresh TSDB per
//! configuration, so it starts its own.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use webchecker_kit::{free_port, http_get_within, metric};

use crate::common::{Res, err};
use crate::sys::{KillOnDrop, proc_status_kib};

/// The bin directory of hack/build-prometheus.sh (a cached build returns at once).
pub fn bin_dir() -> PathBuf {
    webchecker_kit::script_dir(
        "build-prometheus.sh",
        "Go >= the GO_MIN_VERSION of hack/versions.env and the Go module proxy",
    )
}

/// The version `prometheus --version` names ("3.16.0").
pub fn version(bin: &Path) -> String {
    let line = crate::sys::cmd_out(
        bin.join("prometheus").to_str().unwrap_or(""),
        &["--version"],
    );
    line.split_once("version ")
        .and_then(|(_, v)| v.split_whitespace().next())
        .unwrap_or("unknown")
        .to_string()
}

pub struct Prometheus {
    proc: KillOnDrop,
    pub port: u16,
}

impl Prometheus {
    /// Scrapes `targets` (host:port) every `interval` in one job `job`
    /// (honor_labels, as the chart's ServiceMonitor), with `settings` merged
    /// into the job; TSDB and log under `dir`, which must be new.
    pub fn start(
        bin: &Path,
        dir: &Path,
        job: &str,
        targets: &[String],
        interval: Duration,
        settings: &Value,
    ) -> Res<Prometheus> {
        std::fs::create_dir_all(dir)?;
        let secs = format!("{}s", interval.as_secs());
        let mut job_config = json!({
            "job_name": job,
            "honor_labels": true,
            // scrape_body_size_bytes: the uncompressed body of each scrape.
            "extra_scrape_metrics": true,
            "static_configs": [{"targets": targets}],
        });
        if let (Some(c), Some(extra)) = (job_config.as_object_mut(), settings.as_object()) {
            c.extend(extra.clone());
        }
        let cfg = json!({
            "global": {"scrape_interval": secs, "scrape_timeout": secs},
            "scrape_configs": [job_config],
        });
        let config = dir.join("prometheus.yml");
        // JSON is YAML.
        std::fs::write(&config, serde_json::to_string_pretty(&cfg)?)?;
        let port = free_port();
        let log = std::fs::File::create(dir.join("prometheus.log"))?;
        let child = Command::new(bin.join("prometheus"))
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        Ok(Prometheus {
            proc: KillOnDrop(child),
            port,
        })
    }

    pub fn pid(&self) -> u32 {
        self.proc.0.id()
    }

    /// VmHWM of the process (MiB): its peak resident memory so far.
    pub fn peak_rss_mib(&self) -> f64 {
        proc_status_kib(self.pid(), "VmHWM:").unwrap_or(0) as f64 / 1024.0
    }

    /// GET with a deadline for a starved machine (the bench runs at nice 19
    /// beside builds), three attempts.
    pub async fn get(&self, path: &str) -> Option<(u16, String)> {
        for _ in 0..3 {
            let addr = format!("127.0.0.1:{}", self.port);
            if let Some(r) = http_get_within(&addr, path, Duration::from_secs(180)).await {
                return Some(r);
            }
        }
        None
    }

    pub async fn wait_ready(&self, timeout: Duration) -> Res<()> {
        let deadline = Instant::now() + timeout;
        while !matches!(self.get("/-/ready").await, Some((200, _))) {
            if Instant::now() > deadline {
                return Err(err(format!("Prometheus not ready within {timeout:?}")));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        Ok(())
    }

    /// An instant query's result (`data.result`).
    pub async fn query(&self, expr: &str) -> Res<Vec<Value>> {
        let path = format!("/api/v1/query?query={}", encode(expr));
        let (_, body) = self
            .get(&path)
            .await
            .ok_or_else(|| err(format!("no answer from Prometheus to {expr}")))?;
        let v: Value = serde_json::from_str(&body).map_err(|e| {
            err(format!(
                "{expr}: {e}: {}",
                body.chars().take(200).collect::<String>()
            ))
        })?;
        if v["status"] != "success" {
            return Err(err(format!("{expr}: {v}")));
        }
        Ok(v["data"]["result"].as_array().cloned().unwrap_or_default())
    }

    /// The value of a query that answers one float sample (NaN when none).
    pub async fn scalar(&self, expr: &str) -> Res<f64> {
        let r = self.query(expr).await?;
        Ok(r.first()
            .and_then(|s| s["value"][1].as_str()?.parse().ok())
            .unwrap_or(f64::NAN))
    }

    /// The sum of a metric of Prometheus's own /metrics.
    pub async fn own(&self, name: &str) -> Res<f64> {
        let (_, text) = self
            .get("/metrics")
            .await
            .ok_or_else(|| err("no /metrics from Prometheus"))?;
        metric(&text, name, &[]).ok_or_else(|| err(format!("{name} not in Prometheus's /metrics")))
    }

    /// Runs garbage collections (the heap profile's `gc=1`), so that the
    /// heap figures read next are the live heap, not the garbage of the
    /// last scrape that the collector has not reached yet. Twice: the first
    /// only moves pooled buffers (sync.Pool) to the victim cache.
    pub async fn collect_garbage(&self) -> Res<()> {
        for _ in 0..2 {
            match self.get("/debug/pprof/heap?gc=1").await {
                Some((200, _)) => {}
                other => {
                    return Err(err(format!(
                        "GET /debug/pprof/heap?gc=1: {:?}",
                        other.map(|o| o.0)
                    )));
                }
            }
        }
        Ok(())
    }
}

/// Percent-encoding of a query parameter (RFC 3986 unreserved kept).
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn encodes_a_query() {
        assert_eq!(
            super::encode("min(count_over_time(up[1h]))"),
            "min%28count_over_time%28up%5B1h%5D%29%29"
        );
        assert_eq!(super::encode("{name!=\"\"}"), "%7Bname%21%3D%22%22%7D");
    }
}
