//! The confirmer's side: an ask from a member, answered with one probe of
//! the checker as this replica reads it.
//!
//! The confirm listener (its own thread, [`super::endpoint`]) hands each ask
//! over a bounded channel ([`Desk`]) to [`Service::run`] on the engine's
//! runtime, where probes run. An ask is served in this order, each step
//! refusing for free what the next would pay for:
//!
//! 1. who asks ([`super::review`]): the token's own claims, the asker's
//!    membership and address, then a TokenReview remembered per member;
//! 2. the plan: the checker as the owner saw it (UID and generation) and
//!    owned by the asker, its Secrets and patterns read and compiled under
//!    its namespace's budgets ([`super::plans`]);
//! 3. a share of its namespace ([`super::shares`]), then a worker of the
//!    engine's pool, in the fair queue of the checker's namespace with its
//!    own probes (crate::engine: `--workers` counts these probes too);
//! 4. one probe under the forgery guard, if it can end before the owner
//!    stops waiting.
//!
//! Work nobody waits for any more (the owner's wait ended, or it went
//! away) is dropped, its probe included.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use http::HeaderValue;
use kube::{Api, Client};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tracing::debug;

use super::plans::Plans;
use super::review::Reviewer;
use super::shares::Shares;
use crate::api::WebChecker;
use crate::ask::{Ask, CONFIRM_FOR_HEADER, Purpose, Reply, ZONE_FOR_HEADER};
use crate::assignment::Assignment;
use crate::checker::Resolved;
use crate::coordination::shard::MemberView;
use crate::intake::secrets::{self, ObjectId};
use crate::observe::metrics::family::{Family, counter_vec};
use crate::probe::{ProbePlan, Prober, compile_patterns, plan_trusting, references};
use webchecker_core::namespace_budget::Limits;

/// Confirmations in work at once at most, per worker of the pool (they take
/// a worker each, and must leave most of the pool to the owner's probes).
const CONFIRM_PER_WORKERS: usize = 4;
/// Confirmations in work at once, at most.
const CONFIRM_MAX: usize = 64;
/// Zones' probes (spec.locations) in work at once at most, per worker: they
/// come every interval, for every checker another zone owns.
const ZONE_PER_WORKERS: usize = 2;
/// Zones' probes in work at once, at most.
const ZONE_MAX: usize = 256;
/// Asks waiting for the service, at most (the listener answers busy beyond).
const WAITING: usize = 256;
/// Deadline of one read of the checker or of one of its Secrets: the reads
/// before the probe must fit the owner's wait beside the probe's timeout.
const READ: Duration = Duration::from_secs(2);

/// One ask as the listener received it.
pub struct Request {
    /// The bearer token, if any.
    pub token: Option<String>,
    pub ask: Ask,
    /// Where the ask came from.
    pub peer: IpAddr,
    pub reply: oneshot::Sender<Reply>,
}

/// Where the listener leaves asks.
#[derive(Clone)]
pub struct Desk(mpsc::Sender<Request>);

impl Desk {
    pub fn new() -> (Desk, mpsc::Receiver<Request>) {
        let (tx, rx) = mpsc::channel(WAITING);
        (Desk(tx), rx)
    }

    /// Hands an ask over without waiting; false when too many wait.
    pub fn leave(&self, r: Request) -> bool {
        self.0.try_send(r).is_ok()
    }
}

/// Why an ask was not probed: the reply's words and the metric's result.
enum No {
    Unauthenticated(&'static str),
    Refused(String),
    Busy(String),
}

impl No {
    fn result(&self) -> &'static str {
        match self {
            No::Unauthenticated(_) => "unauthenticated",
            No::Refused(_) => "refused",
            No::Busy(_) => "busy",
        }
    }

    fn reply(self) -> Reply {
        let why = match self {
            No::Unauthenticated(why) => format!("not accepted: {why}"),
            No::Refused(why) => why,
            No::Busy(why) => format!("busy: {why}"),
        };
        Reply::Refused { why }
    }
}

fn refused<T>(why: impl Into<String>) -> Result<T, No> {
    Err(No::Refused(why.into()))
}

const CONFIRM_REQUESTS: Family = (
    "webchecker_confirm_requests_total",
    "Asks to confirm a failure or to probe from this zone that this replica served, by result: probed, unauthenticated (not a member's credentials, or not from its address), refused (the asker does not own the checker, it changed, is unknown or cannot be probed here), busy (no share of its namespace's or of the replica's work came free in time), abandoned (the owner stopped waiting before the answer: the work was dropped)",
);

