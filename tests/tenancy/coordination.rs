//! The coordination keys (docs/security.md, "Coordination keys"): the owner
//! label and the epoch, drain, drain-epoch, handed-over-from and last-probe
//! annotations are the sharder's and the owners'. A ServiceAccount that may
//! edit every WebChecker of its namespace is refused, with a message naming
//! the key, whenever it sets, changes or removes one of them (create, merge
//! patch, replace); its own labels pass. Two replicas of the release (the
//! chart's ServiceAccount) go on meanwhile: no checker changes owner, none is
//! probed by two replicas, every one keeps its cadence. Without the policy's
//! binding the same patch lands (the attack is real).

use kube::core::ObjectMeta;
use support::objlog::ObjectLog;
use support::release::Replica;
use webchecker::assignment::{
    DRAIN_ANNOTATION, EPOCH_ANNOTATION, HANDED_OVER_FROM_ANNOTATION, LAST_PROBE_ANNOTATION,
    OWNER_LABEL,
};

use super::*;

const CHECKERS: usize = 6;

/// Asserts that `res` is the coordination policy's refusal naming `key`.
fn assert_key_refused<T: std::fmt::Debug>(res: Result<T, kube::Error>, what: &str, key: &str) {
    let e = match res {
        Err(kube::Error::Api(e)) => e,
        other => panic!("{what}: expected the coordination policy's refusal, got {other:?}"),
    };
    assert_eq!(e.code, 403, "{what}: {e:?}");
    for want in [key, "only its ServiceAccount may write them"] {
        assert!(
            e.message.contains(want),
            "{what}: {want:?} not in {:?}",
            e.message
        );
    }
}

