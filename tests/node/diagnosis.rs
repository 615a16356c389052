//! Diagnosis of real pods (docs/diagnosis.md): behind Services of the
//! watched namespace, a Deployment whose container exits at once (the
//! operator's image with a flag it does not know) reaches CrashLoopBackOff
//! and one whose image cannot be pulled ImagePullBackOff, as the node's
//! kubelet reports them. A checker of each Service turns Ready=False, and
//! its Warning Event (held at most until its next probe) and status name
//! the cause and the pod; once the crashing Deployment is scaled to 0, its
//! next fall says the Service has no ready endpoints.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use webchecker::api::{Diagnosis, WebChecker};

use super::Suite;
use crate::support::node::must;
use crate::support::{checker_object, create_all, eventually};

/// Seconds between the diagnosed checkers' probes.
const EVERY: u64 = 2;
/// A kubelet backs a crashing container off 10 s, then 20 s, ...; a pull
/// from an address that refuses backs off the same way.
const POD_STATE: Duration = Duration::from_secs(180);

fn bound() -> Duration {
    Duration::from_secs(EVERY * 5 + 60)
}

pub(crate) async fn failing_pods_are_diagnosed(s: &Suite) {
    // 127.0.0.1:1 refuses every pull.
    let unpullable = "127.0.0.1:1/shop/cart:1.2";
    workloads(s, unpullable).await;
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), &s.checks);
    let crashing = waiting_pod(&pods, "crash", &["CrashLoopBackOff"]).await;
    let unpulled = waiting_pod(&pods, "pull", &["ImagePullBackOff", "ErrImagePull"]).await;

    let api: Api<WebChecker> = Api::namespaced(s.client.clone(), &s.checks);
    let events: Api<Event> = Api::namespaced(s.client.clone(), &s.checks);
    let host = |app: &str| format!("http://{app}.{}.svc.cluster.local:8080", s.checks);
    create_all(
        &s.client,
        &s.checks,
        vec![
            checker_object("diag-crash", &host("crash"), EVERY, json!({})),
            checker_object("diag-pull", &host("pull"), EVERY, json!({})),
        ],
        2,
    )
    .await;

    // Between two back-offs the container runs, and its pod may be Ready
    // for a moment: the Service may have a ready endpoint when it is read.
    let d = fall(&api, Some(&events), "diag-crash", "CrashLoopBackOff").await;
    assert!(
        d.message.starts_with("Service crash")
            && d.message.contains(&format!(
                "pod {crashing}: CrashLoopBackOff (container app, "
            )),
        "{d:?}"
    );
    let d = fall(&api, Some(&events), "diag-pull", "ImagePullBackOff").await;
    assert!(
        d.message.contains(&format!("pod {unpulled}: "))
            && d.message.contains(&format!("(image {unpullable})")),
        "{d:?}"
    );

    scaled_to_zero(s, &api, &pods).await;

    for app in ["crash", "pull"] {
        must(
            s.node.kubectl(&[
                "delete",
                "deployment,service",
                app,
                "-n",
                &s.checks,
                "--wait=false",
            ]),
            "delete workload",
        )
        .await;
    }
    api.delete("diag-crash", &Default::default()).await.unwrap();
    api.delete("diag-pull", &Default::default()).await.unwrap();
}

/// The Deployments `crash` (the operator's image with a flag it does not
/// know) and `pull` (an image nobody serves), each behind a Service whose
/// name the node's name server resolves to its ClusterIP.
async fn workloads(s: &Suite, unpullable: &str) {
    let image = format!("webchecker-operator:{}", s.node.tag);
    for (app, image, args) in [
        ("crash", image.as_str(), "[\"--no-such-flag\"]"),
        ("pull", unpullable, "[]"),
    ] {
        // Without endpoints, its ClusterIP refuses connections.
        s.apply_service(&workload(app, image, args), app).await;
    }
}

