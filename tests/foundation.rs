//! End-to-end acceptance tests of the foundation issue, against a real control
//! plane (kube-apiserver + etcd from hack/cluster.sh), real operator processes
//! and real HTTP targets (witnesses). One shared cluster per test binary, one
//! namespace and one operator per test.

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, WatchEvent, WatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use webchecker::api::{Condition, WebChecker};

use support::*;

const FLANT: &str = "apiVersion: test.network.io/v1alpha1
kind: WebChecker
metadata:
  name: flant
spec:
  host: http://flant.ru
";

const BADNEWS: &str = "apiVersion: test.network.io/v1alpha1
kind: WebChecker
metadata:
  name: badnews
spec:
  host: http://badnews.me
";

fn cluster() -> &'static Cluster {
    Cluster::shared("foundation")
}

/// A fresh namespace and an operator identity derived from it (unique, so each
/// test has its own log file target/e2e/foundation-<pid>/operator-<identity>.log).
fn world(prefix: &str) -> (&'static Cluster, String, String) {
    let c = cluster();
    let ns = c.namespace(prefix);
    let id = format!("op-{ns}");
    (c, ns, id)
}

fn args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut v: Vec<&str> = FAST_LEASES.to_vec();
    v.extend_from_slice(extra);
    v
}

/// kubectl off the async worker threads (the witnesses share them).
async fn kubectl(c: &'static Cluster, args: &[&str]) -> std::process::Output {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        c.kubectl(&a)
    })
    .await
    .unwrap()
}

async fn kubectl_apply(c: &'static Cluster, ns: &str, yaml: &str) -> std::process::Output {
    let ns = ns.to_string();
    let yaml = yaml.to_string();
    tokio::task::spawn_blocking(move || c.kubectl_stdin(&["apply", "-n", &ns, "-f", "-"], &yaml))
        .await
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_string()
}

fn checkers(client: &Client, ns: &str) -> Api<WebChecker> {
    Api::namespaced(client.clone(), ns)
}

async fn ready(api: &Api<WebChecker>, name: &str) -> Option<Condition> {
    api.get_opt(name)
        .await
        .ok()
        .flatten()?
        .status?
        .condition("Ready")
        .cloned()
}

fn rfc3339(s: &str) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339(s)
        .unwrap_or_else(|e| panic!("{s:?} is not RFC 3339: {e}"))
        .with_timezone(&chrono::Utc)
}

async fn metrics_of(op: &Operator) -> String {
    eventually(Duration::from_secs(10), "metrics answer", || async {
        op.metrics().await
    })
    .await
}

