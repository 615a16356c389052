//! A TLS failure and cert-manager, on the real control plane with the
//! pinned release's CRDs (no cert-manager runs: the test writes a
//! Certificate's status as cert-manager writes it when issuance fails). A
//! checker whose handshake fails (a certificate nobody here trusts) names
//! its namespace's Certificate for that host that is not Ready, with its
//! reason and issuer; a checker of another namespace probing the same host
//! learns nothing of it.

use std::net::IpAddr;

use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use support::dns::Dns;
use support::targets::{Answer, RecordingTarget, TestCa};

use super::*;

/// The Certificate `shop-tls` for `host`, as cert-manager leaves it after
/// two failed issuances from a ClusterIssuer that cannot issue.
async fn failing_certificate(cluster: &Cluster, client: &kube::Client, ns: &str, host: &str) {
    let yaml = format!(
        "apiVersion: cert-manager.io/v1\nkind: Certificate\nmetadata: {{name: shop-tls}}\n\
         spec: {{secretName: shop-tls, dnsNames: [{host}], \
         issuerRef: {{name: letsencrypt, kind: ClusterIssuer, group: cert-manager.io}}}}\n"
    );
    let out = cluster.apply(ns, &yaml).await;
    assert!(out.status.success(), "{}", release::text(&out.stderr));
    let gvk = GroupVersionKind::gvk("cert-manager.io", "v1", "Certificate");
    let certs: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &ApiResource::from_gvk(&gvk));
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let status = json!({"status": {
        "conditions": [
            {"type": "Ready", "status": "False", "reason": "DoesNotExist",
             "message": "Issuing certificate as Secret does not exist", "lastTransitionTime": now},
            {"type": "Issuing", "status": "False", "reason": "Failed",
             "message": "The certificate request has failed to complete", "lastTransitionTime": now}
        ],
        "failedIssuanceAttempts": 2,
        "lastFailureTime": now
    }});
    certs
        .patch_status("shop-tls", &PatchParams::default(), &Patch::Merge(status))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_failure_names_the_namespaces_certificate_that_is_not_ready() {
    let cluster = Cluster::shared("diagnosis");
    cluster.install_cert_manager_crds();
    let ns = cluster.namespace("diag-tls");
    let other = cluster.namespace("diag-tls-other");
    let client = cluster.client().await;
    let host = format!("shop.{ns}.test");
    let loopback: IpAddr = "127.0.0.1".parse().unwrap();
    Dns::shared().add(&host, &[loopback]);
    // Served with a certificate of a CA the operator does not trust.
    let target =
        RecordingTarget::https(&TestCa::new().leaf(&[&host]), None, |_| Answer::ok()).await;
    failing_certificate(cluster, &client, &ns, &host).await;
    let op = Operator::spawn_all_namespaces_with(cluster, "diag-tls-r0", &ns, FAST_LEASES);
    op.wait_ready(Duration::from_secs(60)).await;
    let url = format!("https://{host}:{}", target.addr.port());
    let spec = json!({"confirmFailures": false});
    create_all(
        &client,
        &ns,
        vec![checker_object("shop", &url, EVERY, spec.clone())],
        1,
    )
    .await;
    create_all(
        &client,
        &other,
        vec![checker_object("peek", &url, EVERY, spec)],
        1,
    )
    .await;

    let api: Api<WebChecker> = Api::namespaced(client.clone(), &ns);
    let d = eventually(bound(), "shop Ready=False with a diagnosis", || async {
        let (ready, d, _) = seen(&api, "shop").await?;
        (ready == "False").then_some(())?;
        d
    })
    .await;
    println!("diagnosis: {d:?}");
    assert_eq!(d.cause, "CertificateNotReady");
    assert_eq!(
        d.message,
        format!(
            "Certificate shop-tls for {host} is not ready: DoesNotExist \
             (issuer ClusterIssuer letsencrypt, 2 failed issuances)"
        )
    );
    let reason = api.get("shop").await.unwrap().status.unwrap();
    let reason = &reason.condition("Ready").unwrap().reason;
    assert_eq!(reason, "CertificateInvalid");
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let notes = eventually(bound(), "shop's Warning", || async {
        let w = warnings(&events, "shop").await;
        (!w.is_empty()).then_some(w)
    })
    .await;
    assert!(
        notes[0].ends_with(&format!("the cluster says: {}", d.message)),
        "{notes:?}"
    );

    // The other namespace has no Certificate for the host: its checker
    // fails the same way and, once its diagnosis is made (it reads its own
    // namespace's Certificates and finds none), is told nothing of this
    // namespace's. The status may say Ready=False before the diagnosis
    // comes, so the test waits for the diagnosis itself.
    let theirs: Api<WebChecker> = Api::namespaced(client.clone(), &other);
    eventually(bound(), "peek Ready=False", || async {
        seen(&theirs, "peek").await.filter(|(r, _, _)| r == "False")
    })
    .await;
    let reads = eventually(bound(), "peek diagnosed", || async {
        let m = op.metrics().await?;
        let none = metric(&m, "webchecker_diagnoses_total", &[("result", "none")])?;
        let reads = metric(
            &m,
            "webchecker_diagnosis_reads_total",
            &[("kind", "Certificate"), ("result", "ok")],
        )?;
        (none >= 1.0).then_some(reads)
    })
    .await;
    assert!(reads >= 2.0, "Certificate reads: {reads}");
    let (ready, d, _) = seen(&theirs, "peek").await.unwrap();
    assert_eq!((ready.as_str(), d), ("False", None));
}
