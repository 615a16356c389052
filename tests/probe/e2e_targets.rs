//! Part 2: thresholds, certificates and mutual TLS, the forgery guard, the
//! proxy from the environment, and 200 hostile targets at once.

use super::hostile::Hostile;
use super::ops::*;
use super::*;

/// A target failing every other probe never flips a checker with failureThreshold 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flapping_target_never_flips_failure_threshold_3() {
    let c = cluster();
    let ns = c.namespace("probe-flap");
    let client = c.client().await;
    let api = checkers(&client, &ns);
    // Every other request of each path fails.
    let n = Arc::new(AtomicUsize::new(0));
    let per_path: Arc<Mutex<HashMap<String, usize>>> = Default::default();
    let n2 = n.clone();
    let t = Server::http("127.0.0.1:0", move |s| {
        n2.fetch_add(1, Ordering::SeqCst);
        let mut m = per_path.lock().unwrap();
        let k = m.entry(s.uri.clone()).or_default();
        *k += 1;
        if *k % 2 == 1 {
            Answer::text("")
        } else {
            Answer::status(503)
        }
    })
    .await;
    let op = ready_op(c, &ns).await;
    apply_checker(
        &ns,
        "flap",
        &format!(
            "host: {}\npath: /flap\nintervalSeconds: 2\nfailureThreshold: 3",
            t.url()
        ),
    )
    .await;
    apply_checker(
        &ns,
        "flap-t1",
        &format!("host: {}\npath: /t1\nintervalSeconds: 2", t.url()),
    )
    .await;
    let first = wait_condition(
        &api,
        "flap",
        "Ready",
        "True",
        "ProbeSucceeded",
        Duration::from_secs(20),
    )
    .await;
    let since = n.load(Ordering::SeqCst);
    for i in 0..10 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let c = condition(&api, "flap", "Ready").await.unwrap();
        assert_eq!(
            (c.status.as_str(), c.last_transition_time.as_deref()),
            ("True", first.last_transition_time.as_deref()),
            "sample {i}: flipped"
        );
    }
    let m = op.scrape().await;
    let failures = metric(
        &m,
        "webchecker_probes_total",
        &[("name", "flap"), ("result", "failure")],
    )
    .unwrap_or(0.0);
    let successes = metric(
        &m,
        "webchecker_probes_total",
        &[("name", "flap"), ("result", "success")],
    )
    .unwrap_or(0.0);
    println!(
        "flap: {successes} successes, {failures} failures, target answered {} requests",
        n.load(Ordering::SeqCst) - since
    );
    assert!(failures >= 4.0 && successes >= 4.0, "the target did flap");
    assert!(
        events_of(&client, &ns, "flap")
            .await
            .iter()
            .all(|(t, _, _)| t != "Warning"),
        "no Warning event"
    );
    // The control: with the default threshold (1) the same target flips.
    let ev = eventually(Duration::from_secs(20), "flap-t1 Warning event", || async {
        let e = events_of(&client, &ns, "flap-t1").await;
        e.iter()
            .any(|(t, r, _)| t == "Warning" && r == "UnexpectedStatus")
            .then_some(e)
    })
    .await;
    println!("flap-t1 events: {ev:?}");
}

/// CertificateExpiring (second condition, Warning event), caBundle from a
/// ConfigMap, client certificate from a kubernetes.io/tls Secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_expiring_and_mutual_tls_through_the_operator() {
    let c = cluster();
    let ns = c.namespace("probe-tls");
    let client = c.client().await;
    let api = checkers(&client, &ns);
    let pki = TestCa::new();
    let leaf = pki.leaf_valid(&["127.0.0.1"], -1, 5);
    let t = mutual_tls_target(&client, &ns, &pki, &leaf).await;
    let op = ready_op(c, &ns).await;
    let spec = |days: u32, client: bool| {
        format!(
            "host: {}\nintervalSeconds: 2\ntls: {{caBundle: {{configMapKeyRef: {{name: ca, key: ca.crt}}}}, certificateExpiryWarningDays: {days}{}}}",
            t.https_url(),
            if client {
                ", clientCertificate: {secretName: client-tls}"
            } else {
                ""
            }
        )
    };
    apply_checker(&ns, "expiring", &spec(30, true)).await;
    apply_checker(&ns, "fine", &spec(3, true)).await;
    apply_checker(&ns, "no-client-cert", &spec(30, false)).await;
    expiry_and_client_certificate_conditions(&api).await;
    one_event_when_the_certificate_turns_expiring(&client, &ns).await;
    let m = op.scrape().await;
    assert_eq!(
        metric(
            &m,
            "webchecker_certificate_expiry_timestamp_seconds",
            &[("name", "expiring")]
        ),
        Some(leaf.not_after as f64)
    );
    // kubectl shows both conditions.
    let out = cluster()
        .kubectl_async(&[
            "get",
            "wc",
            "expiring",
            "-n",
            &ns,
            "-o",
            "jsonpath={.status.conditions[*].type}",
        ])
        .await;
    assert_eq!(text(&out.stdout), "Ready CertificateExpiring");
}

