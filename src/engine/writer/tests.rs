use super::*;
use crate::api::WebCheckerStatus;
use crate::assignment::Handover;
use crate::assignment::{
    DRAIN_ANNOTATION, DRAIN_EPOCH_ANNOTATION, EPOCH_ANNOTATION, HANDED_OVER_FROM_ANNOTATION,
    LAST_PROBE_ANNOTATION, OWNER_LABEL,
};
use crate::coordination::membership::MembershipMetrics;

fn writer() -> Arc<StatusWriter> {
    let registry = prometheus::Registry::new();
    let s = Duration::from_secs(1);
    let membership = Membership::new(
        "r1".into(),
        crate::coordination::membership::LeaseAt::new("ns", "webchecker-member-r1"),
        10 * s,
        7 * s,
        2 * s,
        Arc::new(MembershipMetrics::register(&registry)),
        Default::default(),
    );
    StatusWriter::new(membership, WriterMetrics::register(&registry), 1)
}

fn queued(w: &StatusWriter, key: &str) -> Option<Op> {
    w.lock().pending.get(key).map(|p| p.op.clone())
}

#[test]
fn a_status_write_never_replaces_a_queued_drain_ack() {
    let w = writer();
    w.submit(
        "ns/a",
        "ns",
        "a",
        Op::AckDrain {
            last_probe_unix_ms: Some(1),
            handover: None,
        },
    );
    w.submit("ns/a", "ns", "a", Op::Status(Box::default()));
    assert!(matches!(
        queued(&w, "ns/a"),
        Some(Op::AckDrain {
            last_probe_unix_ms: Some(1),
            ..
        })
    ));
}

#[test]
fn a_newer_status_replaces_an_older_one_and_an_ack_replaces_a_status() {
    let w = writer();
    w.submit("ns/a", "ns", "a", Op::Status(Box::default()));
    let newer = WebCheckerStatus {
        owner: Some("r1".into()),
        ..Default::default()
    };
    w.submit("ns/a", "ns", "a", Op::Status(Box::new(newer)));
    assert!(matches!(queued(&w, "ns/a"), Some(Op::Status(s)) if s.owner.as_deref() == Some("r1")));
    w.submit(
        "ns/a",
        "ns",
        "a",
        Op::AckDrain {
            last_probe_unix_ms: None,
            handover: None,
        },
    );
    assert!(matches!(queued(&w, "ns/a"), Some(Op::AckDrain { .. })));
    assert_eq!(w.pending_len(), 1);
}

// The writer against a mocked API server (kube's tower-test pattern): every
// request it sends is checked, every answer is scripted.

use crate::kubeio::mock_api::{ApiHandle, answer, ok, status};

fn mocked() -> (Arc<StatusWriter>, Client, ApiHandle) {
    let (client, handle) = crate::kubeio::mock_api::client();
    let w = writer();
    w.membership.joined_for_test("uid-r1");
    (w, client, handle)
}

fn checker_json(owner: &str, epoch: &str, rv: &str) -> serde_json::Value {
    json!({
        "apiVersion": "test.network.io/v1alpha1",
        "kind": "WebChecker",
        "metadata": {
            "name": "a", "namespace": "ns", "resourceVersion": rv, "uid": "u1",
            "labels": { OWNER_LABEL: owner },
            "annotations": { EPOCH_ANNOTATION: epoch },
        },
        "spec": { "host": "example.invalid" },
    })
}

fn pending(w: &StatusWriter) -> Pending {
    w.lock().pending.get("ns/a").cloned().expect("queued")
}

fn count(w: &StatusWriter, result: &str) -> u64 {
    w.metrics.status_writes.with_label_values(&[result]).get()
}

#[tokio::test]
async fn a_conflict_on_a_checker_that_moved_is_fenced_and_never_retried() {
    let (w, client, mut h) = mocked();
    w.observe_version("ns/a", "5", "u1");
    w.submit("ns/a", "ns", "a", Op::Status(Box::default()));
    let p = w.lock().pending.remove("ns/a").unwrap();
    let api = tokio::spawn(async move {
        answer(&mut h, "PATCH", Some("5"), status(409)).await;
        answer(&mut h, "GET", None, ok(checker_json("r2", "uid-r2", "6"))).await;
        h
    });
    w.write(&client, "ns/a".into(), p).await;
    let mut h = api.await.unwrap();
    assert_eq!(count(&w, "fenced"), 1);
    assert_eq!(w.pending_len(), 0);
    // No third request: the write was not retried.
    drop(client);
    assert!(h.next_request().await.is_none());
}

