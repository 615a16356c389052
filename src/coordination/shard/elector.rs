//! Leader election on one Lease, client-go style, with two additions:
//!
//! - expiry of the current holder is measured by this replica's own clock, and
//!   that clock restarts after any failed read of the Lease (the judge rule of
//!   [`super::view`]: an API outage this replica suffered is not the holder's
//!   silence);
//! - leadership is a [`LeaderGate`] the sharder checks before every write:
//!   valid only while the last successful renewal *started* within the renew
//!   deadline, so a deposed or paused leader writes nothing, even before its
//!   sharder task is aborted.
//!
//! A holder whose process its peers found gone ([`super::peers`]) is not
//! waited for: a candidate takes the Lease at once (a replace with the
//! resourceVersion it read, so one candidate wins). If that evidence lied,
//! the old leader hears 409 at its next renewal, one retry period later, and
//! its gate closes.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::ObjectMeta;
use kube::{Api, Client};
use tracing::{info, warn};

use super::metrics::ShardMetrics;
use super::peers::Peers;
use super::view::MemberView;
use crate::coordination::membership::AbortOnDrop;
use crate::error::{Error, api_code};
use crate::kubeio::client::{CALL_DEADLINE, managers, post_params};
use webchecker_core::election::{Observed, Standing, pause, takes_over};

/// The leader Lease of an install with the default `--lease-prefix`.
pub const LEADER_LEASE: &str = "webchecker-leader";

/// Whether this replica leads now. Shared with the sharder.
pub struct LeaderGate {
    renew_deadline: Duration,
    last_renew_start: Mutex<Option<Instant>>,
}