/// An HTTPS target serving `leaf` that requires a client certificate from
/// `pki`; the CA in ConfigMap ca, a client certificate in Secret client-tls.
async fn mutual_tls_target(client: &kube::Client, ns: &str, pki: &TestCa, leaf: &Leaf) -> Server {
    let client_leaf = pki.leaf_valid(&["webchecker-client"], -1, 90);
    let t = Server::https(
        "127.0.0.1:0",
        server_tls(leaf, BOTH, Some(&pki.pem)),
        |_| Answer::text(""),
    )
    .await;
    config_map(client, ns, "ca", &[("ca.crt", &pki.pem)]).await;
    secret(
        client,
        ns,
        "client-tls",
        "kubernetes.io/tls",
        &[
            ("tls.crt", &client_leaf.cert_pem),
            ("tls.key", &client_leaf.key_pem),
        ],
    )
    .await;
    t
}

/// expiring (warning at 30 days) is ready and expiring; fine (3 days) is
/// ready and valid; no-client-cert fails its handshake.
async fn expiry_and_client_certificate_conditions(api: &kube::Api<WebChecker>) {
    wait_ready(api, "expiring", "True", "ProbeSucceeded").await;
    let ce = wait_condition(
        api,
        "expiring",
        "CertificateExpiring",
        "True",
        "ExpiresSoon",
        Duration::from_secs(20),
    )
    .await;
    println!("expiring: {}", ce.message);
    assert!(ce.message.contains("warning at 30 days"), "{}", ce.message);
    wait_ready(api, "fine", "True", "ProbeSucceeded").await;
    wait_condition(
        api,
        "fine",
        "CertificateExpiring",
        "False",
        "CertificateValid",
        Duration::from_secs(20),
    )
    .await;
    let nc = wait_ready(api, "no-client-cert", "False", "TLSError").await;
    println!("no-client-cert: {}", nc.message);
}

/// One Warning event for expiring, when the condition turns True, and none
/// for fine.
async fn one_event_when_the_certificate_turns_expiring(client: &kube::Client, ns: &str) {
    let ev = eventually(
        Duration::from_secs(20),
        "CertificateExpiring event",
        || async {
            let e = events_of(client, ns, "expiring").await;
            e.iter()
                .any(|(t, r, _)| t == "Warning" && r == "CertificateExpiring")
                .then_some(e)
        },
    )
    .await;
    println!("expiring events: {ev:?}");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let warnings: Vec<_> = events_of(client, ns, "expiring")
        .await
        .into_iter()
        .filter(|(_, r, _)| r == "CertificateExpiring")
        .collect();
    assert_eq!(
        warnings.len(),
        1,
        "one event when it turns True: {warnings:?}"
    );
    assert!(
        events_of(client, ns, "fine")
            .await
            .iter()
            .all(|(_, r, _)| r != "CertificateExpiring")
    );
}

