//! The `confirming` installation: two replicas in two zones (`--zone`)
//! share six checkers of one target. The target then stops answering the
//! probes of one replica (it answers after the probes' timeout, as a cut
//! path would let them time out) while it answers the other at once: each
//! failure of the cut replica is confirmed by the other, whose probe
//! succeeds, so it is refuted (webchecker_unconfirmed_failures_total of the
//! cut replica's zone) and WebCheckerProberImpaired fires for that replica
//! and zone, never for the other. One more checker asks to be probed from
//! three zones (`spec.locations`) where the replicas run in two:
//! WebCheckerZonesShort fires for it, and for no other checker.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::prom::Job;
use crate::support::targets::{Answer, RecordingTarget};
use crate::support::*;
use crate::watch::{Alerts, labels_of};

pub const JOB: &str = "webchecker-confirming";
const CHECKERS: usize = 6;
/// The checkers' interval and timeout; the cut replica's probes get their
/// answer only after `HELD`, so they time out.
const INTERVAL_S: u64 = 1;
const TIMEOUT_S: f64 = 0.5;
const HELD: Duration = Duration::from_secs(2);
/// The replicas and their zones; the second one's path gets cut.
const REPLICAS: [(&str, &str); 2] = [("confirming-0", "zone-a"), ("confirming-1", "zone-b")];
/// The checker that asks for three zones of the two there are.
const SHORT: &str = "zones-short";

pub struct Confirming {
    pub ns: String,
    pub ops: Vec<Operator>,
    names: Vec<String>,
    /// When the checker of [`SHORT`] was created.
    short_since: Instant,
    /// While set, the target holds every request of the cut replica.
    cut: Arc<AtomicBool>,
    _target: RecordingTarget,
}

impl Confirming {
    /// The two replicas, the target and the checkers; returns once every
    /// checker is owned and Ready, and each replica owns some.
    pub async fn start(cluster: &'static Cluster) -> Confirming {
        let ns = cluster.namespace("confirming");
        // The replicas' ServiceAccount (--service-account's default): asks
        // carry a token of it, made with the admin's credentials here.
        let sa = format!(
            "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: webchecker-operator\n  namespace: {ns}\n"
        );
        let out = cluster
            .kubectl_stdin_async(&["apply", "-f", "-"], &sa)
            .await;
        assert!(
            out.status.success(),
            "the replicas' ServiceAccount: {}",
            release::text(&out.stderr)
        );
        let cut = Arc::new(AtomicBool::new(false));
        let (c, victim) = (cut.clone(), REPLICAS[1].0);
        let target = RecordingTarget::http(move |req| {
            let from = req.headers.get("x-webchecker-replica").map(String::as_str);
            if c.load(Ordering::SeqCst) && from == Some(victim) {
                Answer {
                    delay: HELD,
                    ..Answer::ok()
                }
            } else {
                Answer::ok()
            }
        })
        .await;
        let ops: Vec<Operator> = REPLICAS
            .iter()
            .map(|(id, zone)| {
                let zone = format!("--zone={zone}");
                let flags: Vec<&str> = FAST_LEASES.iter().copied().chain([zone.as_str()]).collect();
                Operator::spawn(cluster, id, &ns, &flags)
            })
            .collect();
        for o in &ops {
            o.wait_ready(Duration::from_secs(60)).await;
        }
        let client = cluster.client().await;
        let names: Vec<String> = (0..CHECKERS).map(|i| format!("zoned-{i}")).collect();
        let objs = names
            .iter()
            .map(|n| {
                checker_object(
                    n,
                    &target.url(),
                    INTERVAL_S,
                    json!({"timeoutSeconds": TIMEOUT_S}),
                )
            })
            .collect();
        create_all(&client, &ns, objs, 1).await;
        let short_since = Instant::now();
        let short = checker_object(
            SHORT,
            &target.url(),
            INTERVAL_S,
            json!({"timeoutSeconds": TIMEOUT_S, "locations": {"zones": 3, "quorum": 2}}),
        );
        create_all(&client, &ns, vec![short], 1).await;
        let s = Confirming {
            ns,
            ops,
            names,
            short_since,
            cut,
            _target: target,
        };
        eventually(
            Duration::from_secs(60),
            "each confirming replica owns checkers",
            || async {
                let o = owners(&client, &s.ns).await.ok()?;
                let all = s
                    .names
                    .iter()
                    .all(|n| o.get(n).is_some_and(Option::is_some));
                let each = REPLICAS
                    .iter()
                    .all(|(id, _)| o.values().any(|v| v.as_deref() == Some(*id)));
                (all && each).then_some(())
            },
        )
        .await;
        s
    }

    pub fn scrape_job(&self) -> Job {
        (
            JOB.to_string(),
            self.ops
                .iter()
                .map(|o| (o.identity.clone(), o.port))
                .collect(),
        )
    }

    /// (namespace, name) of every checker: confirmation keeps them Ready
    /// through the cut (the other replica reaches the target).
    pub fn healthy(&self) -> Vec<(String, String)> {
        self.names
            .iter()
            .chain([&SHORT.to_string()])
            .map(|n| (self.ns.clone(), n.clone()))
            .collect()
    }

    pub async fn drive(&self, alerts: &Alerts<'_>) {
        alerts.never(
            "only the checker that asks for more zones is short of them",
            |a| {
                a.name == "WebCheckerZonesShort"
                    && a.labels.get("name").map(String::as_str) != Some(SHORT)
            },
        );
        alerts
            .wait_firing(
                "a checker asking for three zones of two",
                "WebCheckerZonesShort",
                labels_of(&[
                    ("namespace", &self.ns),
                    ("name", SHORT),
                    ("severity", "warning"),
                ]),
                self.short_since,
                // Its first round, then two scrapes.
                Duration::from_secs(15),
            )
            .await;
        let spared = self.ops[0].identity.clone();
        alerts.never(
            "the replica that reaches the target is not impaired",
            move |a| {
                a.name == "WebCheckerProberImpaired"
                    && (a.labels.get("job").map(String::as_str) != Some(JOB)
                        || a.labels.get("pod") == Some(&spared))
            },
        );
        let victim = &self.ops[1];
        self.cut.store(true, Ordering::SeqCst);
        let at = Instant::now();
        let instance = format!("127.0.0.1:{}", victim.port);
        // The refuted failures reach Prometheus first (else the replica's
        // own count says where they stopped).
        let q = format!(
            "webchecker_unconfirmed_failures_total{{job=\"{JOB}\", pod=\"{}\"}} > 0",
            victim.identity
        );
        let seen = tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                if alerts.prom.query(&q).await.is_some_and(|s| !s.is_empty()) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
        .await;
        if seen.is_err() {
            let own: Vec<String> = victim
                .metrics()
                .await
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains("confirm") || l.contains("replica_place"))
                .map(str::to_string)
                .collect();
            panic!("{q}: nothing in Prometheus after 20 s; the replica says {own:#?}");
        }
        alerts
            .wait_firing(
                &format!("{}'s probes held past their timeout", victim.identity),
                "WebCheckerProberImpaired",
                labels_of(&[
                    ("job", JOB),
                    ("instance", &instance),
                    ("pod", &victim.identity),
                    ("zone", REPLICAS[1].1),
                    ("severity", "warning"),
                ]),
                at,
                // Three refuted failures (each a timeout, then another
                // replica's probe), then two scrapes.
                Duration::from_secs(10),
            )
            .await;
    }
}