/// The crashing Deployment scaled to 0: its checker's next fall (suspended
/// and resumed) says the Service has no ready endpoints.
async fn scaled_to_zero(s: &Suite, api: &Api<WebChecker>, pods: &Api<Pod>) {
    // No pod at all: the next fall says so.
    must(
        s.node.kubectl(&[
            "scale",
            "deployment",
            "crash",
            "--replicas=0",
            "-n",
            &s.checks,
        ]),
        "scale to 0",
    )
    .await;
    eventually(POD_STATE, "the crashing pods gone", || async {
        let lp = ListParams::default().labels("app=crash");
        pods.list(&lp)
            .await
            .ok()
            .filter(|l| l.items.is_empty())
            .map(|_| ())
    })
    .await;
    for suspend in [true, false] {
        api.patch(
            "diag-crash",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"suspend": suspend}})),
        )
        .await
        .unwrap();
        eventually(bound(), "diag-crash suspended and back", || async {
            let c = api.get("diag-crash").await.ok()?.status?;
            let ready = c.condition("Ready")?.status.clone();
            ((ready == "Unknown") == suspend).then_some(())
        })
        .await;
    }
    // Its Warning repeats the first fall's reason: the Event recorder counts
    // it in that Event's series (a note is not part of an Event's identity),
    // so the status alone shows the new cause.
    let d = fall(api, None, "diag-crash", "NoReadyEndpoints").await;
    assert_eq!(
        d.message,
        "Service crash has no ready endpoints: no pod matches its selector"
    );
}

/// A Deployment `app` of one pod and a Service in front of it.
fn workload(app: &str, image: &str, args: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {app}}}\n\
         spec:\n  replicas: 1\n  selector: {{matchLabels: {{app: {app}}}}}\n\
         \x20 template:\n    metadata: {{labels: {{app: {app}}}}}\n\
         \x20   spec:\n      terminationGracePeriodSeconds: 0\n\
         \x20     containers:\n      - name: app\n        image: {image}\n\
         \x20       imagePullPolicy: IfNotPresent\n        args: {args}\n\
         ---\napiVersion: v1\nkind: Service\nmetadata: {{name: {app}}}\n\
         spec: {{selector: {{app: {app}}}, ports: [{{port: 8080}}]}}\n"
    )
}

/// The name of the pod of `app` once its container waits for one of
/// `reasons`, as the kubelet reports it.
async fn waiting_pod(pods: &Api<Pod>, app: &str, reasons: &[&str]) -> String {
    let t = Instant::now();
    let name = eventually(
        POD_STATE,
        &format!("a pod of {app} in {reasons:?}"),
        || async {
            let lp = ListParams::default().labels(&format!("app={app}"));
            pods.list(&lp).await.ok()?.items.into_iter().find_map(|p| {
                let waiting = p
                    .status
                    .as_ref()?
                    .container_statuses
                    .as_ref()?
                    .first()?
                    .state
                    .as_ref()?
                    .waiting
                    .as_ref()?
                    .reason
                    .clone()?;
                reasons.contains(&waiting.as_str()).then(|| p.name_any())
            })
        },
    )
    .await;
    println!(
        "pod {name} of {app} in {reasons:?} after {:.1?}",
        t.elapsed()
    );
    name
}

/// Waits for `name` to be Ready=False with a diagnosis of `cause`, and for
/// its Warning Event (of `events`) to carry it: the Event waits for the
/// diagnosis at most until the next probe, so the cluster's word came
/// within one interval.
async fn fall(
    api: &Api<WebChecker>,
    events: Option<&Api<Event>>,
    name: &str,
    cause: &str,
) -> Diagnosis {
    let t = Instant::now();
    let (d, since) = eventually(bound(), &format!("{name} diagnosed {cause}"), || async {
        let s = api.get(name).await.ok()?.status?;
        let c = s.condition("Ready")?;
        (c.status == "False").then_some(())?;
        let since = c.last_transition_time.clone()?;
        let d = s.diagnosis.filter(|d| d.cause == cause)?;
        Some((d, since))
    })
    .await;
    println!(
        "{name}: Ready=False since {since}, diagnosed {cause} (seen {:.1?} after the wait began): {}",
        t.elapsed(),
        d.message
    );
    let Some(events) = events else {
        return d;
    };
    let said = format!("; the cluster says: {}", d.message);
    eventually(
        bound(),
        &format!("{name}'s Warning names {cause}"),
        || async {
            let lp = ListParams::default();
            events.list(&lp).await.ok()?.items.into_iter().find(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                    && e.type_.as_deref() == Some("Warning")
                    && e.note.as_deref().is_some_and(|n| n.ends_with(&said))
            })
        },
    )
    .await;
    d
}
