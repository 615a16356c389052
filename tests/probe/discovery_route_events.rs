//! Part 2: a generated checker's Ready transitions are said on its route
//! too (docs/discovery.md, "Events on the route"): the route's owner sees
//! `CheckerDown` (Warning) and `CheckerUp` (Normal) in `kubectl describe
//! ingress`, naming the checker, from the replica that writes the
//! transition. The target is flipped between 200 and 503 by the test. A
//! checker that names a route it was not generated from puts nothing on
//! it, and a route being deleted generates nothing.

use std::sync::atomic::AtomicBool;

use webchecker::discovery::annotations::{CHECK, INTERVAL_SECONDS};
use webchecker::discovery::route_events::{CHECKER_DOWN, CHECKER_UP};
use webchecker::discovery::{SOURCE_LABEL, SOURCE_NAME_LABEL};

use super::discovery::*;
use super::ops::*;
use super::*;

/// Interval of the checker (the annotation); a transition is written
/// within one probe of the flip, and the Event queue is published at once.
const INTERVAL: Duration = Duration::from_secs(1);
/// Room for a loaded 2-core machine: many intervals.
const WITHIN: Duration = Duration::from_secs(20);

/// `(type, reason, note)` of the Events regarding Ingress `name`.
async fn ingress_events(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> Vec<(String, String, String)> {
    use k8s_openapi::api::events::v1::Event;
    let api: kube::Api<Event> = kube::Api::namespaced(client.clone(), ns);
    let Ok(list) = api.list(&Default::default()).await else {
        return Vec::new();
    };
    list.items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().is_some_and(|r| {
                r.kind.as_deref() == Some("Ingress") && r.name.as_deref() == Some(name)
            })
        })
        .map(|e| {
            (
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default(),
            )
        })
        .collect()
}

