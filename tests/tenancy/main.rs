//! Tenancy: a WebChecker gives its author no read access to Secrets
//! (docs/security.md, "Secrets a checker can use").
//!
//! On a real kube-apiserver with RBAC, with the chart's objects as `helm
//! template` renders them (the ValidatingAdmissionPolicy, the operator's
//! ServiceAccount and its namespaced Role for Secrets) and an operator process
//! running with a token of that ServiceAccount:
//!
//! - a ServiceAccount that may create and update WebCheckers but not read a
//!   Secret is refused, by every reference field, on create and on update,
//!   with a message naming the field, the object and the missing permission;
//!   the attacker's target receives nothing; with the policy's binding removed
//!   the same update does deliver the credential there (the witness works);
//! - a ServiceAccount that may read the Secret (by name) creates the checkers,
//!   and the operator sends the credential to the target; the operator's own
//!   writes (owner labels, status) pass, also for a checker naming a ConfigMap
//!   the operator may not read;
//! - the policy's cost budget: 24 objects checked by name are admitted, a 25th
//!   is refused with a message saying so;
//! - a checker naming a ServiceAccount or bootstrap token Secret ends
//!   `InvalidSpec` and its target receives nothing, policy or not.

mod coordination;
use webchecker_kit as support;

use std::time::{Duration, Instant};

use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::release::{install, kubectl, ok, service_account};
use support::*;
use webchecker::api::WebChecker;
use webchecker::probe::base64;

const INTERVAL: u64 = 1;

// --------------------------------------------------------------- checkers

fn checker(name: &str, host: &str, refs: &Value) -> WebChecker {
    let mut spec = json!({
        "host": host,
        "path": format!("/c/{name}"),
        "intervalSeconds": INTERVAL,
        "timeoutSeconds": 0.5,
    });
    for (k, v) in refs.as_object().unwrap() {
        spec[k] = v.clone();
    }
    WebChecker::new(name, serde_json::from_value(spec).unwrap())
}

/// One way of naming a Secret or ConfigMap: the spec fields, the field path
/// the policy reports, and the object.
struct Reference {
    tag: &'static str,
    field: &'static str,
    kind: &'static str,
    resource: &'static str,
    spec: fn(&str) -> Value,
}

/// Every reference field of the CRD (`references()` in crates/plan/src/plan/values.rs).
const REFERENCES: &[Reference] = &[
    Reference {
        tag: "basic",
        field: "spec.auth.basic.secretName",
        kind: "Secret",
        resource: "secrets",
        spec: |n| json!({"auth": {"basic": {"secretName": n}}}),
    },
    Reference {
        tag: "bearer",
        field: "spec.auth.bearer.secretKeyRef.name",
        kind: "Secret",
        resource: "secrets",
        spec: |n| json!({"auth": {"bearer": {"secretKeyRef": {"name": n, "key": "token"}}}}),
    },
    Reference {
        tag: "header",
        field: "spec.headers[1].valueFrom.secretKeyRef.name",
        kind: "Secret",
        resource: "secrets",
        spec: |n| {
            json!({"headers": [
                {"name": "X-Plain", "value": "plain"},
                {"name": "X-Key", "valueFrom": {"secretKeyRef": {"name": n, "key": "key"}}}
            ]})
        },
    },
    Reference {
        tag: "ca-secret",
        field: "spec.tls.caBundle.secretKeyRef.name",
        kind: "Secret",
        resource: "secrets",
        spec: |n| json!({"tls": {"caBundle": {"secretKeyRef": {"name": n, "key": "ca.crt"}}}}),
    },
    Reference {
        tag: "ca-configmap",
        field: "spec.tls.caBundle.configMapKeyRef.name",
        kind: "ConfigMap",
        resource: "configmaps",
        spec: |n| json!({"tls": {"caBundle": {"configMapKeyRef": {"name": n, "key": "ca.crt"}}}}),
    },
    Reference {
        tag: "client-cert",
        field: "spec.tls.clientCertificate.secretName",
        kind: "Secret",
        resource: "secrets",
        spec: |n| json!({"tls": {"clientCertificate": {"secretName": n}}}),
    },
];

