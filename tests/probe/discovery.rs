//! Part 2: route discovery (`--discover-routes`, docs/discovery.md) against
//! the real API server, whose Ingress API needs no controller. The
//! generated checkers probe port 80 of their hosts: a target listens on
//! port 80 of a loopback address of this test's own, and the kit's name
//! server answers every name under `<namespace>.test` with it (Ingress
//! hosts must be names, not addresses).
//!
//! Deleting an Ingress deletes its checkers through the garbage collector,
//! which this control plane does not run: here the ownerReference is
//! checked; the deletion itself is checked on the real node
//! (tests/node.rs), whose kube-controller-manager runs it.

use webchecker::discovery::annotations::{
    CHECK, EXPECTED_STATUS_CODES, FAILURE_THRESHOLD, INTERVAL_SECONDS, PATH,
};
use webchecker::discovery::{
    FIELD_MANAGER, FINGERPRINT_ANNOTATION, SOURCE_LABEL, SOURCE_NAME_LABEL,
};

use super::ops::*;
use super::*;

/// A generated checker's bound from the Ingress's change to the checker
/// (the issue's figure): the leader's watch, one apply, the test's poll.
const WITHIN: Duration = Duration::from_secs(2);

fn ingress(name: &str, annotations: &[(&str, &str)], hosts: &[&str]) -> String {
    let ann: String = annotations
        .iter()
        .map(|(k, v)| format!("    {k}: {v:?}\n"))
        .collect();
    let rules: String = hosts
        .iter()
        .map(|h| {
            format!(
                "  - host: {h}\n    http:\n      paths:\n      - path: /\n        pathType: Prefix\n        backend:\n          service: {{name: web, port: {{number: 80}}}}\n"
            )
        })
        .collect();
    let ann = if ann.is_empty() {
        String::new()
    } else {
        format!("  annotations:\n{ann}")
    };
    format!(
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: {name}\n{ann}spec:\n  rules:\n{rules}"
    )
}

