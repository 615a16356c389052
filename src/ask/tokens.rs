//! The owner's credentials for asks: a token of the install's
//! ServiceAccount made for [`super::AUDIENCE`] alone (TokenRequest, bound to
//! its pod when it knows its pod), which the confirmer reviews
//! ([`super::review`]). Such a token is refused by the API server itself,
//! so a confirmer learns nothing it could use elsewhere.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::PostParams;
use kube::{Api, Client};
use prometheus::IntGauge;
use tracing::{info, warn};

use super::AUDIENCE;
use crate::observe::metrics::family::{Family, gauge};

const CONFIRM_CREDENTIALS_MISSING: Family = (
    "webchecker_confirm_credentials_missing",
    "1 while this replica could not get credentials to ask other replicas to confirm its failures and to probe from their zones (its ServiceAccount, its pod or the permission to request them is missing; its log says which): its failures then go unconfirmed; 0 otherwise",
);

/// The gauge a [`TokenSource`] sets while it cannot make a token.
pub fn credentials_missing(r: &prometheus::Registry) -> IntGauge {
    gauge(r, CONFIRM_CREDENTIALS_MISSING)
}

/// How long a token made for asks lives; it is made again at 80 %.
const TOKEN_LIFETIME: Duration = Duration::from_secs(3600);
/// Deadline of one call to the API server.
const CALL: Duration = Duration::from_secs(5);

/// The owner's side: a token for asks, made again before it expires.
pub struct TokenSource {
    client: Client,
    namespace: String,
    service_account: String,
    /// This replica's pod (name, UID), to bind the token to.
    pod: Option<(String, String)>,
    /// The token, or why none could be made, and until when that holds.
    cached: Mutex<Option<(Result<String, String>, Instant)>>,
    /// Held while a token is made: a burst of asks (a cut's first failures,
    /// before any token exists) makes one token, not one each, which the
    /// confirmers would each have to review.
    making: tokio::sync::Mutex<()>,
    /// 1 while no token could be made (`webchecker_confirm_credentials_missing`).
    missing: IntGauge,
}

/// How long a failure to make a token is remembered (no API call per
/// failing probe while the permission is missing).
pub const RETRY_AFTER: Duration = Duration::from_secs(10);

impl TokenSource {
    pub fn new(
        client: Client,
        namespace: &str,
        service_account: &str,
        pod: Option<(String, String)>,
        missing: IntGauge,
    ) -> Self {
        TokenSource {
            client,
            namespace: namespace.to_string(),
            service_account: service_account.to_string(),
            pod,
            cached: Mutex::new(None),
            making: tokio::sync::Mutex::new(()),
            missing,
        }
    }

    pub async fn token(&self) -> Result<String, String> {
        if let Some(t) = self.fresh() {
            return t;
        }
        let _making = self.making.lock().await;
        if let Some(t) = self.fresh() {
            return t;
        }
        let made = self.make().await;
        let was_missing = self.missing.get() == 1;
        match &made {
            Ok(_) => {
                self.missing.set(0);
                if was_missing {
                    info!("this replica holds a token to ask other replicas again");
                }
            }
            Err(why) => {
                self.missing.set(1);
                warn!(error = %why, "cannot make a token to ask other replicas to confirm failures or probe from their zones: this replica's failures go unconfirmed (webchecker_confirm_credentials_missing is 1)");
            }
        }
        let until = Instant::now()
            + if made.is_ok() {
                TOKEN_LIFETIME.mul_f64(0.8)
            } else {
                RETRY_AFTER
            };
        *self.cached.lock().unwrap_or_else(|p| p.into_inner()) = Some((made.clone(), until));
        made
    }

    /// The cached token (or failure) while it holds.
    fn fresh(&self) -> Option<Result<String, String>> {
        let cached = self.cached.lock().unwrap_or_else(|p| p.into_inner());
        cached
            .as_ref()
            .filter(|(_, until)| Instant::now() < *until)
            .map(|(t, _)| t.clone())
    }

    async fn make(&self) -> Result<String, String> {
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), &self.namespace);
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                audiences: Some(vec![AUDIENCE.to_string()]),
                expiration_seconds: Some(TOKEN_LIFETIME.as_secs() as i64),
                bound_object_ref: self.pod.as_ref().map(|(name, uid)| BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: Some(name.clone()),
                    uid: Some(uid.clone()),
                }),
            }),
            ..Default::default()
        };
        let made = tokio::time::timeout(
            CALL,
            api.create_subresource::<TokenRequest, TokenRequest>(
                "token",
                &self.service_account,
                &PostParams::default(),
                &request,
            ),
        )
        .await
        .map_err(|_| "the API server did not make a token in time".to_string())?
        .map_err(|e| {
            format!(
                "cannot make a token of ServiceAccount {}/{}: {}",
                self.namespace,
                self.service_account,
                crate::error::describe(&e)
            )
        })?;
        let token = made
            .status
            .and_then(|s| s.token)
            .filter(|t| !t.is_empty())
            .ok_or("the API server made an empty token")?;
        Ok(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubeio::mock_api::{client, ok};

    /// A replica's first failures after a cut ask at once, before it has a
    /// token: one TokenRequest serves them all.
    #[tokio::test]
    async fn a_burst_of_asks_makes_one_token() {
        let (client, mut handle) = client();
        let missing = IntGauge::new("missing", "missing").unwrap();
        let source = std::sync::Arc::new(TokenSource::new(
            client,
            "ops",
            "webchecker-operator",
            None,
            missing.clone(),
        ));
        let api = tokio::spawn(async move {
            let mut served = 0;
            while let Some((req, send)) = handle.next_request().await {
                assert!(req.uri().path().ends_with("/token"), "{}", req.uri());
                tokio::time::sleep(Duration::from_millis(50)).await;
                send.send_response(ok(serde_json::json!({
                    "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                    "spec": {"audiences": [AUDIENCE]},
                    "status": {"token": "t1", "expirationTimestamp": "2030-01-01T00:00:00Z"},
                })));
                served += 1;
            }
            served
        });
        let asks: Vec<_> = (0..50)
            .map(|_| {
                let s = source.clone();
                tokio::spawn(async move { s.token().await })
            })
            .collect();
        for a in asks {
            assert_eq!(a.await.unwrap(), Ok("t1".to_string()));
        }
        drop(source);
        assert_eq!(api.await.unwrap(), 1, "one token for the burst");
        assert_eq!(missing.get(), 0);
    }
}