/// The forgery guard in the operator: a redirect to a denied address, a
/// denied address, and a DNS name resolving to a denied address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forgery_guard_through_the_operator() {
    let c = cluster();
    let client = c.client().await;
    let denied = Server::raw("127.0.0.2:0", |_s| async {}).await;
    let to = format!("http://{}/latest/meta-data", denied.addr);
    let t = Server::http("127.0.0.1:0", move |s| {
        if s.uri == "/ok" {
            Answer::text("")
        } else {
            Answer::redirect(302, &to)
        }
    })
    .await;
    let ns1 = c.namespace("probe-guard");
    let api1 = checkers(&client, &ns1);
    let op1 = guarded_op(c, &ns1, "169.254.0.0/16,fe80::/10,127.0.0.2/32");
    let ns2 = c.namespace("probe-guard-dns");
    let api2 = checkers(&client, &ns2);
    let op2 = guarded_op(c, &ns2, "127.0.0.1/32");
    op1.wait_ready(Duration::from_secs(60)).await;
    op2.wait_ready(Duration::from_secs(60)).await;
    apply_guarded_checkers(&ns1, &t, &denied).await;
    let local = Server::http("127.0.0.1:0", |_| Answer::text("")).await;
    let by_name = format!("guard-{ns2}.probe.test");
    Dns::shared().add(&by_name, &["127.0.0.1".parse().unwrap()]);
    apply_checker(
        &ns2,
        "by-name",
        &format!(
            "host: http://{by_name}:{}\nintervalSeconds: 2",
            local.addr.port()
        ),
    )
    .await;
    wait_ready(&api1, "ok", "True", "ProbeSucceeded").await;
    let r = wait_ready(&api1, "redirect", "False", "Forbidden").await;
    let d = wait_ready(&api1, "direct", "False", "Forbidden").await;
    let n = wait_ready(&api2, "by-name", "False", "Forbidden").await;
    println!(
        "redirect: {}\ndirect: {}\nby-name: {}",
        r.message, d.message, n.message
    );
    assert!(
        n.message.contains(&format!(
            "{by_name} resolves only to addresses the operator may not probe"
        )),
        "{}",
        n.message
    );
    assert!(Dns::shared().queries(&by_name) > 0, "resolved through DNS");
    // The status never quotes the Location (a header value).
    assert_eq!(
        r.message,
        "after a redirect (HTTP 302) to another origin: the new host is an address the operator may not probe (in --deny-cidrs)"
    );
    assert!(
        d.message
            .contains("127.0.0.2 is an address the operator may not probe")
    );
    // A few more rounds: still nothing reached the denied addresses.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        t.seen().iter().filter(|s| s.uri == "/r").count() >= 2,
        "the redirecting hop was probed"
    );
    assert_eq!(denied.accepts(), 0, "no connection to 127.0.0.2");
    assert_eq!(local.accepts(), 0, "no connection to {by_name}");
    let m = op1.scrape().await;
    assert!(
        metric(
            &m,
            "webchecker_probes_total",
            &[("name", "redirect"), ("reason", "Forbidden")]
        )
        .unwrap_or(0.0)
            >= 2.0
    );
}

/// ok probes `t` (/ok); redirect follows its redirect to `denied`; direct
/// probes `denied`.
async fn apply_guarded_checkers(ns1: &str, t: &Server, denied: &Server) {
    apply_checker(
        ns1,
        "ok",
        &format!("host: {}\npath: /ok\nintervalSeconds: 2", t.url()),
    )
    .await;
    apply_checker(
        ns1,
        "redirect",
        &format!(
            "host: {}\npath: /r\nintervalSeconds: 2\nfollowRedirects: true",
            t.url()
        ),
    )
    .await;
    apply_checker(
        ns1,
        "direct",
        &format!("host: http://{}\nintervalSeconds: 2", denied.addr),
    )
    .await;
}

/// The operator of namespace `ns` (identity op-<ns>, debug logs), denied
/// the addresses of `deny_cidrs`; not waited for.
fn guarded_op(c: &Cluster, ns: &str, deny_cidrs: &str) -> Operator {
    spawn_op(
        c,
        &format!("op-{ns}"),
        ns,
        &[&format!("--deny-cidrs={deny_cidrs}")],
        &[],
        "info,webchecker=debug",
    )
}

/// `proxy.fromEnvironment` uses the operator's HTTP_PROXY; without it the
/// same operator connects directly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_from_the_operator_environment() {
    let c = cluster();
    let ns = c.namespace("probe-proxy");
    let client = c.client().await;
    let api = checkers(&client, &ns);
    let proxy = Proxy::start(false).await;
    let t = Server::http("127.0.0.1:0", |_| Answer::text("")).await;
    let op = spawn_op(
        c,
        &format!("op-{ns}"),
        &ns,
        &[],
        &[("HTTP_PROXY", &proxy.url()), ("NO_PROXY", "")],
        "info,webchecker=debug",
    );
    op.wait_ready(Duration::from_secs(60)).await;
    apply_checker(
        &ns,
        "via-env",
        &format!(
            "host: {}\npath: /env\nintervalSeconds: 2\nproxy: {{fromEnvironment: true}}",
            t.url()
        ),
    )
    .await;
    apply_checker(
        &ns,
        "direct",
        &format!("host: {}\npath: /direct\nintervalSeconds: 2", t.url()),
    )
    .await;
    wait_condition(
        &api,
        "via-env",
        "Ready",
        "True",
        "ProbeSucceeded",
        Duration::from_secs(20),
    )
    .await;
    wait_condition(
        &api,
        "direct",
        "Ready",
        "True",
        "ProbeSucceeded",
        Duration::from_secs(20),
    )
    .await;
    let lines = proxy.lines();
    println!("proxy saw: {lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| *l == format!("GET {}/env HTTP/1.1", t.url()))
    );
    assert!(lines.iter().all(|l| !l.contains("/direct")));
    assert!(t.seen().iter().any(|s| s.uri == "/direct"));
}