fn dump_log_tail(op: &Operator, lines: usize) -> String {
    let t = op.log_text();
    let v: Vec<&str> = t.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

// ---------------------------------------------------------------- 1

/// The seed article's two manifests, unchanged: accepted, probed, and shown in
/// the seed's status shape with the name-resolution failure. The operator asks
/// the test kit's name server (tests/support/dns.rs), which answers NXDOMAIN for
/// both public names at once: the machine's DNS is never asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_manifests_work_unchanged() {
    let (c, ns, id) = world("seed");
    let client = c.client().await;
    let api = checkers(&client, &ns);
    let op = Operator::spawn(c, &id, &ns, FAST_LEASES);
    op.wait_ready(Duration::from_secs(60)).await;

    let applied = Instant::now();
    for (name, yaml) in [("flant", FLANT), ("badnews", BADNEWS)] {
        let out = kubectl_apply(c, &ns, yaml).await;
        assert!(
            out.status.success(),
            "seed manifest {name} rejected: {}",
            text(&out.stderr)
        );
        assert_eq!(
            text(&out.stdout).trim(),
            format!("webchecker.test.network.io/{name} created"),
            "stderr: {}",
            text(&out.stderr)
        );
    }

    for (name, host) in [("flant", "flant.ru"), ("badnews", "badnews.me")] {
        let cond = eventually(
            Duration::from_secs(15),
            &format!("{name} Ready=False"),
            || async { ready(&api, name).await.filter(|c| c.status == "False") },
        )
        .await;
        println!(
            "{name}: Ready=False after {:?}: {} / {}",
            applied.elapsed(),
            cond.reason,
            cond.message
        );
        assert_eq!(cond.reason, "DNSError", "{cond:?}");
        assert!(
            cond.message.contains(&format!("cannot resolve {host}"))
                && cond.message.contains("no such host"),
            "the message must name the name-resolution failure: {cond:?}"
        );
        assert!(
            support::dns::Dns::shared().queries(host) > 0,
            "{host} was asked of the test's name server"
        );
    }
    assert!(applied.elapsed() < Duration::from_secs(15));

    let out = kubectl(
        c,
        &[
            "get",
            "webcheckers.test.network.io",
            "badnews",
            "-n",
            &ns,
            "-o",
            "yaml",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let yaml = text(&out.stdout);
    println!("kubectl get webcheckers.test.network.io badnews -o yaml:\n{yaml}");
    let v: serde_yaml::Value = serde_yaml::from_str(&yaml).unwrap();
    assert_eq!(v["apiVersion"].as_str(), Some("test.network.io/v1alpha1"));
    assert_eq!(v["kind"].as_str(), Some("WebChecker"));
    assert_eq!(v["metadata"]["generation"].as_i64(), Some(1));
    assert_eq!(v["spec"]["host"].as_str(), Some("http://badnews.me"));
    assert_eq!(
        v["spec"]["path"].as_str(),
        Some("/"),
        "spec.path defaults to / as in the seed"
    );
    let c0 = &v["status"]["conditions"][0];
    assert_eq!(c0["type"].as_str(), Some("Ready"));
    assert_eq!(
        c0["status"].as_str(),
        Some("False"),
        "status is the string \"False\" as in metav1.Condition"
    );
    assert_eq!(c0["reason"].as_str(), Some("DNSError"));
    let msg = c0["message"].as_str().expect("message");
    assert!(
        msg.contains("cannot resolve badnews.me: no such host"),
        "{msg}"
    );
    let ltt = rfc3339(
        c0["lastTransitionTime"]
            .as_str()
            .expect("lastTransitionTime"),
    );
    let age = chrono::Utc::now() - ltt;
    assert!(
        age < chrono::TimeDelta::seconds(60) && age > chrono::TimeDelta::seconds(-2),
        "lastTransitionTime {ltt}"
    );
    assert!(
        yaml.contains("status: \"False\""),
        "seed shape: status: \"False\""
    );
    drop(op);
}

// ---------------------------------------------------------------- 2

async fn wait_ready_status(
    api: &Api<WebChecker>,
    name: &str,
    status: &str,
    within: Duration,
) -> (Condition, Duration) {
    let t = Instant::now();
    let cond = eventually(within, &format!("{name} Ready={status}"), || async {
        ready(api, name).await.filter(|c| c.status == status)
    })
    .await;
    (cond, t.elapsed())
}

/// lastTransitionTime must stay put while nothing transitions: sampled over a
/// steady period (the assertion is about that period, hence the sleeps).
async fn steady(
    api: &Api<WebChecker>,
    name: &str,
    want: &Condition,
    samples: usize,
    every: Duration,
) {
    for i in 0..samples {
        tokio::time::sleep(every).await;
        let c = ready(api, name).await.expect("condition");
        assert_eq!(
            (
                c.status.as_str(),
                c.reason.as_str(),
                c.last_transition_time.as_deref()
            ),
            (
                want.status.as_str(),
                want.reason.as_str(),
                want.last_transition_time.as_deref()
            ),
            "sample {i}: the condition moved during a steady period"
        );
    }
}

/// Events about one object: (type, reason) -> occurrences (series counted).
async fn events_for(client: &Client, ns: &str, name: &str) -> HashMap<(String, String), i32> {
    let api: Api<K8sEvent> = Api::namespaced(client.clone(), ns);
    let mut m = HashMap::new();
    for e in api.list(&ListParams::default()).await.unwrap() {
        if e.regarding.as_ref().and_then(|r| r.name.as_deref()) != Some(name) {
            continue;
        }
        let n = e.series.as_ref().map(|s| s.count).unwrap_or(1);
        *m.entry((
            e.type_.clone().unwrap_or_default(),
            e.reason.clone().unwrap_or_default(),
        ))
        .or_insert(0) += n;
    }
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_target_lifecycle() {
    let (c, ns, id) = world("life");
    let client = c.client().await;
    let api = checkers(&client, &ns);
    let mut w = Witness::start().await;
    let op = Operator::spawn(c, &id, &ns, FAST_LEASES);
    op.wait_ready(Duration::from_secs(60)).await;

    let name = "local";
    let yaml = checker_yaml(name, &w.url(), "/c/local", 2, "  timeoutSeconds: 1\n");
    let out = kubectl_apply(c, &ns, &yaml).await;
    assert!(out.status.success(), "{}", text(&out.stderr));

    let (up, took) = wait_ready_status(&api, name, "True", Duration::from_secs(30)).await;
    println!("Ready=True after {took:?}: {up:?}");
    assert_eq!(up.reason, "ProbeSucceeded");
    assert!(w.count_for(name) >= 1);
    assert_eq!(
        w.hits_for(name)[0].replica,
        id,
        "X-Webchecker-Replica names the operator"
    );

    let out = kubectl(
        c,
        &[
            "wait",
            "--for=condition=Ready",
            &format!("wc/{name}"),
            "-n",
            &ns,
            "--timeout=30s",
        ],
    )
    .await;
    assert!(
        out.status.success(),
        "kubectl wait: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );

    // Nothing in the default columns goes stale between status writes: Since
    // is the Ready condition's transition, the rest is spec or identity.
    let out = kubectl(c, &["get", "wc", "-n", &ns]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    println!("kubectl get wc:\n{table}");
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "READY", "REASON", "SINCE", "HOST", "AGE"]);
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(row.len(), 6, "{row:?}");
    assert_eq!(&row[..3], [name, "True", "ProbeSucceeded"]);
    assert!(
        row[4].starts_with("http://127.0.0.1:"),
        "host column {:?}",
        row[4]
    );
    // The last write's details and the owner are in -o wide.
    let out = kubectl(c, &["get", "wc", "-n", &ns, "-o", "wide"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    println!("kubectl get wc -o wide:\n{table}");
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME", "READY", "REASON", "SINCE", "HOST", "PATH", "CODE", "LATENCY", "MS", "OWNER",
            "AGE"
        ]
    );
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(row.len(), 10, "{row:?}");
    assert_eq!(row[6], "200");
    assert!(row[7].parse::<u64>().is_ok(), "latency column {:?}", row[7]);
    assert_eq!(row[8], id);

    // Steady True: the transition time does not move.
    steady(&api, name, &up, 4, Duration::from_millis(1200)).await;

    // Target down: Ready=False (ConnectError) within interval + timeout + allowance.
    let wall = chrono::Utc::now();
    w.pause();
    let (down, took_down) = wait_ready_status(&api, name, "False", Duration::from_secs(10)).await;
    println!("Ready=False {took_down:?} after the target stopped: {down:?}");
    assert_eq!(down.reason, "ConnectError", "{down:?}");
    assert!(down.message.contains("connection refused"), "{down:?}");
    assert!(
        took_down <= Duration::from_millis(4500),
        "took {took_down:?} > interval 2s + timeout 1s + 1.5s"
    );
    assert_ne!(down.last_transition_time, up.last_transition_time);
    let ltt_down = rfc3339(down.last_transition_time.as_deref().unwrap());
    assert!(
        ltt_down >= wall - chrono::TimeDelta::seconds(1)
            && ltt_down <= chrono::Utc::now() + chrono::TimeDelta::seconds(1),
        "lastTransitionTime {ltt_down} is not the time of the transition (target stopped at {wall})"
    );
    steady(&api, name, &down, 4, Duration::from_millis(1000)).await;

    // Target back: Ready=True again.
    let wall = chrono::Utc::now();
    w.resume().await;
    let (back, took_up) = wait_ready_status(&api, name, "True", Duration::from_secs(10)).await;
    println!("Ready=True {took_up:?} after the target came back: {back:?}");
    assert_eq!(back.reason, "ProbeSucceeded");
    assert!(took_up <= Duration::from_millis(4500), "took {took_up:?}");
    assert_ne!(back.last_transition_time, down.last_transition_time);
    let ltt_back = rfc3339(back.last_transition_time.as_deref().unwrap());
    assert!(
        ltt_back >= wall - chrono::TimeDelta::seconds(1)
            && ltt_back <= chrono::Utc::now() + chrono::TimeDelta::seconds(1)
    );
    steady(&api, name, &back, 3, Duration::from_millis(1000)).await;

    // Events for the transitions: Unknown->True, True->False, False->True.
    let ev = eventually(Duration::from_secs(15), "transition events", || async {
        let m = events_for(&client, &ns, name).await;
        let warn = m
            .get(&("Warning".into(), "ConnectError".into()))
            .copied()
            .unwrap_or(0);
        let ok = m
            .get(&("Normal".into(), "ProbeSucceeded".into()))
            .copied()
            .unwrap_or(0);
        (warn >= 1 && ok >= 2).then_some(m)
    })
    .await;
    println!("events: {ev:?}");
    assert_eq!(
        ev.get(&("Warning".into(), "ConnectError".into())),
        Some(&1),
        "one Warning per transition: {ev:?}"
    );
    assert_eq!(
        ev.get(&("Normal".into(), "ProbeSucceeded".into())),
        Some(&2),
        "{ev:?}"
    );
    println!("transition latency: down {took_down:?}, up {took_up:?} (bound 4.5s)");
}

// ---------------------------------------------------------------- 3

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_edit_and_deletion() {
    let (c, ns, id) = world("edit");
    let client = c.client().await;
    let api = checkers(&client, &ns);
    let w = Witness::start().await;
    let op = Operator::spawn(c, &id, &ns, FAST_LEASES);
    op.wait_ready(Duration::from_secs(60)).await;

    let name = "edit";
    let out = kubectl_apply(
        c,
        &ns,
        &checker_yaml(name, &w.url(), "/c/edit", 2, "  timeoutSeconds: 1\n"),
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    wait_ready_status(&api, name, "True", Duration::from_secs(30)).await;
    let st = api.get(name).await.unwrap().status.unwrap();
    assert_eq!(st.observed_generation, Some(1));

    // Edit the path.
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"path": "/c/edit-v2"}})),
    )
    .await
    .unwrap();
    let patched = Instant::now();
    let first_new = eventually(
        Duration::from_secs(4),
        "a probe on the new path",
        || async { w.hits_for("edit-v2").first().map(|h| h.start) },
    )
    .await;
    println!(
        "first probe on the new path {:?} after the patch",
        first_new.saturating_duration_since(patched)
    );
    assert!(
        first_new.saturating_duration_since(patched) <= Duration::from_secs(3),
        "not on the next probe"
    );
    let old_after: Vec<Instant> = w
        .hits_for("edit")
        .iter()
        .map(|h| h.start)
        .filter(|t| *t > patched)
        .collect();
    assert!(
        old_after.len() <= 1,
        "{} probes on the old path after the patch",
        old_after.len()
    );
    let st = eventually(Duration::from_secs(6), "observedGeneration 2", || async {
        let st = api.get(name).await.ok()?.status?;
        (st.observed_generation == Some(2) && st.condition("Ready")?.observed_generation == Some(2))
            .then_some(st)
    })
    .await;
    assert_eq!(st.condition("Ready").unwrap().status, "True");
    // A few more probes, all on the new path.
    let n = w.count_for("edit-v2");
    eventually(
        Duration::from_secs(6),
        "more probes on the new path",
        || async { (w.count_for("edit-v2") >= n + 2).then_some(()) },
    )
    .await;
    assert!(
        w.hits_for("edit").iter().all(|h| h.start < first_new),
        "a probe on the old path after one on the new path"
    );

    // Delete.
    api.delete(name, &DeleteParams::default()).await.unwrap();
    let deleted = Instant::now();
    eventually(Duration::from_secs(5), "object gone", || async {
        matches!(api.get_opt(name).await, Ok(None)).then_some(())
    })
    .await;
    let all = |w: &Witness| -> Vec<Instant> {
        let mut v: Vec<Instant> = w
            .all_hits()
            .iter()
            .filter(|h| h.checker.starts_with("edit"))
            .map(|h| h.start)
            .collect();
        v.sort();
        v
    };
    // The assertion is about this time: two intervals (2 s each) with no probe.
    tokio::time::sleep(Duration::from_millis(4500)).await;
    let after: Vec<Instant> = all(&w).into_iter().filter(|t| *t > deleted).collect();
    assert!(
        after.len() <= 1,
        "{} probes after the deletion",
        after.len()
    );
    let last = after.last().copied().unwrap_or(deleted);
    let quiet_until = last + Duration::from_millis(4200);
    tokio::time::sleep(quiet_until.saturating_duration_since(Instant::now())).await;
    let later: Vec<Instant> = all(&w).into_iter().filter(|t| *t > last).collect();
    assert!(
        later.is_empty(),
        "probed {} times after the deletion (after {} in flight)",
        later.len(),
        after.len()
    );
    println!(
        "after deletion: {} racing probe(s), then none for {:?}",
        after.len(),
        quiet_until - last
    );
    let m = metrics_of(&op).await;
    assert_eq!(metric(&m, "webchecker_owned_checkers", &[]), Some(0.0));
    assert_eq!(
        metric(&m, "webchecker_up", &[("name", name)]),
        None,
        "per-checker series forgotten"
    );
}

