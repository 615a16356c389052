//! The simulation's fake API server: WebChecker metadata and member Leases
//! in memory, served to kube's client as a tower service: lists, watches
//! (from a resourceVersion, replayed from a bounded history, 410 beyond it),
//! merge patches fenced by resourceVersion, Lease reads and deletes. Every
//! write is admitted by a token bucket (a write that finds it empty queues
//! up to [`QUEUE_WAIT`], then is refused with 429, as priority and fairness
//! would), then takes the configured latency, then lands. Reads take the
//! latency too. The tally says at each instant who holds how many checkers.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use http::{Request, Response};
use http_body::Frame;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use webchecker::api::MEMBER_LABEL;
use webchecker::assignment::{
    DRAIN_ANNOTATION, DRAIN_EPOCH_ANNOTATION, EPOCH_ANNOTATION, HANDED_OVER_FROM_ANNOTATION,
    OWNER_LABEL,
};

pub type Body = UnsyncBoxBody<Bytes, Infallible>;

/// How long a write waits for the token bucket before it is refused (429).
pub const QUEUE_WAIT: Duration = Duration::from_millis(500);
/// Watch events kept for watches that start from an older resourceVersion.
const HISTORY: usize = 50_000;
const CHECKERS_PATH: &str = "/apis/test.network.io/v1alpha1";
const LEASES_PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/";

/// What the API server costs a write.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Mean time from admission to the answer (uniform in 0.5x-1.5x).
    pub latency: Duration,
    /// Writes admitted per second at most; `None`: unlimited.
    pub rate: Option<f64>,
}

/// Counters of a step (reset by the driver).
#[derive(Clone, Debug, Default)]
pub struct Counts {
    pub sharder_writes: u64,
    pub acks: u64,
    pub shed: u64,
    pub conflicts: u64,
    /// Checkers whose owner changed from one member to another or from none.
    pub owner_changes: u64,
    pub peak_drains: usize,
    pub last_change: Option<Instant>,
}

struct Obj {
    rv: u64,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
}

impl Obj {
    fn owner(&self) -> &str {
        self.labels.get(OWNER_LABEL).map_or("", String::as_str)
    }

    fn drained(&self) -> bool {
        self.annotations.contains_key(DRAIN_ANNOTATION)
    }
}

struct LeaseRec {
    holder: String,
    uid: String,
    rv: u64,
}

/// A watched resource's subscribers and recent events.
#[derive(Default)]
struct Feed {
    history: VecDeque<(u64, Bytes)>,
    trimmed_below: u64,
    subscribers: Vec<mpsc::UnboundedSender<Bytes>>,
}

impl Feed {
    fn publish(&mut self, rv: u64, line: Bytes) {
        self.publish_together(vec![(rv, line)]);
    }

    /// Events written at one moment reach each watch in one chunk, as an
    /// API server's flush of them does.
    fn publish_together(&mut self, events: Vec<(u64, Bytes)>) {
        if events.is_empty() {
            return;
        }
        let mut chunk = Vec::new();
        for (rv, line) in events {
            if self.history.len() == HISTORY
                && let Some((old, _)) = self.history.pop_front()
            {
                self.trimmed_below = old + 1;
            }
            chunk.extend_from_slice(&line);
            self.history.push_back((rv, line));
        }
        let chunk = Bytes::from(chunk);
        self.subscribers.retain(|s| s.send(chunk.clone()).is_ok());
    }

    /// A subscription from `rv` on; `None` when that is older than the history.
    fn subscribe(&mut self, rv: u64) -> Option<mpsc::UnboundedReceiver<Bytes>> {
        if rv + 1 < self.trimmed_below {
            return None;
        }
        let (tx, rx) = mpsc::unbounded_channel();
        for (at, line) in &self.history {
            if *at > rv {
                let _ = tx.send(line.clone());
            }
        }
        self.subscribers.push(tx);
        Some(rx)
    }
}