impl Reference {
    /// The object of the tenant this reference names.
    fn object(&self, secret: &str, config_map: &str) -> String {
        if self.resource == "secrets" {
            secret.to_string()
        } else {
            config_map.to_string()
        }
    }
}

/// Asserts that `res` is the policy's refusal of `r` naming `object` for `user`.
fn assert_refused<T>(
    res: Result<T, kube::Error>,
    what: &str,
    r: &Reference,
    object: &str,
    user: &str,
    ns: &str,
) {
    let e = match res {
        Err(kube::Error::Api(e)) => e,
        Ok(_) => panic!("{what}: admitted, expected the policy's refusal"),
        Err(e) => panic!("{what}: expected the policy's refusal, got {e}"),
    };
    assert_eq!(e.code, 403, "{what}: {e:?}");
    let m = &e.message;
    for want in [
        "ValidatingAdmissionPolicy".to_string(),
        r.field.to_string(),
        format!("names {} \"{object}\"", r.kind),
        format!("user \"{user}\" may not get {} \"{object}\"", r.resource),
        format!("in namespace \"{ns}\""),
    ] {
        assert!(m.contains(&want), "{what}: {want:?} not in {m:?}");
    }
}

/// Replaces the checker with `host` in its spec (PUT), again after a
/// conflict (the operator writes labels of the same object meanwhile).
async fn set_host(
    api: &Api<WebChecker>,
    name: &str,
    host: &str,
) -> Result<WebChecker, kube::Error> {
    loop {
        let mut wc = api.get(name).await?;
        wc.spec.host = host.to_string();
        match api.replace(name, &PostParams::default(), &wc).await {
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            other => return other,
        }
    }
}

fn merge(v: Value) -> Patch<Value> {
    Patch::Merge(v)
}

/// Waits until every checker of `names` was probed at the witness after `since`.
async fn probed_after(w: &Witness, names: &[String], since: Instant, what: &str) {
    eventually(Duration::from_secs(60), what, || async {
        let hits = w.hits();
        names
            .iter()
            .all(|n| hits.iter().any(|h| &h.checker == n && h.start > since))
            .then_some(())
    })
    .await
}

// ------------------------------------------------------------------ tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checker_sends_only_secrets_its_author_may_read() {
    let cluster = Cluster::shared("tenancy");
    let t0 = Instant::now();
    let release_ns = cluster.namespace("wco");
    let tenant = cluster.namespace("tenant");
    let release = format!("p{}", rand_suffix());
    // The operator may read the tenant's Secrets but not its ConfigMaps: its
    // own writes (owner labels, status) of a checker naming a ConfigMap must
    // pass the policy all the same.
    let (rendered, op) = install(
        cluster,
        &release,
        &release_ns,
        &tenant,
        &["rbac.readConfigMaps=false"],
    )
    .await;
    let policy = format!("{release}-webchecker-operator-references");
    assert!(
        rendered.contains("kind: ValidatingAdmissionPolicyBinding"),
        "the policy is on by default"
    );
    println!("chart objects applied, operator ready: {:?}", t0.elapsed());
    let t = SecretsTenancy::start(cluster, &tenant, policy).await;
    t.wait_policy_in_force().await;
    println!("policy in force: {:?}", t0.elapsed());

    let mut admitted: Vec<String> = Vec::new();
    for r in REFERENCES {
        let object = r.object(SECRET, CONFIG_MAP);
        let refs = (r.spec)(&object);
        admitted.extend(t.the_writer_may_not_name(r, &object, &refs).await);
        admitted.push(t.the_reader_may_name(r, &refs).await);
    }
    println!("every reference field checked: {:?}", t0.elapsed());
    t.a_message_names_every_field().await;
    t.only_the_legit_target_gets_the_credentials(&admitted)
        .await;
    println!(
        "credentials delivered to the legitimate target only: {:?}",
        t0.elapsed()
    );
    t.the_cost_budget().await;
    t.without_the_binding_the_attack_works(cluster).await;

    let log = op.log_text();
    let v = &t.values;
    for v in [&v.password, &v.token, &v.key] {
        assert!(!log.contains(v.as_str()), "a value in the operator's log");
    }
    println!("whole test: {:?}", t0.elapsed());
}

