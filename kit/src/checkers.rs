//! WebChecker objects in bulk: creating them, and who owns each.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::api::{ListParams, PostParams};
use kube::core::DynamicObject;
use kube::discovery::ApiResource;
use kube::{Api, Client};
use serde_json::{Value, json};
use webchecker::api::{Condition, WebChecker};
use webchecker::assignment::{DRAIN_ANNOTATION, OWNER_LABEL};

/// A checker as YAML for kubectl; `extra`: further spec lines, indented by two.
pub fn checker_yaml(name: &str, host: &str, path: &str, interval: u32, extra: &str) -> String {
    format!(
        "apiVersion: test.network.io/v1alpha1\nkind: WebChecker\nmetadata:\n  name: {name}\nspec:\n  host: {host}\n  path: {path}\n  intervalSeconds: {interval}\n{extra}"
    )
}

/// A checker as YAML for kubectl, with these spec lines (indented here).
pub fn checker_manifest(name: &str, spec: &str) -> String {
    let spec: String = spec.lines().map(|l| format!("  {l}\n")).collect();
    format!(
        "apiVersion: test.network.io/v1alpha1\nkind: WebChecker\nmetadata:\n  name: {name}\nspec:\n{spec}"
    )
}

/// A checker of the witness: `name` probes `<host>/c/<name>` every
/// `interval` seconds, with the further spec fields of `extra` (a JSON object).
pub fn checker_object(name: &str, host: &str, interval: u64, extra: Value) -> DynamicObject {
    let mut spec = json!({
        "host": host,
        "path": format!("/c/{name}"),
        "intervalSeconds": interval,
    });
    for (k, v) in extra.as_object().expect("extra spec fields: a JSON object") {
        spec[k] = v.clone();
    }
    serde_json::from_value(json!({
        "apiVersion": "test.network.io/v1alpha1",
        "kind": "WebChecker",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .unwrap()
}

/// Creates many checkers quickly through the API (32 at a time); returns
/// when each create returned.
pub async fn create_checkers(
    client: &Client,
    ns: &str,
    target: &str,
    names: &[String],
    interval: u32,
) -> HashMap<String, Instant> {
    create_checkers_concurrently(client, ns, target, names, interval, 32).await
}

/// The same, `concurrency` creates at a time. Checker `n` is probed at
/// `<target>/c/<n>` (the witness's path).
pub async fn create_checkers_concurrently(
    client: &Client,
    ns: &str,
    target: &str,
    names: &[String],
    interval: u32,
    concurrency: usize,
) -> HashMap<String, Instant> {
    // The timeout must stay below the interval.
    let timeout = if interval > 1 { 1.0 } else { 0.5 };
    let objs = names
        .iter()
        .map(|n| {
            checker_object(
                n,
                target,
                interval.into(),
                json!({"timeoutSeconds": timeout}),
            )
        })
        .collect();
    create_all(client, ns, objs, concurrency).await
}

/// Creates these checkers in `ns`, `concurrency` at a time, retrying each
/// (with backoff) through API errors; a create retried after one that landed
/// unseen finds it there (409) and counts as done. When each create returned.
pub async fn create_all(
    client: &Client,
    ns: &str,
    objs: Vec<DynamicObject>,
    concurrency: usize,
) -> HashMap<String, Instant> {
    use futures::StreamExt;
    let created = Arc::new(Mutex::new(HashMap::new()));
    let api = checkers_api(client, ns);
    futures::stream::iter(objs)
        .for_each_concurrent(concurrency, |obj| {
            let api = api.clone();
            let created = created.clone();
            async move {
                let n = obj.metadata.name.clone().expect("a named checker");
                for attempt in 0..8 {
                    match api.create(&PostParams::default(), &obj).await {
                        Ok(_) => {}
                        Err(kube::Error::Api(e)) if e.code == 409 => {
                            assert!(attempt > 0, "checker {n} exists already");
                        }
                        Err(_) => {
                            tokio::time::sleep(Duration::from_millis(200 << attempt.min(4))).await;
                            continue;
                        }
                    }
                    created.lock().unwrap().insert(n, Instant::now());
                    return;
                }
                panic!("could not create {n}");
            }
        })
        .await;
    created.lock().unwrap().clone()
}

/// The WebCheckers of `ns`, untyped (a test may write what the types forbid).
pub fn checkers_api(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<WebChecker>(&()))
}

/// A checker's condition of this type as the API has it now (None: no such
/// checker, or no such condition yet).
pub async fn condition(api: &Api<WebChecker>, name: &str, type_: &str) -> Option<Condition> {
    api.get_opt(name)
        .await
        .ok()
        .flatten()?
        .status?
        .condition(type_)
        .cloned()
}

/// A checker's owner label as it stands (a drain in progress or not).
pub fn owner_label(o: &kube::core::ObjectMeta) -> Option<&str> {
    o.labels
        .as_ref()
        .and_then(|l| l.get(OWNER_LABEL))
        .map(String::as_str)
}

/// The replica that owns a checker: its owner label, unless a drain is in
/// progress (then it is on its way to another and counts as unassigned).
pub fn owner_of(o: &kube::core::ObjectMeta) -> Option<&str> {
    let draining = o
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(DRAIN_ANNOTATION));
    if draining { None } else { owner_label(o) }
}

/// Owner of every checker of `ns` (see [`owner_of`]).
pub async fn owners(client: &Client, ns: &str) -> kube::Result<HashMap<String, Option<String>>> {
    let list = checkers_api(client, ns)
        .list(&ListParams::default())
        .await?;
    Ok(list
        .items
        .iter()
        .filter_map(|o| {
            let name = o.metadata.name.clone()?;
            Some((name, owner_of(&o.metadata).map(String::from)))
        })
        .collect())
}
