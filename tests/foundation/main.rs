//! End-to-end acceptance tests of the foundation issue, against a real control
//! plane (kube-apiserver + etcd from hack/cluster.sh), real operator processes
//! and real HTTP targets (witnesses). One shared cluster per test binary, one
//! namespace and one operator per test.

mod steady;
use webchecker_kit as support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::api::{ListParams, Patch, PatchParams, WatchEvent, WatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use webchecker::api::{Condition, WebChecker};

use support::release::text;
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

fn checkers(client: &Client, ns: &str) -> Api<WebChecker> {
    Api::namespaced(client.clone(), ns)
}

async fn ready(api: &Api<WebChecker>, name: &str) -> Option<Condition> {
    condition(api, name, "Ready").await
}

/// The cell of column `name` in `row` of a kubectl table (`next` is the
/// column after it), trimmed: kubectl leaves a value it did not find blank.
fn cell<'a>(head: &str, row: &'a str, name: &str, next: &str) -> &'a str {
    let (from, to) = (head.find(name).unwrap(), head.find(next).unwrap());
    row.get(from..to.min(row.len())).unwrap_or("").trim()
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
/// the test kit's name server (kit/src/dns.rs), which answers NXDOMAIN for
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
        let out = c.apply(&ns, yaml).await;
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

    badnews_in_the_seeds_shape(c, &ns).await;
    drop(op);
}

/// `kubectl get -o yaml` shows badnews in the seed's shape: its apiVersion,
/// kind, spec with the path defaulted, and a Ready condition of the
/// metav1.Condition shape naming the name-resolution failure.
async fn badnews_in_the_seeds_shape(c: &Cluster, ns: &str) {
    let out = c
        .kubectl_async(&[
            "get",
            "webcheckers.test.network.io",
            "badnews",
            "-n",
            ns,
            "-o",
            "yaml",
        ])
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
    let out = c.apply(&ns, &yaml).await;
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

    let out = c
        .kubectl_async(&[
            "wait",
            "--for=condition=Ready",
            &format!("wc/{name}"),
            "-n",
            &ns,
            "--timeout=30s",
        ])
        .await;
    assert!(
        out.status.success(),
        "kubectl wait: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );

    kubectl_default_columns(c, &ns, name).await;
    kubectl_wide_columns(c, &ns, &id).await;

    // Steady True: the transition time does not move.
    steady(&api, name, &up, 4, Duration::from_millis(1200)).await;

    let (down, took_down) = target_down(&api, name, &mut w, &up).await;
    let took_up = target_back(&api, name, &mut w, &down).await;

    transition_events(&client, &ns, name).await;
    println!("transition latency: down {took_down:?}, up {took_up:?} (bound 4.5s)");
}

/// Target down: Ready=False (ConnectError) within interval + timeout +
/// allowance, at a new transition time that then stays put. The condition
/// and how long it took.
async fn target_down(
    api: &Api<WebChecker>,
    name: &str,
    w: &mut Witness,
    up: &Condition,
) -> (Condition, Duration) {
    let wall = chrono::Utc::now();
    w.pause();
    let (down, took_down) = wait_ready_status(api, name, "False", Duration::from_secs(10)).await;
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
    steady(api, name, &down, 4, Duration::from_millis(1000)).await;
    (down, took_down)
}

/// Target back: Ready=True again, at a new transition time that then stays
/// put. How long it took.
async fn target_back(
    api: &Api<WebChecker>,
    name: &str,
    w: &mut Witness,
    down: &Condition,
) -> Duration {
    let wall = chrono::Utc::now();
    w.resume().await;
    let (back, took_up) = wait_ready_status(api, name, "True", Duration::from_secs(10)).await;
    println!("Ready=True {took_up:?} after the target came back: {back:?}");
    assert_eq!(back.reason, "ProbeSucceeded");
    assert!(took_up <= Duration::from_millis(4500), "took {took_up:?}");
    assert_ne!(back.last_transition_time, down.last_transition_time);
    let ltt_back = rfc3339(back.last_transition_time.as_deref().unwrap());
    assert!(
        ltt_back >= wall - chrono::TimeDelta::seconds(1)
            && ltt_back <= chrono::Utc::now() + chrono::TimeDelta::seconds(1)
    );
    steady(api, name, &back, 3, Duration::from_millis(1000)).await;
    took_up
}

/// The default columns of `kubectl get wc`.
async fn kubectl_default_columns(c: &Cluster, ns: &str, name: &str) {
    // Nothing in the default columns goes stale between status writes: Since
    // is the Ready condition's transition, the rest is spec or identity.
    let out = c.kubectl_async(&["get", "wc", "-n", ns]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    println!("kubectl get wc:\n{table}");
    let mut lines = table.lines();
    let head = lines.next().unwrap();
    let header: Vec<&str> = head.split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME", "READY", "REASON", "DEGRADED", "SINCE", "HOST", "SOURCE", "AGE"
        ]
    );
    let line = lines.next().unwrap();
    // Never degraded: no Degraded condition, a blank cell (one replica has
    // nobody to confirm with). Made by hand: no source, a blank cell.
    assert_eq!(cell(head, line, "DEGRADED", "SINCE"), "");
    assert_eq!(cell(head, line, "SOURCE", "AGE"), "");
    let row: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(row.len(), 6, "{row:?}");
    assert_eq!(&row[..3], [name, "True", "ProbeSucceeded"]);
    assert!(
        row[4].starts_with("http://127.0.0.1:"),
        "host column {:?}",
        row[4]
    );
}