/// The tenant's Secret (readable by the reader) and ConfigMap.
const SECRET: &str = "team";
const CONFIG_MAP: &str = "team-ca";

/// The values of the tenant's Secret: unique to the run.
struct SecretValues {
    password: String,
    token: String,
    key: String,
}

impl SecretValues {
    fn new() -> SecretValues {
        let sfx = rand_suffix();
        SecretValues {
            password: format!("pw-{sfx}-5e1d"),
            token: format!("tok-{sfx}-c07a"),
            key: format!("key-{sfx}-9b2f"),
        }
    }

    /// The Authorization header basic auth sends.
    fn basic(&self) -> String {
        format!(
            "Basic {}",
            base64(format!("probe-user:{}", self.password).as_bytes())
        )
    }
}

/// A dry run: admission judges it, nothing is stored.
fn dry_run() -> PostParams {
    PostParams {
        dry_run: true,
        ..Default::default()
    }
}

/// The tenant's objects: a Secret and a ConfigMap, a writer that may create
/// and update WebCheckers but read nothing, a reader that may also get those
/// two objects by name (and, for the budget checks, the Secrets `many` by
/// name).
fn tenant_objects(tenant: &str, v: &SecretValues, many: &[String]) -> Value {
    let (secret, config_map) = (SECRET, CONFIG_MAP);
    let (password, token, key) = (&v.password, &v.token, &v.key);
    let mut readable = vec![secret.to_string()];
    readable.extend(many.iter().cloned());
    let sa =
        |n: &str| json!({"kind": "ServiceAccount", "apiVersion": "v1", "metadata": {"name": n}});
    let rule = |res: &str, names: Value| json!({"apiGroups": [""], "resources": [res], "resourceNames": names, "verbs": ["get"]});
    let binding = |role: &str, subjects: &[&str]| {
        json!({
            "kind": "RoleBinding", "apiVersion": "rbac.authorization.k8s.io/v1",
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
            "subjects": subjects.iter().map(|s| json!({"kind": "ServiceAccount", "name": s, "namespace": tenant})).collect::<Vec<_>>(),
        })
    };
    json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret}, "type": "Opaque",
         "stringData": {"username": "probe-user", "password": password, "token": token, "key": key}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": config_map},
         "data": {"ca.crt": "not-a-certificate"}},
        sa("writer"),
        sa("reader"),
        {"kind": "Role", "apiVersion": "rbac.authorization.k8s.io/v1",
         "metadata": {"name": "checker-author"},
         "rules": [{"apiGroups": ["test.network.io"], "resources": ["webcheckers"],
                    "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]},
        binding("checker-author", &["writer", "reader"]),
        {"kind": "Role", "apiVersion": "rbac.authorization.k8s.io/v1",
         "metadata": {"name": "read-team"},
         "rules": [rule("secrets", json!(readable)), rule("configmaps", json!([config_map]))]},
        binding("read-team", &["reader"]),
    ]})
}

/// The tenant of `a_checker_sends_only_secrets_its_author_may_read`, its
/// authors and the two targets.
struct SecretsTenancy {
    tenant: String,
    /// The name of the chart's ValidatingAdmissionPolicyBinding.
    policy: String,
    values: SecretValues,
    /// s0..s23: Secrets the reader may get by name.
    many: Vec<String>,
    as_admin: Api<WebChecker>,
    as_writer: Api<WebChecker>,
    as_reader: Api<WebChecker>,
    writer_name: String,
    reader_name: String,
    legit: Witness,
    evil: Witness,
    /// The attack, for a dry run: a writer's checker naming the Secret.
    probe: WebChecker,
}