/// Waits for an Event of `reason` on Ingress `name`; its type and note.
async fn wait_event(client: &kube::Client, ns: &str, name: &str, reason: &str) -> (String, String) {
    eventually(WITHIN, &format!("{reason} on Ingress {name}"), || async {
        ingress_events(client, ns, name)
            .await
            .into_iter()
            .find(|(_, r, _)| r == reason)
            .map(|(t, _, note)| (t, note))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_routes_checker_going_down_and_up_is_said_on_the_route() {
    let c = cluster();
    let ns = c.namespace("probe-route-events");
    let client = c.client().await;
    let wcs = checkers(&client, &ns);
    let zone = format!("{ns}.test");
    let ip = loopback_ip();
    let up = Arc::new(AtomicBool::new(true));
    let flag = up.clone();
    let _target = Server::http(&format!("{ip}:80"), move |_| {
        Answer::status(if flag.load(Ordering::SeqCst) {
            200
        } else {
            503
        })
    })
    .await;
    Dns::shared().add_zone(&zone, &[ip.parse().unwrap()]);
    let _op = discovering_op(c, &ns).await;
    let host = format!("a.{zone}");
    let interval = INTERVAL.as_secs().to_string();
    let ann = [(CHECK, "true"), (INTERVAL_SECONDS, interval.as_str())];
    apply_ok(&ns, &ingress("shop", &ann, &[&host])).await;
    let checker = name_of("ingress", "shop", &host);
    wait_condition(&wcs, &checker, "Ready", "True", "ProbeSucceeded", WITHIN).await;
    assert!(
        ingress_events(&client, &ns, "shop").await.is_empty(),
        "a new checker turning True is no news for its route"
    );

    up.store(false, Ordering::SeqCst);
    let t = Instant::now();
    let (type_, note) = wait_event(&client, &ns, "shop", CHECKER_DOWN).await;
    println!(
        "the target answers 503: {CHECKER_DOWN} on the Ingress after {:.2?}: {note}",
        t.elapsed()
    );
    assert_eq!(type_, "Warning");
    assert!(
        note.starts_with(&format!(
            "checker {checker}: Ready=False (UnexpectedStatus)"
        )),
        "{note}"
    );
    // The status write and the Events are sent apart: the Event may come first.
    wait_condition(&wcs, &checker, "Ready", "False", "UnexpectedStatus", WITHIN).await;

    up.store(true, Ordering::SeqCst);
    let t = Instant::now();
    let (type_, note) = wait_event(&client, &ns, "shop", CHECKER_UP).await;
    println!(
        "the target answers 200 again: {CHECKER_UP} on the Ingress after {:.2?}: {note}",
        t.elapsed()
    );
    assert_eq!(type_, "Normal");
    assert!(
        note.starts_with(&format!("checker {checker}: Ready=True (ProbeSucceeded)")),
        "{note}"
    );
    let out = c
        .kubectl_async(&["describe", "ingress", "shop", "-n", &ns])
        .await;
    let described = text(&out.stdout);
    println!(
        "$ kubectl describe ingress shop (Events)\n{}",
        events_part(&described)
    );
    assert!(described.contains(CHECKER_DOWN) && described.contains(CHECKER_UP));
}

/// The Events section of `kubectl describe`.
fn events_part(described: &str) -> &str {
    described
        .find("Events:")
        .map_or(described, |i| &described[i..])
}

/// A checker may write any labels and ownerReference: one that names
/// Ingress `shop` as its source and controller (by name, with a UID of its
/// own choosing) puts nothing on `shop` when it goes down. The Events of a
/// namespace are published in order: once the CheckerDown of a checker that
/// Ingress `real` did generate (down after the forged one) is on `real`,
/// the forged one's was decided.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checker_cannot_put_events_on_a_route_that_did_not_generate_it() {
    let c = cluster();
    let z = zone("probe-forged-events", |_| Answer::status(503)).await;
    let (ns, client, wcs, zone) = z.parts();
    let _op = discovering_op(c, &ns).await;
    apply_ok(&ns, &ingress("shop", &[], &[&format!("shop.{zone}")])).await;
    let forged = format!(
        "apiVersion: test.network.io/v1alpha1\nkind: WebChecker\nmetadata:\n  name: forged\n  labels:\n    {SOURCE_LABEL}: ingress\n    {SOURCE_NAME_LABEL}: shop\n  ownerReferences:\n  - {{apiVersion: networking.k8s.io/v1, kind: Ingress, name: shop, uid: 0badc0de-0000-4000-8000-000000000000, controller: true}}\nspec:\n  host: http://forged.{zone}\n  intervalSeconds: 1\n"
    );
    apply_ok(&ns, &forged).await;
    wait_condition(&wcs, "forged", "Ready", "False", "UnexpectedStatus", WITHIN).await;
    let interval = INTERVAL.as_secs().to_string();
    let ann = [(CHECK, "true"), (INTERVAL_SECONDS, interval.as_str())];
    apply_ok(&ns, &ingress("real", &ann, &[&format!("real.{zone}")])).await;
    let (_, note) = wait_event(&client, &ns, "real", CHECKER_DOWN).await;
    let on_shop = ingress_events(&client, &ns, "shop").await;
    println!(
        "a checker naming Ingress shop as its controller went down: Events on shop {on_shop:?}; the generated checker of Ingress real: {CHECKER_DOWN} on real: {note}"
    );
    assert!(on_shop.is_empty(), "{on_shop:?}");
}

/// An Ingress being deleted (a finalizer holds it) generates nothing: its
/// checker deleted by hand is not made again, whatever event comes for it.
/// The leader's log says when it looked at it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_being_deleted_generates_nothing() {
    let c = cluster();
    let ns = c.namespace("probe-deleting");
    let client = c.client().await;
    let wcs = checkers(&client, &ns);
    let op = discovering_op(c, &ns).await;
    let host = format!("a.{ns}.test");
    let held = ingress("doomed", &[(CHECK, "true")], &[&host]).replace(
        "metadata:\n",
        "metadata:\n  finalizers: [example.com/hold]\n",
    );
    apply_ok(&ns, &held).await;
    let checker = name_of("ingress", "doomed", &host);
    let want = [checker.clone()];
    wait_generated_from(&wcs, "ingress", "doomed", &want, Instant::now()).await;
    kubectl(&["-n", &ns, "delete", "ingress", "doomed", "--wait=false"]).await;
    let looked = || {
        op.log_text()
            .lines()
            .filter(|l| {
                l.contains("being deleted: nothing generated for it") && l.contains("doomed")
            })
            .count()
    };
    let seen = eventually(
        WITHIN,
        "the leader saw the Ingress being deleted",
        || async { (looked() > 0).then(looked) },
    )
    .await;
    kubectl(&["-n", &ns, "delete", "wc", &checker]).await;
    eventually(WITHIN, "the leader looked at it again", || async {
        let back = wcs.get_opt(&checker).await.ok().flatten();
        assert!(
            back.is_none(),
            "the checker of an Ingress being deleted was made again"
        );
        (looked() > seen).then_some(())
    })
    .await;
    assert!(wcs.get_opt(&checker).await.unwrap().is_none());
    println!("an Ingress being deleted: its checker deleted by hand stays deleted");
    kubectl(&[
        "-n",
        &ns,
        "patch",
        "ingress",
        "doomed",
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":null}}"#,
    ])
    .await;
}
