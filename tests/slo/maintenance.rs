//! A maintenance window end to end, the witness's log and the objects as
//! the oracle: while a WebCheckerMaintenance covers a checker whose target
//! fails, the checker turns Ready=False with a Normal Event, its failures
//! count for neither side of spec.slo, the owner exports
//! webchecker_maintenance and the window's status says it is open and
//! covers it; a checker of the namespace the selector does not match fails
//! at the same time as usual (a Warning, counted bad), and so it does
//! although another namespace has a window over every checker of its own.
//! When the window closes on the checker still down, the Warning held back
//! is sent. The replica watches every namespace (a control plane of its
//! own, so that no other test's checkers are its).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{DeleteParams, ListParams};
use serde_json::json;

use super::support::fleet::*;
use super::support::release::text;
use super::support::*;
use webchecker::api::{SloStatus, WebChecker};

const PLANNED: &str = "planned";
const CONTROL: &str = "control";
const WINDOW: &str = "db-upgrade";

/// (type, reason) -> Events about `name` (series counted).
async fn events_for(api: &Api<Event>, name: &str) -> HashMap<(String, String), i32> {
    let mut m = HashMap::new();
    for e in api.list(&ListParams::default()).await.unwrap() {
        if e.regarding.as_ref().and_then(|r| r.name.as_deref()) != Some(name) {
            continue;
        }
        let n = e.series.as_ref().map(|s| s.count).unwrap_or(1);
        let key = (e.type_.unwrap_or_default(), e.reason.unwrap_or_default());
        *m.entry(key).or_insert(0) += n;
    }
    m
}

fn warnings(events: &HashMap<(String, String), i32>) -> i32 {
    events
        .iter()
        .filter(|((t, _), _)| t == "Warning")
        .map(|(_, n)| n)
        .sum()
}

async fn status(api: &Api<WebChecker>, name: &str) -> Option<webchecker::api::WebCheckerStatus> {
    api.get(name).await.ok()?.status
}

fn ready(s: &webchecker::api::WebCheckerStatus) -> Option<&str> {
    let c = s.conditions.iter().find(|c| c.type_ == "Ready")?;
    Some(c.status.as_str())
}

fn in_window(s: &webchecker::api::WebCheckerStatus) -> bool {
    s.conditions
        .iter()
        .any(|c| c.type_ == "Maintenance" && c.status == "True" && c.message.contains(WINDOW))
}

struct World {
    cluster: &'static Cluster,
    fleet: Fleet,
    api: Api<WebChecker>,
    events: Api<Event>,
}

/// Seconds between probes, and a bound for `k` of them.
const EVERY: Duration = Duration::from_secs(1);

