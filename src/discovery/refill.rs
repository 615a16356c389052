//! A refill: the objects of one kind in one namespace, listed again (in
//! pages, each object trimmed as it comes) when stubs of that namespace
//! may now opt in (its Namespace opted in). Retried with the watches'
//! backoff until the list succeeds or the session ends.

use kube::api::ListParams;
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tracing::debug;

use super::trim::Kept;
use super::views::{Kind, Refilled};
use crate::kubeio::client::{CALL_DEADLINE, WatchBackoff};

/// The objects of `kind` in `ns`, trimmed.
pub(super) async fn list(client: Client, kind: Kind, ns: &str, page: u32) -> Refilled {
    match kind {
        Kind::Ingress => Refilled::Ingresses(all(Api::namespaced(client, ns), page).await),
        Kind::HttpRoute => Refilled::Routes(all(Api::namespaced(client, ns), page).await),
        Kind::GrpcRoute => Refilled::GrpcRoutes(all(Api::namespaced(client, ns), page).await),
        Kind::Service => Refilled::Services(all(Api::namespaced(client, ns), page).await),
        Kind::Gateway => Refilled::Gateways(all(Api::namespaced(client, ns), page).await),
    }
}

/// Every object of `api`, trimmed, in pages of `page`; a failed list starts
/// again after the backoff.
async fn all<K>(api: Api<K>, page: u32) -> Vec<K>
where
    K: Resource + Kept + Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut backoff = WatchBackoff::default();
    loop {
        match pages(&api, page).await {
            Ok(objects) => return objects,
            Err(why) => {
                debug!(
                    why,
                    "route discovery: listing a namespace again failed (retried)"
                );
                let wait = backoff.next().unwrap_or(std::time::Duration::from_secs(2));
                tokio::time::sleep(wait).await;
            }
        }
    }
}

async fn pages<K>(api: &Api<K>, page: u32) -> Result<Vec<K>, String>
where
    K: Resource + Kept + Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut out = Vec::new();
    let mut params = ListParams::default().limit(page);
    loop {
        let list = tokio::time::timeout(CALL_DEADLINE, api.list(&params))
            .await
            .map_err(|_| "no answer within the call deadline".to_string())?
            .map_err(|e| e.to_string())?;
        for mut o in list.items {
            o.trim();
            out.push(o);
        }
        match list.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(out),
        }
    }
}