/// The names of the checkers generated from Ingress `source`.
async fn generated(api: &kube::Api<WebChecker>, source: &str) -> Vec<String> {
    let lp = kube::api::ListParams::default().labels(&format!(
        "{SOURCE_LABEL}=ingress,{SOURCE_NAME_LABEL}={source}"
    ));
    let mut names: Vec<String> = api
        .list(&lp)
        .await
        .map(|l| {
            l.items
                .iter()
                .map(|c| c.metadata.name.clone().unwrap_or_default())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Waits (polling every 20 ms) until exactly `want` are generated from
/// `source`; how long after `from` that was.
async fn wait_generated(
    api: &kube::Api<WebChecker>,
    source: &str,
    want: &[String],
    from: Instant,
) -> Duration {
    let mut want = want.to_vec();
    want.sort();
    let deadline = from + Duration::from_secs(30);
    loop {
        let got = generated(api, source).await;
        if got == want {
            return from.elapsed();
        }
        assert!(
            Instant::now() < deadline,
            "checkers of Ingress {source}: {got:?}, want {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A loopback address of this test's own (port 80 is then free on it).
fn loopback_ip() -> String {
    let r: u32 = rand::random();
    format!(
        "127.{}.{}.{}",
        100 + r % 100,
        (r >> 8) % 256,
        2 + (r >> 16) % 250
    )
}

async fn kubectl(args: &[&str]) {
    let out = cluster().kubectl_async(args).await;
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        text(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingresses_that_opt_in_get_checkers_that_follow_them() {
    let c = cluster();
    let ns = c.namespace("probe-routes");
    let client = c.client().await;
    let wcs = checkers(&client, &ns);
    let zone = format!("{ns}.test");
    let ip = loopback_ip();
    let target = Server::http(&format!("{ip}:80"), |_| Answer::ok()).await;
    Dns::shared().add_zone(&zone, &[ip.parse().unwrap()]);
    // Neither it nor its Namespace opts in (yet).
    apply_ok(&ns, &ingress("plain", &[], &[&format!("plain.{zone}")])).await;
    let op = spawn_op(
        c,
        &format!("op-{ns}"),
        &ns,
        &["--discover-routes"],
        &[],
        "info,webchecker=debug",
    );
    op.wait_ready(Duration::from_secs(60)).await;
    eventually(
        Duration::from_secs(30),
        "route discovery active",
        || async {
            (metric(&op.scrape().await, "webchecker_discovery_active", &[]) == Some(1.0))
                .then_some(())
        },
    )
    .await;

    let (a, b) = (format!("a.{zone}"), format!("b.{zone}"));
    let shop = |hosts: &[&str], extra: &[(&str, &str)]| {
        let mut ann = vec![(CHECK, "true"), (PATH, "/healthz"), (INTERVAL_SECONDS, "2")];
        ann.extend_from_slice(extra);
        ingress("shop", &ann, hosts)
    };
    let t = Instant::now();
    apply_ok(&ns, &shop(&[&a, &b], &[])).await;
    let names = [format!("shop-{a}"), format!("shop-{b}")];
    let took = wait_generated(&wcs, "shop", &names, t).await;
    println!("an Ingress with two hosts annotated: its two WebCheckers after {took:.2?}");
    assert!(took < WITHIN, "{took:?}");
    for n in &names {
        wait_condition(
            &wcs,
            n,
            "Ready",
            "True",
            "ProbeSucceeded",
            Duration::from_secs(30),
        )
        .await;
    }
    let hosts: std::collections::BTreeSet<String> = target
        .seen()
        .iter()
        .filter(|r| r.uri == "/healthz")
        .filter_map(|r| r.headers.get("host").cloned())
        .collect();
    assert!(hosts.contains(&a) && hosts.contains(&b), "{hosts:?}");
    let sel = format!("{SOURCE_NAME_LABEL}=shop");
    let out = c.kubectl_async(&["get", "wc", "-n", &ns, "-l", &sel]).await;
    println!("$ kubectl get wc -l {sel}\n{}", text(&out.stdout));
    owned_by_the_ingress(&client, &wcs, &ns, &names[0]).await;

    // A host edited: the old checker goes, the new one comes.
    let d = format!("d.{zone}");
    let t = Instant::now();
    apply_ok(&ns, &shop(&[&a, &d], &[])).await;
    let names = [format!("shop-{a}"), format!("shop-{d}")];
    let took = wait_generated(&wcs, "shop", &names, t).await;
    println!("a host edited: the old WebChecker deleted and the new one created after {took:.2?}");
    assert!(took < WITHIN, "{took:?}");

    a_hand_set_interval_survives(
        &op,
        &wcs,
        &ns,
        &names[0],
        &shop(&[&a, &d], &[(FAILURE_THRESHOLD, "2")]),
    )
    .await;
    a_bad_annotation_is_named_on_the_ingress(
        &client,
        &ns,
        &shop(&[&a, &d], &[(EXPECTED_STATUS_CODES, "200,2xz")]),
    )
    .await;
    the_namespace_opts_in_and_an_ingress_opts_out(&wcs, &ns, &zone).await;

    // The Ingress opts out: its checkers go.
    let t = Instant::now();
    apply_ok(&ns, &ingress("shop", &[(CHECK, "false")], &[&a, &d])).await;
    let took = wait_generated(&wcs, "shop", &[], t).await;
    println!("the Ingress opted out: its WebCheckers deleted after {took:.2?}");
    let m = op.scrape().await;
    println!(
        "applies: {:?} applied, {:?} conflict, {:?} error; deletes: {:?}",
        metric(
            &m,
            "webchecker_discovery_applies_total",
            &[("result", "applied")]
        ),
        metric(
            &m,
            "webchecker_discovery_applies_total",
            &[("result", "conflict")]
        ),
        metric(
            &m,
            "webchecker_discovery_applies_total",
            &[("result", "error")]
        ),
        metric(
            &m,
            "webchecker_discovery_deletes_total",
            &[("result", "deleted")]
        ),
    );
}

/// The checker names its Ingress as controller owner (the garbage collector
/// deletes it with the Ingress) and is applied by discovery's field manager.
async fn owned_by_the_ingress(
    client: &kube::Client,
    wcs: &kube::Api<WebChecker>,
    ns: &str,
    name: &str,
) {
    use k8s_openapi::api::networking::v1::Ingress;
    let ing: kube::Api<Ingress> = kube::Api::namespaced(client.clone(), ns);
    let uid = ing.get("shop").await.unwrap().metadata.uid.unwrap();
    let wc = wcs.get(name).await.unwrap();
    let owners = wc.metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(owners.len(), 1, "{owners:?}");
    assert_eq!(
        (
            owners[0].kind.as_str(),
            owners[0].name.as_str(),
            owners[0].uid.as_str(),
            owners[0].controller
        ),
        ("Ingress", "shop", uid.as_str(), Some(true))
    );
    assert_eq!(wc.spec.interval_seconds, 2);
    assert_eq!(wc.spec.path, "/healthz");
    let managers: Vec<String> = wc
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert!(managers.iter().any(|m| m == FIELD_MANAGER), "{managers:?}");
    assert!(
        wc.metadata
            .annotations
            .unwrap_or_default()
            .contains_key(FINGERPRINT_ANNOTATION),
        "the fingerprint annotation"
    );
}

/// A person sets intervalSeconds by hand; the next change of the Ingress
/// applies its new field and leaves the hand-set value (a conflict, then an
/// apply without the field).
async fn a_hand_set_interval_survives(
    op: &Operator,
    wcs: &kube::Api<WebChecker>,
    ns: &str,
    name: &str,
    updated: &str,
) {
    kubectl(&[
        "-n",
        ns,
        "patch",
        "wc",
        name,
        "--type=merge",
        "-p",
        r#"{"spec":{"intervalSeconds":3}}"#,
    ])
    .await;
    apply_ok(ns, updated).await;
    let wc = eventually(
        Duration::from_secs(10),
        "failureThreshold 2 applied",
        || async {
            wcs.get(name)
                .await
                .ok()
                .filter(|w| w.spec.failure_threshold == Some(2))
        },
    )
    .await;
    assert_eq!(wc.spec.interval_seconds, 3, "the hand-set value survives");
    let conflicts = metric(
        &op.scrape().await,
        "webchecker_discovery_applies_total",
        &[("result", "conflict")],
    );
    assert!(conflicts >= Some(1.0), "{conflicts:?}");
    println!(
        "a hand-set intervalSeconds (3) survived an Ingress update that applied failureThreshold 2"
    );
}

/// A bad annotation value: a Warning Event on the Ingress naming it.
async fn a_bad_annotation_is_named_on_the_ingress(client: &kube::Client, ns: &str, manifest: &str) {
    use k8s_openapi::api::events::v1::Event;
    apply_ok(ns, manifest).await;
    let api: kube::Api<Event> = kube::Api::namespaced(client.clone(), ns);
    let note = eventually(
        Duration::from_secs(10),
        "a Warning Event on Ingress shop",
        || async {
            api.list(&Default::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find_map(|e| {
                    let about = e.regarding.as_ref()?;
                    (about.kind.as_deref() == Some("Ingress")
                        && about.name.as_deref() == Some("shop")
                        && e.type_.as_deref() == Some("Warning")
                        && e.reason.as_deref() == Some("InvalidAnnotation"))
                    .then(|| e.note.clone().unwrap_or_default())
                })
        },
    )
    .await;
    assert!(note.contains(EXPECTED_STATUS_CODES), "{note}");
    println!("a bad annotation: Warning InvalidAnnotation on the Ingress: {note}");
}

/// Annotating the Namespace opts in its Ingresses that say nothing; one
/// that says "false" stays out.
async fn the_namespace_opts_in_and_an_ingress_opts_out(
    wcs: &kube::Api<WebChecker>,
    ns: &str,
    zone: &str,
) {
    apply_ok(
        ns,
        &ingress("optout", &[(CHECK, "false")], &[&format!("optout.{zone}")]),
    )
    .await;
    assert_eq!(
        generated(wcs, "plain").await,
        Vec::<String>::new(),
        "not opted in"
    );
    let t = Instant::now();
    kubectl(&["annotate", "namespace", ns, &format!("{CHECK}=true")]).await;
    let want = [format!("plain-plain.{zone}")];
    let took = wait_generated(wcs, "plain", &want, t).await;
    println!(
        "the Namespace opted in: the Ingress that says nothing got its WebChecker after {took:.2?}"
    );
    assert_eq!(
        generated(wcs, "optout").await,
        Vec::<String>::new(),
        "opted out"
    );
}
