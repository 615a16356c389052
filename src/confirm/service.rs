//! The confirmer's side: an ask from a member, answered with one probe of
//! the checker as this replica reads it.
//!
//! The HTTP server (its own thread) hands each ask over a bounded channel
//! ([`Desk`]) to [`Service::run`] on the engine's runtime, where probes run.
//! An ask is refused unless its token names the install's ServiceAccount
//! (and, when bound to a pod, the asking replica's pod), the checker is the
//! one the owner saw (UID and generation) and the asker owns it. Then the
//! checker and its Secrets are read with this replica's permissions, its
//! patterns compiled under the usual limits, and one probe runs under the
//! forgery guard. The replica works on at most [`TOTAL`] confirmations at
//! once (and [`ZONE_TOTAL`] zones' probes); a namespace always gets
//! [`PER_NAMESPACE`] (and [`ZONE_PER_NAMESPACE`]) of them and may borrow more only
//! while under half are in use, so one team's failing checkers cannot take
//! the confirmations of others; an ask beyond waits up to [`SHARE_WAIT`]
//! for a share ([`super::shares`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::HeaderValue;
use kube::{Api, Client};
use tokio::sync::{mpsc, oneshot};
use tracing::debug;

use super::shares::{Share, Shares};
use super::tokens::Reviewer;
use super::{Ask, CONFIRM_FOR_HEADER, Purpose, Reply, ZONE_FOR_HEADER};
use crate::api::{OWNER_LABEL, WebChecker};
use crate::intake::secrets::{self, ObjectId, Resolved};
use crate::observe::metrics::Metrics;
use crate::probe::{ProbePlan, Prober, compile_patterns, plan_trusting, references};

/// How long a probe plan is used before the checker and its Secrets are
/// read again (a zone probes every interval, and an owner whose own path is
/// broken asks at each failure; reading the object each time would cost
/// the API server a GET per probe). A Secret's new value reaches
/// confirmations and zones' probes within this.
const PLAN_FRESH: Duration = Duration::from_secs(30);
/// Plans kept at most (the owners' namespace budgets bound what each costs).
const PLANS: usize = 4096;

/// Asks for a confirmation of one namespace in work at once that it always gets.
pub const PER_NAMESPACE: usize = 8;
/// Asks for a confirmation in work at once, at most.
pub const TOTAL: usize = 64;
/// Zones' probes (spec.locations) of one namespace in work at once that it
/// always gets: they come every interval, for every checker of the
/// namespace that another zone owns, and a failing target holds each for
/// up to its timeout.
pub const ZONE_PER_NAMESPACE: usize = 64;
/// Zones' probes in work at once, at most.
pub const ZONE_TOTAL: usize = 256;
/// How long an ask waits for its namespace's share before it is refused
/// busy: the owner waits its probe timeout plus two seconds, and the
/// probe may take the timeout.
pub const SHARE_WAIT: Duration = Duration::from_secs(1);
/// Asks waiting for the service, at most (the HTTP server answers busy
/// beyond).
const WAITING: usize = 256;
/// Deadline of a read of the checker.
const READ: Duration = Duration::from_secs(5);

/// One ask as the HTTP server received it.
pub struct Request {
    /// The bearer token, if any.
    pub token: Option<String>,
    pub ask: Ask,
    pub reply: oneshot::Sender<Reply>,
}

/// Where the HTTP server leaves asks.
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

/// Probe plans, by checker and purpose, for as long as [`PLAN_FRESH`]: used
/// for an ask of the same object (UID), generation and owner only.
#[derive(Default)]
struct PlanCache(Mutex<HashMap<(String, String, Purpose), CachedPlan>>);

struct CachedPlan {
    uid: String,
    generation: Option<i64>,
    owner: String,
    plan: Arc<ProbePlan>,
    read: Instant,
}

impl PlanCache {
    fn get(&self, ask: &Ask, now: Instant) -> Option<Arc<ProbePlan>> {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let c = map.get(&key(ask))?;
        let same = c.uid == ask.uid && c.generation == ask.generation && c.owner == ask.from;
        (same && now.duration_since(c.read) < PLAN_FRESH).then(|| c.plan.clone())
    }

    fn put(&self, ask: &Ask, plan: Arc<ProbePlan>, now: Instant) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= PLANS {
            map.retain(|_, c| now.duration_since(c.read) < PLAN_FRESH);
            if map.len() >= PLANS {
                map.clear();
            }
        }
        map.insert(
            key(ask),
            CachedPlan {
                uid: ask.uid.clone(),
                generation: ask.generation,
                owner: ask.from.clone(),
                plan,
                read: now,
            },
        );
    }
}

/// A plan carries the header of its purpose: one entry per purpose.
fn key(ask: &Ask) -> (String, String, Purpose) {
    (ask.namespace.clone(), ask.name.clone(), ask.purpose)
}

pub struct Service {
    pub client: Client,
    pub reviewer: Reviewer,
    pub prober: Arc<Prober>,
    pub metrics: Arc<Metrics>,
    shares: Shares,
    zone_shares: Shares,
    plans: PlanCache,
}

fn refused<T>(why: impl Into<String>) -> Result<T, Reply> {
    Err(Reply::Refused { why: why.into() })
}

impl Service {
    pub fn new(
        client: Client,
        reviewer: Reviewer,
        prober: Arc<Prober>,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        Arc::new(Service {
            client,
            reviewer,
            prober,
            metrics,
            shares: Shares::new(PER_NAMESPACE, TOTAL),
            zone_shares: Shares::new(ZONE_PER_NAMESPACE, ZONE_TOTAL),
            plans: PlanCache::default(),
        })
    }