impl LeaderGate {
    pub fn new(renew_deadline: Duration) -> Arc<Self> {
        Arc::new(LeaderGate {
            renew_deadline,
            last_renew_start: Mutex::new(None),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.last_renew_start
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// A renewal (or acquisition) that started at `started` succeeded.
    pub fn renewed(&self, started: Instant) {
        let mut g = self.lock();
        *g = Some(g.map_or(started, |t| t.max(started)));
    }

    /// The Lease is someone else's.
    pub fn lost(&self) {
        *self.lock() = None;
    }

    /// May the sharder write now?
    pub fn valid_at(&self, now: Instant) -> bool {
        self.lock()
            .is_some_and(|t| now.saturating_duration_since(t) <= self.renew_deadline)
    }

    pub fn valid(&self) -> bool {
        self.valid_at(Instant::now())
    }

    /// How long one call of an election step may take: a renew deadline,
    /// for the leader (a busy API server is not a lost Lease) and a candidate
    /// alike. With the retry period alone, an API server slower than that
    /// (steady latency above 500 ms with fast leases) let no call of any
    /// candidate finish, and nobody led while it lasted. Waiting longer is
    /// safe: leadership counts from the start of the call that won it.
    fn call_budget(&self) -> Duration {
        self.renew_deadline
            .min(crate::kubeio::client::CALL_DEADLINE)
    }
}

/// What one election step found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Step {
    /// False when the Lease is someone else's.
    ours: bool,
    /// The API server shed a call (429, 503): busy, not down. A leader
    /// tries again after a quarter of the retry period, so a share of shed
    /// calls does not let its renew deadline pass.
    shed: bool,
}

impl Step {
    fn ours() -> Step {
        Step {
            ours: true,
            shed: false,
        }
    }

    fn theirs() -> Step {
        Step {
            ours: false,
            shed: false,
        }
    }

    fn failed(e: &kube::Error) -> Step {
        Step {
            ours: true,
            shed: matches!(api_code(e), Some(429 | 503)),
        }
    }
}

pub struct LeaderElector {
    pub identity: String,
    pub namespace: String,
    /// The leader Lease's name (`LeaseNames::leader`).
    pub lease: String,
    pub lease_duration: Duration,
    pub retry_period: Duration,
    pub metrics: Arc<ShardMetrics>,
    /// The leader Lease's failed renewals, counted with the member Lease's
    /// (`webchecker_lease_renew_failures_total`).
    pub renew_failures: prometheus::IntCounterVec,
    pub gate: Arc<LeaderGate>,
    pub view: Arc<MemberView>,
    pub peers: Arc<Peers>,
}

impl LeaderElector {
    /// Did the peers find the holder's process gone?
    fn holder_gone(&self, holder: &str) -> bool {
        self.view
            .observed()
            .unwrap_or_default()
            .iter()
            .any(|(id, l)| id == holder && self.peers.gone(l))
    }

    fn desired(&self, transitions: i32, acquire: Option<MicroTime>) -> LeaseSpec {
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.lease_duration.as_secs().max(1) as i32),
            acquire_time: Some(acquire.unwrap_or_else(|| now.clone())),
            renew_time: Some(now),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }

    fn unanswered(&self) {
        self.renew_failures
            .with_label_values(&["unreachable"])
            .inc();
    }

    /// The leader's renewal without a read (client-go's optimistic path): a
    /// replace of the Lease it last wrote. Half the calls a busy API server
    /// can shed; a 409 means someone else wrote it, and the full step reads.
    async fn renew_written(&self, api: &Api<Lease>, written: &mut Option<Lease>) -> Option<Step> {
        let mut lease = written.take()?;
        if !self.gate.valid() {
            return None;
        }
        let started = Instant::now();
        let spec = lease.spec.clone().unwrap_or_default();
        lease.spec = Some(self.desired(spec.lease_transitions.unwrap_or(0), spec.acquire_time));
        let sent = tokio::time::timeout(
            self.gate.call_budget(),
            api.replace(&self.lease, &post_params(managers::ELECTOR), &lease),
        )
        .await;
        match sent {
            Ok(Ok(l)) => {
                self.gate.renewed(started);
                *written = Some(l);
                Some(Step::ours())
            }
            Ok(Err(e)) if api_code(&e) == Some(409) => None,
            Ok(Err(e)) => {
                self.unanswered();
                *written = Some(lease);
                Some(Step::failed(&e))
            }
            Err(_) => {
                self.unanswered();
                *written = Some(lease);
                Some(Step::ours())
            }
        }
    }

    /// One election step; afterwards the gate says whether we lead.
    async fn step(
        &self,
        api: &Api<Lease>,
        observed: &mut Observed,
        written: &mut Option<Lease>,
    ) -> Step {
        if let Some(step) = self.renew_written(api, written).await {
            return step;
        }
        let started = Instant::now();
        let budget = self.gate.call_budget();
        let current = match tokio::time::timeout(budget, api.get_opt(&self.lease)).await {
            Ok(Ok(l)) => l,
            Ok(Err(e)) => {
                observed.read_failed(Instant::now());
                self.unanswered();
                return Step::failed(&e);
            }
            Err(_) => {
                observed.read_failed(Instant::now());
                self.unanswered();
                return Step::ours();
            }
        };
        let Some(mut lease) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.lease.clone()),
                    namespace: Some(self.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(self.desired(0, None)),
            };
            let created = tokio::time::timeout(
                self.gate.call_budget(),
                api.create(&post_params(managers::ELECTOR), &lease),
            )
            .await;
            if let Ok(Ok(l)) = created {
                info!(replica = %self.identity, "became leader (sharder)");
                self.gate.renewed(started);
                self.peers.set_leader(Some(&self.identity), true);
                *written = Some(l);
            }
            return Step::ours();
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let rv = lease.metadata.resource_version.clone().unwrap_or_default();
        let ours = holder == self.identity;
        self.peers.set_leader(Some(&holder), ours);
        if !ours {
            self.gate.lost();
            let timing = (self.lease_duration, self.gate.renew_deadline);
            let stale = observed.saw(&rv, Instant::now(), timing);
            let gone = !holder.is_empty() && !stale && self.holder_gone(&holder);
            if !takes_over(&holder, stale, gone) {
                return Step::theirs();
            }
            if gone {
                info!(replica = %self.identity, leader = %holder, "the leader's process is gone (its address refuses connections): taking the leader Lease now");
            }
        }
        let transitions = spec.lease_transitions.unwrap_or(0) + if ours { 0 } else { 1 };
        lease.spec = Some(self.desired(transitions, if ours { spec.acquire_time } else { None }));
        let budget = self.gate.call_budget();
        match tokio::time::timeout(
            budget,
            api.replace(&self.lease, &post_params(managers::ELECTOR), &lease),
        )
        .await
        {
            Ok(Ok(l)) => {
                if !ours {
                    info!(replica = %self.identity, "became leader (sharder)");
                }
                self.gate.renewed(started);
                self.peers.set_leader(Some(&self.identity), true);
                *written = Some(l);
                Step::ours()
            }
            Ok(Err(e)) if api_code(&e) == Some(409) => {
                self.gate.lost();
                Step::theirs()
            }
            Ok(Err(e)) => {
                observed.read_failed(Instant::now());
                self.unanswered();
                Step::failed(&e)
            }
            Err(_) => {
                observed.read_failed(Instant::now());
                self.unanswered();
                Step::ours()
            }
        }
    }

