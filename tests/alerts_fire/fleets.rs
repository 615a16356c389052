//! The installations the alerts are driven on, each a scrape job of its own
//! (the per-job alerts judge each separately), and Prometheus' jobs.
//!
//! - `shards` (shards.rs): three replicas, 100 checkers;
//! - `leaderless`: one replica behind a fault proxy, cut off later;
//! - `lag`: one replica with a single worker for more probing than it can do;
//! - `writes`: one replica whose proxy answers every status write with 500;
//! - `limited`: one replica with a ServiceAccount that may not read Nodes, the
//!   `kubernetes` Service nor its EndpointSlices (the forgery guard cannot
//!   learn them), trusting a test CA (--ca-bundle); it probes the per-checker
//!   cases (an expiring certificate, a down and a slow endpoint).

use std::sync::Mutex;
use std::time::Duration;

use serde_json::json;

use crate::prom::{Job, Prometheus};
use crate::support::faults::FaultProxy;
use crate::support::release::service_account;
use crate::support::targets::{Answer, RecordingTarget, TestCa};
use crate::support::*;
use crate::watch::{Labels, labels_of};

/// One replica, its own installation.
pub struct Single {
    pub job: String,
    pub ns: String,
    pub op: Operator,
    pub proxy: Option<FaultProxy>,
}

impl Single {
    pub fn instance(&self) -> String {
        format!("127.0.0.1:{}", self.op.port)
    }

    /// The labels of one of its per-replica alerts.
    pub fn replica_labels(&self, severity: &str) -> Labels {
        labels_of(&[
            ("job", &self.job),
            ("instance", &self.instance()),
            ("pod", &self.op.identity),
            ("severity", severity),
        ])
    }

    pub fn scrape_job(&self) -> Job {
        (
            self.job.clone(),
            vec![(self.op.identity.clone(), self.op.port)],
        )
    }
}