impl SecretsTenancy {
    async fn start(cluster: &Cluster, tenant: &str, policy: String) -> SecretsTenancy {
        let values = SecretValues::new();
        let many: Vec<String> = (0..24).map(|i| format!("s{i}")).collect();
        let objects = tenant_objects(tenant, &values, &many);
        ok(
            cluster.kubectl_stdin(&["apply", "-n", tenant, "-f", "-"], &objects.to_string()),
            "the tenant's objects",
        );
        let (_, writer) = service_account(cluster, tenant, "writer").await;
        let (_, reader) = service_account(cluster, tenant, "reader").await;
        let admin = cluster.client().await;
        let legit = Witness::start().await;
        let evil = Witness::start().await;
        let basic = &REFERENCES[0];
        let probe = checker("dry-run", &evil.url(), &(basic.spec)(SECRET));
        SecretsTenancy {
            tenant: tenant.to_string(),
            policy,
            values,
            many,
            as_admin: Api::namespaced(admin, tenant),
            as_writer: Api::namespaced(writer, tenant),
            as_reader: Api::namespaced(reader, tenant),
            writer_name: format!("system:serviceaccount:{tenant}:writer"),
            reader_name: format!("system:serviceaccount:{tenant}:reader"),
            legit,
            evil,
            probe,
        }
    }

    /// The policy is enforced once the API server has loaded it: a
    /// server-side dry run of the attack is refused (nothing is stored
    /// meanwhile).
    async fn wait_policy_in_force(&self) {
        eventually(
            Duration::from_secs(30),
            "the admission policy in force",
            || async {
                match self.as_writer.create(&dry_run(), &self.probe).await {
                    Err(kube::Error::Api(e)) if e.message.contains(&self.policy) => Some(()),
                    _ => None,
                }
            },
        )
        .await;
    }

    /// Asserts that `res` is the policy's refusal of the writer's naming
    /// `object` by `r`.
    fn writer_refused<T>(
        &self,
        res: Result<T, kube::Error>,
        what: &str,
        r: &Reference,
        object: &str,
    ) {
        assert_refused(res, what, r, object, &self.writer_name, &self.tenant);
    }