/// The last write's details and the owner are in -o wide.
async fn kubectl_wide_columns(c: &Cluster, ns: &str, id: &str) {
    let out = c
        .kubectl_async(&["get", "wc", "-n", ns, "-o", "wide"])
        .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    println!("kubectl get wc -o wide:\n{table}");
    let mut lines = table.lines();
    let head = lines.next().unwrap();
    let header: Vec<&str> = head.split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "READY",
            "REASON",
            "DEGRADED",
            "DIAGNOSIS",
            "SINCE",
            "HOST",
            "SOURCE",
            "PATH",
            "CODE",
            "LATENCY",
            "MS",
            "BUDGET",
            "AVAILABILITY",
            "OWNER",
            "AGE"
        ]
    );
    let line = lines.next().unwrap();
    assert_eq!(cell(head, line, "DEGRADED", "DIAGNOSIS"), "");
    assert_eq!(cell(head, line, "DIAGNOSIS", "SINCE"), "");
    let row: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(row.len(), 10, "{row:?}");
    assert_eq!(row[6], "200");
    assert!(row[7].parse::<u64>().is_ok(), "latency column {:?}", row[7]);
    assert_eq!(row[8], id);
}

/// One Event per transition: Unknown->True, True->False, False->True.
async fn transition_events(client: &Client, ns: &str, name: &str) {
    let ev = eventually(Duration::from_secs(15), "transition events", || async {
        let m = events_for(client, ns, name).await;
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
}

// ---------------------------------------------------------------- 3
// A spec edit (the next probe uses the new plan, on the same cadence, and
// writes the new observedGeneration) and a deletion (never probed again, its
// series forgotten) are the engine's alone: scenario tests of its checker
// table cover them (crates/core/src/table/tests/spec.rs).

// ---------------------------------------------------------------- 4

/// Manifests the API server refuses: (name, spec lines, what its message says).
const INVALID: &[(&str, &str, &str)] = &[
    ("no-host", "  path: /\n", "spec.host: Required value"),
    (
        "no-scheme",
        "  host: example.com\n",
        "spec.host must be an http://, https://, grpc://, grpcs://, tcp:// or tls:// URL",
    ),
    (
        "ftp",
        "  host: ftp://example.com\n",
        "spec.host must be an http://, https://, grpc://, grpcs://, tcp:// or tls:// URL",
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
    (
        "slo-100",
        "  host: http://example.com\n  slo: {objective: \"100\"}\n",
        "spec.slo.objective must be a percentage below 100 with at most three decimals",
    ),
    (
        "slo-ratio",
        "  host: http://example.com\n  slo: {objective: \"0.999\"}\n",
        "spec.slo.objective is a percentage: write \"99.9\" for 99.9%, not a ratio",
    ),
    (
        "slo-number",
        "  host: http://example.com\n  slo: {objective: 99.9}\n",
        "spec.slo.objective: Invalid value: \"number\"",
    ),
    (
        "slo-5d",
        "  host: http://example.com\n  slo: {objective: \"99\", window: 5d}\n",
        "Unsupported value: \"5d\"",
    ),
    (
        "depends-on-itself",
        "  host: http://example.com\n  dependsOn: {names: [gateway, depends-on-itself]}\n",
        "a checker cannot depend on itself",
    ),
    (
        "depends-on-nothing",
        "  host: http://example.com\n  dependsOn: {}\n",
        "spec.dependsOn needs names (WebCheckers of this namespace) or a selector",
    ),
    (
        "depends-twice",
        "  host: http://example.com\n  dependsOn: {names: [gateway, gateway]}\n",
        "spec.dependsOn.names names a checker twice",
    ),
    (
        "depends-on-a-url",
        "  host: http://example.com\n  dependsOn: {names: [\"http://gateway\"]}\n",
        "spec.dependsOn.names[0]: Invalid value",
    ),
    (
        "depends-bad-operator",
        "  host: http://example.com\n  dependsOn: {selector: {matchExpressions: [{key: tier, operator: Equals}]}}\n",
        "Unsupported value: \"Equals\"",
    ),
];

/// Maintenance windows refused at admission: (name, spec, what the API
/// server says).
const INVALID_WINDOWS: &[(&str, &str, &str)] = &[
    (
        "mw-both",
        "  selector: {}\n  start: '2026-12-24T22:00:00Z'\n  end: '2026-12-25T02:00:00Z'\n  schedule: {days: [Sunday], at: '02:00', duration: 2h}\n",
        "either start and end (one window) or schedule",
    ),
    (
        "mw-neither",
        "  selector: {}\n",
        "either start and end (one window) or schedule",
    ),
    (
        "mw-backwards",
        "  selector: {}\n  start: '2026-12-25T02:00:00Z'\n  end: '2026-12-24T22:00:00Z'\n",
        "spec.end must be after spec.start",
    ),
    (
        "mw-start-alone",
        "  selector: {}\n  start: '2026-12-25T02:00:00Z'\n",
        "spec.start and spec.end go together",
    ),
    (
        "mw-at",
        "  selector: {}\n  schedule: {days: [Sunday], at: '25:00', duration: 2h}\n",
        "spec.schedule.at must be a time of day written HH:MM",
    ),
    (
        "mw-duration",
        "  selector: {}\n  schedule: {days: [Sunday], at: '02:00', duration: 2 hours}\n",
        "spec.schedule.duration must be whole hours and minutes",
    ),
    (
        "mw-day-twice",
        "  selector: {}\n  schedule: {days: [Sunday, Sunday], at: '02:00', duration: 2h}\n",
        "spec.schedule.days names a day twice",
    ),
    (
        "mw-day",
        "  selector: {}\n  schedule: {days: [Sundays], at: '02:00', duration: 2h}\n",
        "Unsupported value: \"Sundays\"",
    ),
    (
        "mw-many-labels",
        "  selector: {matchLabels: {k0: v, k1: v, k2: v, k3: v, k4: v, k5: v, k6: v, k7: v, k8: v, k9: v, k10: v, k11: v, k12: v, k13: v, k14: v, k15: v, k16: v}}\n  schedule: {days: [Sunday], at: '02:00', duration: 2h}\n",
        "spec.selector.matchLabels: Too many: 17: must have at most 16 items",
    ),
    (
        "mw-operator",
        "  selector: {matchExpressions: [{key: tier, operator: Equals, values: [db]}]}\n  schedule: {days: [Sunday], at: '02:00', duration: 2h}\n",
        "Unsupported value: \"Equals\"",
    ),
    (
        "mw-zone",
        "  selector: {}\n  schedule: {days: [Sunday], at: '02:00', duration: 2h, timeZone: Berlin time}\n",
        "spec.schedule.timeZone must be an IANA time zone name",
    ),
];

/// Each of `refused` (name, spec, what the API server says) is refused at
/// admission as a `kind` and nothing of `resource` is created; each of
/// `accepted` (name, spec), the control, is.
async fn admission_table(
    c: &Cluster,
    ns: &str,
    (kind, resource): (&str, &str),
    refused: &[(&str, &str, &str)],
    accepted: &[(&str, &str)],
) {
    let head = |name: &str| {
        format!(
            "apiVersion: test.network.io/v1alpha1\nkind: {kind}\nmetadata:\n  name: {name}\nspec:\n"
        )
    };
    for (name, spec, want) in refused {
        let out = c.apply(ns, &format!("{}{spec}", head(name))).await;
        let err = assert_refused(&out, name, want);
        assert!(err.contains("is invalid"), "{name}: {err}");
    }
    let out = c
        .kubectl_async(&["get", resource, "-n", ns, "-o", "name"])
        .await;
    assert_eq!(text(&out.stdout).trim(), "", "nothing was created");
    for (name, spec) in accepted {
        let out = c.apply(ns, &format!("{}{spec}", head(name))).await;
        assert!(out.status.success(), "{name}: {}", text(&out.stderr));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_maintenance_windows_are_rejected() {
    let (c, ns, _) = world("invalid-mw");
    // The control: a one-off and a weekly window.
    let accepted = [
        (
            "mw-once",
            "  selector: {matchLabels: {tier: db}}\n  start: '2026-12-24T22:00:00Z'\n  end: '2026-12-25T02:00:00Z'\n",
        ),
        (
            "mw-weekly",
            "  selector: {}\n  schedule: {days: [Saturday, Sunday], at: '02:30', duration: 1h30m, timeZone: America/New_York}\n",
        ),
    ];
    let kind = ("WebCheckerMaintenance", "wcm");
    admission_table(c, &ns, kind, INVALID_WINDOWS, &accepted).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_manifests_are_rejected() {
    let (c, ns, _) = world("invalid");
    // The control: valid manifests beside them are accepted, a 1 s interval
    // without timeoutSeconds too (its default timeout fits it).
    let accepted = [
        ("valid", "  host: http://example.com\n"),
        (
            "one-second",
            "  host: http://example.com\n  intervalSeconds: 1\n",
        ),
        (
            "h2",
            "  host: http://example.com\n  http2: PriorKnowledge\n  httpVersions: [HTTP/2]\n  compression: zstd\n",
        ),
        (
            "dependent",
            "  host: http://example.com\n  dependsOn: {names: [valid], selector: {matchLabels: {tier: edge}}}\n",
        ),
    ];
    admission_table(c, &ns, ("WebChecker", "wc"), INVALID, &accepted).await;
}
