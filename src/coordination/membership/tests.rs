//! Renewal paths against a mocked API server (kube's tower-test pattern).

use http::Response;
use kube::client::Body;
use serde_json::json;

use super::*;
use crate::kubeio::mock_api::{ApiHandle, ok, status};

/// A member that has joined (epoch uid-r1); lease 6 x retry.
fn membership(retry: Duration) -> (Arc<Membership>, Client, ApiHandle) {
    let (m, client, handle) = joining(retry, None, "");
    m.joined_for_test("uid-r1");
    (m, client, handle)
}

fn lease(uid: &str, rv: &str) -> Response<Body> {
    ok(json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": { "name": "webchecker-member-r1", "namespace": "ns", "uid": uid, "resourceVersion": rv },
        "spec": { "holderIdentity": "r1" },
    }))
}

async fn answer(h: &mut ApiHandle, method: &str, resp: Response<Body>) {
    crate::kubeio::mock_api::answer(h, method, None, resp).await
}

fn failures(m: &Membership, reason: &str) -> u64 {
    m.metrics
        .lease_renew_failures
        .with_label_values(&[reason])
        .get()
}

#[tokio::test]
async fn a_renewal_is_a_merge_patch_that_names_our_epoch_and_no_version() {
    let (m, client, mut h) = membership(Duration::from_secs(1));
    let api = tokio::spawn(async move {
        let (req, send) = h.next_request().await.unwrap();
        assert_eq!(req.method(), "PATCH");
        assert_eq!(
            req.headers()["content-type"],
            "application/merge-patch+json"
        );
        let v = crate::kubeio::mock_api::body_json(req).await;
        assert_eq!(v["metadata"]["uid"], "uid-r1");
        assert!(v["metadata"].get("resourceVersion").is_none(), "{v}");
        assert_eq!(v["spec"]["holderIdentity"], "r1");
        assert!(v["spec"]["renewTime"].is_string(), "{v}");
        send.send_response(lease("uid-r1", "2"));
    });
    assert!(!m.renew(&client).await);
    api.await.unwrap();
    assert_eq!(m.epoch().as_deref(), Some("uid-r1"));
    assert!(m.can_write());
}

/// Asked to stop, the member says so in its next renewal, so the sharder
/// drains its checkers while it still probes them.
#[tokio::test]
async fn a_leaving_member_says_so_in_its_renewal() {
    let (m, client, mut h) = membership(Duration::from_secs(1));
    m.leave();
    let api = tokio::spawn(async move {
        let (req, send) = h.next_request().await.unwrap();
        let v = crate::kubeio::mock_api::body_json(req).await;
        assert_eq!(
            v["metadata"]["annotations"][LEAVING_ANNOTATION], "true",
            "{v}"
        );
        send.send_response(lease("uid-r1", "2"));
    });
    assert!(!m.renew(&client).await);
    api.await.unwrap();
    assert!(
        m.can_write(),
        "it still probes until each checker is drained"
    );
}

/// The UID is immutable: a patch naming ours on another incarnation's Lease
/// is refused with 422.
#[tokio::test]
async fn a_lease_of_another_incarnation_is_a_loss() {
    let (m, client, mut h) = membership(Duration::from_secs(1));
    let api = tokio::spawn(async move {
        answer(&mut h, "PATCH", status(422)).await;
        answer(&mut h, "GET", lease("uid-other", "9")).await;
    });
    assert!(m.renew(&client).await, "lost");
    api.await.unwrap();
    assert_eq!(m.epoch(), None);
    assert!(!m.dispatch_allowed());
    assert_eq!(failures(&m, "lost"), 1);
}

/// A 422 while the Lease is still ours refuses our patch itself; a 409 (the
/// server gave up on concurrent writes) says nothing.
#[tokio::test]
async fn a_422_or_409_on_our_own_lease_is_no_loss() {
    let (m, client, mut h) = membership(Duration::from_secs(1));
    let api = tokio::spawn(async move {
        answer(&mut h, "PATCH", status(409)).await;
        answer(&mut h, "GET", lease("uid-r1", "7")).await;
        answer(&mut h, "PATCH", status(422)).await;
        answer(&mut h, "GET", lease("uid-r1", "7")).await;
    });
    assert!(!m.renew(&client).await);
    assert_eq!(failures(&m, "unreachable"), 1);
    assert!(!m.renew(&client).await);
    assert_eq!(failures(&m, "rejected"), 1);
    api.await.unwrap();
    assert_eq!(failures(&m, "lost"), 0);
    assert_eq!(m.epoch().as_deref(), Some("uid-r1"));
}

