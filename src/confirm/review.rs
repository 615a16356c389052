//! The confirmer's side of the credentials: who sent an ask.
//!
//! A member's ask must pass, in order:
//! 1. free checks of what the token says of itself ([`super::claims`]):
//!    our audience, the install's ServiceAccount, not expired, bound to the
//!    pod of the replica named by the ask (`from`), unless unbound tokens
//!    are allowed (`--confirm-allow-unbound-tokens`);
//! 2. `from` is a member now (its Lease) and the ask came from an address
//!    that member advertises: a token copied elsewhere is worth nothing;
//! 3. a TokenReview for our audience that names the same ServiceAccount and
//!    pod, remembered per member.
//!
//! Only asks that pass 1 and 2 cost a review, so a pod that sends made-up
//! tokens costs the API server nothing and cannot take a member's reviews:
//! each member's good reviews are kept apart from everyone else's, and a
//! member's ask waits for its review rather than being refused for load.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::sync::{Semaphore, watch};

use crate::ask::AUDIENCE;
use crate::coordination::shard::view::MemberPlace;

/// How long a good review is trusted. A member's token is also checked
/// against its Lease and address at every ask, so a pod that is gone is
/// refused at once whatever this says.
const GOOD_FOR: Duration = Duration::from_secs(300);
/// How long a refused token stays refused without another review.
const BAD_FOR: Duration = Duration::from_secs(30);
/// Good reviews kept per member (its current token and the next).
const GOOD_PER_MEMBER: usize = 4;
/// Refused tokens kept per member.
const BAD_PER_MEMBER: usize = 8;
/// Reviews in flight at once; more wait their turn.
const REVIEWS: usize = 4;
/// Deadline of one review: the confirmer's reads before its probe must fit
/// the owner's wait.
const CALL: Duration = Duration::from_secs(2);
/// The pod a bound token was made for, as TokenReview tells it.
const POD_NAME_EXTRA: &str = "authentication.kubernetes.io/pod-name";

/// Why an ask's credentials were not accepted (the owner's log says it).
pub type Refusal = &'static str;

type Outcome = Result<(), Refusal>;

/// Per member: token digests, and until when each holds.
type Ledger = Mutex<HashMap<String, VecDeque<(Vec<u8>, Instant)>>>;

pub struct Reviewer {
    client: Client,
    /// `system:serviceaccount:<namespace>:<name>`.
    expected_user: String,
    allow_unbound: bool,
    /// Per member: digests of its tokens a review accepted, and until when.
    good: Ledger,
    /// Per member: digests of tokens a review refused, and until when.
    bad: Ledger,
    /// Reviews under way, by digest: asks with the same token wait for it.
    inflight: Mutex<HashMap<Vec<u8>, watch::Receiver<Option<Outcome>>>>,
    reviews: Semaphore,
}

/// Removes a review's entry from the reviews under way when dropped.
struct Leave<'a>(&'a Reviewer, &'a [u8]);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        lock(&self.0.inflight).remove(self.1);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether `peer` is an address `place` advertises.
fn advertises(place: &MemberPlace, peer: IpAddr) -> bool {
    [&place.address, &place.confirm_address]
        .into_iter()
        .flatten()
        .filter_map(|a| a.parse::<SocketAddr>().ok())
        .any(|a| a.ip().to_canonical() == peer.to_canonical())
}

/// Looks `digest` up in `member`'s entries, dropping those that expired.
fn holds(map: &Ledger, member: &str, digest: &[u8], now: Instant) -> bool {
    let mut map = lock(map);
    let Some(entries) = map.get_mut(member) else {
        return false;
    };
    entries.retain(|(_, until)| now < *until);
    entries.iter().any(|(d, _)| d == digest)
}

fn remember(map: &Ledger, member: &str, digest: &[u8], until: Instant, at_most: usize) {
    let mut map = lock(map);
    let entries = map.entry(member.to_string()).or_default();
    entries.retain(|(d, _)| d != digest);
    entries.push_back((digest.to_vec(), until));
    while entries.len() > at_most {
        entries.pop_front();
    }
}

impl Reviewer {
    pub fn new(
        client: Client,
        namespace: &str,
        service_account: &str,
        allow_unbound: bool,
    ) -> Self {
        Reviewer {
            client,
            expected_user: format!("system:serviceaccount:{namespace}:{service_account}"),
            allow_unbound,
            good: Mutex::new(HashMap::new()),
            bad: Mutex::new(HashMap::new()),
            inflight: Mutex::new(HashMap::new()),
            reviews: Semaphore::new(REVIEWS),
        }
    }