// ---------------------------------------------------------------- 4

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_manifests_are_rejected() {
    let (c, ns, _) = world("invalid");
    let head = |name: &str| {
        format!(
            "apiVersion: test.network.io/v1alpha1\nkind: WebChecker\nmetadata:\n  name: {name}\nspec:\n"
        )
    };
    let cases: &[(&str, &str, &str)] = &[
        ("no-host", "  path: /\n", "spec.host: Required value"),
        (
            "no-scheme",
            "  host: example.com\n",
            "spec.host must be an http:// or https:// URL",
        ),
        (
            "ftp",
            "  host: ftp://example.com\n",
            "spec.host must be an http:// or https:// URL",
        ),
        (
            "bad-path",
            "  host: http://example.com\n  path: healthz\n",
            "spec.path must start with '/'",
        ),
        (
            "timeout-eq-interval",
            "  host: http://example.com\n  intervalSeconds: 2\n  timeoutSeconds: 2\n",
            "spec.timeoutSeconds must be below spec.intervalSeconds",
        ),
        (
            "interval-zero",
            "  host: http://example.com\n  intervalSeconds: 0\n",
            "should be greater than or equal to 1",
        ),
        (
            "host-with-path",
            "  host: http://x/y\n",
            "spec.host must not contain a path; put it in spec.path",
        ),
        (
            "reversed-range",
            "  host: http://example.com\n  expectedStatusCodes: [\"300-200\"]\n",
            "a range must be written low-high",
        ),
        (
            "http3",
            "  host: http://example.com\n  httpVersions: [HTTP/3]\n",
            "Unsupported value: \"HTTP/3\"",
        ),
        (
            "lz4",
            "  host: http://example.com\n  compression: lz4\n",
            "Unsupported value: \"lz4\"",
        ),
    ];
    for (name, spec, want) in cases {
        let out = kubectl_apply(c, &ns, &format!("{}{spec}", head(name))).await;
        let err = text(&out.stderr);
        println!("{name}: {}", err.trim());
        assert!(
            !out.status.success(),
            "{name} was accepted: {}",
            text(&out.stdout)
        );
        assert!(err.contains("is invalid"), "{name}: {err}");
        assert!(err.contains(want), "{name}: expected {want:?} in {err}");
    }
    let out = kubectl(c, &["get", "wc", "-n", &ns, "-o", "name"]).await;
    assert_eq!(text(&out.stdout).trim(), "", "nothing was created");
    // The control: valid manifests beside them are accepted, a 1 s interval
    // without timeoutSeconds too (its default timeout fits it).
    for (name, spec) in [
        ("valid", "  host: http://example.com\n"),
        (
            "one-second",
            "  host: http://example.com\n  intervalSeconds: 1\n",
        ),
        (
            "h2",
            "  host: http://example.com\n  http2: PriorKnowledge\n  httpVersions: [HTTP/2]\n  compression: zstd\n",
        ),
    ] {
        let out = kubectl_apply(c, &ns, &format!("{}{spec}", head(name))).await;
        assert!(out.status.success(), "{name}: {}", text(&out.stderr));
    }
}

