//! Part 2 helpers: the shared control plane, operators, checkers, Secrets,
//! ConfigMaps, conditions and Events.

use super::*;

pub(super) fn cluster() -> &'static Cluster {
    Cluster::shared("probe")
}

/// An operator with fast leases, and a log filter and environment of the
/// test's choice.
pub(super) fn spawn_op(
    c: &Cluster,
    identity: &str,
    ns: &str,
    extra: &[&str],
    env: &[(&str, &str)],
    rust_log: &str,
) -> Operator {
    let level = format!("--log-level={rust_log}");
    let mut args: Vec<&str> = FAST_LEASES.to_vec();
    args.push(&level);
    args.extend_from_slice(extra);
    Operator::spawn_with_env(c, identity, ns, &args, env)
}

/// The usual operator of a test's namespace `ns` (identity op-<ns>, debug
/// logs), ready.
pub(super) async fn ready_op(c: &Cluster, ns: &str) -> Operator {
    let op = spawn_op(
        c,
        &format!("op-{ns}"),
        ns,
        &[],
        &[],
        "info,webchecker=debug",
    );
    op.wait_ready(Duration::from_secs(60)).await;
    op
}

/// process_resident_memory_bytes, in MiB.
pub(super) async fn rss_mib(op: &Operator) -> f64 {
    metric(&op.scrape().await, "process_resident_memory_bytes", &[]).unwrap_or(0.0)
        / (1024.0 * 1024.0)
}

pub(super) use crate::support::release::text;

pub(super) async fn apply_ok(ns: &str, yaml: &str) {
    let out = cluster().apply(ns, yaml).await;
    assert!(out.status.success(), "{}\n{yaml}", text(&out.stderr));
}

/// Applies checker `name` with these spec lines (see `checker_manifest`).
pub(super) async fn apply_checker(ns: &str, name: &str, spec: &str) {
    apply_ok(ns, &checker_manifest(name, spec)).await;
}

pub(super) fn checkers(client: &kube::Client, ns: &str) -> kube::Api<WebChecker> {
    kube::Api::namespaced(client.clone(), ns)
}

pub(super) async fn wait_condition(
    api: &kube::Api<WebChecker>,
    name: &str,
    type_: &str,
    status: &str,
    reason: &str,
    within: Duration,
) -> webchecker::api::Condition {
    eventually(
        within,
        &format!("{name} {type_}={status} ({reason})"),
        || async {
            condition(api, name, type_)
                .await
                .filter(|c| c.status == status && c.reason == reason)
        },
    )
    .await
}

/// `wait_condition` on the Ready condition, within 20 s.
pub(super) async fn wait_ready(
    api: &kube::Api<WebChecker>,
    name: &str,
    status: &str,
    reason: &str,
) -> webchecker::api::Condition {
    wait_condition(api, name, "Ready", status, reason, Duration::from_secs(20)).await
}

pub(super) async fn secret(
    client: &kube::Client,
    ns: &str,
    name: &str,
    type_: &str,
    data: &[(&str, &str)],
) {
    use k8s_openapi::api::core::v1::Secret;
    let api: kube::Api<Secret> = kube::Api::namespaced(client.clone(), ns);
    let s = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        type_: Some(type_.into()),
        string_data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..Default::default()
    };
    api.create(&Default::default(), &s).await.unwrap();
}

pub(super) async fn config_map(client: &kube::Client, ns: &str, name: &str, data: &[(&str, &str)]) {
    use k8s_openapi::api::core::v1::ConfigMap;
    let api: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), ns);
    let cm = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..Default::default()
    };
    api.create(&Default::default(), &cm).await.unwrap();
}

/// `(type, reason, note)` of the Events about one checker.
pub(super) async fn events_of(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> Vec<(String, String, String)> {
    use k8s_openapi::api::events::v1::Event;
    let api: kube::Api<Event> = kube::Api::namespaced(client.clone(), ns);
    api.list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| {
            (
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default(),
            )
        })
        .collect()
}