#[tokio::test]
async fn a_conflict_on_a_checker_still_ours_retries_with_the_new_version() {
    let (w, client, mut h) = mocked();
    w.observe_version("ns/a", "5", "u1");
    w.submit("ns/a", "ns", "a", Op::Status(Box::default()));
    let p = w.lock().pending.remove("ns/a").unwrap();
    let api = tokio::spawn(async move {
        answer(&mut h, "PATCH", Some("5"), status(409)).await;
        answer(&mut h, "GET", None, ok(checker_json("r1", "uid-r1", "6"))).await;
        answer(
            &mut h,
            "PATCH",
            Some("6"),
            ok(checker_json("r1", "uid-r1", "7")),
        )
        .await;
    });
    w.write(&client, "ns/a".into(), p).await;
    api.await.unwrap();
    assert_eq!(count(&w, "ok"), 1);
    assert_eq!(
        w.lock().versions.get("ns/a").map(|v| v.rv.as_str()),
        Some("7")
    );
}

/// The checker was deleted and created again under its name, and the new
/// object is ours too: the old object's status must not land on it.
#[tokio::test]
async fn a_conflict_on_a_checker_recreated_under_its_name_is_fenced() {
    let (w, client, mut h) = mocked();
    w.observe_version("ns/a", "5", "u1");
    w.submit("ns/a", "ns", "a", Op::Status(Box::default()));
    let p = w.lock().pending.remove("ns/a").unwrap();
    let api = tokio::spawn(async move {
        answer(&mut h, "PATCH", Some("5"), status(409)).await;
        let mut recreated = checker_json("r1", "uid-r1", "8");
        recreated["metadata"]["uid"] = json!("u2");
        answer(&mut h, "GET", None, ok(recreated)).await;
        h
    });
    w.write(&client, "ns/a".into(), p).await;
    let mut h = api.await.unwrap();
    assert_eq!(count(&w, "fenced"), 1);
    drop(client);
    assert!(h.next_request().await.is_none());
}

/// A write that failed with a 5xx after its checker was
/// forgotten (it moved away meanwhile) was re-queued without a version and
/// retried forever.
#[tokio::test]
async fn a_failed_write_of_a_checker_forgotten_meanwhile_is_not_retried() {
    let (w, client, mut h) = mocked();
    w.observe_version("ns/a", "5", "u1");
    w.submit("ns/a", "ns", "a", Op::Status(Box::default()));
    let p = w.lock().pending.remove("ns/a").unwrap();
    let w2 = w.clone();
    let api = tokio::spawn(async move {
        let (_req, send) = h.next_request().await.unwrap();
        w2.forget("ns/a");
        send.send_response(status(503));
    });
    w.write(&client, "ns/a".into(), p).await;
    api.await.unwrap();
    assert_eq!(w.pending_len(), 0);
}

#[tokio::test]
async fn a_failure_without_verdict_is_retried_later_with_backoff() {
    let (w, client, mut h) = mocked();
    w.observe_version("ns/a", "5", "u1");
    w.submit("ns/a", "ns", "a", Op::Status(Box::default()));
    let p = w.lock().pending.remove("ns/a").unwrap();
    let api = tokio::spawn(async move {
        answer(&mut h, "PATCH", Some("5"), status(500)).await;
    });
    let before = Instant::now();
    w.write(&client, "ns/a".into(), p).await;
    api.await.unwrap();
    let p = pending(&w);
    assert_eq!(p.attempts, 1);
    assert!(p.not_before.is_some_and(|t| t > before));
    // Not due yet: the batch is empty, and says when to look again.
    let (batch, next) = w.take_batch(10, Instant::now());
    assert!(batch.is_empty());
    assert!(next.is_some());
    assert!(backoff(20) <= Duration::from_secs(30), "capped");
}

