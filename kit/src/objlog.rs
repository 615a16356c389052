//! The oracle's view of the objects: every WebChecker and every membership
//! Lease of a namespace, every change in order: when the test saw it, its
//! resourceVersion, the owner label, epoch and drain annotations, and the
//! status (with the replica that wrote it). Tests can then check every write,
//! not only the last one.
//!
//! Two sources feed it. `ObjectLog::start` watches through the API server
//! (straight, no fault proxy): when that watch must re-list (410 Gone after
//! a compaction or an API server restart), the changes in between are lost;
//! such a gap is recorded, and the list's items come in as `Listed`
//! baselines rather than changes. `ObjectLog::from_etcd` (etcdlog.rs) reads
//! etcd's own history and has a gap only where etcd compacted what it had
//! not read yet.
//!
//! resourceVersions of one etcd are revisions, comparable across kinds: a
//! status write and a Lease deletion can be ordered exactly.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::core::DynamicObject;
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use webchecker::api::MEMBER_LABEL;
use webchecker::assignment::{
    DRAIN_ANNOTATION, EPOCH_ANNOTATION, HANDED_OVER_FROM_ANNOTATION, OWNER_LABEL,
};

/// The kube-apiserver flag that stores every object as JSON in etcd, where
/// [`ObjectLog::from_etcd`] reads them (Leases are protobuf otherwise).
pub const JSON_STORAGE: &str = "--storage-media-type=application/json";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecKind {
    Added,
    Modified,
    Deleted,
    /// Seen in a (re-)list: a baseline, not a change in order.
    Listed,
}

/// One version of one WebChecker.
#[derive(Clone, Debug)]
pub struct ObjRec {
    pub at: Instant,
    pub rv: u64,
    pub kind: RecKind,
    pub name: String,
    pub generation: Option<i64>,
    pub owner: Option<String>,
    pub epoch: Option<String>,
    pub drain: Option<String>,
    /// The replica whose drain acknowledgement assigned the current owner
    /// (the sharder's own assignments remove it).
    pub handed_over_from: Option<String>,
    /// `status.owner`: the replica that wrote the status.
    pub status_owner: Option<String>,
    pub observed_generation: Option<i64>,
    /// The whole status, serialized ("" when none).
    pub status: String,
}

impl ObjRec {
    /// Assigned, not draining: (owner, epoch).
    pub fn assignment(&self) -> Option<(&str, &str)> {
        match (&self.owner, &self.epoch, &self.drain) {
            (Some(o), Some(e), None) => Some((o, e)),
            _ => None,
        }
    }
}

/// One version of one membership Lease.
#[derive(Clone, Debug)]
pub struct LeaseRec {
    pub at: Instant,
    pub rv: u64,
    pub kind: RecKind,
    pub name: String,
    pub holder: Option<String>,
    pub uid: String,
    /// A deletion inferred from a re-list (the Lease was gone): its rv is the
    /// list's, an upper bound.
    pub inferred: bool,
}

/// A stretch of history the watch did not see (it re-listed).
#[derive(Clone, Debug)]
pub struct Gap {
    pub at: Instant,
    pub what: &'static str,
    /// Last resourceVersion seen before the gap, and the list's.
    pub after_rv: u64,
    pub list_rv: u64,
}

#[derive(Default)]
pub struct LogState {
    pub objs: Vec<ObjRec>,
    pub leases: Vec<LeaseRec>,
    pub gaps: Vec<Gap>,
    pub watch_errors: Vec<(Instant, &'static str, String)>,
    /// Latest version of every WebChecker that exists.
    pub current: BTreeMap<String, ObjRec>,
    /// Latest version of every membership Lease that exists, by name.
    pub leases_now: BTreeMap<String, LeaseRec>,
    last_rv: HashMap<&'static str, u64>,
}

impl LogState {
    /// Current members: holder -> Lease UID.
    pub fn members(&self) -> BTreeMap<String, String> {
        self.leases_now
            .values()
            .filter_map(|l| Some((l.holder.clone()?, l.uid.clone())))
            .collect()
    }