/// 200 hostile targets probed at once: the operator's memory stays bounded,
/// and each checker ends with the precise reason within timeout + 100 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_hostile_targets_at_once() {
    let c = cluster();
    let ns = c.namespace("probe-hostile");
    let client = c.client().await;
    let api = checkers(&client, &ns);
    let targets = Hostile::start().await;
    config_map(&client, &ns, "hostile-ca", &[("ca.crt", &targets.ca_pem)]).await;
    let op = spawn_op(c, &format!("op-{ns}"), &ns, &[], &[], "info");
    op.wait_ready(Duration::from_secs(60)).await;
    let baseline = rss_mib(&op).await;
    let names: Vec<(String, &str)> = (0..200)
        .map(|i| {
            let kind = Hostile::KINDS[i % Hostile::KINDS.len()];
            (format!("{kind}-{i}"), kind)
        })
        .collect();
    let docs: Vec<String> = names
        .iter()
        .map(|(n, k)| checker_manifest(n, &format!("{}\nintervalSeconds: 4", targets.yaml(k, 3))))
        .collect();
    apply_ok(&ns, &docs.join("---\n")).await;
    // Every checker has a verdict.
    eventually(Duration::from_secs(60), "200 verdicts", || async {
        let list = api.list(&Default::default()).await.ok()?;
        let done = list
            .items
            .iter()
            .filter(|w| {
                w.status
                    .as_ref()
                    .and_then(|s| s.condition("Ready"))
                    .is_some_and(|c| c.reason != "Pending")
            })
            .count();
        (done == 200).then_some(())
    })
    .await;
    let mut peak: f64 = 0.0;
    let mut inflight_peak: f64 = 0.0;
    let watch = Instant::now();
    while watch.elapsed() < Duration::from_secs(24) {
        let m = op.scrape().await;
        peak =
            peak.max(metric(&m, "process_resident_memory_bytes", &[]).unwrap_or(0.0) / 1048576.0);
        inflight_peak =
            inflight_peak.max(metric(&m, "webchecker_inflight_probes", &[]).unwrap_or(0.0));
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let m = op.scrape().await;
    let probes = metric(&m, "webchecker_probes_total", &[]).unwrap_or(0.0);
    println!(
        "200 hostile checkers: RSS baseline {baseline:.1} MiB, peak {peak:.1} MiB over 24 s; {probes} probes; up to {inflight_peak} in flight"
    );
    assert!(probes >= 200.0 * 5.0, "probes ran: {probes}");
    assert!(peak < 256.0, "RSS peak {peak:.1} MiB");
    assert!(
        peak - baseline < 128.0,
        "RSS grew by {:.1} MiB",
        peak - baseline
    );
    // The verdicts: the precise reason, and within timeout + 100 ms.
    let list = api.list(&Default::default()).await.unwrap();
    for w in &list.items {
        let name = w.metadata.name.clone().unwrap();
        let kind = names.iter().find(|(n, _)| *n == name).unwrap().1;
        let (_, want, msg) = Hostile::EXPECTED
            .iter()
            .find(|(k, _, _)| *k == kind)
            .unwrap();
        let st = w.status.as_ref().unwrap();
        let cond = st.condition("Ready").unwrap();
        let want_reason = want.as_str();
        assert_eq!(cond.reason, want_reason, "{name}: {cond:?}");
        if *want != Reason::ProbeSucceeded {
            assert!(cond.message.contains(msg), "{name}: {}", cond.message);
        }
        let ms = st.last_latency_millis.unwrap();
        assert!(ms <= 3100, "{name}: {ms} ms");
    }
    for (kind, want, _) in Hostile::EXPECTED {
        let n = metric(&m, "webchecker_probes_total", &[("reason", want.as_str())]).unwrap_or(0.0);
        println!(
            "{kind:<14} {:<18} probes with this reason: {n}",
            want.as_str()
        );
    }
}