/// The asks this replica served, by result.
pub struct ConfirmMetrics {
    requests: prometheus::IntCounterVec,
}

impl ConfirmMetrics {
    pub fn register(r: &prometheus::Registry) -> Self {
        let results = ["probed", "unauthenticated", "refused", "busy", "abandoned"];
        ConfirmMetrics {
            requests: counter_vec(r, CONFIRM_REQUESTS, &["result"], &results),
        }
    }
}

/// What the service is made of.
pub struct Parts {
    pub client: Client,
    pub reviewer: Reviewer,
    pub prober: Arc<Prober>,
    pub metrics: ConfirmMetrics,
    pub view: Arc<MemberView>,
    /// The engine, which runs the probes on its worker pool.
    pub engine: mpsc::Sender<crate::engine::Command>,
    pub workers: usize,
    /// The namespaces' budgets (webchecker_core::namespace_budget).
    pub budgets: Limits,
}

pub struct Service {
    parts: Parts,
    shares: Shares,
    zone_shares: Shares,
    plans: Plans<ProbePlan>,
}

impl Service {
    pub fn new(parts: Parts) -> Arc<Self> {
        let workers = parts.workers.max(1);
        Arc::new(Service {
            shares: Shares::new((workers / CONFIRM_PER_WORKERS).clamp(1, CONFIRM_MAX)),
            zone_shares: Shares::new((workers / ZONE_PER_WORKERS).clamp(1, ZONE_MAX)),
            plans: Plans::new(parts.budgets),
            parts,
        })
    }

    pub async fn run(self: Arc<Self>, mut asks: mpsc::Receiver<Request>) {
        while let Some(r) = asks.recv().await {
            let me = self.clone();
            tokio::spawn(async move {
                let Request {
                    token,
                    ask,
                    peer,
                    mut reply,
                } = r;
                let deadline = Instant::now() + ask.wait();
                let work = me.serve(token, &ask, peer, deadline);
                let served = tokio::select! {
                    served = tokio::time::timeout_at(deadline, work) => served.ok(),
                    _ = reply.closed() => None,
                };
                let Some(served) = served else {
                    me.parts
                        .metrics
                        .requests
                        .with_label_values(&["abandoned"])
                        .inc();
                    return;
                };
                let result = served.as_ref().map_or_else(No::result, |_| "probed");
                me.parts.metrics.requests.with_label_values(&[result]).inc();
                let reply_to_send = served.unwrap_or_else(No::reply);
                debug!(from = %ask.from, namespace = %ask.namespace, name = %ask.name, reply = ?reply_to_send, "ask served");
                let _ = reply.send(reply_to_send);
            });
        }
    }

    async fn serve(
        &self,
        token: Option<String>,
        ask: &Ask,
        peer: IpAddr,
        deadline: Instant,
    ) -> Result<Reply, No> {
        let token = token.ok_or(No::Unauthenticated("no credentials"))?;
        let place = self
            .parts
            .view
            .places()
            .into_iter()
            .find(|(id, _)| id == &ask.from)
            .map(|(_, p)| p);
        let reviewer = &self.parts.reviewer;
        reviewer
            .precheck(&token, &ask.from, place.as_ref(), peer)
            .map_err(No::Unauthenticated)?;
        reviewer
            .review(&token, &ask.from)
            .await
            .map_err(No::Unauthenticated)?;
        let plan = match self.plans.get(ask, std::time::Instant::now()) {
            Some(plan) => plan,
            None => {
                let (plan, cost) = self.plan(ask).await?;
                let plan = Arc::new(plan);
                if !self
                    .plans
                    .put(ask, plan.clone(), cost, std::time::Instant::now())
                {
                    return refused("the checker is over its namespace's budget on this replica");
                }
                plan
            }
        };
        if ask.purpose == Purpose::Zone && plan.locations.is_none() {
            return refused("the checker has no spec.locations");
        }
        let shares = match ask.purpose {
            Purpose::Confirm => &self.shares,
            Purpose::Zone => &self.zone_shares,
        };
        let slack = || {
            deadline
                .saturating_duration_since(Instant::now())
                .saturating_sub(plan.timeout)
        };
        let Some(_share) = shares.take(&ask.namespace, plan.timeout, slack()).await else {
            return Err(No::Busy(format!(
                "namespace {} has its share of asks in work here",
                ask.namespace
            )));
        };
        let (done, outcome) = oneshot::channel();
        let probe = crate::engine::Command::Probe {
            namespace: ask.namespace.clone(),
            plan: plan.clone(),
            done,
        };
        if tokio::time::timeout(slack(), self.parts.engine.send(probe))
            .await
            .is_err()
        {
            return Err(No::Busy("the engine took no more work in time".into()));
        }
        // Dropped (this ask abandoned), the receiver gives the probe up.
        let outcome = match outcome.await {
            Ok(Some(outcome)) => outcome,
            Ok(None) => return refused("the probe was held back"),
            Err(_) => return Err(No::Busy("no worker came free".into())),
        };
        Ok(Reply::Probed {
            success: outcome.success(),
            reason: outcome.reason.as_str().to_string(),
            millis: outcome.duration.as_millis() as u64,
        })
    }