    /// The writer may not name `object` (by `r`, as `refs`): not on create,
    /// nor by redirecting or editing a checker that names it, nor by adding
    /// it to a checker of its own. The checkers admitted meanwhile.
    async fn the_writer_may_not_name(
        &self,
        r: &Reference,
        object: &str,
        refs: &Value,
    ) -> Vec<String> {
        let pp = PostParams::default();
        let (as_writer, legit, evil) = (&self.as_writer, &self.legit, &self.evil);

        // Create: refused.
        let name = format!("w-create-{}", r.tag);
        let res = as_writer
            .create(&pp, &checker(&name, &evil.url(), refs))
            .await;
        self.writer_refused(res, &name, r, object);

        // Update of a checker that names the object (written by someone who
        // may read it): redirecting it is refused...
        let legit_name = format!("legit-{}", r.tag);
        self.as_admin
            .create(&pp, &checker(&legit_name, &legit.url(), refs))
            .await
            .unwrap();
        let res = set_host(as_writer, &legit_name, &evil.url()).await;
        self.writer_refused(res, &format!("redirect {legit_name}"), r, object);
        // ... and so is any other change of its spec.
        let res = as_writer
            .patch(
                &legit_name,
                &PatchParams::default(),
                &merge(json!({"spec": {"intervalSeconds": 2}})),
            )
            .await;
        self.writer_refused(res, &format!("edit {legit_name}"), r, object);
        // Labels and annotations are not the policy's business (the
        // operator's sharder writes them).
        as_writer
            .patch(
                &legit_name,
                &PatchParams::default(),
                &merge(
                    json!({"metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}}}),
                ),
            )
            .await
            .unwrap_or_else(|e| panic!("label {legit_name}: {e}"));

        // Update that adds the reference to a checker of the writer's own.
        let own = format!("w-own-{}", r.tag);
        as_writer
            .create(&pp, &checker(&own, &legit.url(), &json!({})))
            .await
            .unwrap_or_else(|e| panic!("{own} without references: {e}"));
        let mut patch = json!({"spec": refs.clone()});
        patch["spec"]["host"] = json!(evil.url());
        let res = as_writer
            .patch(&own, &PatchParams::default(), &merge(patch))
            .await;
        self.writer_refused(res, &format!("add a reference to {own}"), r, object);
        vec![legit_name, own]
    }

    /// The reader may: create, and update the spec... but only the objects
    /// it may get, by name. The checker it created.
    async fn the_reader_may_name(&self, r: &Reference, refs: &Value) -> String {
        let pp = PostParams::default();
        let (as_reader, legit) = (&self.as_reader, &self.legit);
        let rname = format!("r-{}", r.tag);
        as_reader
            .create(&pp, &checker(&rname, &legit.url(), refs))
            .await
            .unwrap_or_else(|e| panic!("{rname} by the reader: {e}"));
        as_reader
            .patch(
                &rname,
                &PatchParams::default(),
                &merge(json!({"spec": {"maxResponseTimeMillis": 5000}})),
            )
            .await
            .unwrap_or_else(|e| panic!("update {rname} by the reader: {e}"));
        let res = as_reader
            .create(
                &pp,
                &checker(
                    &format!("r-other-{}", r.tag),
                    &legit.url(),
                    &(r.spec)("other"),
                ),
            )
            .await;
        assert_refused(res, &rname, r, "other", &self.reader_name, &self.tenant);
        rname
    }

    /// A message names every field of a refused object.
    async fn a_message_names_every_field(&self) {
        let secret = SECRET;
        let both = json!({
            "auth": {"basic": {"secretName": secret}},
            "headers": [{"name": "X-Key", "valueFrom": {"secretKeyRef": {"name": secret, "key": "key"}}}]
        });
        let e = self
            .as_writer
            .create(
                &PostParams::default(),
                &checker("w-both", &self.evil.url(), &both),
            )
            .await
            .unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains(
                "spec.auth.basic.secretName, spec.headers[0].valueFrom.secretKeyRef.name name Secret \"team\""
            ),
            "{m}"
        );
    }

    /// The operator (the chart's ServiceAccount, Secrets readable in the
    /// tenant namespace only) sends the reader's credentials to the target;
    /// its own writes pass; the attacker's target hears nothing.
    async fn only_the_legit_target_gets_the_credentials(&self, admitted: &[String]) {
        let (legit, v) = (&self.legit, &self.values);
        let since = Instant::now();
        let creds = [
            ("r-basic", "authorization", v.basic()),
            ("r-bearer", "authorization", format!("Bearer {}", v.token)),
            ("r-header", "x-key", v.key.clone()),
        ];
        for (name, header, want) in &creds {
            eventually(
                Duration::from_secs(60),
                &format!("{name} sends its {header}"),
                || async {
                    legit
                        .hits_for(name)
                        .iter()
                        .any(|h| h.headers.get(*header) == Some(want))
                        .then_some(())
                },
            )
            .await;
        }
        self.the_operators_own_writes_pass(admitted).await;
        // Every admitted checker has been probed since: the operator has seen
        // them all, and the attacker's target has heard nothing.
        let plain: Vec<String> = admitted
            .iter()
            .filter(|n| n.starts_with("w-own-") || *n == "legit-basic")
            .cloned()
            .collect();
        probed_after(legit, &plain, since, "the writer's checkers probed").await;
        assert!(
            self.evil.all_hits().is_empty(),
            "the attacker's target was reached: {:?}",
            self.evil.all_hits()
        );
    }

    /// Its own writes went through: owner labels and status on every checker,
    /// also on r-ca-configmap, whose ConfigMap the operator may not read.
    async fn the_operators_own_writes_pass(&self, admitted: &[String]) {
        let as_admin = &self.as_admin;
        eventually(
            Duration::from_secs(60),
            "every admitted checker owned, with a status",
            || async {
                for n in admitted {
                    let wc = as_admin.get(n).await.ok()?;
                    owner_label(&wc.metadata)?;
                    wc.status.as_ref()?.condition("Ready")?;
                }
                Some(())
            },
        )
        .await;
        let c = as_admin
            .get("r-ca-configmap")
            .await
            .unwrap()
            .status
            .unwrap()
            .condition("Ready")
            .cloned()
            .unwrap();
        assert!(
            c.reason == "InvalidSpec" && c.message.contains("the operator may not read ConfigMap"),
            "r-ca-configmap: {c:?}"
        );
    }

    /// The cost budget: 24 objects checked by name (plus one namespace-wide
    /// check per kind) fit; a 25th is refused with a message saying so.
    async fn the_cost_budget(&self) {
        let (many, legit, dry) = (&self.many, &self.legit, dry_run());
        let headers = |names: &[String]| {
            json!({"headers": names.iter().enumerate().map(|(i, n)| json!(
                {"name": format!("X-{i}"), "valueFrom": {"secretKeyRef": {"name": n, "key": "k"}}}
            )).collect::<Vec<_>>()})
        };
        let mut worst = headers(&many[..22]);
        worst["auth"] = json!({"bearer": {"secretKeyRef": {"name": SECRET, "key": "token"}}});
        worst["tls"] =
            json!({"caBundle": {"configMapKeyRef": {"name": CONFIG_MAP, "key": "ca.crt"}}});
        for (what, refs) in [
            ("24 Secrets", headers(many)),
            ("23 Secrets and a ConfigMap", worst),
        ] {
            self.as_reader
                .create(&dry, &checker("r-many", &legit.url(), &refs))
                .await
                .unwrap_or_else(|e| panic!("{what} by name: {e}"));
        }
        let mut too_many = many.clone();
        too_many.push("s24".into());
        let e = self
            .as_reader
            .create(&dry, &checker("r-many", &legit.url(), &headers(&too_many)))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("spec names 25 distinct Secrets and ConfigMaps")
                && e.contains("checks at most 24 by name"),
            "{e}"
        );
    }

