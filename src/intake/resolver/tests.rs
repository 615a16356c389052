use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::json;

use super::*;
use crate::checker::Change;
use crate::intake::secrets::TTL;

/// A checker of `ns` whose headers come from these Secrets (key `k`).
fn checker(ns: &str, name: &str, path: &str, secrets: &[&str]) -> Box<WebChecker> {
    let headers: Vec<_> = secrets
        .iter()
        .enumerate()
        .map(|(i, s)| json!({"name": format!("X-{i}"), "valueFrom": {"secretKeyRef": {"name": s, "key": "k"}}}))
        .collect();
    Box::new(
        serde_json::from_value(json!({
            "apiVersion": "test.network.io/v1alpha1",
            "kind": "WebChecker",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"host": "http://x", "path": path, "headers": headers},
        }))
        .unwrap(),
    )
}

fn up(wc: Box<WebChecker>) -> Step<Compiled> {
    let found = Found {
        wc,
        info: Default::default(),
        initial: false,
        seen: Instant::now(),
    };
    Step::Found(Box::new(found), Arc::new(Ok(Default::default())))
}

fn cmd(c: Command) -> Step<Compiled> {
    Step::Command(c)
}

fn secret(ns: &str, name: &str) -> ObjectId {
    ObjectId {
        namespace: ns.into(),
        kind: "Secret",
        name: name.into(),
    }
}

fn found(pairs: &[(&str, &str)]) -> Read {
    Ok(pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
        .collect())
}

fn not_found(name: &str) -> Read {
    Err(Fetch::Final(format!("Secret {name:?} not found")))
}

/// A resolver whose reads the test performs by hand (the sync core).
fn resolver() -> ValueResolver {
    let reader: Reader = Arc::new(|_| Box::pin(async { unreachable!("reads are by hand") }));
    ValueResolver::new(reader, TTL, Box::new(|_| true), 64 << 20)
}

/// What the queue lets start now, as `start_reads` would.
fn started(r: &mut ValueResolver) -> Vec<ObjectId> {
    std::iter::from_fn(|| r.queue.next()).collect()
}

/// (key, path, header values) of an Upsert; the key of another command.
fn seen(c: &Command) -> (String, String, Vec<Result<Vec<u8>, String>>) {
    match c {
        Command::Change(Change::Upsert { checker, .. }) => {
            let def = checker.definition.as_ref().unwrap();
            let vals = references(&def.spec)
                .iter()
                .map(|r| def.values.get(r))
                .collect();
            (checker.key.clone(), def.spec.path.clone(), vals)
        }
        Command::Change(Change::Remove { key }) => (key.clone(), "<remove>".into(), vec![]),
        Command::Change(Change::Drain { key, .. }) => (key.clone(), "<drain>".into(), vec![]),
        Command::Change(Change::Refresh { key, resolved }) => (
            key.clone(),
            "<refresh>".into(),
            vec![resolved.get(&ValueRef::secret("s", "k"))],
        ),
        Command::Change(Change::Resync { .. }) => ("".into(), "<resync>".into(), vec![]),
        _ => unreachable!(),
    }
}