#[tokio::test]
async fn a_refused_write_is_dropped_and_counted() {
    let (w, client, mut h) = mocked();
    w.observe_version("ns/a", "5", "u1");
    w.submit("ns/a", "ns", "a", Op::Status(Box::default()));
    let p = w.lock().pending.remove("ns/a").unwrap();
    let api = tokio::spawn(async move {
        answer(&mut h, "PATCH", Some("5"), status(422)).await;
    });
    w.write(&client, "ns/a".into(), p).await;
    api.await.unwrap();
    assert_eq!(w.pending_len(), 0);
    assert_eq!(count(&w, "refused"), 1);
}

#[test]
fn drain_acks_are_written_before_status() {
    let w = writer();
    for i in 0..50 {
        let k = format!("ns/s{i}");
        w.submit(&k, "ns", &format!("s{i}"), Op::Status(Box::default()));
    }
    w.submit(
        "ns/ack",
        "ns",
        "ack",
        Op::AckDrain {
            last_probe_unix_ms: None,
            handover: None,
        },
    );
    let (batch, _) = w.take_batch(1, Instant::now());
    assert_eq!(batch.len(), 1);
    assert_eq!(batch[0].0, "ns/ack");
}

#[test]
fn each_api_answer_to_a_write_has_its_next_step() {
    assert_eq!(write_answer(Some(409)), WriteAnswer::Conflict);
    assert_eq!(write_answer(Some(404)), WriteAnswer::Gone);
    for c in [None, Some(429), Some(500), Some(503), Some(504)] {
        assert_eq!(write_answer(c), WriteAnswer::Retry, "{c:?}");
    }
    for c in [400, 401, 403, 422] {
        assert_eq!(write_answer(Some(c)), WriteAnswer::Refused, "{c}");
    }
}

#[test]
fn a_drain_ack_jumps_a_batch_already_taken() {
    let w = writer();
    for i in 0..10 {
        let k = format!("ns/s{i}");
        w.observe_version(&k, "1", "u1");
        w.submit(&k, "ns", &format!("s{i}"), Op::Status(Box::default()));
    }
    let (batch, _) = w.take_batch(256, Instant::now());
    assert_eq!(batch.len(), 10);
    w.submit(
        "ns/ack",
        "ns",
        "ack",
        Op::AckDrain {
            last_probe_unix_ms: None,
            handover: None,
        },
    );
    let (key, _) = w.take_ack(Instant::now()).expect("the ack goes next");
    assert_eq!(key, "ns/ack");
    assert!(w.take_ack(Instant::now()).is_none());
}

/// Found by the fault campaign (seed 366952557, window 36): after our drain
/// ack landed, a status write queued later carried the version the ack
/// produced and landed on a checker whose owner label named nobody.
#[tokio::test]
async fn nothing_is_written_after_our_drain_ack_landed() {
    let (w, client, mut h) = mocked();
    w.observe_version("ns/a", "5", "u1");
    w.submit(
        "ns/a",
        "ns",
        "a",
        Op::AckDrain {
            last_probe_unix_ms: None,
            handover: None,
        },
    );
    let p = w.lock().pending.remove("ns/a").unwrap();
    let api = tokio::spawn(async move {
        answer(&mut h, "PATCH", Some("5"), ok(checker_json("", "", "6"))).await;
        h
    });
    w.write(&client, "ns/a".into(), p).await;
    let mut h = api.await.unwrap();
    // A status write submitted afterwards (a probe that finished late).
    w.submit("ns/a", "ns", "a", Op::Status(Box::default()));
    let p = w.lock().pending.remove("ns/a").unwrap();
    w.write(&client, "ns/a".into(), p).await;
    drop(client);
    assert!(h.next_request().await.is_none(), "no request after the ack");
}

#[test]
fn a_flooding_namespace_delays_another_by_one_turn_and_nothing_waits_forever() {
    let w = writer();
    let flood = |w: &StatusWriter| {
        for i in 0..1000 {
            let k = format!("flood/f{i}");
            w.submit(&k, "flood", &format!("f{i}"), Op::Status(Box::default()));
        }
    };
    flood(&w);
    for i in 0..5 {
        let k = format!("quiet/q{i}");
        w.submit(&k, "quiet", &format!("q{i}"), Op::Status(Box::default()));
    }
    // The flood rewrites its checkers again: they keep their place.
    flood(&w);
    let (batch, _) = w.take_batch(20, Instant::now());
    let quiet = batch
        .iter()
        .filter(|(k, _)| k.starts_with("quiet/"))
        .count();
    assert_eq!(
        quiet, 5,
        "the quiet namespace's writes all go in the first batch"
    );
    // Within the flood, oldest first: the first submitted were taken.
    assert!(batch.iter().any(|(k, _)| k == "flood/f0"));
    // Batch after batch (the flood resubmitting everything each time), every
    // checker of the flood is written: none waits forever.
    let mut written = HashSet::new();
    for _ in 0..60 {
        let (batch, _) = w.take_batch(20, Instant::now());
        written.extend(batch.into_iter().map(|(k, _)| k));
        flood(&w);
    }
    assert_eq!(written.len(), 1000, "every flooding checker got its turn");
}