/// The owner of each checker now, from the object log.
fn owners(log: &ObjectLog, names: &[String]) -> Vec<Option<String>> {
    log.with(|s| {
        names
            .iter()
            .map(|n| s.current.get(n).and_then(|o| o.owner.clone()))
            .collect()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_operator_writes_the_coordination_keys() {
    let cluster = Cluster::shared("tenancy");
    let t0 = Instant::now();
    let release_ns = cluster.namespace("wco-coord");
    let tenant = cluster.namespace("coord");
    let release = format!("c{}", rand_suffix());
    let (_, _first) = install(cluster, &release, &release_ns, &tenant, &[]).await;
    let fullname = format!("{release}-webchecker-operator");
    let (kc, _) = service_account(cluster, &release_ns, &fullname).await;
    let mut second = Replica::spawn_as(cluster, &kc, &release_ns, &tenant, "op-coord-b");
    second.wait_ready().await;

    // The tenant's editor: every verb on WebCheckers, nothing else.
    let objects = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "editor"}},
        {"kind": "Role", "apiVersion": "rbac.authorization.k8s.io/v1",
         "metadata": {"name": "checker-editor"},
         "rules": [{"apiGroups": ["test.network.io"], "resources": ["webcheckers"],
                    "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]},
        {"kind": "RoleBinding", "apiVersion": "rbac.authorization.k8s.io/v1",
         "metadata": {"name": "checker-editor"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "checker-editor"},
         "subjects": [{"kind": "ServiceAccount", "name": "editor", "namespace": tenant}]},
    ]});
    ok(
        cluster.kubectl_stdin(&["apply", "-n", &tenant, "-f", "-"], &objects.to_string()),
        "the tenant's editor",
    );
    let (_, editor) = service_account(cluster, &tenant, "editor").await;
    let as_editor: Api<WebChecker> = Api::namespaced(editor, &tenant);
    let pp = PostParams::default();
    let pat = PatchParams::default();
    let editor_name = format!("system:serviceaccount:{tenant}:editor");

    let witness = Witness::start().await;
    witness.set_hold(HOLD.0, HOLD.1);
    let log = ObjectLog::start(cluster.client().await, &tenant).await;
    let names: Vec<String> = (0..CHECKERS).map(|i| format!("c{i}")).collect();
    for n in &names {
        as_editor
            .create(&pp, &checker(n, &witness.url(), &json!({})))
            .await
            .unwrap_or_else(|e| panic!("create {n}: {e}"));
    }
    // Every checker owned, by both replicas between them, and probed.
    let before = eventually(Duration::from_secs(60), "every checker owned", || async {
        let o = owners(&log, &names);
        o.iter().all(Option::is_some).then_some(o)
    })
    .await;
    probed_after(&witness, &names, t0, "every checker probed").await;
    let replicas: Vec<String> = ["op-".to_string() + &tenant, "op-coord-b".to_string()].into();

    // The policy is in force once the API server has loaded it.
    let dry = PatchParams {
        dry_run: true,
        ..Default::default()
    };
    let forge_owner = |to: &str| merge(json!({"metadata": {"labels": {OWNER_LABEL: to}}}));
    eventually(
        Duration::from_secs(30),
        "the coordination policy in force",
        || async {
            as_editor
                .patch(&names[0], &dry, &forge_owner("op-ghost"))
                .await
                .is_err()
                .then_some(())
        },
    )
    .await;
    let attack = Instant::now();

    // Create: a copy of a live object carries the owner label.
    let mut forged = checker("forged", &witness.url(), &json!({}));
    forged.metadata.labels = Some([(OWNER_LABEL.to_string(), replicas[0].clone())].into());
    let res = as_editor.create(&pp, &forged).await;
    assert_key_refused(res, "create with the owner label", OWNER_LABEL);
    let e = as_editor
        .create(&pp, &forged)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains(&editor_name) && e.contains("may not set"), "{e}");

    // Move a checker to the other replica, or to one that does not exist.
    let other = |i: usize| {
        let now = before[i].as_deref().unwrap();
        if now == replicas[0] {
            &replicas[1]
        } else {
            &replicas[0]
        }
    };
    let res = as_editor
        .patch(&names[0], &pat, &forge_owner(other(0)))
        .await;
    assert_key_refused(res, "relabel c0", OWNER_LABEL);
    let res = as_editor
        .patch(&names[1], &pat, &forge_owner("op-ghost"))
        .await;
    assert_key_refused(res, "relabel c1", OWNER_LABEL);
    // Ask its owner to hand it over; end its assignment; make up a handover
    // or a last probe.
    let annotate = |k: &str, v: Value| merge(json!({"metadata": {"annotations": {k: v}}}));
    let res = as_editor
        .patch(
            &names[2],
            &pat,
            &annotate(DRAIN_ANNOTATION, json!(other(2))),
        )
        .await;
    assert_key_refused(res, "drain c2", DRAIN_ANNOTATION);
    let res = as_editor
        .patch(&names[3], &pat, &annotate(EPOCH_ANNOTATION, Value::Null))
        .await;
    assert_key_refused(res, "remove the epoch of c3", EPOCH_ANNOTATION);
    let res = as_editor
        .patch(
            &names[4],
            &pat,
            &annotate(HANDED_OVER_FROM_ANNOTATION, json!("op-ghost")),
        )
        .await;
    assert_key_refused(res, "handed-over-from on c4", HANDED_OVER_FROM_ANNOTATION);
    let res = as_editor
        .patch(
            &names[4],
            &pat,
            &annotate(LAST_PROBE_ANNOTATION, json!("0")),
        )
        .await;
    assert_key_refused(res, "last-probe on c4", LAST_PROBE_ANNOTATION);
    // A replace without the keys removes them.
    let mut c5 = as_editor.get(&names[5]).await.unwrap();
    c5.metadata = ObjectMeta {
        name: c5.metadata.name.clone(),
        resource_version: c5.metadata.resource_version.clone(),
        ..Default::default()
    };
    let res = as_editor.replace(&names[5], &pp, &c5).await;
    assert_key_refused(res, "replace c5 without its labels", OWNER_LABEL);
    // The editor's own labels and annotations, and its spec, pass.
    as_editor
        .patch(
            &names[0],
            &pat,
            &merge(
                json!({"metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}},
                           "spec": {"maxResponseTimeMillis": 5000}}),
            ),
        )
        .await
        .expect("the editor's own label");
    println!("every forgery refused: {:?}", t0.elapsed());

    // The replicas go on: three more probes of every checker, then the
    // oracle (the witness and the object log) from the attack on.
    let three_more = || async {
        let hits = witness.hits_since(attack);
        names
            .iter()
            .all(|n| hits.iter().filter(|h| &h.checker == n).count() >= 3)
            .then_some(())
    };
    eventually(
        Duration::from_secs(60),
        "three probes of every checker",
        three_more,
    )
    .await;
    let end = Instant::now();
    let moved: Vec<String> = log.with(|s| {
        s.objs
            .iter()
            .filter(|o| o.at >= attack && names.contains(&o.name))
            .filter(|o| {
                let i = names.iter().position(|n| n == &o.name).unwrap();
                o.owner != before[i]
            })
            .map(|o| format!("{} -> {:?}", o.name, o.owner))
            .collect()
    });
    assert!(moved.is_empty(), "checkers moved: {moved:?}");
    let hits = witness.hits_since(attack);
    assert_eq!(exclusivity_violation(&hits), None);
    for (i, n) in names.iter().enumerate() {
        let by: Vec<&str> = hits
            .iter()
            .filter(|h| &h.checker == n)
            .map(|h| h.replica.as_str())
            .collect();
        assert!(
            by.iter().all(|r| Some(*r) == before[i].as_deref()),
            "{n} probed by {by:?}, owned by {:?}",
            before[i]
        );
    }
    let interval = Duration::from_secs(INTERVAL);
    let (gap, worst) = largest_gap(&witness.hits(), &names, attack, end);
    assert!(
        gap <= interval * 3,
        "{worst}: a gap of {gap:?} at an interval of {interval:?}"
    );
    println!("no move, one prober each, largest gap {gap:?} ({worst})");

    // managedFields say which part of the operator wrote what.
    let managers = |meta: &ObjectMeta| -> Vec<String> {
        let mut m: Vec<String> = meta
            .managed_fields
            .iter()
            .flatten()
            .map(|f| {
                format!(
                    "{}{}",
                    f.manager.as_deref().unwrap_or("?"),
                    f.subresource
                        .as_deref()
                        .map(|s| format!(" ({s})"))
                        .unwrap_or_default()
                )
            })
            .collect();
        m.sort();
        m.dedup();
        m
    };
    let c1 = as_editor.get(&names[1]).await.unwrap();
    let m = managers(&c1.metadata);
    for want in [
        "webchecker-operator/sharder",
        "webchecker-operator/status (status)",
    ] {
        assert!(m.iter().any(|x| x == want), "{want} not among {m:?}");
    }
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(cluster.client().await, &release_ns);
    for l in leases.list(&Default::default()).await.unwrap() {
        let m = managers(&l.metadata);
        assert!(
            m.iter().all(|x| x.starts_with("webchecker-operator/")),
            "{:?}: {m:?}",
            l.metadata.name
        );
    }

    // Control: without the binding the same patch lands.
    let binding = format!("{release}-webchecker-operator-coordination");
    kubectl(
        cluster,
        &["delete", "validatingadmissionpolicybinding", &binding],
    )
    .await;
    eventually(
        Duration::from_secs(30),
        "the relabel admitted without the policy",
        || async {
            as_editor
                .patch(&names[1], &dry, &forge_owner("op-ghost"))
                .await
                .is_ok()
                .then_some(())
        },
    )
    .await;
}