    /// The free checks (1 and 2 of the module doc) of an ask from `peer`
    /// that says it comes from `from`, a member at `place` (`None`: no
    /// member of that name).
    pub fn precheck(
        &self,
        token: &str,
        from: &str,
        place: Option<&MemberPlace>,
        peer: IpAddr,
    ) -> Outcome {
        let claims = super::claims::read(token).ok_or("not a ServiceAccount token")?;
        if !claims.audiences.iter().any(|a| a == AUDIENCE) {
            return Err("a token for another audience");
        }
        if claims.subject != self.expected_user {
            return Err("a token of another ServiceAccount");
        }
        let now = chrono::Utc::now().timestamp();
        if claims.expires.is_some_and(|exp| exp <= now) {
            return Err("an expired token");
        }
        match &claims.pod {
            Some(pod) if pod != from => return Err("a token bound to another pod"),
            None if !self.allow_unbound => return Err("a token bound to no pod"),
            _ => {}
        }
        let place = place.ok_or("the asker is no member")?;
        if !advertises(place, peer) {
            return Err("not from the asker's address");
        }
        Ok(())
    }

    /// Whether `token`, which passed [`Self::precheck`] for `from`, is a
    /// token of `from` as the API server reviews it.
    pub async fn review(&self, token: &str, from: &str) -> Outcome {
        let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, token.as_bytes())
            .as_ref()
            .to_vec();
        let now = Instant::now();
        if holds(&self.good, from, &digest, now) {
            return Ok(());
        }
        if holds(&self.bad, from, &digest, now) {
            return Err("credentials the API server refused");
        }
        // One review per token at a time: join one under way.
        let joined = {
            let mut inflight = lock(&self.inflight);
            match inflight.get(&digest) {
                Some(rx) => Err(rx.clone()),
                None => {
                    let (tx, rx) = watch::channel(None);
                    inflight.insert(digest.clone(), rx);
                    Ok(tx)
                }
            }
        };
        let tx = match joined {
            Ok(tx) => tx,
            Err(mut rx) => {
                return match rx.wait_for(Option::is_some).await {
                    Ok(v) => v.unwrap_or(Err("the review was abandoned")),
                    Err(_) => Err("the review was abandoned"),
                };
            }
        };
        let _leave = Leave(self, &digest);
        let r = self.review_now(token, from).await;
        match r {
            Ok(()) => remember(&self.good, from, &digest, now + GOOD_FOR, GOOD_PER_MEMBER),
            // An API server that did not answer is no verdict on the token.
            Err(why) if why != UNANSWERED => {
                remember(&self.bad, from, &digest, now + BAD_FOR, BAD_PER_MEMBER)
            }
            Err(_) => {}
        }
        let _ = tx.send(Some(r));
        r
    }

    async fn review_now(&self, token: &str, from: &str) -> Outcome {
        let Ok(_turn) = self.reviews.acquire().await else {
            return Err(UNANSWERED);
        };
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_string(),
                audiences: Some(vec![AUDIENCE.to_string()]),
            },
            ..Default::default()
        };
        let done = match tokio::time::timeout(CALL, api.create(&PostParams::default(), &review))
            .await
        {
            Ok(Ok(done)) => done,
            Ok(Err(e)) => {
                tracing::warn!(error = %crate::error::describe(&e), "cannot review an ask's credentials");
                return Err(UNANSWERED);
            }
            Err(_) => return Err(UNANSWERED),
        };
        let status = done.status.unwrap_or_default();
        if status.authenticated != Some(true) {
            return Err("credentials the API server refused");
        }
        let audiences = status.audiences.unwrap_or_default();
        if !audiences.is_empty() && !audiences.iter().any(|a| a == AUDIENCE) {
            return Err("a token for another audience");
        }
        let user = status.user.unwrap_or_default();
        if user.username.as_deref() != Some(self.expected_user.as_str()) {
            return Err("a token of another ServiceAccount");
        }
        let pod = user
            .extra
            .and_then(|e| e.get(POD_NAME_EXTRA).and_then(|v| v.first().cloned()));
        match pod {
            Some(pod) if pod != from => Err("a token bound to another pod"),
            None if !self.allow_unbound => Err("a token bound to no pod"),
            _ => Ok(()),
        }
    }
}

/// The review could not be had (the API server did not answer in time).
const UNANSWERED: Refusal = "the credentials could not be reviewed in time";

#[cfg(test)]
mod tests;