fn probes(k: u32) -> Duration {
    EVERY * 3 * (k + 10)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_keeps_a_failure_out_of_the_budget_and_sends_no_warning() {
    let w = two_ready_checkers().await;
    let (before, end) = open_the_window(&w).await;
    both_fail(&w, &before, end).await;
    close_the_window(&w).await;
}

/// The planned checker (team=shop) and the control, both Ready, with an
/// objective and no confirmation (every failure counts).
async fn two_ready_checkers() -> World {
    let cluster = Cluster::shared("maintenance");
    let ns = cluster.namespace("slo-mw");
    // Another namespace's window over all of its checkers: none of ours.
    let other = cluster.namespace("mw-other");
    let everything = "apiVersion: test.network.io/v1alpha1\nkind: WebCheckerMaintenance\n\
         metadata: {name: everything}\nspec: {selector: {}, start: '2020-01-01T00:00:00Z', end: '2100-01-01T00:00:00Z'}\n";
    let out = cluster.apply(&other, everything).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let ops = vec![Operator::spawn_all_namespaces_with(
        cluster,
        "mw-r0",
        &ns,
        FAST_LEASES,
    )];
    let witness = Witness::start().await;
    let fleet = Fleet::start_with_witness(cluster, ns.clone(), ops, witness, 0, 1).await;
    let spec = json!({"confirmFailures": false, "slo": {"objective": "99", "window": "7d"}});
    let every = EVERY.as_secs();
    let mut planned = checker_object(PLANNED, &fleet.witness.url(), every, spec.clone());
    planned.metadata.labels = Some([("team".to_string(), "shop".to_string())].into());
    let control = checker_object(CONTROL, &fleet.witness.url(), every, spec);
    create_all(&fleet.client, &ns, vec![planned, control], 2).await;
    let api: Api<WebChecker> = Api::namespaced(fleet.client.clone(), &ns);
    let events: Api<Event> = Api::namespaced(fleet.client.clone(), &ns);
    for name in [PLANNED, CONTROL] {
        eventually(probes(5), &format!("{name} Ready"), || async {
            (ready(&status(&api, name).await?)? == "True").then_some(())
        })
        .await;
    }
    World {
        cluster,
        fleet,
        api,
        events,
    }
}

/// A window over team=shop, open from a minute ago for ten minutes: the
/// planned checker's Maintenance condition and its count then, the
/// window's status, and when it closes (Unix seconds).
async fn open_the_window(w: &World) -> (SloStatus, i64) {
    let ns = &w.fleet.ns;
    let now = chrono::Utc::now();
    let end = now + chrono::Duration::minutes(10);
    let window = format!(
        "apiVersion: test.network.io/v1alpha1\nkind: WebCheckerMaintenance\nmetadata: {{name: {WINDOW}}}\n\
         spec: {{selector: {{matchLabels: {{team: shop}}}}, start: '{}', end: '{}', reason: schema change}}\n",
        (now - chrono::Duration::minutes(1)).format("%Y-%m-%dT%H:%M:%SZ"),
        end.format("%Y-%m-%dT%H:%M:%SZ"),
    );
    let out = w.cluster.apply(ns, &window).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let before = eventually(
        probes(5),
        "Maintenance=True on the planned checker",
        || async {
            let s = status(&w.api, PLANNED).await?;
            in_window(&s).then_some(s.slo?)
        },
    )
    .await;
    let wcm = eventually(
        probes(10),
        "the window's status: open, covering 1",
        || async {
            let get = ["get", "wcm", "-n", ns.as_str(), WINDOW, "-o", "json"];
            let out = w.cluster.kubectl_async(&get).await;
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
            let s = &v["status"];
            (s["active"] == true && s["checkers"] == 1).then(|| v.clone())
        },
    )
    .await;
    assert!(wcm["status"]["nextStart"].is_null(), "{wcm}");
    let get = ["get", "wcm", "-n", ns.as_str()];
    let table = text(&w.cluster.kubectl_async(&get).await.stdout);
    println!("{table}");
    assert!(
        table.contains("ACTIVE") && table.contains("true"),
        "{table}"
    );
    (before, end.timestamp())
}

/// Both targets fail: the planned checker in its window, the control not.
async fn both_fail(w: &World, before: &SloStatus, end: i64) {
    let witness = &w.fleet.witness;
    let start = Instant::now();
    witness.set_mode(PLANNED, Mode::Status(503));
    witness.set_mode(CONTROL, Mode::Status(503));
    let down = |name: &'static str| async move {
        eventually(probes(5), &format!("{name} Ready=False"), || async {
            let s = status(&w.api, name).await?;
            (ready(&s)? == "False").then_some(s)
        })
        .await
    };
    let (planned_down, control_down) = (down(PLANNED).await, down(CONTROL).await);
    // The control's count moves (a live system), the planned one's does not.
    let control_slo = control_down.slo.clone().unwrap();
    assert!(
        control_slo.good_probes < control_slo.total_probes,
        "the control's failures count: {control_slo:?}"
    );
    let during: SloStatus = planned_down.slo.clone().unwrap();
    assert_eq!(
        (during.good_probes, during.total_probes),
        (before.good_probes, before.total_probes),
        "failures in the window counted: before {before:?}, during {during:?}"
    );
    let failed = witness
        .hits_since(start)
        .iter()
        .filter(|h| h.checker == PLANNED)
        .count();
    assert!(failed >= 1, "the planned checker was probed in its window");
    eventually(probes(5), "the control's Warning", || async {
        (warnings(&events_for(&w.events, CONTROL).await) > 0).then_some(())
    })
    .await;
    let planned_events = events_for(&w.events, PLANNED).await;
    assert_eq!(warnings(&planned_events), 0, "{planned_events:?}");
    assert!(
        planned_events
            .keys()
            .any(|(t, r)| t == "Normal" && r != "ProbeSucceeded"),
        "the planned failure as a Normal Event: {planned_events:?}"
    );
    let ns = w.fleet.ns.as_str();
    let labels = [("namespace", ns), ("name", PLANNED), ("window", WINDOW)];
    let until = eventually(probes(3), "webchecker_maintenance on the owner", || async {
        metric(
            &w.fleet.ops[0].metrics().await?,
            "webchecker_maintenance",
            &labels,
        )
    })
    .await;
    assert_eq!(until, end as f64, "the close time of the window");
}

/// The window goes while the target still fails: the Warning held back.
async fn close_the_window(w: &World) {
    let wcm: Api<webchecker::api::WebCheckerMaintenance> =
        Api::namespaced(w.fleet.client.clone(), &w.fleet.ns);
    wcm.delete(WINDOW, &DeleteParams::default()).await.unwrap();
    let warned = eventually(probes(5), "the Warning after the window", || async {
        let e = events_for(&w.events, PLANNED).await;
        (warnings(&e) > 0).then_some(e)
    })
    .await;
    println!("planned checker's Events: {warned:?}");
    let after = eventually(probes(5), "Maintenance=False, written", || async {
        let s = status(&w.api, PLANNED).await?;
        (!in_window(&s)).then_some(s)
    })
    .await;
    assert_eq!(ready(&after), Some("False"));
    assert_eq!(exclusivity_violation(&w.fleet.witness.hits()), None);
}
