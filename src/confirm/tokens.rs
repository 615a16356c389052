//! The credentials of asks: the owner sends a token of the install's
//! ServiceAccount made for [`super::AUDIENCE`] alone (TokenRequest, bound to
//! its pod when it knows its pod), and the confirmer accepts it when a
//! TokenReview for that audience names the same ServiceAccount (and, for a
//! bound token, the pod of the replica that says it asks). Such a token is
//! refused by the API server itself, so a confirmer learns nothing it could
//! use elsewhere.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{
    BoundObjectReference, TokenRequest, TokenRequestSpec, TokenReview, TokenReviewSpec,
};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::sync::{Semaphore, watch};

use super::AUDIENCE;

/// How long a token made for asks lives; it is made again at 80 %.
const TOKEN_LIFETIME: Duration = Duration::from_secs(3600);
/// How long a review is trusted (a deleted pod's token stays accepted at
/// most this long).
const REVIEW_TTL: Duration = Duration::from_secs(60);
/// Reviews remembered at most (a stranger's made-up tokens evict each other).
const REVIEW_CACHE: usize = 64;
/// Deadline of one call to the API server.
const CALL: Duration = Duration::from_secs(5);
/// The pod a bound token was made for, as TokenReview tells it.
const POD_NAME_EXTRA: &str = "authentication.kubernetes.io/pod-name";

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
}

/// How long a failure to make a token is remembered (no API call per
/// failing probe while the permission is missing).
const RETRY_AFTER: Duration = Duration::from_secs(10);

impl TokenSource {
    pub fn new(
        client: Client,
        namespace: &str,
        service_account: &str,
        pod: Option<(String, String)>,
    ) -> Self {
        TokenSource {
            client,
            namespace: namespace.to_string(),
            service_account: service_account.to_string(),
            pod,
            cached: Mutex::new(None),
            making: tokio::sync::Mutex::new(()),
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
                "cannot make a token of ServiceAccount {}/{}: {e}",
                self.namespace, self.service_account
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

/// A token's review: the pod it is bound to, or why it is refused; and
/// until when that holds.
type Review = (Result<Option<String>, String>, Instant);

/// The confirmer's side: who sent a token.
pub struct Reviewer {
    client: Client,
    /// `system:serviceaccount:<namespace>:<name>`.
    expected_user: String,
    /// By the token's SHA-256: the pod it is bound to (if any), or why it
    /// was refused, and until when that holds.
    cache: Mutex<HashMap<Vec<u8>, Review>>,
    /// Reviews in flight at most: made-up tokens cannot load the API server.
    reviews: Semaphore,
    /// When the last reviews started: at most [`REVIEWS_PER_SECOND`] a second.
    recent: Mutex<std::collections::VecDeque<Instant>>,
    /// Reviews under way, by the token's SHA-256: asks with a token whose
    /// review is under way wait for it instead of starting another (a
    /// replica's first failures after a cut come in a burst, all with one
    /// token, and must not be refused for the limits above).
    inflight: Mutex<HashMap<Vec<u8>, watch::Receiver<Option<Verdict>>>>,
}

type Verdict = Result<Option<String>, String>;

/// Removes a review's entry from the reviews under way when dropped.
struct Leave<'a>(
    &'a Mutex<HashMap<Vec<u8>, watch::Receiver<Option<Verdict>>>>,
    &'a [u8],
);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(self.1);
    }
}

/// TokenReviews a confirmer asks for per second at most. Members need one
/// per token they make (every 48 minutes); more are strangers' tokens.
const REVIEWS_PER_SECOND: usize = 5;

impl Reviewer {
    pub fn new(client: Client, namespace: &str, service_account: &str) -> Self {
        Reviewer {
            client,
            expected_user: format!("system:serviceaccount:{namespace}:{service_account}"),
            cache: Mutex::new(HashMap::new()),
            reviews: Semaphore::new(2),
            recent: Mutex::new(std::collections::VecDeque::new()),
            inflight: Mutex::new(HashMap::new()),
        }
    }