/// Everything behind one lock, as etcd's single revision counter is.
struct Store {
    rv: u64,
    namespace: String,
    checkers: BTreeMap<String, Obj>,
    leases: BTreeMap<String, LeaseRec>,
    checker_feed: Feed,
    lease_feed: Feed,
    /// Checkers per owner label ("" for none).
    held: HashMap<String, usize>,
    drains: usize,
    counts: Counts,
    /// Drains to acknowledge, per owner that is a live member.
    acks: HashMap<String, mpsc::UnboundedSender<String>>,
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

pub struct FakeApi {
    store: Mutex<Store>,
    bucket: Mutex<Bucket>,
    limits: Limits,
    rng: Mutex<u64>,
}

fn resp(code: u16, body: Body) -> Response<Body> {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(body)
        .expect("a response")
}

fn full(v: &Value) -> Body {
    Full::new(Bytes::from(serde_json::to_vec(v).expect("json"))).boxed_unsync()
}

fn status(code: u16, reason: &str) -> Response<Body> {
    let v = json!({
        "apiVersion": "v1", "kind": "Status", "status": "Failure",
        "message": reason, "reason": reason, "code": code,
    });
    resp(code, full(&v))
}

fn query(req: &Request<kube::client::Body>, key: &str) -> Option<String> {
    req.uri().query()?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then(|| v.to_string())
    })
}

fn split_key(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or(("", key))
}

fn checker_meta(key: &str, o: &Obj) -> Value {
    let (ns, name) = split_key(key);
    json!({
        "name": name, "namespace": ns, "uid": format!("uid-{key}"),
        "resourceVersion": o.rv.to_string(),
        "labels": o.labels, "annotations": o.annotations,
    })
}

fn partial(key: &str, o: &Obj) -> Value {
    json!({
        "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
        "metadata": checker_meta(key, o),
    })
}

fn lease_json(ns: &str, name: &str, l: &LeaseRec) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {
            "name": name, "namespace": ns, "uid": l.uid,
            "resourceVersion": l.rv.to_string(),
            "labels": { MEMBER_LABEL: "true" },
        },
        "spec": { "holderIdentity": l.holder, "leaseDurationSeconds": 10 },
    })
}

fn event_line(kind: &str, object: Value) -> Bytes {
    let mut v = serde_json::to_vec(&json!({ "type": kind, "object": object })).expect("json");
    v.push(b'\n');
    Bytes::from(v)
}

/// Applies a merge patch's labels and annotations (null removes).
fn merge(map: &mut BTreeMap<String, String>, patch: Option<&Value>) {
    let Some(Value::Object(p)) = patch else {
        return;
    };
    for (k, v) in p {
        match v {
            Value::String(s) => {
                map.insert(k.clone(), s.clone());
            }
            _ => {
                map.remove(k);
            }
        }
    }
}

impl Store {
    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    /// Changes a checker (already fenced), keeps the tally, publishes the
    /// event, and queues the acknowledgement its owner now owes.
    fn change(&mut self, key: &str, f: impl FnOnce(&mut Obj)) -> Option<Value> {
        let rv = self.next_rv();
        let o = self.checkers.get_mut(key)?;
        let (owner_before, drained_before) = (o.owner().to_string(), o.drained());
        f(o);
        o.rv = rv;
        let (owner, drained) = (o.owner().to_string(), o.drained());
        let ack =
            (drained && o.annotations.contains_key(DRAIN_EPOCH_ANNOTATION)).then(|| owner.clone());
        let object = partial(key, o);
        let moved = owner != owner_before;
        if moved {
            *self.held.entry(owner_before).or_default() -= 1;
            *self.held.entry(owner.clone()).or_default() += 1;
            self.counts.owner_changes += 1;
        }
        match (drained_before, drained) {
            (false, true) => self.drains += 1,
            (true, false) => self.drains -= 1,
            _ => {}
        }
        self.counts.peak_drains = self.counts.peak_drains.max(self.drains);
        if moved || drained != drained_before {
            self.counts.last_change = Some(Instant::now());
        }
        self.checker_feed
            .publish(rv, event_line("MODIFIED", object.clone()));
        if let Some(to) = ack.and_then(|o| self.acks.get(&o))
            && to.send(key.to_string()).is_err()
        {
            self.acks.remove(&owner);
        }
        Some(object)
    }
}

