//! This replica's membership Lease and the dispatch/write gates derived from it.
//!
//! The Lease's UID is this replica's incarnation ("epoch"): assignments name it,
//! and a replica probes a checker only while the checker's epoch annotation
//! equals the UID of the Lease it holds now. Losing the Lease (the API server
//! answered that it is gone or changed) therefore invalidates every assignment
//! at once, even if the replica re-creates its Lease a moment later.
//!
//! The overdue-renewal policy of DESIGN.md:
//! - an answer that the Lease is no longer ours: fence (stop probing, drop state);
//! - no renewal even attempted while the deadline passed (SIGSTOP, a stall):
//!   dispatch nothing until an attempt gets an answer;
//! - attempts made but unanswered (API server down or cut off): keep probing,
//!   write nothing.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{DeleteParams, ObjectMeta, PostParams, Preconditions};
use kube::{Api, Client};
use tokio::sync::Notify;
use tracing::{error, info, warn};

use crate::api::MEMBER_LABEL;
use crate::error::{Error, api_code};
use crate::metrics::Metrics;

pub fn member_lease_name(identity: &str) -> String {
    format!("webchecker-member-{identity}")
}

#[derive(Debug)]
struct State {
    /// UID of the Lease we hold; `None` while we hold none.
    epoch: Option<String>,
    resource_version: Option<String>,
    last_success: Instant,
    /// End of the last renewal attempt, whatever its result.
    last_attempt: Instant,
    reachable: bool,
    /// Set when a pause was detected, cleared by the next answered attempt.
    paused: bool,
}

/// Shared view of the membership Lease. Cheap to query from hot paths.
pub struct Membership {
    pub identity: String,
    namespace: String,
    lease_duration: Duration,
    renew_deadline: Duration,
    retry_period: Duration,
    state: Mutex<State>,
    /// Wakes the renewal task early (pause detected, shutdown).
    kick: Notify,
    /// Signals gate changes to waiters (writer, engine).
    pub changed: Notify,
    metrics: Arc<Metrics>,
}

/// What the renew loop tells the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// The API server answered that our Lease is gone: drop every checker now.
    Lost,
}