#[test]
fn another_namespace_passes_while_one_namespace_waits_for_its_reads() {
    let mut r = resolver();
    let now = Instant::now();
    for i in 0..100 {
        let names: Vec<String> = (0..24).map(|j| format!("a{i}-s{j}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        assert!(
            r.take(up(checker("a", &format!("a{i}"), "/", &names)), now)
                .is_none()
        );
    }
    let a_reads = started(&mut r);
    assert_eq!(a_reads.len(), READS_PER_NAMESPACE, "A holds its share only");
    // B's checker without references goes on at once.
    let plain = r
        .take(up(checker("b", "plain", "/", &[])), now)
        .expect("no wait");
    assert_eq!(seen(&plain).0, "b/plain");
    // B's checker with a reference waits for its own read only, read in
    // B, started ahead of A's 2,396 queued reads.
    assert!(r.take(up(checker("b", "with", "/", &["s"])), now).is_none());
    assert_eq!(started(&mut r), vec![secret("b", "s")]);
    let out = r.read_done(secret("b", "s"), found(&[("k", "v"), ("other", "x")]), now);
    assert_eq!(out.len(), 1);
    assert_eq!(
        seen(&out[0]),
        ("b/with".into(), "/".into(), vec![Ok(b"v".to_vec())])
    );
    // Only the keys a spec names are kept.
    assert!(r.cache.last("b", &ValueRef::secret("s", "other")).is_err());
    // A is served too: a checker goes on once its 24 reads are in, with
    // the message naming its missing Secret.
    let mut out = Vec::new();
    let mut reads = a_reads;
    while let Some(obj) = reads.pop() {
        let name = obj.name.clone();
        out.extend(r.read_done(obj, not_found(&name), now));
        reads.extend(started(&mut r));
    }
    assert_eq!(out.len(), 100);
    for c in &out {
        let (key, _, vals) = seen(c);
        let name = key.strip_prefix("a/").unwrap();
        assert_eq!(vals.len(), 24);
        assert!(
            vals.iter().all(|v| v
                .as_ref()
                .is_err_and(|e| e.starts_with(&format!("Secret \"{name}-s")))),
            "{key}: {vals:?}"
        );
    }
    assert!(r.held.is_empty());
}

#[test]
fn values_over_the_namespace_budget_are_not_kept_until_room_is_made() {
    let mut r = resolver();
    r.budgets = Budgets::new(Kind::Values, 1 << 20);
    let now = Instant::now();
    let big = "x".repeat(600 << 10);
    for (name, s) in [("c0", "s0"), ("c1", "s1")] {
        assert!(r.take(up(checker("ns", name, "/", &[s])), now).is_none());
    }
    let mut out = Vec::new();
    for obj in started(&mut r) {
        out.extend(r.read_done(obj, found(&[("k", &big)]), now));
    }
    let values = |c: &Command| match c {
        Command::Change(Change::Upsert { checker, .. }) => (
            checker.name.clone(),
            checker.definition.as_ref().unwrap().values.clone(),
        ),
        Command::Change(Change::Refresh { key, resolved }) => (key.clone(), resolved.clone()),
        other => panic!("{other:?}"),
    };
    let mut got: Vec<_> = out.iter().map(values).collect();
    got.sort_by(|a, b| a.0.cmp(&b.0));
    // The older fits; the newer's values would pass the 1 MiB budget.
    assert_eq!(got[0].1.bytes(), 600 << 10);
    assert!(got[0].1.quota_exceeded().is_none());
    let msg = got[1].1.quota_exceeded().expect("over the budget");
    assert!(
        msg.contains("take 600 KiB") && msg.contains("(1 MiB per replica"),
        "{msg}"
    );
    assert_eq!(got[1].1.bytes(), 0, "values not kept");
    // The older is deleted: the newer gets its values.
    assert!(
        r.take(
            cmd(Command::Change(Change::Remove {
                key: "ns/c0".into()
            })),
            now
        )
        .is_some()
    );
    let moved: Vec<_> = r.moved.drain(..).map(|c| values(&c)).collect();
    assert_eq!(moved.len(), 1);
    assert_eq!(moved[0].0, "ns/c1");
    assert_eq!(moved[0].1.bytes(), 600 << 10);
}

#[test]
fn the_newest_command_for_a_checker_wins() {
    let mut r = resolver();
    let now = Instant::now();
    let s = || secret("ns", "s");
    let later = |r: &mut ValueResolver, obj: ObjectId| {
        started(r);
        r.read_done(obj, found(&[("k", "v")]), now)
    };
    // A Remove, a Drain, a malformed Upsert, a Resync without it, an
    // Upsert without references: each goes on at once and forgets the
    // held Upsert, which never follows it.
    let forgetting = [
        cmd(Command::Change(Change::Remove { key: "ns/c".into() })),
        cmd(Command::Change(Change::Drain {
            key: "ns/c".into(),
            namespace: "ns".into(),
            name: "c".into(),
            resource_version: "2".into(),
            uid: "u1".into(),
            epoch: None,
            handover: None,
        })),
        cmd(crate::intake::found::malformed(
            "ns".into(),
            "c".into(),
            "2".into(),
            None,
            "bad".into(),
            false,
            now,
        )),
        cmd(Command::Change(Change::Resync {
            present: HashSet::from(["ns/other".to_string()]),
        })),
        up(checker("ns", "c", "/plain", &[])),
    ];
    for newer in forgetting {
        let what = format!("{newer:?}");
        assert!(r.take(up(checker("ns", "c", "/v1", &["s"])), now).is_none());
        assert!(r.take(newer, now).is_some(), "{what} waits for nothing");
        assert!(later(&mut r, s()).is_empty(), "after {what}");
        assert!(r.held.is_empty() && r.users.is_empty(), "{what}");
    }
    // A newer Upsert replaces the held one: only it goes on, once, even
    // when it waits for other objects than the first.
    assert!(r.take(up(checker("ns", "c", "/v1", &["s"])), now).is_none());
    assert!(r.take(up(checker("ns", "c", "/v2", &["t"])), now).is_none());
    assert!(later(&mut r, s()).is_empty());
    let out = later(&mut r, secret("ns", "t"));
    assert_eq!(seen(&out[0]).1, "/v2");
    assert_eq!(out.len(), 1);
    // The same object: the read in flight serves the newest Upsert.
    assert!(r.take(up(checker("ns", "d", "/v1", &["u"])), now).is_none());
    assert_eq!(started(&mut r), vec![secret("ns", "u")]);
    assert!(r.take(up(checker("ns", "d", "/v2", &["u"])), now).is_none());
    assert_eq!(started(&mut r), vec![], "read once");
    let out = r.read_done(secret("ns", "u"), found(&[("k", "v")]), now);
    assert_eq!(out.iter().map(|c| seen(c).1).collect::<Vec<_>>(), ["/v2"]);
    // New patterns for a held Upsert go with it; for another checker
    // they go on at once.
    assert!(r.take(up(checker("ns", "p", "/", &["w"])), now).is_none());
    let over: crate::probe::Compiled =
        Arc::new(Err(crate::probe::PatternError::OverBudget("over".into())));
    let patterns = |key: &str| {
        cmd(Command::Change(Change::Patterns {
            key: key.into(),
            compiled: over.clone(),
        }))
    };
    assert!(r.take(patterns("ns/p"), now).is_none());
    assert!(r.take(patterns("ns/elsewhere"), now).is_some());
    let out = later(&mut r, secret("ns", "w"));
    assert!(matches!(
        &out[..],
        [Command::Change(Change::Upsert { checker, .. })]
            if checker.definition.as_ref().unwrap().patterns.is_err()
    ));
    // Values fresh in the cache: no wait at all.
    let c = r
        .take(up(checker("ns", "e", "/", &["u"])), now)
        .expect("cached");
    assert_eq!(seen(&c).2, vec![Ok(b"v".to_vec())]);
}

#[test]
fn a_held_upsert_of_a_checker_assigned_elsewhere_meanwhile_goes_on_as_a_remove() {
    let ours = Arc::new(AtomicBool::new(true));
    let reader: Reader = Arc::new(|_| Box::pin(async { unreachable!() }));
    let mut r = ValueResolver::new(
        reader,
        TTL,
        {
            let ours = ours.clone();
            Box::new(move |_| ours.load(Ordering::Relaxed))
        },
        64 << 20,
    );
    let now = Instant::now();
    assert!(r.take(up(checker("ns", "c", "/", &["s"])), now).is_none());
    started(&mut r);
    ours.store(false, Ordering::Relaxed);
    let out = r.read_done(secret("ns", "s"), found(&[("k", "v")]), now);
    assert_eq!(seen(&out[0]).1, "<remove>");
    assert!(r.tracked.is_empty() && r.users.is_empty());
}

#[test]
fn rotation_is_a_refresh_and_a_transient_error_keeps_the_last_good_value() {
    let mut r = resolver();
    let t0 = Instant::now();
    let s = || secret("ns", "s");
    assert!(r.take(up(checker("ns", "c", "/", &["s"])), t0).is_none());
    started(&mut r);
    let out = r.read_done(s(), found(&[("k", "v1")]), t0);
    assert_eq!(seen(&out[0]).2, vec![Ok(b"v1".to_vec())]);
    // Within the TTL nothing is read again.
    r.refresh(t0 + TTL / 2);
    assert_eq!(started(&mut r), vec![]);
    // Past it: read again; a new value is a Refresh, the same one nothing.
    let t1 = t0 + TTL + Duration::from_secs(1);
    r.refresh(t1);
    assert_eq!(started(&mut r), vec![s()]);
    assert!(r.read_done(s(), found(&[("k", "v1")]), t1).is_empty());
    let t2 = t1 + TTL + Duration::from_secs(1);
    r.refresh(t2);
    started(&mut r);
    let out = r.read_done(s(), found(&[("k", "v2")]), t2);
    assert_eq!(
        seen(&out[0]),
        ("ns/c".into(), "<refresh>".into(), vec![Ok(b"v2".to_vec())])
    );
    // The API server does not answer: v2 stays, read again after RETRY.
    let t3 = t2 + TTL + Duration::from_secs(1);
    r.refresh(t3);
    started(&mut r);
    let transient = Err(Fetch::Transient("timed out".into()));
    assert!(r.read_done(s(), transient, t3).is_empty());
    r.refresh(t3 + crate::intake::secrets::RETRY + Duration::from_secs(1));
    assert_eq!(started(&mut r), vec![s()]);
    // Deleted: the checker learns it (InvalidSpec in the engine).
    let out = r.read_done(s(), not_found("s"), t3);
    assert!(
        seen(&out[0]).2[0]
            .as_ref()
            .unwrap_err()
            .contains("not found")
    );
    // A Remove stops the re-reads.
    r.take(
        cmd(Command::Change(Change::Remove { key: "ns/c".into() })),
        t3,
    );
    r.refresh(t3 + TTL * 3);
    assert_eq!(started(&mut r), vec![]);
}

#[test]
fn one_read_serves_every_checker_naming_the_object() {
    let mut r = resolver();
    let now = Instant::now();
    assert!(r.take(up(checker("ns", "a", "/", &["s"])), now).is_none());
    assert!(r.take(up(checker("ns", "b", "/", &["s"])), now).is_none());
    assert_eq!(started(&mut r), vec![secret("ns", "s")]);
    let out = r.read_done(secret("ns", "s"), found(&[("k", "v")]), now);
    let keys: Vec<String> = out.iter().map(|c| seen(c).0).collect();
    assert_eq!(keys, ["ns/a", "ns/b"]);
}

/// The task as the feed runs it, with reads that take time: A's take
/// 5 s each (a slow API server), B's 10 ms.
#[tokio::test(start_paused = true)]
async fn the_task_hands_another_namespace_over_at_once_and_the_slow_one_at_its_pace() {
    let reads: Arc<std::sync::Mutex<HashMap<String, usize>>> = Default::default();
    let reader: Reader = {
        let reads = reads.clone();
        Arc::new(move |obj: ObjectId| {
            *reads
                .lock()
                .unwrap()
                .entry(obj.namespace.clone())
                .or_default() += 1;
            Box::pin(async move {
                let slow = obj.namespace == "a";
                let d = if slow { 5000 } else { 10 };
                tokio::time::sleep(Duration::from_millis(d)).await;
                if slow {
                    not_found(&obj.name)
                } else {
                    found(&[("k", "v")])
                }
            })
        })
    };
    let (feed, input) = mpsc::channel(INPUT);
    let (engine, mut out) = mpsc::channel(10_000);
    let task = tokio::spawn(
        ValueResolver::new(reader, TTL, Box::new(|_| true), 64 << 20).run(input, engine),
    );
    for i in 0..100 {
        let names: Vec<String> = (0..24).map(|j| format!("a{i}-s{j}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        feed.send(up(checker("a", &format!("a{i}"), "/", &names)))
            .await
            .unwrap();
    }
    let t0 = tokio::time::Instant::now();
    feed.send(up(checker("b", "with", "/", &["s"])))
        .await
        .unwrap();
    feed.send(up(checker("b", "plain", "/", &[])))
        .await
        .unwrap();
    let mut at = HashMap::new();
    while at.len() < 2 {
        let c = out.recv().await.unwrap();
        at.insert(seen(&c).0, t0.elapsed());
    }
    assert_eq!(at["b/plain"], Duration::ZERO, "{at:?}");
    assert!(at["b/with"] <= Duration::from_millis(20), "{at:?}");
    // A is served, at its own pace: 2,400 reads, 4 at a time.
    let mut a = 0;
    while a < 100 {
        let c = out.recv().await.unwrap();
        assert!(seen(&c).0.starts_with("a/"));
        a += 1;
    }
    let took = t0.elapsed();
    assert!(took >= Duration::from_secs(2400 * 5 / 4), "{took:?}");
    // Each read at least once (the periodic re-reads of the checkers
    // already served come on top, behind the reads A's checkers wait for).
    assert!(reads.lock().unwrap()["a"] >= 2400);
    drop(feed);
    task.await.unwrap();
}
