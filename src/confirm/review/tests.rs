use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;

use super::*;
use crate::confirm::claims::encode;
use crate::kubeio::mock_api::{client, ok};

const USER: &str = "system:serviceaccount:ops:webchecker-operator";

fn token(pod: Option<&str>, aud: &str, sub: &str, salt: usize) -> String {
    let mut claims = json!({
        "aud": [aud], "sub": sub, "exp": chrono::Utc::now().timestamp() + 3600, "jti": salt,
    });
    if let Some(pod) = pod {
        claims["kubernetes.io"] = json!({"pod": {"name": pod, "uid": "u"}});
    }
    encode(&claims)
}

fn member_token(pod: &str, salt: usize) -> String {
    token(Some(pod), AUDIENCE, USER, salt)
}

fn place(ip: &str) -> MemberPlace {
    MemberPlace {
        address: Some(format!("{ip}:8080")),
        confirm_address: Some(format!("{ip}:8081")),
        ..Default::default()
    }
}

/// A reviewer whose API server accepts every token as `r1`'s, counting
/// reviews, each taking `delay`.
fn reviewer(delay: Duration) -> (Arc<Reviewer>, Arc<AtomicUsize>) {
    let (client, mut handle) = client();
    let reviews = Arc::new(AtomicUsize::new(0));
    let counted = reviews.clone();
    tokio::spawn(async move {
        while let Some((req, send)) = handle.next_request().await {
            assert!(req.uri().path().ends_with("/tokenreviews"), "{}", req.uri());
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                send.send_response(ok(json!({
                    "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                    "spec": {}, "status": {"authenticated": true, "audiences": [AUDIENCE],
                        "user": {"username": USER, "extra": {(POD_NAME_EXTRA): ["r1"]}}},
                })));
            });
        }
    });
    let r = Reviewer::new(client, "ops", "webchecker-operator", false);
    (Arc::new(r), reviews)
}

#[tokio::test]
async fn made_up_tokens_are_refused_without_a_review() {
    let (r, reviews) = reviewer(Duration::ZERO);
    let member = place("10.0.0.1");
    let home: IpAddr = "10.0.0.1".parse().unwrap();
    let stranger: IpAddr = "10.9.9.9".parse().unwrap();
    let cases = [
        ("garbage".to_string(), "r1", Some(&member), home),
        (
            token(Some("r1"), "kubernetes", USER, 0),
            "r1",
            Some(&member),
            home,
        ),
        (
            token(Some("r1"), AUDIENCE, "system:serviceaccount:ops:other", 0),
            "r1",
            Some(&member),
            home,
        ),
        (token(None, AUDIENCE, USER, 0), "r1", Some(&member), home),
        (member_token("r2", 0), "r1", Some(&member), home),
        (member_token("r1", 0), "r1", None, home),
        (member_token("r1", 0), "r1", Some(&member), stranger),
    ];
    for (token, from, place, peer) in &cases {
        let refused = r.precheck(token, from, *place, *peer);
        assert!(refused.is_err(), "{token} from {peer}: accepted");
    }
    assert_eq!(
        r.precheck(&member_token("r1", 0), "r1", Some(&member), home),
        Ok(())
    );
    let expired = encode(&json!({"aud": [AUDIENCE], "sub": USER, "exp": 1,
        "kubernetes.io": {"pod": {"name": "r1"}}}));
    assert_eq!(
        r.precheck(&expired, "r1", Some(&member), home),
        Err("an expired token")
    );
    assert_eq!(reviews.load(Ordering::SeqCst), 0);
    // Unbound tokens pass the free checks only where they are allowed.
    let (client, _h) = client();
    let lax = Reviewer::new(client, "ops", "webchecker-operator", true);
    let unbound = token(None, AUDIENCE, USER, 0);
    assert_eq!(lax.precheck(&unbound, "r1", Some(&member), home), Ok(()));
    assert!(
        lax.precheck(&unbound, "r1", Some(&member), stranger)
            .is_err()
    );
}

#[tokio::test]
async fn a_members_review_is_kept_for_it_whatever_others_send() {
    let (r, reviews) = reviewer(Duration::ZERO);
    let mine = member_token("r1", 0);
    assert_eq!(r.review(&mine, "r1").await, Ok(()));
    assert_eq!(reviews.load(Ordering::SeqCst), 1);
    // Thousands of other tokens reviewed for other members (the worst a
    // member's own address could send) do not evict r1's.
    for i in 0..1000 {
        let _ = r
            .review(&member_token("r9", i), &format!("r9-{}", i % 50))
            .await;
    }
    let before = reviews.load(Ordering::SeqCst);
    assert_eq!(r.review(&mine, "r1").await, Ok(()));
    assert_eq!(
        reviews.load(Ordering::SeqCst),
        before,
        "answered from r1's cache"
    );
}

#[tokio::test]
async fn a_burst_of_asks_waits_for_reviews_instead_of_being_refused() {
    let (r, reviews) = reviewer(Duration::from_millis(50));
    // Fifty asks with one token, and ten members' new tokens at once: more
    // than the reviews in flight at once; every one waits its turn.
    let mut asks = Vec::new();
    for _ in 0..50 {
        let r = r.clone();
        asks.push(tokio::spawn(async move {
            r.review(&member_token("r1", 0), "r1").await
        }));
    }
    for i in 1..=10 {
        let r = r.clone();
        asks.push(tokio::spawn(async move {
            r.review(&member_token("r1", i), "r1").await
        }));
    }
    for a in asks {
        assert_eq!(a.await.unwrap(), Ok(()));
    }
    assert_eq!(reviews.load(Ordering::SeqCst), 11, "one review per token");
}