impl Membership {
    pub fn new(
        identity: String,
        namespace: String,
        lease_duration: Duration,
        renew_deadline: Duration,
        retry_period: Duration,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        let now = Instant::now();
        Arc::new(Membership {
            identity,
            namespace,
            lease_duration,
            renew_deadline,
            retry_period,
            state: Mutex::new(State {
                epoch: None,
                resource_version: None,
                last_success: now,
                last_attempt: now,
                reachable: true,
                paused: false,
            }),
            kick: Notify::new(),
            changed: Notify::new(),
            metrics,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn epoch(&self) -> Option<String> {
        self.lock().epoch.clone()
    }

    /// May a probe start now? Checked before every dispatch, by the monotonic clock.
    pub fn dispatch_allowed(&self) -> bool {
        let now = Instant::now();
        let mut s = self.lock();
        if s.epoch.is_none() || s.paused {
            return false;
        }
        if now.duration_since(s.last_success) <= self.renew_deadline {
            return true;
        }
        // Overdue. If renewals were attempted all along, the API server is just not
        // answering: keep probing. If not even an attempt was made, we were paused.
        let attempts_stalled =
            now.duration_since(s.last_attempt) > self.retry_period * 2 + self.retry_period / 2;
        if attempts_stalled {
            s.paused = true;
            drop(s);
            self.metrics
                .self_fences
                .with_label_values(&["paused"])
                .inc();
            warn!(replica = %self.identity, "lease renewal overdue with no attempt made (process paused?): holding probes until the API server answers");
            self.kick.notify_one();
            return false;
        }
        true
    }

    /// May status be written now? Only while the Lease is known to be ours.
    pub fn can_write(&self) -> bool {
        let s = self.lock();
        s.epoch.is_some()
            && !s.paused
            && s.reachable
            && Instant::now().duration_since(s.last_success) <= self.renew_deadline
    }

    pub fn holds_lease(&self) -> bool {
        self.lock().epoch.is_some()
    }

    fn api(client: &Client, namespace: &str) -> Api<Lease> {
        Api::namespaced(client.clone(), namespace)
    }

    fn desired(&self, now: jiff_now::Timestamp) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(member_lease_name(&self.identity)),
                namespace: Some(self.namespace.clone()),
                labels: Some([(MEMBER_LABEL.to_string(), "true".to_string())].into()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.identity.clone()),
                lease_duration_seconds: Some(self.lease_duration.as_secs().max(1) as i32),
                acquire_time: Some(MicroTime(now)),
                renew_time: Some(MicroTime(now)),
                ..Default::default()
            }),
        }
    }

    /// Creates our Lease, replacing a stale one left by an earlier incarnation of
    /// the same identity (its assignments then carry a foreign epoch and move).
    pub async fn join(&self, client: &Client) -> Result<(), Error> {
        let api = Self::api(client, &self.namespace);
        let name = member_lease_name(&self.identity);
        loop {
            match api
                .create(&PostParams::default(), &self.desired(jiff_now::now()))
                .await
            {
                Ok(lease) => {
                    let now = Instant::now();
                    let mut s = self.lock();
                    s.epoch = lease.metadata.uid.clone();
                    s.resource_version = lease.metadata.resource_version.clone();
                    s.last_success = now;
                    s.last_attempt = now;
                    s.reachable = true;
                    s.paused = false;
                    drop(s);
                    self.metrics.api_reachable.set(1);
                    info!(replica = %self.identity, epoch = ?lease.metadata.uid, "joined: membership Lease created");
                    self.changed.notify_waiters();
                    return Ok(());
                }
                Err(e) if api_code(&e) == Some(409) => {
                    warn!(replica = %self.identity, "a membership Lease of an earlier incarnation exists; replacing it");
                    let _ = api.delete(&name, &DeleteParams::default()).await;
                }
                Err(e) if api_code(&e) == Some(403) => {
                    return Err(Error::Forbidden(format!(
                        "cannot create Leases in namespace {:?} (coordination.k8s.io leases: create, get, update, delete): {e}",
                        self.namespace
                    )));
                }
                Err(e) => {
                    warn!(error = %e, "cannot create the membership Lease yet; retrying");
                    tokio::time::sleep(self.retry_period).await;
                }
            }
        }
    }

    /// One renewal attempt. Returns Some(Lost) when the API server says the Lease is not ours.
    async fn renew(&self, client: &Client) -> Option<Signal> {
        let api = Self::api(client, &self.namespace);
        let name = member_lease_name(&self.identity);
        let (epoch, rv) = {
            let s = self.lock();
            (s.epoch.clone(), s.resource_version.clone())
        };
        epoch.as_ref()?;
        let mut lease = self.desired(jiff_now::now());
        lease.metadata.resource_version = rv;
        lease.metadata.uid = epoch.clone();
        let attempt = tokio::time::timeout(self.retry_period, async {
            match api.replace(&name, &PostParams::default(), &lease).await {
                Err(e) if api_code(&e) == Some(409) => {
                    // Our previous renewal may have landed without us hearing the answer:
                    // the Lease is still ours if its UID is our epoch.
                    match api.get_opt(&name).await {
                        Ok(Some(current)) if current.metadata.uid == epoch => {
                            lease.metadata.resource_version = current.metadata.resource_version;
                            api.replace(&name, &PostParams::default(), &lease).await
                        }
                        Ok(_) => Err(e),
                        Err(e2) => Err(e2),
                    }
                }
                other => other,
            }
        })
        .await;
        let now = Instant::now();
        let mut s = self.lock();
        s.last_attempt = now;
        let result = match attempt {
            Ok(Ok(l)) => {
                s.resource_version = l.metadata.resource_version;
                s.last_success = now;
                s.reachable = true;
                s.paused = false;
                None
            }
            Ok(Err(e)) if matches!(api_code(&e), Some(404) | Some(409)) => {
                error!(replica = %self.identity, error = %e, "membership Lease lost: dropping every checker");
                s.epoch = None;
                s.resource_version = None;
                s.paused = false;
                self.metrics
                    .lease_renew_failures
                    .with_label_values(&["lost"])
                    .inc();
                self.metrics.self_fences.with_label_values(&["lost"]).inc();
                Some(Signal::Lost)
            }
            Ok(Err(e)) => {
                s.reachable = false;
                self.metrics
                    .lease_renew_failures
                    .with_label_values(&["unreachable"])
                    .inc();
                warn!(error = %e, "membership Lease renewal failed");
                None
            }
            Err(_) => {
                s.reachable = false;
                self.metrics
                    .lease_renew_failures
                    .with_label_values(&["unreachable"])
                    .inc();
                warn!("membership Lease renewal got no answer in time");
                None
            }
        };
        self.metrics.api_reachable.set(s.reachable as i64);
        drop(s);
        self.changed.notify_waiters();
        result
    }

    /// The renewal loop. `on_lost` runs (and completes) before we re-join, so the
    /// engine has dropped every checker of the old incarnation first.
    pub async fn run<F, Fut>(self: Arc<Self>, client: Client, on_lost: F) -> Result<(), Error>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(self.retry_period) => {}
                _ = self.kick.notified() => {}
            }
            if self.renew(&client).await == Some(Signal::Lost) {
                on_lost().await;
                self.join(&client).await?;
            }
        }
    }

    /// Graceful shutdown: delete our Lease so the sharder moves our checkers at once.
    pub async fn release(&self, client: &Client) {
        let epoch = {
            let mut s = self.lock();
            s.resource_version = None;
            s.epoch.take()
        };
        if let Some(uid) = epoch {
            let dp = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..Default::default()
            };
            let api = Self::api(client, &self.namespace);
            match api.delete(&member_lease_name(&self.identity), &dp).await {
                Ok(_) => info!(replica = %self.identity, "membership Lease released"),
                Err(e) => warn!(error = %e, "could not release the membership Lease"),
            }
        }
        self.changed.notify_waiters();
    }

    pub fn lease_duration(&self) -> Duration {
        self.lease_duration
    }
}

/// Time helpers over the jiff Timestamp that k8s-openapi uses.
pub mod jiff_now {
    pub use k8s_openapi::jiff::Timestamp;
    pub fn now() -> Timestamp {
        Timestamp::now()
    }
}