    pub async fn run<F, Fut>(
        self,
        client: Client,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
        lead: F,
    ) -> Result<(), Error>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<(), Error>> + Send + 'static,
    {
        let api: Api<Lease> = Api::namespaced(client, &self.namespace);
        let mut observed = Observed::default();
        let mut task: Option<(tokio::task::JoinHandle<Result<(), Error>>, AbortOnDrop)> = None;
        let mut lapsed_since: Option<Instant> = None;
        let mut written: Option<Lease> = None;
        loop {
            let step = self.step(&api, &mut observed, &mut written).await;
            let ours = step.ours;
            if !ours {
                written = None;
            }
            let standing = match (self.gate.valid(), ours) {
                (true, _) => Standing::Leading,
                (false, true) if task.is_some() => Standing::Lapsed,
                _ => Standing::Follower,
            };
            let leading = standing == Standing::Leading;
            self.metrics.leader.set(leading as i64);
            match standing {
                Standing::Leading => {
                    lapsed_since = None;
                    if task.is_none() {
                        let t = tokio::spawn(lead());
                        let abort = AbortOnDrop(t.abort_handle());
                        task = Some((t, abort));
                    }
                }
                // The sharder writes nothing while the gate is closed (it checks
                // before every write), so it may wait for leadership to come back
                // for a lease duration and keep its view instead of re-listing.
                Standing::Lapsed => {
                    let since = *lapsed_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > self.lease_duration {
                        warn!(replica = %self.identity, "leadership not renewed for a lease duration; sharder stopped (probing goes on)");
                        task = None;
                        lapsed_since = None;
                    }
                }
                Standing::Follower => {
                    if task.take().is_some() {
                        warn!(replica = %self.identity, "lost leadership; sharder stopped (probing goes on)");
                    }
                    lapsed_since = None;
                }
            }
            if let Some((t, _)) = &task
                && t.is_finished()
            {
                let (t, _abort) = task.take().expect("checked");
                return match t.await {
                    Ok(Err(e)) => Err(e),
                    Ok(Ok(())) => Err(Error::TaskDied("sharder")),
                    Err(e) => Err(Error::TaskPanicked("sharder", e.to_string())),
                };
            }
            tokio::select! {
                _ = tokio::time::sleep(pause(standing, step.shed, self.retry_period)) => {}
                _ = self.peers.changed.notified(), if !leading => {}
                _ = shutdown.changed() => {
                    let held = leading || task.is_some();
                    drop(task.take());
                    self.metrics.leader.set(0);
                    self.gate.lost();
                    if held {
                        self.release(&api).await;
                    }
                    return Ok(());
                }
            }
        }
    }

