//! The object log read from etcd's own history instead of the API server:
//! a snapshot (`/v3/kv/range`), then a watch (`/v3/watch`, etcd's JSON
//! gateway on the cluster's plain-http loopback port) of the keys of the
//! namespace's WebCheckers and Leases, with the previous value of each
//! deletion. Every revision of those keys comes in, in order, whatever
//! happens to the API server; after a dropped connection (an etcd restart,
//! a freeze) the watch resumes at the revision after the last one it heard
//! of, so nothing is lost. Only a compaction of a revision the watch had not
//! read yet loses history: that is recorded as a `Gap`, and a new snapshot
//! is taken. A caught-up watch survives compactions.
//!
//! The values must be JSON: the cluster's kube-apiserver runs with
//! `--storage-media-type=application/json` (built-in kinds such as Lease are
//! stored as protobuf otherwise). A value that cannot be read is a gap too.
//!
//! A revision is an object's resourceVersion (its `mod_revision`; a
//! deletion's is the revision of the delete), so the records are the same
//! as the API watch's.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Incoming};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::coordination::v1::Lease;
use kube::core::DynamicObject;
use serde::{Deserialize, Deserializer};
use webchecker::api::WebChecker;

use crate::Cluster;
use crate::objlog::{LogState, Logged, ObjectLog, RecKind};

/// Bound of a connection, a range call, a watch's response head.
const CALL: Duration = Duration::from_secs(10);
/// No message for this long: a dead connection. Generous: a watch hears
/// nothing while nothing changes (etcd notifies progress every ten minutes
/// by default), as during an API server outage, and a reconnection after a
/// compaction of revisions it did not see is a gap (it could not know).
/// etcd restarts close the connection at once.
const SILENCE: Duration = Duration::from_secs(180);
/// Pause before trying again after an error (an etcd restart takes seconds).
const RETRY: Duration = Duration::from_millis(200);

/// etcd's int64 fields come as JSON strings.
fn num<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    match serde_json::Value::deserialize(d)? {
        serde_json::Value::String(s) => s.parse().map_err(serde::de::Error::custom),
        serde_json::Value::Number(n) => n
            .as_u64()
            .ok_or_else(|| serde::de::Error::custom("negative revision")),
        _ => Ok(0),
    }
}