    /// Control: without the policy's binding, the writer's redirect is
    /// admitted and the operator delivers the Secret to the attacker. This is
    /// what the policy prevents, and it shows the witness would have seen it.
    async fn without_the_binding_the_attack_works(&self, cluster: &Cluster) {
        kubectl(
            cluster,
            &["delete", "validatingadmissionpolicybinding", &self.policy],
        )
        .await;
        eventually(
            Duration::from_secs(30),
            "the binding's removal in force",
            || async { self.as_writer.create(&dry_run(), &self.probe).await.ok() },
        )
        .await;
        set_host(&self.as_writer, "legit-basic", &self.evil.url())
            .await
            .expect("the redirect, without the policy");
        let stolen = self.values.basic();
        eventually(
            Duration::from_secs(60),
            "the credential at the attacker's target without the policy",
            || async {
                self.evil
                    .hits_for("legit-basic")
                    .iter()
                    .any(|h| h.headers.get("authorization") == Some(&stolen))
                    .then_some(())
            },
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_secrets_are_never_sent_whoever_wrote_the_checker() {
    let cluster = Cluster::shared("tenancy");
    let t0 = Instant::now();
    let release_ns = cluster.namespace("wco");
    let tenant = cluster.namespace("tokens");
    let release = format!("t{}", rand_suffix());
    // Without the policy: the operator's own refusal is what is tested (and
    // the other test removes its binding, which must not matter here).
    let (_, op) = install(
        cluster,
        &release,
        &release_ns,
        &tenant,
        &["admissionPolicy.enabled=false"],
    )
    .await;
    let v = TokenValues::new();
    ok(
        cluster.kubectl_stdin(
            &["apply", "-f", "-"],
            &token_secrets(&tenant, &v).to_string(),
        ),
        "create the Secrets",
    );
    let target = Witness::start().await;
    let admin = cluster.client().await;
    let api: Api<WebChecker> = Api::namespaced(admin, &tenant);
    let pp = PostParams::default();
    let cases = token_cases();
    for (name, refs, _) in &cases {
        api.create(&pp, &checker(name, &target.url(), refs))
            .await
            .unwrap();
    }
    api.create(
        &pp,
        &checker("control", &target.url(), &bearer("plain", "token")),
    )
    .await
    .unwrap();
    for (name, _, type_) in &cases {
        invalid_spec_naming_the_type(&api, name, type_).await;
    }
    // The control checker, same interval and target, is probed twice more
    // with its credential; the refused ones not once.
    let since = Instant::now();
    eventually(
        Duration::from_secs(60),
        "the control checker probed twice since",
        || async {
            let n = target
                .hits_for("control")
                .iter()
                .filter(|h| {
                    h.start > since
                        && h.headers.get("authorization")
                            == Some(&format!("Bearer {}", v.plain_token))
                })
                .count();
            (n >= 2).then_some(())
        },
    )
    .await;
    let hits = target.all_hits();
    for (name, _, _) in &cases {
        assert!(
            !hits.iter().any(|h| h.checker == *name),
            "{name} reached its target"
        );
    }
    for h in &hits {
        for val in h.headers.values() {
            assert!(
                !val.contains(&v.sa_token) && !val.contains(&v.boot_secret),
                "a token reached the target"
            );
        }
    }
    let log = op.log_text();
    for val in [&v.sa_token, &v.boot_secret, &v.plain_token] {
        assert!(!log.contains(val.as_str()), "a value in the operator's log");
    }
    println!("whole test: {:?}", t0.elapsed());
}

/// The values of the token test's Secrets: unique to the run.
struct TokenValues {
    sa_token: String,
    boot_secret: String,
    plain_token: String,
}

impl TokenValues {
    fn new() -> TokenValues {
        let sfx = rand_suffix();
        TokenValues {
            sa_token: format!("eyJhbGciOiJSUzI1NiJ9.sa-{sfx}.sig"),
            boot_secret: format!("boot{sfx}0000000000")[..16].to_string(),
            plain_token: format!("plain-{sfx}-4d2a"),
        }
    }
}

/// A ServiceAccount token Secret, a bootstrap token Secret and an Opaque
/// one. Created by the cluster admin: no controller fills a token in here,
/// so the test writes one.
fn token_secrets(tenant: &str, v: &TokenValues) -> Value {
    let (sa_token, boot_secret, plain_token) = (&v.sa_token, &v.boot_secret, &v.plain_token);
    json!({
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "sa-token", "namespace": tenant,
                    "annotations": {"kubernetes.io/service-account.name": "default"}},
                "type": "kubernetes.io/service-account-token",
                "stringData": {"token": sa_token, "ca.crt": "-"}
            },
            {
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "bootstrap-token-abcdef", "namespace": tenant},
                "type": "bootstrap.kubernetes.io/token",
                "stringData": {"token-id": "abcdef", "token-secret": boot_secret,
                    "usage-bootstrap-authentication": "true"}
            },
            {
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "plain", "namespace": tenant},
                "type": "Opaque",
                "stringData": {"token": plain_token}
            }
        ]
    })
}

