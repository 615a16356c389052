//! The object log read from etcd against the API server's watch, across
//! compactions and restarts, on a control plane of its own (~40 s).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::PostParams;
use webchecker::api::MEMBER_LABEL;
use webchecker_kit::faults::ControlPlane;
use webchecker_kit::objlog::{JSON_STORAGE, LeaseRec, LogState, ObjectLog, RecKind};
use webchecker_kit::{Cluster, checker_object, checkers_api, eventually};

/// A change the test made, as the object log must have it: the kind ("checkers"
/// or "leases"), the name, its resourceVersion (within `lo..=hi`: a deletion's
/// is known only between the last write and the next read) and the record kind.
#[derive(Clone, Debug, PartialEq)]
struct Made {
    what: &'static str,
    name: String,
    lo: u64,
    hi: u64,
    kind: RecKind,
}

impl Made {
    fn at(what: &'static str, name: &str, rv: u64, kind: RecKind) -> Made {
        Made {
            what,
            name: name.into(),
            lo: rv,
            hi: rv,
            kind,
        }
    }

    /// Is `g` the record of this change?
    fn recorded_as(&self, g: &Record) -> bool {
        g.0 == self.what
            && g.1 == self.name
            && (self.lo..=self.hi).contains(&g.2)
            && g.3 == self.kind
    }
}

/// A record of a log: the kind ("checkers" or "leases"), the name, its
/// resourceVersion and the record kind.
type Record = (&'static str, String, u64, RecKind);

fn rv_of(meta: &kube::core::ObjectMeta) -> u64 {
    meta.resource_version.as_deref().unwrap().parse().unwrap()
}

/// Sets annotation `step` to `n` (a merge patch, so a retry after an answer
/// lost to a restart writes nothing again), through the errors of a control
/// plane that is coming back; the change it made.
async fn step<K>(api: &Api<K>, what: &'static str, name: &str, n: u32) -> Made
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    use kube::api::{Patch, PatchParams};
    let patch = serde_json::json!({"metadata": {"annotations": {"step": n.to_string()}}});
    let done = |o: &K| {
        let ann = o.meta().annotations.as_ref();
        ann.and_then(|a| a.get("step")) == Some(&n.to_string())
    };
    let rv = eventually(
        Duration::from_secs(90),
        &format!("step {n} of {name}"),
        || async {
            match api
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(o) => Some(rv_of(o.meta())),
                Err(_) => {
                    let o = api.get(name).await.ok()?;
                    done(&o).then(|| rv_of(o.meta()))
                }
            }
        },
    )
    .await;
    Made::at(what, name, rv, RecKind::Modified)
}

/// Creates `obj` through the errors of a control plane that is coming back;
/// the change it made and the object's UID.
async fn create<K>(api: &Api<K>, what: &'static str, obj: &K) -> (Made, String)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let name = obj.meta().name.clone().unwrap();
    let (rv, uid) = eventually(
        Duration::from_secs(90),
        &format!("create {name}"),
        || async {
            let o = match api.create(&PostParams::default(), obj).await {
                Ok(o) => o,
                Err(_) => api.get(&name).await.ok()?,
            };
            Some((rv_of(o.meta()), o.meta().uid.clone().unwrap()))
        },
    )
    .await;
    (Made::at(what, &name, rv, RecKind::Added), uid)
}

/// Deletes `name` (a precondition on its last version, so nothing else came
/// in between); its deletion's resourceVersion is above that version and at
/// most the revision of a list made afterwards.
async fn delete<K>(api: &Api<K>, what: &'static str, name: &str, last: u64) -> Made
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    use kube::api::{DeleteParams, ListParams, Preconditions};
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            resource_version: Some(last.to_string()),
            uid: None,
        }),
        ..DeleteParams::default()
    };
    api.delete(name, &dp).await.unwrap();
    let list = api.list(&ListParams::default()).await.unwrap();
    let hi = list.metadata.resource_version.unwrap().parse().unwrap();
    Made {
        what,
        name: name.into(),
        lo: last + 1,
        hi,
        kind: RecKind::Deleted,
    }
}

/// What a log recorded, in its order.
fn recorded(s: &LogState) -> Vec<Record> {
    let objs = s
        .objs
        .iter()
        .map(|o| ("checkers", o.name.clone(), o.rv, o.kind));
    let leases = s
        .leases
        .iter()
        .map(|l| ("leases", l.name.clone(), l.rv, l.kind));
    objs.chain(leases).collect()
}

fn a_member_lease(name: &str, holder: &str) -> Lease {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {MEMBER_LABEL: "true"}},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 3},
    }))
    .unwrap()
}

/// The object log read from etcd sees every write and deletion, in order,
/// across compactions, an etcd restart and an API server restart, where the
/// API server's watch has to re-list and loses what happened in between.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_etcd_object_log_sees_every_change_across_restarts_and_compactions() {
    let cluster = Cluster::start_with("etcdlog", JSON_STORAGE);
    let cp = ControlPlane::new(&cluster);
    let ns = cluster.namespace("etcdlog");
    let client = cluster.client().await;
    let from_api = ObjectLog::start(client.clone(), &ns).await;
    let from_etcd = ObjectLog::from_etcd(&cluster, &ns).await;
    let (made, lease_uid) = changes_across_faults(&cp, &client, &ns).await;
    the_etcd_log_has_every_change(&from_etcd, &made, &lease_uid).await;
    the_api_log_relisted(&from_api, &made).await;
    drop((from_api, from_etcd, cp));
    cluster.down();
}

