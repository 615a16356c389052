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
    let as_editor = tenant_editor(cluster, &tenant).await;

    let witness = Witness::start().await;
    witness.set_hold(HOLD.0, HOLD.1);
    let log = ObjectLog::start(cluster.client().await, &tenant).await;
    let names: Vec<String> = (0..CHECKERS).map(|i| format!("c{i}")).collect();
    for n in &names {
        as_editor
            .create(
                &PostParams::default(),
                &checker(n, &witness.url(), &json!({})),
            )
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
    let test = Coordination {
        editor_name: format!("system:serviceaccount:{tenant}:editor"),
        as_editor,
        witness,
        log,
        names,
        before,
        replicas,
    };

    // The policy is in force once the API server has loaded it.
    test.wait_policy("c0", true, "the coordination policy in force")
        .await;
    let attack = Instant::now();
    test.every_forgery_is_refused().await;
    println!("every forgery refused: {:?}", t0.elapsed());
    test.the_replicas_go_on(attack).await;
    test.managed_fields_name_the_operator(cluster, &release_ns)
        .await;

    // Control: without the binding the same patch lands.
    let binding = format!("{release}-webchecker-operator-coordination");
    kubectl(
        cluster,
        &["delete", "validatingadmissionpolicybinding", &binding],
    )
    .await;
    test.wait_policy("c1", false, "the relabel admitted without the policy")
        .await;
}

/// The tenant's editor: every verb on WebCheckers, nothing else; its
/// WebCheckers.
async fn tenant_editor(cluster: &Cluster, tenant: &str) -> Api<WebChecker> {
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
        cluster.kubectl_stdin(&["apply", "-n", tenant, "-f", "-"], &objects.to_string()),
        "the tenant's editor",
    );
    let (_, editor) = service_account(cluster, tenant, "editor").await;
    Api::namespaced(editor, tenant)
}

/// A merge patch setting checker's owner label to `to`.
fn forge_owner(to: &str) -> Patch<Value> {
    merge(json!({"metadata": {"labels": {OWNER_LABEL: to}}}))
}

/// A merge patch setting (or, with null, removing) annotation `k`.
fn annotate(k: &str, v: Value) -> Patch<Value> {
    merge(json!({"metadata": {"annotations": {k: v}}}))
}

/// The state of `only_the_operator_writes_the_coordination_keys` once its
/// checkers are owned and probed.
struct Coordination {
    as_editor: Api<WebChecker>,
    editor_name: String,
    witness: Witness,
    log: ObjectLog,
    names: Vec<String>,
    /// The owner of each checker before the attack.
    before: Vec<Option<String>>,
    /// The identities of the two replicas.
    replicas: Vec<String>,
}

impl Coordination {
    /// Waits (30 s at most) until a dry run of a relabel of `checker` is
    /// refused (`refused`) or admitted.
    async fn wait_policy(&self, checker: &str, refused: bool, what: &str) {
        let dry = PatchParams {
            dry_run: true,
            ..Default::default()
        };
        eventually(Duration::from_secs(30), what, || async {
            let res = self
                .as_editor
                .patch(checker, &dry, &forge_owner("op-ghost"))
                .await;
            (res.is_err() == refused).then_some(())
        })
        .await;
    }

    /// The replica that does not own checker `i`.
    fn other(&self, i: usize) -> &str {
        let now = self.before[i].as_deref().unwrap();
        if now == self.replicas[0] {
            &self.replicas[1]
        } else {
            &self.replicas[0]
        }
    }

    async fn every_forgery_is_refused(&self) {
        let (pp, pat) = (PostParams::default(), PatchParams::default());
        let (as_editor, names) = (&self.as_editor, &self.names);
        // Create: a copy of a live object carries the owner label.
        let mut forged = checker("forged", &self.witness.url(), &json!({}));
        forged.metadata.labels = Some([(OWNER_LABEL.to_string(), self.replicas[0].clone())].into());
        let res = as_editor.create(&pp, &forged).await;
        assert_key_refused(res, "create with the owner label", OWNER_LABEL);
        let e = as_editor
            .create(&pp, &forged)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&self.editor_name) && e.contains("may not set"),
            "{e}"
        );

        // `(checker, what, patch, the key refused)`.
        let patches = [
            // Move a checker to the other replica, or to one that does not exist.
            (0, "relabel c0", forge_owner(self.other(0)), OWNER_LABEL),
            (1, "relabel c1", forge_owner("op-ghost"), OWNER_LABEL),
            // Ask its owner to hand it over; end its assignment; make up a
            // handover or a last probe.
            (
                2,
                "drain c2",
                annotate(DRAIN_ANNOTATION, json!(self.other(2))),
                DRAIN_ANNOTATION,
            ),
            (
                3,
                "remove the epoch of c3",
                annotate(EPOCH_ANNOTATION, Value::Null),
                EPOCH_ANNOTATION,
            ),
            (
                4,
                "handed-over-from on c4",
                annotate(HANDED_OVER_FROM_ANNOTATION, json!("op-ghost")),
                HANDED_OVER_FROM_ANNOTATION,
            ),
            (
                4,
                "last-probe on c4",
                annotate(LAST_PROBE_ANNOTATION, json!("0")),
                LAST_PROBE_ANNOTATION,
            ),
        ];
        for (i, what, patch, key) in patches {
            let res = as_editor.patch(&names[i], &pat, &patch).await;
            assert_key_refused(res, what, key);
        }
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
    }

    /// The replicas go on: three more probes of every checker, then the
    /// oracle (the witness and the object log) from the attack on.
    async fn the_replicas_go_on(&self, attack: Instant) {
        let (witness, names, before) = (&self.witness, &self.names, &self.before);
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
        let moved: Vec<String> = self.log.with(|s| {
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
        let (gap, worst) = largest_gap(&witness.hits(), names, attack, end);
        assert!(
            gap <= interval * 3,
            "{worst}: a gap of {gap:?} at an interval of {interval:?}"
        );
        println!("no move, one prober each, largest gap {gap:?} ({worst})");
    }

    /// managedFields say which part of the operator wrote what.
    async fn managed_fields_name_the_operator(&self, cluster: &Cluster, release_ns: &str) {
        let c1 = self.as_editor.get(&self.names[1]).await.unwrap();
        let m = managers(&c1.metadata);
        for want in [
            "webchecker-operator/sharder",
            "webchecker-operator/status (status)",
        ] {
            assert!(m.iter().any(|x| x == want), "{want} not among {m:?}");
        }
        let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
            Api::namespaced(cluster.client().await, release_ns);
        for l in leases.list(&Default::default()).await.unwrap() {
            let m = managers(&l.metadata);
            assert!(
                m.iter().all(|x| x.starts_with("webchecker-operator/")),
                "{:?}: {m:?}",
                l.metadata.name
            );
        }
    }
}

/// The managers of an object's managedFields (with their subresource), sorted.
fn managers(meta: &ObjectMeta) -> Vec<String> {
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
}
