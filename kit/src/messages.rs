//! What users read, checked in every end-to-end run: each control plane the
//! kit starts is watched, from its start to the end of the process, for
//! the condition messages of every WebChecker's status and the messages of
//! the operator's Events. Each must be at most [`MAX_MESSAGE`] characters
//! and hold no debug formatting of the operator's internals (`Some(`,
//! `Status {`, ...): a status is about the user's target, in words they can
//! act on. A violation is printed at once and fails the test whose replica
//! is dropped next (crate::Operator's Drop), with every message found.

use std::sync::Mutex;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Event;
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::core::DynamicObject;
use kube::{Api, Client};

/// The longest message a user may be shown (the operator cuts longer ones).
pub const MAX_MESSAGE: usize = 200;

/// Text that only debug formatting (`{:?}`) of Rust values produces.
const DEBUG_MARKS: &[&str] = &[
    "Some(",
    "None,",
    "Status {",
    "Error {",
    "ErrorResponse {",
    "Api(",
    "ApiError",
    "kind: ",
    "hyper::",
    "Kind(",
    "Os {",
    "\\\"",
];

/// Violations found and not yet reported.
static FOUND: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Why `message` may not be shown to a user, if it may not.
pub fn fault(message: &str) -> Option<String> {
    let chars = message.chars().count();
    if chars > MAX_MESSAGE {
        return Some(format!("{chars} characters, more than {MAX_MESSAGE}"));
    }
    DEBUG_MARKS
        .iter()
        .find(|m| message.contains(*m))
        .map(|m| format!("debug formatting ({m:?})"))
}

fn found(what: String) {
    eprintln!("\n!!! USER-FACING MESSAGE REFUSED: {what}\n");
    let mut f = FOUND.lock().unwrap_or_else(|p| p.into_inner());
    if f.len() < 100 && !f.contains(&what) {
        f.push(what);
    }
}

/// The violations found so far, taken (each is reported once).
pub fn take_found() -> Vec<String> {
    std::mem::take(&mut *FOUND.lock().unwrap_or_else(|p| p.into_inner()))
}

/// Checks one WebChecker's conditions.
fn check_checker(obj: &DynamicObject) {
    let name = format!(
        "{}/{}",
        obj.metadata.namespace.as_deref().unwrap_or(""),
        obj.metadata.name.as_deref().unwrap_or("")
    );
    let conditions = obj.data["status"]["conditions"].as_array();
    for c in conditions.into_iter().flatten() {
        let message = c["message"].as_str().unwrap_or("");
        if let Some(why) = fault(message) {
            let type_ = c["type"].as_str().unwrap_or("?");
            found(format!(
                "WebChecker {name}: condition {type_}: {why}: {message:?}"
            ));
        }
    }
}

/// Checks one Event of the operator.
fn check_event(e: &Event) {
    let ours = [
        e.reporting_component.as_deref(),
        e.source.as_ref().and_then(|s| s.component.as_deref()),
    ]
    .into_iter()
    .flatten()
    .any(|c| c.starts_with("webchecker"));
    if !ours {
        return;
    }
    let message = e.message.as_deref().unwrap_or("");
    if let Some(why) = fault(message) {
        let about = e.involved_object.name.as_deref().unwrap_or("?");
        found(format!(
            "Event {} about {about}: {why}: {message:?}",
            e.reason.as_deref().unwrap_or("?")
        ));
    }
}

/// Watches `api` for ever (re-listing after any error), checking each object.
async fn watch<K>(api: Api<K>, check: fn(&K))
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    loop {
        let list = match api.list(&ListParams::default()).await {
            Ok(l) => l,
            Err(_) => {
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        list.items.iter().for_each(check);
        let Some(rv) = list.metadata.resource_version else {
            continue;
        };
        let wp = WatchParams::default().timeout(290);
        let Ok(stream) = api.watch(&wp, &rv).await else {
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        };
        let mut stream = stream.boxed();
        while let Some(Ok(ev)) = stream.next().await {
            match ev {
                WatchEvent::Added(o) | WatchEvent::Modified(o) => check(&o),
                WatchEvent::Error(_) => break,
                _ => {}
            }
        }
    }
}

async fn client_of(kubeconfig: &std::path::Path) -> Option<Client> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).ok()?;
    let options = kube::config::KubeConfigOptions::default();
    let config = kube::Config::from_custom_kubeconfig(kc, &options)
        .await
        .ok()?;
    Client::try_from(config).ok()
}

/// Starts watching the control plane of `kubeconfig` on a thread of its own
/// (the tests' runtimes come and go with each test).
pub fn watch_cluster(kubeconfig: std::path::PathBuf) {
    let _ = std::thread::Builder::new()
        .name("message-check".into())
        .spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                let client = loop {
                    if let Some(client) = client_of(&kubeconfig).await {
                        break client;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                };
                let checkers: Api<DynamicObject> = Api::all_with(
                    client.clone(),
                    &kube::api::ApiResource::erase::<webchecker::api::WebChecker>(&()),
                );
                let events: Api<Event> = Api::all(client);
                tokio::join!(watch(checkers, check_checker), watch(events, check_event));
            });
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_dumps_and_long_messages_are_refused() {
        assert_eq!(fault("HTTP 503 in 4 ms"), None);
        assert_eq!(
            fault(
                "probes from replica r2 in zone c fail (Timeout) while replica r1 in zone a reached the target in 3 ms"
            ),
            None
        );
        let dump = "unconfirmed: cannot make a token: ApiError: forbidden (ErrorResponse { status: Some(Failure) })";
        assert!(fault(dump).is_some());
        assert!(fault(&"x".repeat(MAX_MESSAGE + 1)).is_some());
        assert_eq!(
            fault(&"é".repeat(MAX_MESSAGE)),
            None,
            "characters, not bytes"
        );
    }
}