    /// Stretches in which the checker watch was blind: from each error to
    /// the next version it delivered (or `now`), merged.
    pub fn blind_periods(&self, now: Instant) -> Vec<(Instant, Instant)> {
        let mut out: Vec<(Instant, Instant)> = Vec::new();
        for (at, what, _) in &self.watch_errors {
            if *what != "checkers" {
                continue;
            }
            let end = self
                .objs
                .iter()
                .map(|o| o.at)
                .filter(|t| t >= at)
                .min()
                .unwrap_or(now);
            match out.last_mut() {
                Some((_, e)) if *at <= *e => *e = (*e).max(end),
                _ => out.push((*at, end)),
            }
        }
        out
    }

    /// Is this checker assigned to a current member under that member's
    /// current Lease, with no drain in progress?
    pub fn validly_owned(&self, o: &ObjRec) -> bool {
        let members = self.members();
        o.assignment()
            .is_some_and(|(owner, epoch)| members.get(owner).map(String::as_str) == Some(epoch))
    }
}

pub struct ObjectLog {
    state: Arc<Mutex<LogState>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

fn rv_of(meta: &kube::core::ObjectMeta) -> u64 {
    meta.resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn obj_rec(o: &DynamicObject, kind: RecKind, at: Instant) -> ObjRec {
    let labels = o.metadata.labels.as_ref();
    let ann = o.metadata.annotations.as_ref();
    let status = o.data.get("status");
    ObjRec {
        at,
        rv: rv_of(&o.metadata),
        kind,
        name: o.metadata.name.clone().unwrap_or_default(),
        generation: o.metadata.generation,
        owner: labels.and_then(|l| l.get(OWNER_LABEL)).cloned(),
        epoch: ann.and_then(|a| a.get(EPOCH_ANNOTATION)).cloned(),
        drain: ann.and_then(|a| a.get(DRAIN_ANNOTATION)).cloned(),
        handed_over_from: ann
            .and_then(|a| a.get(HANDED_OVER_FROM_ANNOTATION))
            .cloned(),
        status_owner: status
            .and_then(|s| s.get("owner"))
            .and_then(|v| v.as_str())
            .map(String::from),
        observed_generation: status
            .and_then(|s| s.get("observedGeneration"))
            .and_then(|v| v.as_i64()),
        status: status.map(|s| s.to_string()).unwrap_or_default(),
    }
}

fn lease_rec(l: &Lease, kind: RecKind, at: Instant) -> LeaseRec {
    LeaseRec {
        at,
        rv: rv_of(&l.metadata),
        kind,
        name: l.metadata.name.clone().unwrap_or_default(),
        holder: l.spec.as_ref().and_then(|s| s.holder_identity.clone()),
        uid: l.metadata.uid.clone().unwrap_or_default(),
        inferred: false,
    }
}

/// A kind of object the log records, and how: the API watch and the etcd
/// source (etcdlog.rs) feed the log through these alone.
pub(crate) trait Logged:
    Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static
{
    /// The key of `LogState::last_rv` and of gaps.
    const WHAT: &'static str;
    /// The API watch's label selector; `kept` is the same test on an object.
    fn selector() -> Option<String>;
    fn kept(&self) -> bool;
    /// A (re-)list at `list_rv`: every object that exists then.
    fn listed(s: &mut LogState, at: Instant, items: &[Self], list_rv: u64);
    /// One change, in order.
    fn changed(s: &mut LogState, at: Instant, kind: RecKind, o: &Self);
}

impl LogState {
    /// After the first list of `what`, a re-list is a gap: the changes since
    /// the last version seen are lost.
    fn note_relist(&mut self, what: &'static str, at: Instant, list_rv: u64) {
        if let Some(after_rv) = self.last_rv.insert(what, list_rv) {
            self.gaps.push(Gap {
                at,
                what,
                after_rv,
                list_rv,
            });
        }
    }

    /// A change of `what` at `rv` that could not be read: the log is blind
    /// to it, a gap.
    pub(crate) fn blind(&mut self, at: Instant, what: &'static str, rv: u64, why: String) {
        let after_rv = self.last_rv.get(what).copied().unwrap_or(0);
        self.gaps.push(Gap {
            at,
            what,
            after_rv,
            list_rv: rv,
        });
        self.watch_error(at, what, why);
    }

    pub(crate) fn watch_error(&mut self, at: Instant, what: &'static str, e: String) {
        self.watch_errors.push((at, what, e));
    }

    /// Has `what` had its first list?
    pub(crate) fn listed_once(&self, what: &str) -> bool {
        self.last_rv.contains_key(what)
    }
}

impl Logged for DynamicObject {
    const WHAT: &'static str = "checkers";

    fn selector() -> Option<String> {
        None
    }

    fn kept(&self) -> bool {
        true
    }

    fn listed(s: &mut LogState, at: Instant, items: &[Self], list_rv: u64) {
        s.note_relist(Self::WHAT, at, list_rv);
        let listed: BTreeMap<String, ObjRec> = items
            .iter()
            .map(|o| {
                let r = obj_rec(o, RecKind::Listed, at);
                (r.name.clone(), r)
            })
            .collect();
        for (name, old) in std::mem::take(&mut s.current) {
            if !listed.contains_key(&name) {
                let mut r = old.clone();
                r.kind = RecKind::Deleted;
                r.rv = list_rv;
                r.at = at;
                s.objs.push(r);
            }
        }
        s.objs.extend(listed.values().cloned());
        s.current = listed;
    }

    fn changed(s: &mut LogState, at: Instant, kind: RecKind, o: &Self) {
        let r = obj_rec(o, kind, at);
        s.last_rv.insert(Self::WHAT, r.rv);
        if kind == RecKind::Deleted {
            s.current.remove(&r.name);
        } else {
            s.current.insert(r.name.clone(), r.clone());
        }
        s.objs.push(r);
    }
}

impl Logged for Lease {
    const WHAT: &'static str = "leases";

    fn selector() -> Option<String> {
        Some(format!("{MEMBER_LABEL}=true"))
    }

    fn kept(&self) -> bool {
        self.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(MEMBER_LABEL))
            .is_some_and(|v| v == "true")
    }

    fn listed(s: &mut LogState, at: Instant, items: &[Self], list_rv: u64) {
        s.note_relist(Self::WHAT, at, list_rv);
        let listed: BTreeMap<String, LeaseRec> = items
            .iter()
            .map(|l| {
                let r = lease_rec(l, RecKind::Listed, at);
                (r.name.clone(), r)
            })
            .collect();
        for (name, old) in std::mem::take(&mut s.leases_now) {
            // Gone, or replaced by a Lease of the same name.
            if listed.get(&name).is_none_or(|l| l.uid != old.uid) {
                let mut r = old.clone();
                r.kind = RecKind::Deleted;
                r.rv = list_rv;
                r.at = at;
                r.inferred = true;
                s.leases.push(r);
            }
        }
        s.leases.extend(listed.values().cloned());
        s.leases_now = listed;
    }

    fn changed(s: &mut LogState, at: Instant, kind: RecKind, l: &Self) {
        let r = lease_rec(l, kind, at);
        s.last_rv.insert(Self::WHAT, r.rv);
        if kind == RecKind::Deleted {
            s.leases_now.remove(&r.name);
        } else {
            s.leases_now.insert(r.name.clone(), r.clone());
        }
        s.leases.push(r);
    }
}

/// How long a list or the start of a watch may take.
const CALL: Duration = Duration::from_secs(15);

/// List, then watch from the list's resourceVersion; resume after errors from
/// the last version seen; re-list only on 410 Gone. Retries are bounded in
/// time (a few hundred ms), never given up.
async fn watch_loop<K: Logged>(api: Api<K>, state: Arc<Mutex<LogState>>) {
    let error = |e: String| note_error::<K>(&state, e);
    let mut resume: Option<String> = None;
    loop {
        let rv = match resume.clone() {
            Some(rv) => rv,
            None => match list(&api, &state).await {
                Some(rv) => rv,
                None => continue,
            },
        };
        resume = Some(rv.clone());
        let mut wp = WatchParams::default().timeout(50);
        if let Some(l) = K::selector() {
            wp = wp.labels(&l);
        }
        let stream = match tokio::time::timeout(CALL, api.watch(&wp, &rv)).await {
            Ok(Ok(s)) => s,
            Ok(Err(kube::Error::Api(s))) if s.code == 410 => {
                error("watch: 410 Gone".into());
                resume = None;
                continue;
            }
            Ok(Err(e)) => {
                error(format!("watch: {e}"));
                tokio::time::sleep(Duration::from_millis(250)).await;
                continue;
            }
            Err(_) => {
                error("watch: no answer in 15s".into());
                continue;
            }
        };
        follow_watch(stream, &state, &mut resume).await;
    }
}

fn note_error<K: Logged>(state: &Mutex<LogState>, e: String) {
    state
        .lock()
        .unwrap()
        .watch_error(Instant::now(), K::WHAT, e)
}

/// A (re-)list of `K`, recorded: the resourceVersion to watch from, or
/// `None` after an error (noted; the caller lists again).
async fn list<K: Logged>(api: &Api<K>, state: &Mutex<LogState>) -> Option<String> {
    let mut lp = ListParams::default();
    if let Some(l) = K::selector() {
        lp = lp.labels(&l);
    }
    match tokio::time::timeout(CALL, api.list(&lp)).await {
        Ok(Ok(list)) => {
            let rv = list.metadata.resource_version.clone().unwrap_or_default();
            let list_rv = rv.parse().unwrap_or(0);
            K::listed(
                &mut state.lock().unwrap(),
                Instant::now(),
                &list.items,
                list_rv,
            );
            Some(rv)
        }
        Ok(Err(e)) => {
            note_error::<K>(state, format!("list: {e}"));
            tokio::time::sleep(Duration::from_millis(250)).await;
            None
        }
        Err(_) => {
            note_error::<K>(state, "list: no answer in 15s".into());
            None
        }
    }
}

/// Records the changes one watch delivers until it ends, fails or falls
/// silent; `resume` follows the last version seen (`None` after 410 Gone:
/// list again).
async fn follow_watch<K: Logged>(
    stream: impl futures::Stream<Item = kube::Result<WatchEvent<K>>>,
    state: &Mutex<LogState>,
    resume: &mut Option<String>,
) {
    let error = |e: String| note_error::<K>(state, e);
    let mut stream = std::pin::pin!(stream);
    loop {
        // The server ends a watch after `timeout` (50 s) and sends
        // bookmarks meanwhile; 70 s of silence means a dead connection.
        let ev = match tokio::time::timeout(Duration::from_secs(70), stream.next()).await {
            Ok(Some(ev)) => ev,
            Ok(None) => break,
            Err(_) => {
                error("watch: silent for 70s".into());
                break;
            }
        };
        let (kind, obj) = match ev {
            Ok(WatchEvent::Added(o)) => (RecKind::Added, o),
            Ok(WatchEvent::Modified(o)) => (RecKind::Modified, o),
            Ok(WatchEvent::Deleted(o)) => (RecKind::Deleted, o),
            Ok(WatchEvent::Bookmark(b)) => {
                *resume = Some(b.metadata.resource_version);
                continue;
            }
            Ok(WatchEvent::Error(s)) => {
                error(format!("watch event: {} {}", s.code, s.message));
                if s.code == 410 {
                    *resume = None;
                }
                break;
            }
            Err(e) => {
                error(format!("watch stream: {e}"));
                tokio::time::sleep(Duration::from_millis(100)).await;
                break;
            }
        };
        if let Some(rv) = obj.meta().resource_version.clone() {
            *resume = Some(rv);
        }
        K::changed(&mut state.lock().unwrap(), Instant::now(), kind, &obj);
    }
}

impl ObjectLog {
    /// Starts watching the WebCheckers and membership Leases of `namespace`,
    /// and waits (up to 30 s) for both first lists.
    pub async fn start(client: Client, namespace: &str) -> ObjectLog {
        let state = Arc::new(Mutex::new(LogState::default()));
        let checkers = crate::checkers_api(&client, namespace);
        let leases: Api<Lease> = Api::namespaced(client, namespace);
        let tasks = vec![
            tokio::spawn(watch_loop(checkers, state.clone())),
            tokio::spawn(watch_loop(leases, state.clone())),
        ];
        ObjectLog::started(state, tasks, "the object log's first lists").await
    }

    /// The log fed by `tasks`, once both kinds had their first list (up to
    /// 30 s).
    pub(crate) async fn started(
        state: Arc<Mutex<LogState>>,
        tasks: Vec<tokio::task::JoinHandle<()>>,
        what: &str,
    ) -> ObjectLog {
        let log = ObjectLog { state, tasks };
        super::eventually(Duration::from_secs(30), what, || async {
            let s = log.state.lock().unwrap();
            (s.listed_once(DynamicObject::WHAT) && s.listed_once(Lease::WHAT)).then_some(())
        })
        .await;
        log
    }

    /// Runs `f` on the log under its lock (keep it short: the watch waits).
    pub fn with<R>(&self, f: impl FnOnce(&LogState) -> R) -> R {
        f(&self.state.lock().unwrap())
    }
}

impl Drop for ObjectLog {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}