#[tokio::test]
async fn a_deleted_lease_is_a_loss() {
    let (m, client, mut h) = membership(Duration::from_secs(1));
    let api = tokio::spawn(async move { answer(&mut h, "PATCH", status(404)).await });
    assert!(m.renew(&client).await);
    api.await.unwrap();
    assert_eq!(m.epoch(), None);
}

/// 401/403/422 were counted as "unreachable" (keep probing
/// for ever); they are answers that the Lease will expire under us.
#[tokio::test]
async fn a_refused_renewal_is_not_an_outage() {
    let (m, client, mut h) = membership(Duration::from_secs(1));
    let api = tokio::spawn(async move { answer(&mut h, "PATCH", status(403)).await });
    assert!(!m.renew(&client).await);
    api.await.unwrap();
    assert_eq!(failures(&m, "rejected"), 1);
    assert_eq!(failures(&m, "unreachable"), 0);
    assert!(!m.can_write());
    assert_eq!(m.judge_since(), None);
}

#[tokio::test]
async fn a_renewal_that_hangs_ends_at_its_deadline_as_unanswered() {
    let (m, client, mut h) = membership(Duration::from_millis(100));
    let heartbeat = tokio::spawn(m.clone().heartbeat());
    let api = tokio::spawn(async move {
        // Accept the request and never answer.
        let (_req, send) = h.next_request().await.unwrap();
        tokio::time::sleep(Duration::from_secs(5)).await;
        drop(send);
    });
    let t = Instant::now();
    assert!(!m.renew(&client).await);
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "bounded by the retry period"
    );
    assert_eq!(failures(&m, "unreachable"), 1);
    assert!(!m.can_write(), "unreachable: write nothing");
    assert!(m.dispatch_allowed(), "but keep probing");
    api.abort();
    heartbeat.abort();
}

/// Campaign window "accept and never answer": a watch opened during the
/// fault hangs; the feed must hear that the API server answers again. One
/// slow answer on a busy API server is no such fault (a fresh watch re-lists
/// the whole shard, which would add to the load).
#[tokio::test]
async fn a_renewal_answered_after_an_outage_is_told_as_a_reconnect() {
    let retry = Duration::from_millis(20);
    let (m, client, mut h) = membership(retry);
    let reconnects = m.reconnects();
    let api = tokio::spawn(async move {
        answer(&mut h, "PATCH", lease("uid-r1", "2")).await;
        answer(&mut h, "PATCH", status(503)).await;
        answer(&mut h, "PATCH", lease("uid-r1", "3")).await;
        answer(&mut h, "PATCH", status(503)).await;
        answer(&mut h, "PATCH", status(503)).await;
        answer(&mut h, "PATCH", lease("uid-r1", "4")).await;
    });
    assert!(!m.renew(&client).await);
    assert!(!m.renew(&client).await);
    assert!(!m.renew(&client).await);
    assert!(
        !reconnects.has_changed().unwrap(),
        "one failure is no outage"
    );
    assert!(!m.renew(&client).await);
    // Unanswered for longer than the renew deadline (4 retry periods).
    tokio::time::sleep(retry * 5).await;
    assert!(!m.renew(&client).await);
    assert!(!reconnects.has_changed().unwrap(), "still out");
    assert!(!m.renew(&client).await);
    assert!(reconnects.has_changed().unwrap(), "back after the outage");
    api.await.unwrap();
}