// ---------------------------------------------------------------- 5

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steady_state_writes_are_rare() {
    let (c, ns, id) = world("writes");
    let client = c.client().await;
    let api = checkers(&client, &ns);
    let w = Witness::start().await;
    let op = Operator::spawn(c, &id, &ns, FAST_LEASES);
    op.wait_ready(Duration::from_secs(60)).await;

    // 1 s interval, as the issue asks (create_checkers sets timeoutSeconds 0.5).
    let interval = 1;
    let names: Vec<String> = (0..50).map(|i| format!("w-{i}")).collect();
    let _ = create_checkers(&client, &ns, &w.url(), &names, interval).await;
    let list = eventually(Duration::from_secs(60), "all 50 Ready=True", || async {
        let l = api.list(&ListParams::default()).await.ok()?;
        let n = l
            .items
            .iter()
            .filter(|o| {
                o.status
                    .as_ref()
                    .and_then(|s| s.condition("Ready"))
                    .is_some_and(|c| c.status == "True")
            })
            .count();
        (n == 50).then_some(l)
    })
    .await;
    let rv = list.metadata.resource_version.clone().unwrap();
    let m0 = metrics_of(&op).await;

    let window = Duration::from_secs(30);
    let mut stream = api
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    let t0 = Instant::now();
    let mut writes = 0;
    let mut modified: HashMap<String, usize> = HashMap::new();
    let watched = tokio::time::timeout(window, async {
        while let Some(ev) = stream.next().await {
            match ev.unwrap() {
                WatchEvent::Modified(o) => {
                    writes += 1;
                    *modified.entry(o.name_any()).or_default() += 1;
                }
                WatchEvent::Error(e) => panic!("watch error {e:?}"),
                _ => {}
            }
        }
    })
    .await;
    assert!(watched.is_err(), "the watch ended before the window did");
    let t1 = Instant::now();
    // Control: the same watch does see a write.
    api.patch(
        "w-0",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"control": "1"}}})),
    )
    .await
    .unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(ev) = stream.next().await {
            if let Ok(WatchEvent::Modified(o)) = ev
                && o.name_any() == "w-0"
            {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(seen, Ok(true), "the watch does not see writes");
    let probes = w
        .hits()
        .iter()
        .filter(|h| h.start >= t0 && h.start <= t1)
        .count();
    let m1 = metrics_of(&op).await;
    let ok_writes = metric(&m1, "webchecker_status_writes_total", &[("result", "ok")])
        .unwrap_or(0.0)
        - metric(&m0, "webchecker_status_writes_total", &[("result", "ok")]).unwrap_or(0.0);
    println!(
        "steady state over {:?}: {writes} object writes (watch MODIFIED; operator counted {ok_writes} status writes) vs {probes} probes; {modified:?}",
        t1 - t0
    );
    let expected = 50 * window.as_secs() as usize / interval as usize;
    assert!(
        probes * 6 >= expected * 5,
        "{probes} probes, expected about {expected}"
    );
    assert!(writes * 100 < probes, "{writes} writes for {probes} probes");
}

// ---------------------------------------------------------------- 6

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// Per checker: consecutive exchanges at the witness never overlap, and start
/// about one interval (2 s) apart. The operator keeps a 2 s cadence (start =
/// due + lag, due times exactly 2 s apart) and dispatches the next probe only
/// after the previous one ended; the witness adds its own scheduling noise to
/// the start it logs. So: every spacing >= `floor` (hard: a second timer or a
/// probe stacked on another lands anywhere in 0..2 s), and at least 99% of
/// them >= 1.9 s. Returns (smallest spacing, 1st percentile).
fn no_stacking(hits: &[Hit], floor: Duration) -> (Duration, Duration) {
    let mut by: HashMap<&str, Vec<&Hit>> = HashMap::new();
    for h in hits {
        by.entry(&h.checker).or_default().push(h);
    }
    let mut spacings = Vec::new();
    for (checker, mut hs) in by {
        hs.sort_by_key(|h| h.start);
        for p in hs.windows(2) {
            assert!(
                p[1].start >= p[0].end,
                "{checker}: a probe started {:?} before the previous one ended",
                p[0].end - p[1].start
            );
            let d = p[1].start - p[0].start;
            assert!(
                d >= floor,
                "{checker}: two probes {d:?} apart (interval 2s)"
            );
            spacings.push(d);
        }
    }
    spacings.sort();
    if spacings.is_empty() {
        return (Duration::MAX, Duration::MAX);
    }
    let p1 = spacings[spacings.len() / 100];
    assert!(
        p1 >= Duration::from_millis(1900),
        "1% of consecutive probes are less than {p1:?} apart (interval 2s)"
    );
    (spacings[0], p1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_stacking_no_deadlock() {
    let c = cluster();
    let client = c.client().await;

    // Part 1: default pool (1024); 500 hanging beside 100 healthy checkers.
    let ns = c.namespace("stack");
    let hang = Witness::start().await;
    hang.set_default_mode(Mode::Hang(Duration::from_millis(1500)));
    let ok = Witness::start().await;
    let op = Operator::spawn(c, &format!("op-{ns}"), &ns, FAST_LEASES);
    op.wait_ready(Duration::from_secs(60)).await;
    let (hang_names, ok_names) = (names("hang", 500), names("ok", 100));
    let t = Instant::now();
    let _ = create_checkers(&client, &ns, &hang.url(), &hang_names, 2).await;
    let _ = create_checkers(&client, &ns, &ok.url(), &ok_names, 2).await;
    println!("created 600 checkers in {:?}", t.elapsed());
    let api = checkers(&client, &ns);
    eventually(Duration::from_secs(90), "all 600 have a status", || async {
        let l = api.list(&ListParams::default()).await.ok()?;
        let n = l
            .items
            .iter()
            .filter(|o| {
                o.status
                    .as_ref()
                    .and_then(|s| s.condition("Ready"))
                    .is_some()
            })
            .count();
        (n == 600).then_some(())
    })
    .await;
    println!(
        "all 600 have a status {:?} after creation began",
        t.elapsed()
    );
    let from = Instant::now();
    // The assertions are about what happens during these 20 s.
    tokio::time::sleep(Duration::from_secs(22)).await;
    let m = metrics_of(&op).await;
    let hang_hits = hang.all_hits();
    let ok_hits = ok.all_hits();
    // A witness logs an exchange when it ends (answered after 1.5 s, or
    // abandoned when the probe times out after 1 s): the log is complete only
    // for exchanges that started more than 1.5 s ago. Judge the gaps on the
    // 20 s that are complete.
    let to = from + Duration::from_secs(20);
    let min_hang = no_stacking(&hang_hits, Duration::from_millis(1800));
    let min_ok = no_stacking(&ok_hits, Duration::from_millis(1800));
    let gap_ok = largest_gap(&ok_hits, &ok_names, from, to);
    let gap_hang = largest_gap(&hang_hits, &hang_names, from, to);
    let p50 = histogram_quantile(&m, "webchecker_schedule_lag_seconds", 0.5);
    let p99 = histogram_quantile(&m, "webchecker_schedule_lag_seconds", 0.99);
    let missed = metric(&m, "webchecker_missed_intervals_total", &[]).unwrap_or(0.0);
    println!(
        "pool 1024: {} hanging + {} healthy exchanges; spacing (min, 1st percentile) hang {min_hang:?} ok {min_ok:?}; largest gap ok {:?} ({}), hang {:?} ({}); lag p50 <= {p50:?} p99 <= {p99:?}; missed {missed}",
        hang_hits.len(),
        ok_hits.len(),
        gap_ok.0,
        gap_ok.1,
        gap_hang.0,
        gap_hang.1
    );
    assert!(
        gap_ok.0 <= Duration::from_millis(2500),
        "healthy checker {} not probed for {:?}",
        gap_ok.1,
        gap_ok.0
    );
    assert!(
        gap_hang.0 <= Duration::from_millis(2500),
        "hanging checker {} not probed for {:?}",
        gap_hang.1,
        gap_hang.0
    );
    assert!(
        p99.is_some_and(|q| q <= 0.1),
        "schedule lag p99 {p99:?} (bucket upper bound) not under 100 ms"
    );
    drop(op);

    // Part 2: the same load on 8 workers: saturated, but alive and fair.
    let ns = c.namespace("sat");
    let hang = Witness::start().await;
    hang.set_default_mode(Mode::Hang(Duration::from_millis(1500)));
    let ok = Witness::start().await;
    let op = Operator::spawn(c, &format!("op-{ns}"), &ns, &args(&["--workers=8"]));
    op.wait_ready(Duration::from_secs(60)).await;
    let addr = format!("127.0.0.1:{}", op.port);
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
    let poller = tokio::spawn(async move {
        let (mut worst, mut bad, mut n, mut max_inflight) = (Duration::ZERO, Vec::new(), 0, 0.0f64);
        loop {
            let t = Instant::now();
            match http_get(&addr, "/healthz").await {
                Some((200, _)) => {}
                other => bad.push(format!("{other:?}")),
            }
            worst = worst.max(t.elapsed());
            n += 1;
            if let Some((_, m)) = http_get(&addr, "/metrics").await {
                max_inflight =
                    max_inflight.max(metric(&m, "webchecker_inflight_probes", &[]).unwrap_or(0.0));
            }
            tokio::select! {
                _ = &mut stop_rx => return (worst, bad, n, max_inflight),
                _ = tokio::time::sleep(Duration::from_millis(250)) => {}
            }
        }
    });
    let t = Instant::now();
    let _ = create_checkers(&client, &ns, &hang.url(), &hang_names, 2).await;
    let _ = create_checkers(&client, &ns, &ok.url(), &ok_names, 2).await;
    let created = t.elapsed();
    // 8 workers, a hanging probe holds one for its 1 s timeout: one round over
    // the 500 hanging checkers takes 500 * 1 s / 8 = 62.5 s (the healthy ones
    // take milliseconds). Allow that plus the creation time and a margin.
    let bound = Duration::from_secs(63) + created + Duration::from_secs(20);
    let all_names: Vec<String> = hang_names.iter().chain(ok_names.iter()).cloned().collect();
    let covered = eventually(
        bound,
        "every checker probed at least once on 8 workers",
        || async {
            let seen: std::collections::HashSet<String> = hang
                .all_hits()
                .into_iter()
                .chain(ok.all_hits())
                .map(|h| h.checker)
                .collect();
            all_names
                .iter()
                .all(|n| seen.contains(n))
                .then(|| t.elapsed())
        },
    )
    .await;
    let _ = stop_tx.send(());
    let (worst, bad, n, max_inflight) = poller.await.unwrap();
    let m = metrics_of(&op).await;
    let p99 = histogram_quantile(&m, "webchecker_schedule_lag_seconds", 0.99);
    let missed = metric(&m, "webchecker_missed_intervals_total", &[]).unwrap_or(0.0);
    println!(
        "pool 8: created in {created:?}; every checker probed within {covered:?} (bound {bound:?}); /healthz {n} polls, slowest {worst:?}, failures {bad:?}; inflight max {max_inflight}; lag p99 <= {p99:?}; missed {missed}"
    );
    assert!(bad.is_empty(), "/healthz did not answer 200: {bad:?}");
    assert!(worst < Duration::from_secs(1), "/healthz took {worst:?}");
    assert_eq!(
        max_inflight, 8.0,
        "inflight probes should reach the pool size and never pass it"
    );
    assert!(
        p99.is_some_and(|q| q > 1.0),
        "lag p99 {p99:?} should show the saturation"
    );
    assert!(missed > 0.0, "missed intervals should be counted");
    assert_eq!(metric(&m, "webchecker_worker_pool_size", &[]), Some(8.0));
    let min = no_stacking(&hang.all_hits(), Duration::from_millis(1800));
    println!("pool 8: spacing of one checker's probes (min, 1st percentile) {min:?}");
}

// ---------------------------------------------------------------- 7

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_endpoints_and_graceful_shutdown() {
    let (c, ns, id) = world("health");
    let client = c.client().await;
    let api = checkers(&client, &ns);
    let w = Witness::start().await;
    w.set_default_mode(Mode::Hang(Duration::from_secs(3)));
    let mut op = Operator::spawn(c, &id, &ns, &args(&["--shutdown-timeout=10s"]));
    op.wait_ready(Duration::from_secs(60)).await;
    assert_eq!(op.get("/healthz").await.map(|r| r.0), Some(200));
    assert_eq!(op.get("/readyz").await, Some((200, "ready\n".to_string())));

    // A replica that cannot reach the API server never becomes ready.
    let kc = std::fs::read_to_string(&c.kubeconfig).unwrap();
    let server = kc
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .unwrap()
        .trim()
        .to_string();
    let bad_kc = c.dir.join(format!("kubeconfig-closed-{ns}"));
    std::fs::write(
        &bad_kc,
        kc.replace(&server, &format!("https://127.0.0.1:{}", free_port())),
    )
    .unwrap();
    let bad_cluster = Cluster {
        dir: c.dir.clone(),
        kubeconfig: bad_kc,
        bin: c.bin.clone(),
    };
    let mut bad = Operator::spawn(&bad_cluster, &format!("bad-{ns}"), &ns, FAST_LEASES);
    let mut answers = Vec::new();
    let until = Instant::now() + Duration::from_secs(5);
    // The assertion is about these 5 s: never ready.
    while Instant::now() < until {
        let r = bad.get("/readyz").await;
        assert_ne!(
            r.as_ref().map(|r| r.0),
            Some(200),
            "ready without an API server"
        );
        if answers.last() != Some(&r) {
            answers.push(r);
        }
        if bad.exited().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let exit = bad.exited();
    println!(
        "unreachable API server: /readyz answers {answers:?}; exit {exit:?}; log tail:\n{}",
        dump_log_tail(&bad, 2)
    );
    if let Some(st) = exit {
        assert!(!st.success(), "exited 0 without an API server");
    }
    drop(bad);

    // Graceful shutdown while a probe hangs (target hangs 3 s, timeout 2 s).
    let out = kubectl_apply(
        c,
        &ns,
        &checker_yaml("slow", &w.url(), "/c/slow", 3, "  timeoutSeconds: 2\n"),
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Wait for the first probe to be in flight: no status yet, one probe running.
    eventually(Duration::from_secs(30), "first probe in flight", || async {
        let no_status = api.get("slow").await.ok()?.status.is_none();
        let m = op.metrics().await?;
        (no_status && metric(&m, "webchecker_inflight_probes", &[]) == Some(1.0)).then_some(())
    })
    .await;
    let term = Instant::now();
    op.signal(libc::SIGTERM);
    let mut saw_503 = None;
    let status = loop {
        if let Some(st) = op.exited() {
            break st;
        }
        if saw_503.is_none()
            && let Some((503, body)) = op.get("/readyz").await
        {
            assert_eq!(body, "shutting down\n");
            saw_503 = Some(term.elapsed());
        }
        assert!(
            term.elapsed() < Duration::from_secs(10),
            "no exit within the shutdown timeout (10s)"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let exited = term.elapsed();
    println!(
        "SIGTERM: readyz 503 \"shutting down\" after {saw_503:?}, exit {status:?} after {exited:?}"
    );
    assert!(
        saw_503.is_some(),
        "readyz never said 503 shutting down before the exit"
    );
    assert!(
        status.success(),
        "exit status {status:?}; log:\n{}",
        dump_log_tail(&op, 20)
    );
    // The in-flight probe was let finish (timed out at 2 s, not cut), and its
    // result was written before the exit.
    // The witness logs the abandoned exchange when it sees the connection close.
    let hits = eventually(
        Duration::from_secs(5),
        "the hung exchange logged",
        || async {
            let h = w.all_hits();
            (!h.is_empty()).then_some(h)
        },
    )
    .await;
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert!(
        hits[0].end - hits[0].start >= Duration::from_millis(1900),
        "probe cut after {:?}",
        hits[0].end - hits[0].start
    );
    let cond = ready(&api, "slow")
        .await
        .expect("status flushed during shutdown");
    assert_eq!(
        (cond.status.as_str(), cond.reason.as_str()),
        ("False", "Timeout"),
        "{cond:?}"
    );
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    assert!(
        leases
            .get_opt(&format!("webchecker-member-{id}"))
            .await
            .unwrap()
            .is_none(),
        "membership Lease released"
    );
}