#[tokio::test]
async fn a_flush_waits_for_writes_in_flight_and_the_gate_is_asked_before_each_write() {
    let (w, client, mut h) = mocked();
    w.observe_version("ns/a", "5", "u1");
    w.submit("ns/a", "ns", "a", Op::Status(Box::default()));
    let (mut batch, _) = w.take_batch(10, Instant::now());
    assert_eq!(w.pending_len(), 0);
    // Taken, not written yet: a flush does not report it done.
    assert!(!w.flush(Duration::from_millis(100)).await);
    let (k, p) = batch.pop().unwrap();
    let api = tokio::spawn(async move {
        answer(
            &mut h,
            "PATCH",
            Some("5"),
            ok(checker_json("r1", "uid-r1", "6")),
        )
        .await;
        h
    });
    w.write_if_allowed(&client, k, p).await;
    let mut h = api.await.unwrap();
    assert!(
        w.flush(Duration::from_millis(100)).await,
        "written: drained"
    );

    // The Lease is lost between the batch and the write: nothing is sent,
    // the op waits in the queue as it was.
    w.submit("ns/a", "ns", "a", Op::Status(Box::default()));
    let (mut batch, _) = w.take_batch(10, Instant::now());
    w.membership.released_for_test();
    let (k, p) = batch.pop().unwrap();
    w.write_if_allowed(&client, k, p).await;
    assert!(
        tokio::time::timeout(Duration::from_millis(50), h.next_request())
            .await
            .is_err(),
        "no request after the Lease was lost"
    );
    let back = pending(&w);
    assert_eq!((back.attempts, back.not_before), (0, None));
    assert!(!w.flush(Duration::from_millis(100)).await, "still pending");
}

/// A write that failed while the API server was in trouble waits out its
/// backoff (up to 30 s) only while the trouble lasts: once another write is
/// answered, it is due again.
#[tokio::test]
async fn a_backoff_ends_when_the_api_server_answers_again() {
    let (w, client, mut h) = mocked();
    w.observe_version("ns/a", "5", "u1");
    w.observe_version("ns/b", "5", "u1");
    w.submit("ns/a", "ns", "a", Op::Status(Box::default()));
    let p = w.lock().pending.remove("ns/a").unwrap();
    let api = tokio::spawn(async move {
        answer(&mut h, "PATCH", Some("5"), status(500)).await;
        answer(
            &mut h,
            "PATCH",
            Some("5"),
            ok(checker_json("r1", "uid-r1", "6")),
        )
        .await;
    });
    w.write(&client, "ns/a".into(), p).await;
    // Many failures later: a long backoff.
    let far = Instant::now() + Duration::from_secs(30);
    w.lock().pending.get_mut("ns/a").unwrap().not_before = Some(far);
    let (batch, next) = w.take_batch(10, Instant::now());
    assert!(batch.is_empty());
    assert_eq!(next, Some(far));
    w.submit("ns/b", "ns", "b", Op::Status(Box::default()));
    let (batch, _) = w.take_batch(10, Instant::now());
    let (k, p) = batch.into_iter().next().expect("b is due");
    w.write(&client, k, p).await;
    api.await.unwrap();
    let (batch, _) = w.take_batch(10, Instant::now());
    assert_eq!(batch.len(), 1, "a's backoff is over");
    assert_eq!(batch[0].0, "ns/a");
}

fn draining_json(to: &str, to_epoch: &str, rv: &str) -> serde_json::Value {
    let mut v = checker_json("r1", "uid-r1", rv);
    v["metadata"]["annotations"][DRAIN_ANNOTATION] = json!(to);
    v["metadata"]["annotations"][DRAIN_EPOCH_ANNOTATION] = json!(to_epoch);
    v
}