/// Writes, creations and deletions of checkers and a membership Lease around
/// two compactions, an etcd restart and an API server restart: the changes
/// made, sorted by kind and resourceVersion, and the Lease's UID.
async fn changes_across_faults(
    cp: &ControlPlane,
    client: &kube::Client,
    ns: &str,
) -> (Vec<Made>, String) {
    let checkers = checkers_api(client, ns);
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    let checker = |n: &str| checker_object(n, "http://127.0.0.1:9", 5, serde_json::json!({}));
    let mut made = vec![
        create(&checkers, "checkers", &checker("a")).await.0,
        create(&checkers, "checkers", &checker("b")).await.0,
    ];
    let (m, uid) = create(&leases, "leases", &a_member_lease("m", "r0")).await;
    made.push(m);
    made.push(step(&checkers, "checkers", "a", 1).await);
    made.push(step(&leases, "leases", "m", 1).await);

    cp.compact().await.unwrap();
    made.push(step(&checkers, "checkers", "b", 2).await);
    made.push(step(&leases, "leases", "m", 2).await);
    made.push(create(&checkers, "checkers", &checker("c")).await.0);

    cp.restart_etcd().await.unwrap();
    made.push(step(&checkers, "checkers", "a", 3).await);
    made.push(step(&leases, "leases", "m", 3).await);

    cp.stop_apiserver().await.unwrap();
    cp.start_apiserver().await.unwrap();
    made.push(step(&checkers, "checkers", "b", 4).await);
    made.push(step(&leases, "leases", "m", 4).await);
    cp.compact().await.unwrap();
    made.push(delete(&leases, "leases", "m", made.last().unwrap().lo).await);
    made.push(step(&checkers, "checkers", "a", 5).await);
    made.push(delete(&checkers, "checkers", "a", made.last().unwrap().lo).await);
    made.push(step(&checkers, "checkers", "c", 6).await);
    made.sort_by_key(|m| (m.what, m.lo));
    (made, uid)
}

/// The etcd log, once it has the last changes: no gap, etcd's restart
/// noticed, every change made recorded exactly once, in order, and the
/// Lease's deletion under its UID.
async fn the_etcd_log_has_every_change(from_etcd: &ObjectLog, made: &[Made], lease_uid: &str) {
    let all_seen = |log: &ObjectLog| {
        log.with(|s| {
            let got = recorded(s);
            made.iter().all(|m| {
                got.iter()
                    .any(|g| g.0 == m.what && g.1 == m.name && g.2 >= m.lo && g.3 == m.kind)
            })
        })
    };
    eventually(
        Duration::from_secs(60),
        "the etcd log sees the last changes",
        || async { all_seen(from_etcd).then_some(()) },
    )
    .await;
    let (got, gaps, errors, deleted) = from_etcd.with(|s| {
        let deleted: Vec<LeaseRec> = s
            .leases
            .iter()
            .filter(|l| l.kind == RecKind::Deleted)
            .cloned()
            .collect();
        (recorded(s), s.gaps.clone(), s.watch_errors.len(), deleted)
    });
    println!(
        "etcd log: {} records, {errors} watch errors, gaps {gaps:?}",
        got.len()
    );
    for g in &got {
        println!("  {g:?}");
    }
    assert!(gaps.is_empty(), "the etcd log has gaps: {gaps:?}");
    assert!(
        errors > 0,
        "etcd's restart went unnoticed: its watch errors are none"
    );
    let mut got = got;
    got.sort_by_key(|g| g.0);
    assert_eq!(
        got.len(),
        made.len(),
        "records {got:?}\nchanges made {made:?}"
    );
    for (g, m) in got.iter().zip(made) {
        assert!(
            m.recorded_as(g),
            "recorded {g:?} where the change made was {m:?}\nrecords {got:?}"
        );
    }
    assert_eq!(deleted.len(), 1, "{deleted:?}");
    assert_eq!(
        deleted[0].uid, lease_uid,
        "the Lease's deletion names its UID"
    );
    assert!(!deleted[0].inferred, "{deleted:?}");
}

/// The API log, once it has caught up (a record of each kind at or past
/// the last change made), has re-listed and holds baselines instead.
async fn the_api_log_relisted(from_api: &ObjectLog, made: &[Made]) {
    let caught_up = |got: &[Record]| {
        made.iter()
            .all(|m| got.iter().any(|g| g.0 == m.what && g.2 >= m.lo))
    };
    let (api_got, api_gaps) = eventually(
        Duration::from_secs(60),
        "the API log's watches catch up",
        || async {
            let (got, gaps) = from_api.with(|s| (recorded(s), s.gaps.clone()));
            caught_up(&got).then_some((got, gaps))
        },
    )
    .await;
    let missed = made
        .iter()
        .filter(|m| !api_got.iter().any(|g| m.recorded_as(g)))
        .count();
    println!(
        "API log: {} records, {missed} of the {} changes missed, gaps {api_gaps:?}",
        api_got.len(),
        made.len()
    );
    assert!(
        !api_gaps.is_empty(),
        "the API server's watch re-listed nowhere: the comparison proves nothing"
    );
}