    pub async fn run(self: Arc<Self>, mut asks: mpsc::Receiver<Request>) {
        while let Some(r) = asks.recv().await {
            let me = self.clone();
            tokio::spawn(async move {
                let reply = me.serve(r.token, &r.ask).await.unwrap_or_else(|e| e);
                let result = match &reply {
                    Reply::Probed { .. } => "probed",
                    Reply::Refused { why } if why.starts_with("busy") => "busy",
                    Reply::Refused { .. } => "refused",
                };
                me.metrics
                    .confirm_requests
                    .with_label_values(&[result])
                    .inc();
                debug!(from = %r.ask.from, namespace = %r.ask.namespace, name = %r.ask.name, ?reply, "confirmation");
                let _ = r.reply.send(reply);
            });
        }
    }

    async fn take_share(&self, namespace: &str, purpose: Purpose) -> Option<Share<'_>> {
        let shares = match purpose {
            Purpose::Confirm => &self.shares,
            Purpose::Zone => &self.zone_shares,
        };
        shares.take(namespace, SHARE_WAIT).await
    }

    async fn serve(&self, token: Option<String>, ask: &Ask) -> Result<Reply, Reply> {
        let Some(token) = token else {
            return refused("no credentials");
        };
        match self.reviewer.review(&token).await {
            Err(why) => return refused(why),
            Ok(Some(pod)) if pod != ask.from => {
                return refused(format!(
                    "the credentials are those of pod {pod}, not of {}",
                    ask.from
                ));
            }
            Ok(_) => {}
        }
        let Some(_share) = self.take_share(&ask.namespace, ask.purpose).await else {
            return refused(format!(
                "busy: namespace {} has its share of asks in work here",
                ask.namespace
            ));
        };
        let plan = match self.plans.get(ask, Instant::now()) {
            Some(plan) => plan,
            None => {
                let plan = Arc::new(self.plan(ask).await?);
                self.plans.put(ask, plan.clone(), Instant::now());
                plan
            }
        };
        if ask.purpose == Purpose::Zone && plan.locations.is_none() {
            return refused("the checker has no spec.locations");
        }
        let Some(outcome) = self.prober.probe(&plan, &ask.namespace, &|| true).await else {
            return refused("the probe was held back");
        };
        Ok(Reply::Probed {
            success: outcome.success(),
            reason: outcome.reason.as_str().to_string(),
            millis: outcome.duration.as_millis() as u64,
        })
    }

    /// The probe plan of the checker as this replica reads it now: the
    /// object, its Secrets, its patterns; the header naming the owner.
    async fn plan(&self, ask: &Ask) -> Result<ProbePlan, Reply> {
        let wc = self.read(ask).await?;
        let spec = &wc.spec;
        let values = self.values(&ask.namespace, spec).await;
        let patterns = {
            let spec = spec.clone();
            tokio::task::spawn_blocking(move || compile_patterns(&spec))
                .await
                .unwrap_or_else(|_| Err("the regular expressions could not be compiled".into()))
        };
        let resolve = |v: &crate::probe::ValueRef| values.get(v);
        let mut plan = match plan_trusting(spec, &resolve, &patterns, self.prober.roots()) {
            Ok(p) => p,
            Err(m) => return refused(format!("the spec cannot be probed here: {m}")),
        };
        let header = match ask.purpose {
            Purpose::Confirm => CONFIRM_FOR_HEADER,
            Purpose::Zone => ZONE_FOR_HEADER,
        };
        if let Ok(v) = HeaderValue::from_str(&ask.from) {
            plan.headers
                .push((http::HeaderName::from_static(header), v));
        }
        Ok(plan)
    }

    /// The checker as the owner saw it, read now.
    async fn read(&self, ask: &Ask) -> Result<WebChecker, Reply> {
        let api: Api<WebChecker> = Api::namespaced(self.client.clone(), &ask.namespace);
        let got = tokio::time::timeout(READ, api.get_opt(&ask.name)).await;
        let wc = match got {
            Err(_) => return refused("the checker could not be read in time"),
            Ok(Err(e)) => return refused(format!("the checker could not be read: {e}")),
            Ok(Ok(None)) => return refused("no such checker"),
            Ok(Ok(Some(wc))) => wc,
        };
        if wc.metadata.uid.as_deref() != Some(ask.uid.as_str()) {
            return refused("the checker was deleted and created again");
        }
        if wc.metadata.generation != ask.generation {
            return refused("the checker's spec changed meanwhile");
        }
        let owner = wc.metadata.labels.as_ref().and_then(|l| l.get(OWNER_LABEL));
        if owner.map(String::as_str) != Some(ask.from.as_str()) {
            return refused(format!("{} does not own the checker", ask.from));
        }
        Ok(wc)
    }

    /// The Secret and ConfigMap values the spec names, read with this
    /// replica's permissions (a value that cannot be read fails the plan).
    async fn values(&self, namespace: &str, spec: &crate::api::WebCheckerSpec) -> Resolved {
        let refs = references(spec);
        let mut objects: BTreeMap<ObjectId, secrets::Read> = BTreeMap::new();
        for r in &refs {
            let obj = ObjectId::of(namespace, r);
            if let std::collections::btree_map::Entry::Vacant(v) = objects.entry(obj.clone()) {
                v.insert(secrets::read(self.client.clone(), obj).await);
            }
        }
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
