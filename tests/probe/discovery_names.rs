//! Part 2: discovery never takes over a WebChecker it did not generate
//! (docs/discovery.md, "Names"). A checker made by hand under the name a
//! route would give one of its checkers is left as it is (spec, labels,
//! ownerReferences, no field of discovery's), said on the route as
//! `NameTaken`, and neither the route's opt-out nor its deletion touches
//! it. Two routes whose parts join alike (Ingress `x` with host `y-z...`,
//! Ingress `x-y` with host `z...`) get a checker each.

use webchecker::discovery::annotations::CHECK;
use webchecker::discovery::{FIELD_MANAGER, NAME_TAKEN, SOURCE_LABEL, SOURCE_NAME_LABEL};

use super::discovery::*;
use super::ops::*;
use super::*;

/// What a hand-made checker must keep: its spec, labels, ownerReferences,
/// and no field of discovery's field manager.
async fn untouched(wcs: &kube::Api<WebChecker>, name: &str, before: &WebChecker, when: &str) {
    let now = wcs
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("{when}: {name}: {e}"));
    let json = |w: &WebChecker| serde_json::to_value(&w.spec).unwrap();
    assert_eq!(json(&now), json(before), "{when}: its spec");
    // The replicas add their owner label, as to any checker; discovery none.
    let labels = now.metadata.labels.clone().unwrap_or_default();
    for (k, v) in before.metadata.labels.iter().flatten() {
        assert_eq!(labels.get(k), Some(v), "{when}: its label {k}");
    }
    for ours in [SOURCE_LABEL, SOURCE_NAME_LABEL] {
        assert!(!labels.contains_key(ours), "{when}: {labels:?}");
    }
    assert_eq!(
        now.metadata.owner_references, before.metadata.owner_references,
        "{when}: its ownerReferences"
    );
    let managers = field_managers(&now);
    assert!(
        !managers.iter().any(|m| m == FIELD_MANAGER),
        "{when}: {managers:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_made_checker_is_never_taken_over_by_a_route() {
    let c = cluster();
    let z = zone("probe-names", |_| Answer::ok()).await;
    let (ns, client, wcs, zone) = z.parts();
    let (a, b) = (format!("a.{zone}"), format!("b.{zone}"));
    let taken = name_of("ingress", "shop", &a);
    let hand = format!(
        "apiVersion: test.network.io/v1alpha1\nkind: WebChecker\nmetadata:\n  name: {taken}\n  labels: {{team: hand}}\nspec:\n  host: http://hand.{zone}\n  intervalSeconds: 30\n"
    );
    apply_ok(&ns, &hand).await;
    let before = wcs.get(&taken).await.unwrap();
    let _op = discovering_op(c, &ns).await;

    let t = Instant::now();
    apply_ok(&ns, &ingress("shop", &[(CHECK, "true")], &[&a, &b])).await;
    // Only b's is the Ingress's (a hand-made one taken over would be listed too).
    let other = [name_of("ingress", "shop", &b)];
    wait_generated_from(&wcs, "ingress", "shop", &other, t).await;
    untouched(&wcs, &taken, &before, "the Ingress made").await;
    let note = warning_note(&client, &ns, "Ingress", "shop", NAME_TAKEN).await;
    println!(
        "a checker made by hand under the name of one the Ingress wants: Warning {NAME_TAKEN}: {note}"
    );
    assert!(note.contains(&taken), "{note}");

    let t = Instant::now();
    apply_ok(&ns, &ingress("shop", &[(CHECK, "false")], &[&a, &b])).await;
    let took = wait_generated_from(&wcs, "ingress", "shop", &[], t).await;
    println!(
        "the Ingress opted out: its own checker deleted after {took:.2?}, the hand-made one kept"
    );
    untouched(&wcs, &taken, &before, "the Ingress opted out").await;
    apply_ok(&ns, &ingress("shop", &[(CHECK, "true")], &[&a, &b])).await;
    wait_generated_from(&wcs, "ingress", "shop", &other, Instant::now()).await;
    kubectl(&["-n", &ns, "delete", "ingress", "shop"]).await;
    // Nothing of it names the Ingress: the garbage collector has nothing to follow.
    untouched(&wcs, &taken, &before, "the Ingress deleted").await;

    sources_whose_parts_join_alike_get_a_checker_each(&wcs, &ns, &zone).await;
}

/// Ingress `x` with host `y-z.<zone>` and Ingress `x-y` with host
/// `z.<zone>` both read `x-y-z.<zone>`: each gets a checker of its own,
/// owned by it.
async fn sources_whose_parts_join_alike_get_a_checker_each(
    wcs: &kube::Api<WebChecker>,
    ns: &str,
    zone: &str,
) {
    let (yz, z) = (format!("y-z.{zone}"), format!("z.{zone}"));
    let t = Instant::now();
    apply_ok(ns, &ingress("x", &[(CHECK, "true")], &[&yz])).await;
    apply_ok(ns, &ingress("x-y", &[(CHECK, "true")], &[&z])).await;
    let (one, two) = (name_of("ingress", "x", &yz), name_of("ingress", "x-y", &z));
    wait_generated_from(wcs, "ingress", "x", std::slice::from_ref(&one), t).await;
    wait_generated_from(wcs, "ingress", "x-y", std::slice::from_ref(&two), t).await;
    println!("Ingress x (host {yz}) and Ingress x-y (host {z}): checkers {one} and {two}");
    assert_ne!(one, two);
    for (name, owner) in [(&one, "x"), (&two, "x-y")] {
        let wc = wcs.get(name).await.unwrap();
        let owners = wc.metadata.owner_references.unwrap_or_default();
        assert_eq!(owners.len(), 1, "{name}: {owners:?}");
        assert_eq!(owners[0].name, owner, "{name}");
        let labels = wc.metadata.labels.unwrap_or_default();
        assert_eq!(
            labels.get(SOURCE_LABEL).map(String::as_str),
            Some("ingress")
        );
    }
}