impl FakeApi {
    /// `checkers` keys ("namespace/name"), unassigned.
    pub fn new(namespace: &str, keys: impl Iterator<Item = String>, limits: Limits) -> Arc<Self> {
        let mut rv = 0;
        let checkers: BTreeMap<String, Obj> = keys
            .map(|k| {
                rv += 1;
                let o = Obj {
                    rv,
                    labels: BTreeMap::new(),
                    annotations: BTreeMap::new(),
                };
                (k, o)
            })
            .collect();
        let held = HashMap::from([(String::new(), checkers.len())]);
        Arc::new(FakeApi {
            store: Mutex::new(Store {
                rv,
                namespace: namespace.to_string(),
                checkers,
                leases: BTreeMap::new(),
                checker_feed: Feed::default(),
                lease_feed: Feed::default(),
                held,
                drains: 0,
                counts: Counts::default(),
                acks: HashMap::new(),
            }),
            bucket: Mutex::new(Bucket {
                tokens: 0.0,
                at: Instant::now(),
            }),
            limits,
            rng: Mutex::new(0x9e37_79b9_7f4a_7c15),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A uniform draw in [0, 1).
    pub fn random(&self) -> f64 {
        let mut s = self.rng.lock().unwrap_or_else(|p| p.into_inner());
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        (*s >> 11) as f64 / (1u64 << 53) as f64
    }

    async fn latency(&self) {
        let l = self.limits.latency.mul_f64(0.5 + self.random());
        if !l.is_zero() {
            tokio::time::sleep(l).await;
        }
    }

    /// Takes a token, waiting up to [`QUEUE_WAIT`]; false: shed.
    async fn admit(&self) -> bool {
        let Some(rate) = self.limits.rate else {
            return true;
        };
        let deadline = Instant::now() + QUEUE_WAIT;
        loop {
            let wait = {
                let mut b = self.bucket.lock().unwrap_or_else(|p| p.into_inner());
                let now = Instant::now();
                // A burst of a tenth of a second's writes, as a bucket of APF seats.
                let burst = (rate / 10.0).max(1.0);
                b.tokens = (b.tokens + (now - b.at).as_secs_f64() * rate).min(burst);
                b.at = now;
                if b.tokens >= 1.0 {
                    b.tokens -= 1.0;
                    return true;
                }
                Duration::from_secs_f64((1.0 - b.tokens) / rate)
            };
            if Instant::now() + wait > deadline {
                self.lock().counts.shed += 1;
                return false;
            }
            tokio::time::sleep(wait.mul_f64(1.0 + self.random())).await;
        }
    }

    /// Adds member Leases (holder names); returns their acknowledgement queues.
    pub fn join(&self, holders: &[String]) -> Vec<(String, mpsc::UnboundedReceiver<String>)> {
        let mut s = self.lock();
        let mut queues = Vec::new();
        for h in holders {
            let rv = s.next_rv();
            let name = format!("webchecker-member-{h}");
            let l = LeaseRec {
                holder: h.clone(),
                uid: format!("uid-{h}-{rv}"),
                rv,
            };
            let line = event_line("ADDED", lease_json(&s.namespace, &name, &l));
            s.lease_feed.publish(rv, line);
            s.leases.insert(name, l);
            let (tx, rx) = mpsc::unbounded_channel();
            s.acks.insert(h.clone(), tx);
            queues.push((h.clone(), rx));
        }
        queues
    }

    /// Releases member Leases (graceful shutdown, all at one moment): their
    /// holders stop.
    pub fn leave(&self, holders: &[String]) {
        let mut s = self.lock();
        let mut deleted = Vec::new();
        for h in holders {
            let name = format!("webchecker-member-{h}");
            if let Some(l) = s.leases.remove(&name) {
                let rv = s.next_rv();
                let mut v = lease_json(&s.namespace, &name, &l);
                v["metadata"]["resourceVersion"] = json!(rv.to_string());
                deleted.push((rv, event_line("DELETED", v)));
            }
            s.acks.remove(h);
        }
        s.lease_feed.publish_together(deleted);
    }

    /// Renews one member's Lease (a new resourceVersion, as a renewal writes).
    pub fn renew(&self, holder: &str) {
        let mut s = self.lock();
        let name = format!("webchecker-member-{holder}");
        let rv = s.next_rv();
        let ns = s.namespace.clone();
        if let Some(l) = s.leases.get_mut(&name) {
            l.rv = rv;
            let line = event_line("MODIFIED", lease_json(&ns, &name, l));
            s.lease_feed.publish(rv, line);
        }
    }

    pub fn is_member(&self, holder: &str) -> bool {
        self.lock().acks.contains_key(holder)
    }

    /// Settled: no drain, every checker on a member, each member within
    /// floor(M/N)..=ceil(M/N).
    pub fn settled(&self) -> bool {
        let s = self.lock();
        let members: BTreeSet<&str> = s.leases.values().map(|l| l.holder.as_str()).collect();
        let (m, n) = (s.checkers.len(), members.len());
        if s.drains > 0 || n == 0 {
            return false;
        }
        let (lo, hi) = (m / n, m.div_ceil(n));
        members.iter().all(|h| {
            let c = s.held.get(*h).copied().unwrap_or(0);
            (lo..=hi).contains(&c)
        })
    }

    /// Checkers per member name, members only.
    pub fn loads(&self) -> BTreeMap<String, usize> {
        let s = self.lock();
        s.leases
            .values()
            .map(|l| {
                (
                    l.holder.clone(),
                    s.held.get(&l.holder).copied().unwrap_or(0),
                )
            })
            .collect()
    }

    pub fn drains(&self) -> usize {
        self.lock().drains
    }

    pub fn take_counts(&self) -> Counts {
        let mut s = self.lock();
        let peak = s.drains;
        let c = std::mem::take(&mut s.counts);
        s.counts.peak_drains = peak;
        c
    }

    /// The old owner's acknowledgement of a drain: the target becomes the
    /// owner, with the drain's epoch, in one write. `Ok(false)`: nothing to
    /// acknowledge any more (withdrawn or redirected, or no longer ours);
    /// `Err(())`: shed, try again later.
    pub async fn acknowledge(&self, key: &str, me: &str) -> Result<bool, ()> {
        if !self.admit().await {
            return Err(());
        }
        self.latency().await;
        let mut s = self.lock();
        let Some(o) = s.checkers.get(key) else {
            return Ok(false);
        };
        let (Some(to), Some(epoch)) = (
            o.annotations.get(DRAIN_ANNOTATION).cloned(),
            o.annotations.get(DRAIN_EPOCH_ANNOTATION).cloned(),
        ) else {
            return Ok(false);
        };
        if o.owner() != me {
            return Ok(false);
        }
        s.counts.acks += 1;
        s.change(key, |o| {
            o.labels.insert(OWNER_LABEL.into(), to);
            o.annotations.insert(EPOCH_ANNOTATION.into(), epoch);
            o.annotations.remove(DRAIN_ANNOTATION);
            o.annotations.remove(DRAIN_EPOCH_ANNOTATION);
            o.annotations
                .insert(HANDED_OVER_FROM_ANNOTATION.into(), me.to_string());
        });
        Ok(true)
    }

    /// Serves one request of kube's client.
    pub async fn handle(self: Arc<Self>, req: Request<kube::client::Body>) -> Response<Body> {
        let path = req.uri().path().to_string();
        let method = req.method().clone();
        // A watch, and from which resourceVersion.
        let watch = query(&req, "watch")
            .is_some_and(|v| v == "true" || v == "1")
            .then(|| {
                query(&req, "resourceVersion")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0)
            });
        if let Some(rest) = path.strip_prefix(CHECKERS_PATH) {
            let parts: Vec<&str> = rest.trim_start_matches('/').split('/').collect();
            return match (method.as_str(), parts.as_slice()) {
                ("GET", ["webcheckers"]) => self.list_or_watch(watch, false).await,
                ("PATCH", ["namespaces", ns, "webcheckers", name]) => {
                    let key = format!("{ns}/{name}");
                    let body = match req.into_body().collect().await {
                        Ok(b) => b.to_bytes(),
                        Err(_) => return status(400, "BadRequest"),
                    };
                    self.patch(&key, &body).await
                }
                _ => status(404, "NotFound"),
            };
        }
        if let Some(rest) = path.strip_prefix(LEASES_PATH) {
            let parts: Vec<&str> = rest.split('/').collect();
            return match (method.as_str(), parts.as_slice()) {
                ("GET", [_, "leases"]) => self.list_or_watch(watch, true).await,
                ("GET", [_, "leases", name]) => {
                    self.latency().await;
                    let s = self.lock();
                    match s.leases.get(*name) {
                        Some(l) => resp(200, full(&lease_json(&s.namespace, name, l))),
                        None => status(404, "NotFound"),
                    }
                }
                ("DELETE", [_, "leases", name]) => {
                    self.latency().await;
                    let holder = self.lock().leases.get(*name).map(|l| l.holder.clone());
                    match holder {
                        Some(h) => {
                            self.leave(&[h]);
                            resp(200, full(&json!({"kind": "Status", "status": "Success"})))
                        }
                        None => status(404, "NotFound"),
                    }
                }
                _ => status(404, "NotFound"),
            };
        }
        status(404, "NotFound")
    }

    async fn patch(&self, key: &str, body: &[u8]) -> Response<Body> {
        let Ok(p) = serde_json::from_slice::<Value>(body) else {
            return status(400, "BadRequest");
        };
        if !self.admit().await {
            return status(429, "TooManyRequests");
        }
        self.latency().await;
        let mut s = self.lock();
        s.counts.sharder_writes += 1;
        let Some(o) = s.checkers.get(key) else {
            return status(404, "NotFound");
        };
        let meta = &p["metadata"];
        if let Some(want) = meta["resourceVersion"].as_str()
            && want != o.rv.to_string()
        {
            s.counts.conflicts += 1;
            return status(409, "Conflict");
        }
        let object = s.change(key, |o| {
            merge(&mut o.labels, meta.get("labels"));
            merge(&mut o.annotations, meta.get("annotations"));
        });
        match object {
            Some(mut v) => {
                v["apiVersion"] = json!("test.network.io/v1alpha1");
                v["kind"] = json!("WebChecker");
                resp(200, full(&v))
            }
            None => status(404, "NotFound"),
        }
    }

    async fn list_or_watch(&self, watch: Option<u64>, leases: bool) -> Response<Body> {
        let Some(from) = watch else {
            self.latency().await;
            return resp(200, full(&self.list(leases)));
        };
        let rx = {
            let mut s = self.lock();
            let feed = if leases {
                &mut s.lease_feed
            } else {
                &mut s.checker_feed
            };
            feed.subscribe(from)
        };
        let Some(rx) = rx else {
            let gone = json!({
                "type": "ERROR",
                "object": { "kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "reason": "Expired", "code": 410, "message": "too old resource version" },
            });
            return resp(200, full(&gone));
        };
        let lines = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv()
                .await
                .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
        });
        resp(200, StreamBody::new(lines.boxed()).boxed_unsync())
    }

    /// One page with everything (no `continue`): a consistent snapshot.
    fn list(&self, leases: bool) -> Value {
        let s = self.lock();
        let rv = s.rv.to_string();
        if leases {
            let items: Vec<Value> = s
                .leases
                .iter()
                .map(|(name, l)| lease_json(&s.namespace, name, l))
                .collect();
            return json!({
                "apiVersion": "coordination.k8s.io/v1", "kind": "LeaseList",
                "metadata": { "resourceVersion": rv }, "items": items,
            });
        }
        let items: Vec<Value> = s.checkers.iter().map(|(k, o)| partial(k, o)).collect();
        json!({
            "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
            "metadata": { "resourceVersion": rv }, "items": items,
        })
    }
}