    /// The probe plan of the checker as this replica reads it now (the
    /// object, its Secrets, its patterns; the header naming the owner), and
    /// what it holds in bytes.
    async fn plan(&self, ask: &Ask) -> Result<(ProbePlan, usize), No> {
        let wc = self.read(ask).await?;
        let spec = &wc.spec;
        let values = self.values(&ask.namespace, spec).await;
        let patterns = {
            let spec = spec.clone();
            tokio::task::spawn_blocking(move || compile_patterns(&spec))
                .await
                .unwrap_or_else(|_| Err("the regular expressions could not be compiled".into()))
        };
        let cost = values.bytes() + patterns.as_ref().map_or(0, |p| p.bytes);
        let resolve = |v: &crate::probe::ValueRef| values.get(v);
        let mut plan = match plan_trusting(spec, &resolve, &patterns, self.parts.prober.roots()) {
            Ok(p) => p,
            Err(_) => return refused("the spec cannot be probed here"),
        };
        let header = match ask.purpose {
            Purpose::Confirm => CONFIRM_FOR_HEADER,
            Purpose::Zone => ZONE_FOR_HEADER,
        };
        if let Ok(v) = HeaderValue::from_str(&ask.from) {
            plan.headers
                .push((http::HeaderName::from_static(header), v));
        }
        Ok((plan, cost))
    }

    /// The checker as the owner saw it, read now.
    async fn read(&self, ask: &Ask) -> Result<WebChecker, No> {
        let api: Api<WebChecker> = Api::namespaced(self.parts.client.clone(), &ask.namespace);
        let wc = match tokio::time::timeout(READ, api.get_opt(&ask.name)).await {
            Err(_) | Ok(Err(_)) => return refused("the checker could not be read in time"),
            Ok(Ok(None)) => return refused("no such checker"),
            Ok(Ok(Some(wc))) => wc,
        };
        if wc.metadata.uid.as_deref() != Some(ask.uid.as_str()) {
            return refused("the checker was deleted and created again");
        }
        if wc.metadata.generation != ask.generation {
            return refused("the checker's spec changed meanwhile");
        }
        if Assignment::of(&wc.metadata).owner.as_deref() != Some(ask.from.as_str()) {
            return refused(format!("{} does not own the checker", ask.from));
        }
        Ok(wc)
    }

    /// The Secret and ConfigMap values the spec names, read with this
    /// replica's permissions, a few at a time per namespace (a value that
    /// cannot be read fails the plan).
    async fn values(&self, namespace: &str, spec: &crate::api::WebCheckerSpec) -> Resolved {
        let refs = references(spec);
        let mut objects: BTreeMap<ObjectId, ()> = BTreeMap::new();
        for r in &refs {
            objects.insert(ObjectId::of(namespace, r), ());
        }
        let reads = objects.into_keys().map(|obj| async move {
            let _turn = self.plans.read_turn(namespace).await;
            let read = match tokio::time::timeout(
                READ,
                secrets::read(self.parts.client.clone(), obj.clone()),
            )
            .await
            {
                Ok(read) => read,
                Err(_) => Err(secrets::Fetch::Transient(format!(
                    "{} {:?} could not be read in time",
                    obj.kind, obj.name
                ))),
            };
            (obj, read)
        });
        let objects: BTreeMap<ObjectId, secrets::Read> =
            futures::future::join_all(reads).await.into_iter().collect();
        refs.into_iter()
            .map(|r| {
                let obj = ObjectId::of(namespace, &r);
                let v = match objects.get(&obj) {
                    Some(Ok(keys)) => keys
                        .get(r.key())
                        .cloned()
                        .ok_or_else(|| format!("{r} not found")),
                    Some(Err(secrets::Fetch::Final(m) | secrets::Fetch::Transient(m))) => {
                        Err(m.clone())
                    }
                    None => Err(format!("{r} was not read")),
                };
                (r, v)
            })
            .collect()
    }
}