/// The spec fields of bearer auth from key `key` of Secret `name`.
fn bearer(name: &str, key: &str) -> Value {
    json!({"auth": {"bearer": {"secretKeyRef": {"name": name, "key": key}}}})
}

/// `(checker, the spec fields naming a token Secret, its type)`.
fn token_cases() -> [(&'static str, Value, &'static str); 3] {
    [
        (
            "sa",
            bearer("sa-token", "token"),
            "kubernetes.io/service-account-token",
        ),
        (
            "boot",
            json!({"headers": [{"name": "X-Token", "valueFrom": {"secretKeyRef": {"name": "bootstrap-token-abcdef", "key": "token-secret"}}}]}),
            "bootstrap.kubernetes.io/token",
        ),
        (
            "ca",
            json!({"tls": {"caBundle": {"secretKeyRef": {"name": "sa-token", "key": "ca.crt"}}}}),
            "kubernetes.io/service-account-token",
        ),
    ]
}

/// Waits (60 s at most) until checker `name` is Ready=False InvalidSpec, with
/// a message naming the Secret's type `type_`.
async fn invalid_spec_naming_the_type(api: &Api<WebChecker>, name: &str, type_: &str) {
    let c = eventually(
        Duration::from_secs(60),
        &format!("{name} Ready=False InvalidSpec"),
        || async {
            let wc = api.get(name).await.ok()?;
            let c = wc.status?.condition("Ready")?.clone();
            (c.status == "False" && c.reason == "InvalidSpec").then_some(c)
        },
    )
    .await;
    println!("{name}: {}", c.message);
    for want in [type_, "never uses", "Opaque"] {
        assert!(
            c.message.contains(want),
            "{name}: {want:?} not in {:?}",
            c.message
        );
    }
}