/// Campaign window "accept and never answer" (seed 138277570, window 190):
/// the cut-off replica's attempt hangs past the end of the fault; it must
/// hear that its Lease is gone within one retry period of the API server
/// answering again, not after that attempt's deadline.
#[tokio::test(start_paused = true)]
async fn a_loss_is_heard_within_a_retry_period_while_an_earlier_attempt_hangs() {
    let retry = Duration::from_secs(1);
    let (m, client, mut h) = membership(retry);
    let (lost_tx, mut lost_rx) = tokio::sync::mpsc::channel(1);
    let run = tokio::spawn(m.clone().run(client, move || {
        let tx = lost_tx.clone();
        async move {
            let _ = tx.send(tokio::time::Instant::now()).await;
        }
    }));
    // The first attempt goes into the void...
    let (req, hung) = h.next_request().await.unwrap();
    assert_eq!(req.method(), "PATCH");
    let hung_at = tokio::time::Instant::now();
    // ...the API server answers again: the next attempt hears the loss.
    let (req, send) = h.next_request().await.unwrap();
    assert_eq!(req.method(), "PATCH");
    assert!(
        hung_at.elapsed() <= retry,
        "the next attempt waits for no deadline"
    );
    send.send_response(status(404));
    let fenced_at = lost_rx.recv().await.unwrap();
    assert!(fenced_at - hung_at <= retry);
    assert!(
        !m.dispatch_allowed(),
        "no probe between the loss and the join"
    );
    // Re-join under a new epoch; the hung attempt's late answer is about the
    // old one and changes nothing.
    answer(&mut h, "POST", lease("uid-r1b", "1")).await;
    tokio::time::timeout(Duration::from_secs(5), async {
        while m.epoch().as_deref() != Some("uid-r1b") {
            m.changed.notified().await;
        }
    })
    .await
    .expect("joined");
    drop(hung);
    assert_eq!(m.epoch().as_deref(), Some("uid-r1b"));
    run.abort();
}

/// A busy API server: a renewal answered 429 is tried again a quarter retry
/// period later, not a whole one (six attempts per lease of 3 s all failing
/// at a 50% share proved live members gone).
#[tokio::test(start_paused = true)]
async fn a_renewal_answered_429_is_tried_again_soon() {
    let retry = Duration::from_secs(1);
    let (m, client, mut h) = membership(retry);
    let run = tokio::spawn(m.clone().run(client, || std::future::ready(())));
    let (req, send) = h.next_request().await.unwrap();
    assert_eq!(req.method(), "PATCH");
    send.send_response(status(429));
    let failed_at = tokio::time::Instant::now();
    let (req, send) = h.next_request().await.unwrap();
    assert_eq!(req.method(), "PATCH");
    assert!(
        failed_at.elapsed() <= retry / 4,
        "the next attempt came {:?} after the 429",
        failed_at.elapsed()
    );
    send.send_response(lease("uid-r1", "2"));
    run.abort();
}

/// A slow API server (campaign seed 589230722, window 27: 786 ms added to
/// every call): an attempt answered after the next one started must leave
/// that one nothing stale to conflict on. With a resourceVersion, each later
/// attempt met a conflict, re-read, ran out of time, and a live replica's
/// Lease expired.
#[tokio::test(start_paused = true)]
async fn overlapping_attempts_on_a_slow_api_server_all_renew() {
    let retry = Duration::from_millis(500);
    let (m, client, mut h) = membership(retry);
    let run = tokio::spawn(m.clone().run(client, || std::future::ready(())));
    let mut held = Vec::new();
    for rv in 2..6 {
        // Each call is answered after 1.5 retry periods: attempts overlap.
        let (req, send) = h.next_request().await.unwrap();
        assert_eq!(req.method(), "PATCH", "no re-read: nothing conflicts");
        held.push((tokio::time::Instant::now(), send, rv));
        while held
            .first()
            .is_some_and(|(at, _, _)| at.elapsed() >= retry * 3 / 2)
        {
            let (_, send, rv) = held.remove(0);
            send.send_response(lease("uid-r1", &rv.to_string()));
        }
    }
    assert_eq!(failures(&m, "lost"), 0);
    assert_eq!(failures(&m, "unreachable"), 0);
    assert!(m.can_write());
    run.abort();
}