/// Answers the next PATCH (fenced by `rv`) with `resp`; returns its body.
async fn patched(
    h: &mut ApiHandle,
    rv: &str,
    resp: http::Response<kube::client::Body>,
) -> serde_json::Value {
    let (req, send) = h.next_request().await.expect("a request");
    assert_eq!(req.method().as_str(), "PATCH");
    let v = crate::kubeio::mock_api::body_json(req).await;
    assert_eq!(
        v["metadata"]["resourceVersion"], rv,
        "fenced by the version last seen"
    );
    send.send_response(resp);
    v
}

/// The two-write handover: the old owner's acknowledgement assigns the
/// drain's target itself (owner, epoch), clears the drain, says who handed
/// it over, and keeps the cadence.
#[tokio::test]
async fn a_drain_ack_with_a_handover_assigns_the_target_in_one_write() {
    let (w, client, mut h) = mocked();
    w.observe_version("ns/a", "5", "u1");
    let annotations: std::collections::BTreeMap<String, String> = [
        (DRAIN_ANNOTATION.to_string(), "r2".to_string()),
        (DRAIN_EPOCH_ANNOTATION.to_string(), "uid-r2".to_string()),
    ]
    .into();
    let meta = kube::api::ObjectMeta {
        annotations: Some(annotations),
        ..Default::default()
    };
    let handover = Assignment::of(&meta).handover();
    assert_eq!(
        handover,
        Some(Handover {
            to: "r2".into(),
            epoch: "uid-r2".into()
        })
    );
    w.submit(
        "ns/a",
        "ns",
        "a",
        Op::AckDrain {
            last_probe_unix_ms: Some(1234),
            handover,
        },
    );
    let p = w.lock().pending.remove("ns/a").unwrap();
    let api = tokio::spawn(async move {
        let body = patched(&mut h, "5", ok(checker_json("r2", "uid-r2", "6"))).await;
        (h, body)
    });
    w.write(&client, "ns/a".into(), p).await;
    let (_h, body) = api.await.unwrap();
    let m = &body["metadata"];
    assert_eq!(m["labels"][OWNER_LABEL], "r2");
    assert_eq!(m["annotations"][EPOCH_ANNOTATION], "uid-r2");
    assert_eq!(m["annotations"][DRAIN_ANNOTATION], serde_json::Value::Null);
    assert_eq!(
        m["annotations"][DRAIN_EPOCH_ANNOTATION],
        serde_json::Value::Null
    );
    assert_eq!(m["annotations"][HANDED_OVER_FROM_ANNOTATION], "r1");
    assert_eq!(m["annotations"][LAST_PROBE_ANNOTATION], "1234");
    assert_eq!(count(&w, "ok"), 1);
    assert!(!w.lock().versions.contains_key("ns/a"), "not ours any more");
}

/// The sharder re-targeted the drain (its target left) while our ack was on
/// its way: the retry hands over to the target of the version it is fenced
/// by, never to the one that left.
#[tokio::test]
async fn a_drain_retargeted_meanwhile_is_handed_to_the_new_target() {
    let (w, client, mut h) = mocked();
    w.observe_version("ns/a", "5", "u1");
    let handover = Some(Handover {
        to: "r2".into(),
        epoch: "uid-r2".into(),
    });
    w.submit(
        "ns/a",
        "ns",
        "a",
        Op::AckDrain {
            last_probe_unix_ms: None,
            handover,
        },
    );
    let p = w.lock().pending.remove("ns/a").unwrap();
    let api = tokio::spawn(async move {
        patched(&mut h, "5", status(409)).await;
        answer(&mut h, "GET", None, ok(draining_json("r3", "uid-r3", "6"))).await;
        let body = patched(&mut h, "6", ok(checker_json("r3", "uid-r3", "7"))).await;
        (h, body)
    });
    w.write(&client, "ns/a".into(), p).await;
    let (_h, body) = api.await.unwrap();
    assert_eq!(body["metadata"]["labels"][OWNER_LABEL], "r3");
    assert_eq!(body["metadata"]["annotations"][EPOCH_ANNOTATION], "uid-r3");
}