    async fn release(&self, api: &Api<Lease>) {
        let Ok(Ok(Some(mut lease))) =
            tokio::time::timeout(CALL_DEADLINE, api.get_opt(&self.lease)).await
        else {
            return;
        };
        if lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref())
            != Some(self.identity.as_str())
        {
            return;
        }
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
        }
        match tokio::time::timeout(
            CALL_DEADLINE,
            api.replace(&self.lease, &post_params(managers::ELECTOR), &lease),
        )
        .await
        {
            Ok(Ok(_)) => info!(replica = %self.identity, "leader Lease released"),
            Ok(Err(e)) => warn!(error = %e, "could not release the leader Lease"),
            Err(_) => warn!("releasing the leader Lease got no answer in time"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubeio::mock_api::{self, ApiHandle, ok, status};

    fn elector() -> LeaderElector {
        let lease = Duration::from_secs(3);
        LeaderElector {
            identity: "me".into(),
            namespace: "ns".into(),
            lease: LEADER_LEASE.into(),
            lease_duration: lease,
            retry_period: Duration::from_millis(500),
            metrics: Arc::new(ShardMetrics::register(&prometheus::Registry::new())),
            renew_failures: prometheus::IntCounterVec::new(
                prometheus::Opts::new("failures", "failures"),
                &["reason"],
            )
            .unwrap(),
            gate: LeaderGate::new(Duration::from_secs(2)),
            view: MemberView::new(lease),
            peers: Peers::new("me", false),
        }
    }

    fn lease_json(holder: &str, rv: &str) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": LEADER_LEASE, "namespace": "ns", "resourceVersion": rv},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 3, "leaseTransitions": 1},
        })
    }

    async fn next(
        h: &mut ApiHandle,
        method: &str,
        rv: Option<&str>,
        resp: http::Response<kube::client::Body>,
    ) {
        mock_api::answer(h, method, rv, resp).await
    }

    /// A busy API server sheds a share of calls: the leader renews with one
    /// call (a replace of what it last wrote, no read), and a shed renewal is
    /// tried again after a quarter of the retry period.
    #[tokio::test]
    async fn the_leader_renews_with_one_call_and_retries_a_shed_one_soon() {
        let (client, mut h) = mock_api::client();
        let api: Api<Lease> = Api::namespaced(client, "ns");
        let e = elector();
        let (mut observed, mut written) = (Observed::default(), None);
        let server = tokio::spawn(async move {
            // Acquisition: read, then replace with the version read.
            next(&mut h, "GET", None, ok(lease_json("", "5"))).await;
            next(&mut h, "PUT", Some("5"), ok(lease_json("me", "6"))).await;
            // Renewals: a replace of version 6, shed once, then accepted.
            next(&mut h, "PUT", Some("6"), status(429)).await;
            next(&mut h, "PUT", Some("6"), ok(lease_json("me", "7"))).await;
            // Someone else wrote it: 409, then the full step reads.
            next(&mut h, "PUT", Some("7"), status(409)).await;
            next(&mut h, "GET", None, ok(lease_json("other", "9"))).await;
        });
        let first = e.step(&api, &mut observed, &mut written).await;
        assert_eq!(first, Step::ours());
        assert!(e.gate.valid());
        let shed = e.step(&api, &mut observed, &mut written).await;
        assert!(shed.ours && shed.shed, "{shed:?}");
        let retry = e.retry_period;
        assert_eq!(pause(Standing::Leading, shed.shed, retry), retry / 4);
        assert_eq!(pause(Standing::Lapsed, true, retry), retry / 4);
        assert_eq!(
            pause(Standing::Follower, true, retry),
            retry / 2,
            "candidates add no load"
        );
        assert_eq!(
            e.step(&api, &mut observed, &mut written).await,
            Step::ours()
        );
        assert_eq!(
            e.step(&api, &mut observed, &mut written).await,
            Step::theirs()
        );
        assert!(!e.gate.valid());
        server.await.unwrap();
    }

    #[test]
    fn a_candidate_waits_a_renew_deadline_for_an_answer() {
        let g = LeaderGate::new(Duration::from_secs(2));
        let t0 = Instant::now();
        // Not leading: an API server answering in 800 ms must still elect.
        assert_eq!(g.call_budget(), Duration::from_secs(2));
        // Leading, 1.9 s left: the same.
        g.renewed(t0);
        assert_eq!(g.call_budget(), Duration::from_secs(2));
        // Leading, 0.3 s left: still a renew deadline for the call.
        assert_eq!(g.call_budget(), Duration::from_secs(2));
    }

    #[test]
    fn the_gate_counts_from_the_start_of_the_renewal() {
        let g = LeaderGate::new(Duration::from_secs(2));
        let t0 = Instant::now();
        assert!(!g.valid_at(t0));
        g.renewed(t0);
        assert!(g.valid_at(t0 + Duration::from_millis(1999)));
        // A renewal sent before a pause and read after it proves nothing new.
        assert!(!g.valid_at(t0 + Duration::from_secs(5)));
        g.lost();
        assert!(!g.valid_at(t0));
    }
}