#[derive(Deserialize, Default, Clone)]
#[serde(default)]
struct Kv {
    key: String,
    #[serde(deserialize_with = "num")]
    mod_revision: u64,
    value: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Header {
    #[serde(deserialize_with = "num")]
    revision: u64,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RangeResponse {
    header: Header,
    kvs: Vec<Kv>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Event {
    /// "DELETE", or absent for a put.
    #[serde(rename = "type")]
    kind: String,
    kv: Kv,
    prev_kv: Option<Kv>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct WatchResult {
    header: Header,
    created: bool,
    canceled: bool,
    #[serde(deserialize_with = "num")]
    compact_revision: u64,
    cancel_reason: String,
    events: Vec<Event>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct WatchLine {
    result: Option<WatchResult>,
    error: Option<serde_json::Value>,
}

/// The etcd client port of a cluster (`ETCD_PORT` of its cluster.env).
fn etcd_port(dir: &Path) -> u16 {
    let env = std::fs::read_to_string(dir.join("cluster.env")).expect("cluster.env");
    env.lines()
        .find_map(|l| l.strip_prefix("ETCD_PORT="))
        .and_then(|v| v.trim_matches(|c| c == '"' || c == '\'').parse().ok())
        .expect("ETCD_PORT in cluster.env")
}

/// `key` and `range_end` (base64) of every key under `prefix`.
fn span(prefix: &str) -> (String, String) {
    let mut end = prefix.as_bytes().to_vec();
    *end.last_mut().expect("a prefix") += 1;
    (B64.encode(prefix), B64.encode(end))
}

/// Aborts the connection task when dropped.
struct Conn(tokio::task::JoinHandle<()>);

impl Drop for Conn {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// POSTs `body` to `path` on a connection of its own; the response head.
async fn post<B>(
    port: u16,
    path: &str,
    body: B,
) -> Result<(hyper::Response<Incoming>, Conn), String>
where
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let call = async {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .map_err(|e| format!("handshake: {e}"))?;
        let conn = Conn(tokio::spawn(async move {
            let _ = conn.await;
        }));
        let req = hyper::Request::post(path)
            .header(http::header::HOST, format!("127.0.0.1:{port}"))
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body)
            .expect("a request");
        let resp = send
            .send_request(req)
            .await
            .map_err(|e| format!("{path}: {e}"))?;
        if !resp.status().is_success() {
            return Err(format!("{path}: {}", resp.status()));
        }
        Ok((resp, conn))
    };
    tokio::time::timeout(CALL, call)
        .await
        .map_err(|_| format!("{path}: no answer in {CALL:?}"))?
}

/// Every key under `prefix` now: (revision, kvs).
async fn range(port: u16, prefix: &str) -> Result<(u64, Vec<Kv>), String> {
    let (key, end) = span(prefix);
    let body = serde_json::json!({ "key": key, "range_end": end }).to_string();
    let read = async {
        let (resp, _conn) = post(port, "/v3/kv/range", Full::new(Bytes::from(body))).await?;
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("range: {e}"))?
            .to_bytes();
        let r: RangeResponse = serde_json::from_slice(&bytes).map_err(|e| format!("range: {e}"))?;
        if r.header.revision == 0 {
            return Err(format!("range: {}", String::from_utf8_lossy(&bytes)));
        }
        Ok((r.header.revision, r.kvs))
    };
    tokio::time::timeout(CALL, read)
        .await
        .map_err(|_| format!("range: no answer in {CALL:?}"))?
}

/// The object stored in `kv`, with its resourceVersion set to `rv`.
fn decode<K: Logged>(kv: &Kv, rv: u64) -> Result<K, String> {
    let key = B64.decode(&kv.key).unwrap_or_default();
    let key = String::from_utf8_lossy(&key);
    let bytes = B64
        .decode(&kv.value)
        .map_err(|e| format!("{key}: value not base64: {e}"))?;
    let mut o: K = serde_json::from_slice(&bytes).map_err(|e| {
        format!("{key} at revision {rv}: not a JSON object ({e}); does the API server store JSON (--storage-media-type=application/json)?")
    })?;
    o.meta_mut().resource_version = Some(rv.to_string());
    Ok(o)
}

/// Why a watch ended.
enum Ended {
    Compacted(u64),
    Broken(String),
}

/// Follows the keys under `prefix`: snapshot, then watch, resuming after
/// every error where it stopped; a new snapshot only after a compaction of
/// revisions it had not read.
async fn follow<K: Logged>(port: u16, prefix: String, state: Arc<Mutex<LogState>>) {
    let error = |e: String| {
        state
            .lock()
            .unwrap()
            .watch_error(Instant::now(), K::WHAT, e)
    };
    // The objects that exist (and are kept), by key (base64).
    let mut known: HashMap<String, K> = HashMap::new();
    let mut next: Option<u64> = None;
    loop {
        let mut from = match next {
            Some(n) => n,
            None => match range(port, &prefix).await {
                Ok((rev, kvs)) => {
                    snapshot(&mut state.lock().unwrap(), rev, &kvs, &mut known);
                    rev + 1
                }
                Err(e) => {
                    error(e);
                    tokio::time::sleep(RETRY).await;
                    continue;
                }
            },
        };
        let ended = watch(port, &prefix, &mut from, &mut known, &state).await;
        next = Some(from);
        match ended {
            Ended::Compacted(at) => {
                error(format!(
                    "watch from revision {from}: compacted at {at}; history lost"
                ));
                next = None;
            }
            Ended::Broken(e) => {
                error(e);
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}

/// Everything under the prefix at revision `rev`.
fn snapshot<K: Logged>(s: &mut LogState, rev: u64, kvs: &[Kv], known: &mut HashMap<String, K>) {
    let at = Instant::now();
    known.clear();
    let mut items = Vec::new();
    for kv in kvs {
        match decode::<K>(kv, kv.mod_revision) {
            Ok(o) if o.kept() => {
                known.insert(kv.key.clone(), o.clone());
                items.push(o);
            }
            Ok(_) => {}
            Err(e) => s.blind(at, K::WHAT, kv.mod_revision, e),
        }
    }
    K::listed(s, at, &items, rev);
}

/// One watch connection from revision `*from`, which advances with every
/// event and progress notification; it ends only on an error. (The gateway
/// reads no more of the request once it answers, over HTTP/1.1: progress
/// cannot be asked for on the way; a watch with nothing to say is silent.)
async fn watch<K: Logged>(
    port: u16,
    prefix: &str,
    from: &mut u64,
    known: &mut HashMap<String, K>,
    state: &Mutex<LogState>,
) -> Ended {
    let (key, end) = span(prefix);
    let create = serde_json::json!({ "create_request": {
        "key": key, "range_end": end, "start_revision": from.to_string(),
        "prev_kv": true, "progress_notify": true,
    }});
    let body = Full::new(Bytes::from(format!("{create}\n")));
    let (resp, _conn) = match post(port, "/v3/watch", body).await {
        Ok(r) => r,
        Err(e) => return Ended::Broken(format!("watch: {e}")),
    };
    let mut body = resp.into_body();
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let data = match tokio::time::timeout(SILENCE, body.frame()).await {
            Err(_) => return Ended::Broken(format!("watch: silent for {SILENCE:?}")),
            Ok(None) => return Ended::Broken("watch: the stream ended".into()),
            Ok(Some(Err(e))) => return Ended::Broken(format!("watch stream: {e}")),
            Ok(Some(Ok(f))) => match f.into_data() {
                Ok(d) => d,
                Err(_) => continue,
            },
        };
        buf.extend_from_slice(&data);
        while let Some(i) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=i).collect();
            if let Err(ended) = on_line(&line, from, known, state) {
                return ended;
            }
        }
    }
}

/// One message of the watch stream.
fn on_line<K: Logged>(
    line: &[u8],
    from: &mut u64,
    known: &mut HashMap<String, K>,
    state: &Mutex<LogState>,
) -> Result<(), Ended> {
    if line.trim_ascii().is_empty() {
        return Ok(());
    }
    let msg: WatchLine = serde_json::from_slice(line).map_err(|e| {
        Ended::Broken(format!(
            "watch: unreadable message ({e}): {}",
            String::from_utf8_lossy(line)
        ))
    })?;
    let r = match (msg.result, msg.error) {
        (Some(r), _) => r,
        (None, Some(e)) => return Err(Ended::Broken(format!("watch: {e}"))),
        (None, None) => return Ok(()),
    };
    if r.canceled {
        return Err(match r.compact_revision {
            0 => Ended::Broken(format!("watch canceled: {}", r.cancel_reason)),
            c => Ended::Compacted(c),
        });
    }
    if r.created {
        return Ok(());
    }
    if r.events.is_empty() {
        // Progress: every event up to its revision was sent.
        *from = (*from).max(r.header.revision + 1);
        return Ok(());
    }
    let at = Instant::now();
    let mut s = state.lock().unwrap();
    for ev in &r.events {
        apply(&mut s, at, ev, known);
        *from = (*from).max(ev.kv.mod_revision + 1);
    }
    Ok(())
}

/// One event: a put of a kept object is an addition or a change, a put that
/// is no longer kept (a Lease that lost the membership label) and a delete
/// of a kept object are deletions.
fn apply<K: Logged>(s: &mut LogState, at: Instant, ev: &Event, known: &mut HashMap<String, K>) {
    let rv = ev.kv.mod_revision;
    let key = &ev.kv.key;
    if ev.kind == "DELETE" {
        let Some(old) = known.remove(key) else {
            return;
        };
        let mut o = match ev.prev_kv.as_ref().map(|kv| decode::<K>(kv, rv)) {
            Some(Ok(o)) => o,
            _ => old,
        };
        o.meta_mut().resource_version = Some(rv.to_string());
        K::changed(s, at, RecKind::Deleted, &o);
        return;
    }
    match decode::<K>(&ev.kv, rv) {
        Ok(o) if o.kept() => {
            let kind = match known.insert(key.clone(), o.clone()) {
                Some(_) => RecKind::Modified,
                None => RecKind::Added,
            };
            K::changed(s, at, kind, &o);
        }
        Ok(o) => {
            if known.remove(key).is_some() {
                K::changed(s, at, RecKind::Deleted, &o);
            }
        }
        Err(e) => s.blind(at, K::WHAT, rv, e),
    }
}

impl ObjectLog {
    /// The object log of the WebCheckers and membership Leases of
    /// `namespace`, read from the etcd of `cluster` (whose API server must
    /// store JSON); waits (up to 30 s) for both first snapshots.
    pub async fn from_etcd(cluster: &Cluster, namespace: &str) -> ObjectLog {
        use kube::Resource;
        let port = etcd_port(&cluster.dir);
        let state = Arc::new(Mutex::new(LogState::default()));
        let checkers = format!(
            "/registry/{}/{}/{namespace}/",
            WebChecker::group(&()),
            WebChecker::plural(&())
        );
        let leases = format!("/registry/leases/{namespace}/");
        let tasks = vec![
            tokio::spawn(follow::<DynamicObject>(port, checkers, state.clone())),
            tokio::spawn(follow::<Lease>(port, leases, state.clone())),
        ];
        ObjectLog::started(state, tasks, "the etcd object log's first snapshots").await
    }
}
