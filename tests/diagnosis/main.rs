//! Diagnosis from the cluster's own state, on the real control plane: a
//! checker whose host names a Service of its namespace turns Ready=False
//! and, within one interval, its status.diagnosis and the message of its
//! Warning Event say what the API server knows of that Service: no ready
//! endpoints and no pod, then the pod behind it in CrashLoopBackOff (its
//! status written as a kubelet writes it: this control plane has no
//! node). A checker of another namespace whose
//! host names that same Service learns nothing of it. certificate.rs: a
//! TLS failure and the namespace's cert-manager Certificate.

use webchecker_kit as support;

mod certificate;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::*;
use webchecker::api::{Diagnosis, WebChecker};

/// Seconds between probes.
const EVERY: u64 = 2;

fn bound() -> Duration {
    Duration::from_secs(EVERY * 5 + 30)
}

/// Ready's status and status.diagnosis of `name`.
async fn seen(api: &Api<WebChecker>, name: &str) -> Option<(String, Option<Diagnosis>, String)> {
    let s = api.get(name).await.ok()?.status?;
    let c = s.condition("Ready")?;
    Some((
        c.status.clone(),
        s.diagnosis.clone(),
        c.last_transition_time.clone()?,
    ))
}

/// The notes of the Warning Events about `name`.
async fn warnings(api: &Api<Event>, name: &str) -> Vec<String> {
    api.list(&ListParams::default())
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .filter_map(|e| e.note)
        .collect()
}

/// A Service `cart` selecting app=cart, with no pod yet.
fn service() -> String {
    "apiVersion: v1\nkind: Service\nmetadata: {name: cart}\n\
     spec: {selector: {app: cart}, ports: [{port: 8080}]}\n"
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_checker_of_a_service_says_why_and_another_namespace_learns_nothing() {
    let cluster = Cluster::shared("diagnosis");
    let ns = cluster.namespace("diag");
    let other = cluster.namespace("diag-other");
    let out = cluster.apply(&ns, &service()).await;
    assert!(out.status.success(), "{}", release::text(&out.stderr));
    let op = Operator::spawn_all_namespaces_with(cluster, "diag-r0", &ns, FAST_LEASES);
    op.wait_ready(Duration::from_secs(60)).await;
    let client = cluster.client().await;
    // Nothing resolves the Service's name here: the probes fail (DNSError).
    let host = format!("http://cart.{ns}.svc.cluster.local:8080");
    let mine = checker_object("cart", &host, EVERY, json!({"confirmFailures": false}));
    create_all(&client, &ns, vec![mine], 1).await;
    let theirs = checker_object("peek", &host, EVERY, json!({"confirmFailures": false}));
    create_all(&client, &other, vec![theirs], 1).await;
    let api: Api<WebChecker> = Api::namespaced(client.clone(), &ns);
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);

    let (first, fell) = eventually(bound(), "cart Ready=False with a diagnosis", || async {
        let (ready, d, since) = seen(&api, "cart").await?;
        (ready == "False").then_some(())?;
        Some((d?, since))
    })
    .await;
    println!("diagnosis: {first:?} (Ready=False since {fell})");
    assert_eq!(first.cause, "NoReadyEndpoints");
    assert_eq!(
        first.message,
        "Service cart has no ready endpoints: no pod matches its selector"
    );
    let notes = eventually(bound(), "cart's Warning", || async {
        let w = warnings(&events, "cart").await;
        (!w.is_empty()).then_some(w)
    })
    .await;
    assert!(
        notes[0].ends_with(
            "; the cluster says: Service cart has no ready endpoints: no pod matches its selector"
        ),
        "{notes:?}"
    );

    another_namespace_learns_nothing(&client, &other).await;

    // A pod behind it that crashes: the next fall names it.
    crashing_pod(&client, &ns).await;
    let again = Instant::now();
    // The checker recovers and falls again, as the target does: here the
    // name is made to resolve nowhere for a moment and back.
    api.patch(
        "cart",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"suspend": true}})),
    )
    .await
    .unwrap();
    eventually(bound(), "cart suspended", || async {
        seen(&api, "cart").await.filter(|(r, _, _)| r == "Unknown")
    })
    .await;
    api.patch(
        "cart",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"suspend": false}})),
    )
    .await
    .unwrap();
    let d = eventually(
        bound(),
        "cart's diagnosis names the crashing pod",
        || async {
            let (ready, d, _) = seen(&api, "cart").await?;
            (ready == "False").then_some(())?;
            d.filter(|d| d.cause == "CrashLoopBackOff")
        },
    )
    .await;
    println!("diagnosis {:?} after the pod came: {d:?}", again.elapsed());
    assert_eq!(
        d.message,
        "Service cart has no ready endpoints: pod cart-0: CrashLoopBackOff (container app, restarted 4 times)"
    );
    let metrics = op.metrics().await.unwrap_or_default();
    let found = metric(
        &metrics,
        "webchecker_diagnoses_total",
        &[("result", "found")],
    )
    .unwrap_or(0.0);
    assert!(found >= 2.0, "diagnoses found: {found}");
    let reads = metric(
        &metrics,
        "webchecker_diagnosis_reads_total",
        &[("kind", "Pod"), ("result", "ok")],
    );
    assert!(reads.unwrap_or(0.0) >= 2.0, "pod reads: {reads:?}");
}

/// The other namespace's checker names the same Service: its failure says
/// nothing of it.
async fn another_namespace_learns_nothing(client: &kube::Client, other: &str) {
    let theirs: Api<WebChecker> = Api::namespaced(client.clone(), other);
    let (_, d, _) = eventually(bound(), "peek Ready=False", || async {
        seen(&theirs, "peek").await.filter(|(r, _, _)| r == "False")
    })
    .await;
    assert_eq!(d, None);
    let their_events: Api<Event> = Api::namespaced(client.clone(), other);
    let notes = eventually(bound(), "peek's Warning", || async {
        let w = warnings(&their_events, "peek").await;
        (!w.is_empty()).then_some(w)
    })
    .await;
    assert!(
        notes.iter().all(|n| !n.contains("cluster says")),
        "{notes:?}"
    );
}

/// Pod cart-0 (app=cart), its status as a kubelet writes it for a
/// container that keeps crashing.
async fn crashing_pod(client: &kube::Client, ns: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "cart-0", "labels": {"app": "cart"}},
        "spec": {"containers": [{"name": "app", "image": "shop/cart:1.2"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let status = json!({"status": {
        "phase": "Running",
        "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "False"}],
        "containerStatuses": [{
            "name": "app", "image": "shop/cart:1.2", "imageID": "", "ready": false, "restartCount": 4,
            "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 1m20s restarting failed container"}},
            "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}
        }]
    }});
    pods.patch_status("cart-0", &PatchParams::default(), &Patch::Merge(status))
        .await
        .unwrap();
}