/// A checker of the shared witness: `(name, interval, extra spec, mode)`.
type Spec = (&'static str, u64, serde_json::Value, Mode);

/// Per-checker cases, probed by `limited` (the https ones get their host there).
pub const HEALTHY_LIMITED: &[&str] = &["ok-0", "ok-1", "slow-0", "cert-soon", "cert-far", "slo-ok"];
/// The status writes `writes` cannot make.
pub const WRITES: &[&str] = &["w-0", "w-1", "w-2"];
/// The probes `lag` is late for: 5 x 300 ms each second on one worker.
pub const LAG: &[&str] = &["lag-0", "lag-1", "lag-2", "lag-3", "lag-4"];
pub const LAG_HANG: Duration = Duration::from_millis(300);
/// `lag`'s memory limit (`--memory-limit`): 8 MiB, less than its binary
/// alone takes resident.
pub const LAG_MEMORY_LIMIT: u64 = 8 << 20;
pub const SLOW_HANG: Duration = Duration::from_millis(700);
/// Days left of the expiring certificate (threshold: 14), and of the other.
/// The checker in a maintenance window while its target fails, and how
/// long from its creation the window stays open: longer than failing takes
/// to show plus WebCheckerDown's wait (rules.rs), so that the alert is due
/// when the window closes.
pub const PLANNED: &str = "planned-0";
pub const PLANNED_WINDOW: Duration = Duration::from_secs(45);
pub const SOON_DAYS: i64 = 7;
pub const FAR_DAYS: i64 = 90;

pub struct Singles {
    pub leaderless: Single,
    pub lag: Single,
    pub writes: Single,
    pub limited: Single,
    /// The targets, kept alive: the witness of the http checkers, and the
    /// https targets of cert-soon and cert-far.
    witness: Witness,
    tls: Vec<RecordingTarget>,
}

/// A replica `id` watching `ns` with the fast leases and `extra` flags,
/// talking to the API server through `kubeconfig`.
fn spawn(
    cluster: &'static Cluster,
    id: &str,
    ns: &str,
    extra: &[&str],
    kubeconfig: &std::path::Path,
) -> Operator {
    let flags: Vec<&str> = FAST_LEASES.iter().chain(extra).copied().collect();
    Operator::spawn_with_kubeconfig(cluster, id, ns, &flags, kubeconfig)
}

impl Single {
    /// `leaderless`: behind a fault proxy (cut off later).
    async fn leaderless(cluster: &'static Cluster) -> Single {
        let ns = cluster.namespace("leaderless");
        let proxy = FaultProxy::for_cluster(cluster, "leaderless-0", 1).await;
        let op = spawn(cluster, "leaderless-0", &ns, &[], &proxy.kubeconfig);
        Single {
            job: "webchecker-leaderless".into(),
            ns,
            op,
            proxy: Some(proxy),
        }
    }

    /// `lag`: a single worker, and a memory limit below what any replica
    /// holds.
    fn lag(cluster: &'static Cluster) -> Single {
        let ns = cluster.namespace("lag");
        let limit = format!("--memory-limit={LAG_MEMORY_LIMIT}");
        let flags = ["--workers=1", limit.as_str()];
        let op = spawn(cluster, "lag-0", &ns, &flags, &cluster.kubeconfig);
        Single {
            job: "webchecker-lag".into(),
            ns,
            op,
            proxy: None,
        }
    }

    /// `writes`: behind a proxy that refuses its status writes.
    async fn writes(cluster: &'static Cluster) -> Single {
        let ns = cluster.namespace("writes");
        let proxy = FaultProxy::for_cluster(cluster, "writes-0", 2).await;
        // Status writes only (PATCH .../webcheckers/<name>/status): the Lease
        // renewals and the sharder's assignments pass.
        proxy.refuse(500, |method, path| {
            method.as_str() == "PATCH"
                && path.contains("/webcheckers/")
                && path.ends_with("/status")
        });
        let op = spawn(cluster, "writes-0", &ns, &[], &proxy.kubeconfig);
        Single {
            job: "webchecker-writes".into(),
            ns,
            op,
            proxy: Some(proxy),
        }
    }

    /// `limited`: the limited ServiceAccount, trusting `ca` (its bundle
    /// written into `dir`).
    async fn limited(cluster: &'static Cluster, ca: &TestCa, dir: &std::path::Path) -> Single {
        let ns = cluster.namespace("limited");
        let kubeconfig = limited_account(cluster, &ns).await;
        let bundle = dir.join("ca-bundle.crt");
        std::fs::write(&bundle, &ca.pem).unwrap();
        let ca_flag = format!("--ca-bundle={}", bundle.display());
        let op = spawn(cluster, "limited-0", &ns, &[&ca_flag], &kubeconfig);
        Single {
            job: "webchecker-limited".into(),
            ns,
            op,
            proxy: None,
        }
    }
}

impl Singles {
    /// Starts the four replicas and their checkers; returns once each replica
    /// is ready and its checkers are created.
    pub async fn start(cluster: &'static Cluster, dir: &std::path::Path) -> Singles {
        let witness = Witness::start().await;
        let leaderless = Single::leaderless(cluster).await;
        let lag = Single::lag(cluster);
        let writes = Single::writes(cluster).await;
        let ca = TestCa::new();
        let limited = Single::limited(cluster, &ca, dir).await;
        let soon = ca.leaf_valid(&["127.0.0.1"], -1, SOON_DAYS);
        let far = ca.leaf_valid(&["127.0.0.1"], -1, FAR_DAYS);
        let tls = vec![
            RecordingTarget::https(&soon, None, |_| Answer::ok()).await,
            RecordingTarget::https(&far, None, |_| Answer::ok()).await,
        ];
        let singles = Singles {
            leaderless,
            lag,
            writes,
            limited,
            witness,
            tls,
        };
        for s in singles.all() {
            s.op.wait_ready(Duration::from_secs(60)).await;
        }
        singles.create_checkers(cluster).await;
        singles
    }

    fn all(&self) -> [&Single; 4] {
        [&self.leaderless, &self.lag, &self.writes, &self.limited]
    }

    /// Every replica's checkers: on the witness in its mode, the https ones
    /// on their targets.
    async fn create_checkers(&self, cluster: &'static Cluster) {
        let client = cluster.client().await;
        let ok = || json!({});
        let mut specs: Vec<(&Single, Spec)> = vec![(&self.leaderless, ("n-0", 2, ok(), Mode::Ok))];
        for n in WRITES {
            specs.push((&self.writes, (n, 2, ok(), Mode::Ok)));
        }
        for n in LAG {
            let t = json!({"timeoutSeconds": 0.9});
            specs.push((&self.lag, (n, 1, t, Mode::Hang(LAG_HANG))));
        }
        let slow = json!({"timeoutSeconds": 2});
        let slo = || json!({"slo": {"objective": "99.9"}});
        let limited = &self.limited;
        specs.extend([
            (limited, ("ok-0", 2, ok(), Mode::Ok)),
            (limited, ("ok-1", 2, ok(), Mode::Ok)),
            (limited, ("down-0", 2, ok(), Mode::Status(503))),
            (limited, ("slow-0", 3, slow, Mode::Hang(SLOW_HANG))),
            (limited, ("slo-0", 2, slo(), Mode::Status(503))),
            (limited, ("slo-ok", 2, slo(), Mode::Ok)),
            (limited, (PLANNED, 2, slo(), Mode::Status(503))),
        ]);
        // Its window first: it fails from its first probe.
        let window = crate::checkers::window_manifest(PLANNED_WINDOW);
        let out = cluster.apply(&limited.ns, &window).await;
        assert!(out.status.success(), "{}", release::text(&out.stderr));
        for (s, (name, interval, extra, mode)) in specs {
            self.witness.set_mode(name, mode);
            let mut obj = checker_object(name, &self.witness.url(), interval, extra);
            if name == PLANNED {
                obj.metadata.labels = Some([("window".to_string(), "planned".to_string())].into());
            }
            create_all(&client, &s.ns, vec![obj], 1).await;
        }
        for (name, t) in [("cert-soon", &self.tls[0]), ("cert-far", &self.tls[1])] {
            let host = format!("https://{}", t.addr);
            let obj = checker_object(name, &host, 2, json!({}));
            create_all(&client, &limited.ns, vec![obj], 1).await;
        }
    }

    pub fn jobs(&self) -> Vec<Job> {
        self.all().iter().map(|s| s.scrape_job()).collect()
    }

    /// (namespace, name) of every checker that must never be down.
    pub fn healthy(&self) -> Vec<(String, String)> {
        let of = |s: &Single, names: &[&str]| -> Vec<(String, String)> {
            names
                .iter()
                .map(|n| (s.ns.clone(), n.to_string()))
                .collect()
        };
        [
            of(&self.limited, HEALTHY_LIMITED),
            of(&self.writes, WRITES),
            of(&self.lag, LAG),
        ]
        .concat()
    }
}

/// A ServiceAccount with what the operator needs (its checkers, their status,
/// Events, the namespaces, Leases in its namespace) but nothing to read Nodes,
/// the `kubernetes` Service or its EndpointSlices: a kubeconfig for it.
async fn limited_account(cluster: &Cluster, ns: &str) -> std::path::PathBuf {
    let role = format!("alerts-fire-limited-{ns}");
    let rbac = crate::support::release::rbac_without_address_discovery(ns, &role);
    let out = cluster
        .kubectl_stdin_async(&["apply", "-f", "-"], &rbac)
        .await;
    assert!(
        out.status.success(),
        "RBAC of the limited replica: {}",
        release::text(&out.stderr)
    );
    service_account(cluster, ns, "limited").await.0
}

/// Prometheus' scrape jobs (of every Prometheus of the run), which a replica
/// that joins later is added to.
pub struct Jobs<'a> {
    pub proms: [&'a Prometheus; 2],
    jobs: Mutex<Vec<Job>>,
}

impl<'a> Jobs<'a> {
    pub fn new(proms: [&'a Prometheus; 2], jobs: Vec<Job>) -> Self {
        Jobs {
            proms,
            jobs: Mutex::new(jobs),
        }
    }

    /// Adds a target to `job` (a configuration reload) and waits until
    /// every Prometheus has scraped it.
    pub async fn add(&self, job: &str, target: (String, u16)) {
        let port = target.1;
        let all = {
            let mut jobs = self.jobs.lock().unwrap();
            let j = jobs.iter_mut().find(|(n, _)| n == job).expect("a job");
            j.1.push(target);
            jobs.clone()
        };
        let q = format!("up{{instance=\"127.0.0.1:{port}\"}} == 1");
        for prom in self.proms {
            prom.set_jobs(&all);
            eventually(
                Duration::from_secs(30),
                &format!("{} scrapes 127.0.0.1:{port}", prom.version.name()),
                || async { prom.query(&q).await.filter(|s| s.len() == 1) },
            )
            .await;
        }
    }
}