    /// The pod the token is bound to (`None`: not bound), or why it is not
    /// accepted.
    pub async fn review(&self, token: &str) -> Result<Option<String>, String> {
        let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, token.as_bytes())
            .as_ref()
            .to_vec();
        let now = Instant::now();
        if let Some((r, until)) = self
            .cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&digest)
            && now < *until
        {
            return r.clone();
        }
        // One review per token at a time: join one under way.
        let tx = {
            let mut inflight = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
            match inflight.get(&digest) {
                Some(rx) => Err(rx.clone()),
                None => {
                    let (tx, rx) = watch::channel(None);
                    inflight.insert(digest.clone(), rx);
                    Ok(tx)
                }
            }
        };
        let tx = match tx {
            Ok(tx) => tx,
            Err(mut rx) => {
                return match rx.wait_for(Option::is_some).await {
                    Ok(v) => v.clone().unwrap_or_else(|| Err("cannot review".into())),
                    Err(_) => Err("cannot review the credentials: the review was abandoned".into()),
                };
            }
        };
        // Whatever happens to this future, the entry goes (the waiters then
        // hear that the review was abandoned).
        let _leave = Leave(&self.inflight, &digest);
        let r = self.review_now(token, &digest, now).await;
        let _ = tx.send(Some(r.clone()));
        r
    }

    /// Reviews `token` within the limits, and caches the verdict.
    async fn review_now(&self, token: &str, digest: &[u8], now: Instant) -> Verdict {
        let Ok(_permit) = self.reviews.try_acquire() else {
            return Err("too many credentials to review at once".into());
        };
        {
            let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
            while recent
                .front()
                .is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(1))
            {
                recent.pop_front();
            }
            if recent.len() >= REVIEWS_PER_SECOND {
                return Err("too many credentials to review this second".into());
            }
            recent.push_back(now);
        }
        let r = self.ask_api_server(token).await;
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= REVIEW_CACHE {
            cache.retain(|_, (_, until)| now < *until);
            if cache.len() >= REVIEW_CACHE {
                cache.clear();
            }
        }
        // An API server that did not answer is no verdict on the token.
        if !r.as_ref().is_err_and(|e| e.starts_with("cannot review")) {
            cache.insert(digest.to_vec(), (r.clone(), now + REVIEW_TTL));
        }
        r
    }

    async fn ask_api_server(&self, token: &str) -> Result<Option<String>, String> {
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_string(),
                audiences: Some(vec![AUDIENCE.to_string()]),
            },
            ..Default::default()
        };
        let done = tokio::time::timeout(CALL, api.create(&PostParams::default(), &review))
            .await
            .map_err(|_| "cannot review the credentials: timed out".to_string())?
            .map_err(|e| format!("cannot review the credentials: {e}"))?;
        let status = done.status.unwrap_or_default();
        if status.authenticated != Some(true) {
            return Err("the credentials are not valid for this audience".into());
        }
        let user = status.user.unwrap_or_default();
        if user.username.as_deref() != Some(self.expected_user.as_str()) {
            return Err(format!(
                "the credentials are not those of {}",
                self.expected_user
            ));
        }
        let audiences = status.audiences.unwrap_or_default();
        if !audiences.is_empty() && !audiences.iter().any(|a| a == AUDIENCE) {
            return Err("the credentials are for another audience".into());
        }
        Ok(user
            .extra
            .and_then(|e| e.get(POD_NAME_EXTRA).and_then(|v| v.first().cloned())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubeio::mock_api::{client, ok};

    #[tokio::test]
    async fn made_up_tokens_cost_the_api_server_at_most_five_reviews_a_second() {
        let (client, mut handle) = client();
        let reviewer = Reviewer::new(client, "ops", "webchecker-operator");
        let api = tokio::spawn(async move {
            let mut served = 0;
            while let Some((req, send)) = handle.next_request().await {
                assert!(req.uri().path().ends_with("/tokenreviews"), "{}", req.uri());
                send.send_response(ok(serde_json::json!({
                    "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                    "spec": {}, "status": {"authenticated": false},
                })));
                served += 1;
            }
            served
        });
        let mut refused_here = 0;
        for i in 0..20 {
            match reviewer.review(&format!("made-up-{i}")).await {
                Err(e) if e.contains("this second") => refused_here += 1,
                Err(e) => assert!(e.contains("not valid"), "{e}"),
                Ok(_) => panic!("a made-up token was accepted"),
            }
        }
        // The same token again: answered from the cache, no review.
        assert!(reviewer.review("made-up-0").await.is_err());
        drop(reviewer);
        assert_eq!(api.await.unwrap(), 5);
        assert_eq!(refused_here, 15);
    }

    /// A replica's first failures after a cut ask at once, before it has a
    /// token: one TokenRequest serves them all.
    #[tokio::test]
    async fn a_burst_of_asks_makes_one_token() {
        let (client, mut handle) = client();
        let source =
            std::sync::Arc::new(TokenSource::new(client, "ops", "webchecker-operator", None));
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
    }

    /// A replica's first failures after a cut arrive at once, all with its
    /// one token: one review serves them all, none is refused for the limits.
    #[tokio::test]
    async fn a_burst_of_asks_with_one_token_waits_for_one_review() {
        let (client, mut handle) = client();
        let reviewer = std::sync::Arc::new(Reviewer::new(client, "ops", "webchecker-operator"));
        let api = tokio::spawn(async move {
            let mut served = 0;
            while let Some((_, send)) = handle.next_request().await {
                tokio::time::sleep(Duration::from_millis(50)).await;
                send.send_response(ok(serde_json::json!({
                    "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                    "spec": {}, "status": {"authenticated": true, "audiences": [AUDIENCE],
                        "user": {"username": "system:serviceaccount:ops:webchecker-operator",
                            "extra": {(POD_NAME_EXTRA): ["r1"]}}},
                })));
                served += 1;
            }
            served
        });
        let asks: Vec<_> = (0..50)
            .map(|_| {
                let r = reviewer.clone();
                tokio::spawn(async move { r.review("the-token").await })
            })
            .collect();
        for a in asks {
            assert_eq!(a.await.unwrap(), Ok(Some("r1".to_string())));
        }
        drop(reviewer);
        assert_eq!(api.await.unwrap(), 1, "one review for the burst");
    }
}