/// A member that has not joined yet, advertising `address` (if any) and
/// incarnation `inc`; lease 6 x retry.
fn joining(
    retry: Duration,
    address: Option<String>,
    inc: &str,
) -> (Arc<Membership>, Client, ApiHandle) {
    let (client, handle) = crate::kubeio::mock_api::client();
    let m = Membership::new(
        "r1".into(),
        LeaseAt::new("ns", "webchecker-member-r1"),
        retry * 6,
        retry * 4,
        retry,
        Arc::new(MembershipMetrics::register(&prometheus::Registry::new())),
        Advert {
            address,
            incarnation: inc.into(),
            ..Default::default()
        },
    );
    (m, client, handle)
}

/// A Lease under our name as another process (or an earlier attempt) left it.
fn found(uid: &str, rv: &str, address: Option<&str>, inc: &str) -> Response<Body> {
    let mut annotations = json!({ INCARNATION_ANNOTATION: inc });
    if let Some(a) = address {
        annotations[ADDRESS_ANNOTATION] = json!(a);
    }
    ok(json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": { "name": "webchecker-member-r1", "namespace": "ns", "uid": uid,
                      "resourceVersion": rv, "annotations": annotations },
        "spec": { "holderIdentity": "r1" },
    }))
}

#[tokio::test]
async fn a_conflict_on_joining_with_our_own_earlier_create_adopts_it() {
    let (m, client, mut h) = joining(Duration::from_secs(1), None, "inc-1");
    let api = tokio::spawn(async move {
        answer(&mut h, "POST", status(409)).await;
        answer(&mut h, "GET", found("uid-a", "5", None, "inc-1")).await;
    });
    m.join(&client).await.unwrap();
    api.await.unwrap();
    assert_eq!(m.epoch().as_deref(), Some("uid-a"));
}

#[tokio::test]
async fn a_lease_whose_process_is_gone_is_replaced_at_once_under_preconditions() {
    let refused = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let (m, client, mut h) = joining(Duration::from_secs(1), None, "new");
    let api = tokio::spawn(async move {
        answer(&mut h, "POST", status(409)).await;
        answer(&mut h, "GET", found("uid-old", "7", Some(&refused), "old")).await;
        let (req, send) = h.next_request().await.unwrap();
        assert_eq!(req.method(), "DELETE");
        let v = crate::kubeio::mock_api::body_json(req).await;
        assert_eq!(v["preconditions"]["uid"], "uid-old");
        assert_eq!(v["preconditions"]["resourceVersion"], "7");
        send.send_response(ok(
            json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
        ));
        answer(&mut h, "POST", lease("uid-new", "8")).await;
    });
    m.join(&client).await.unwrap();
    api.await.unwrap();
    assert_eq!(m.epoch().as_deref(), Some("uid-new"));
}

#[tokio::test]
async fn a_lease_another_process_renews_is_never_deleted_and_a_still_one_is_after_a_lease() {
    let retry = Duration::from_millis(10);
    let (m, client, mut h) = joining(retry, None, "mine");
    let join = tokio::spawn(async move { m.join(&client).await });
    // Renewed at every look: asked again with back-off, never deleted.
    let mut looks = Vec::new();
    for rv in 1..=6 {
        answer(&mut h, "POST", status(409)).await;
        looks.push(Instant::now());
        answer(
            &mut h,
            "GET",
            found("uid-x", &rv.to_string(), None, "other"),
        )
        .await;
    }
    let gaps: Vec<Duration> = looks.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.last().unwrap() >= &(retry * 4), "back-off: {gaps:?}");
    // Then it stands still: replaced once a whole lease (60 ms) passed.
    let still_since = Instant::now();
    loop {
        answer(&mut h, "POST", status(409)).await;
        answer(&mut h, "GET", found("uid-x", "6", None, "other")).await;
        let (req, send) = h.next_request().await.unwrap();
        if req.method() == "DELETE" {
            assert!(still_since.elapsed() >= retry * 6 - retry);
            send.send_response(ok(
                json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
            ));
            break;
        }
        assert_eq!(req.method(), "POST");
        send.send_response(status(409));
        answer(&mut h, "GET", found("uid-x", "6", None, "other")).await;
    }
    answer(&mut h, "POST", lease("uid-mine", "9")).await;
    join.await.unwrap().unwrap();
}
