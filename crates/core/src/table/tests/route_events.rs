//! A generated checker's Ready transitions are told to its route too
//! (crate::discovery::route_events): Warning `CheckerDown` when it turns
//! False (from True, or from Unknown: down from its first probe), Normal
//! `CheckerUp` when it turns True after False; a checker made by hand
//! tells only itself.

use super::*;
use k8s_openapi::api::core::v1::ObjectReference;

fn route(uid: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("networking.k8s.io/v1".into()),
        kind: Some("Ingress".into()),
        namespace: Some("ns".into()),
        name: Some("shop".into()),
        uid: Some(uid.into()),
        ..Default::default()
    }
}

fn generated(name: &str) -> Checker {
    let mut c = checker(name, spec("/", 10, ""));
    c.source_ref = Some(route("u-shop"));
    c
}

/// The Events among `fx`: "<object> <type> <reason>", the object by name
/// (and UID for the route's).
pub(super) fn events(fx: &[Effect]) -> Vec<String> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::Event(n) => {
                let kind = if n.warning { "Warning" } else { "Normal" };
                let on = match n.object_ref.kind.as_deref() {
                    Some(k) => format!(
                        "{k}/{}@{}",
                        n.object_ref.name.as_deref().unwrap_or_default(),
                        n.object_ref.uid.as_deref().unwrap_or_default()
                    ),
                    None => n.object_ref.name.clone().unwrap_or_default(),
                };
                Some(format!("{on} {kind} {}", n.reason))
            }
            _ => None,
        })
        .collect()
}

/// Runs the next probe of `ns/<name>` (its timer armed for `at`) to
/// `outcome`: the effects of its end, and when the one after is due.
pub(super) fn probe(
    sim: &mut Sim,
    name: &str,
    at: Instant,
    outcome: Outcome,
) -> (Vec<Effect>, Instant) {
    let key = format!("ns/{name}");
    let seq = sim.start(&key, at);
    sim.advance(Duration::from_millis(300));
    let fx = sim.step(Input::Done {
        key: key.clone(),
        seq,
        outcome: Some(outcome),
        finished: sim.wall,
    });
    let next = scheduled(sim, &sim.show(&fx));
    (fx, next)
}

pub(super) fn arrive(sim: &mut Sim, c: Checker) -> Instant {
    let lines = sim.upsert(c, false);
    scheduled(sim, &lines)
}

#[test]
fn a_route_hears_when_its_checker_goes_down_and_comes_back() {
    let mut sim = Sim::warm();
    let at = arrive(&mut sim, generated("a"));
    let (fx, at) = probe(&mut sim, "a", at, ok());
    assert_eq!(
        events(&fx),
        ["a Normal ProbeSucceeded"],
        "a new checker turning True is no news for its route"
    );
    let (fx, at) = probe(&mut sim, "a", at, refused());
    assert_eq!(
        events(&fx),
        [
            "a Warning ConnectError",
            "Ingress/shop@u-shop Warning CheckerDown"
        ]
    );
    let note = fx
        .iter()
        .find_map(|e| match e {
            Effect::Event(n) if n.reason == "CheckerDown" => Some(n.note.clone()),
            _ => None,
        })
        .unwrap();
    assert!(
        note.starts_with("checker a: Ready=False (ConnectError)"),
        "{note}"
    );
    let (fx, at) = probe(&mut sim, "a", at, refused());
    assert_eq!(events(&fx), Vec::<String>::new(), "still down: no news");
    // The Ingress deleted and made again: the checker is applied with the
    // new owner, same spec; its Events follow.
    sim.upsert(
        Checker {
            source_ref: Some(route("u-shop-2")),
            ..generated("a")
        },
        false,
    );
    let (fx, _) = probe(&mut sim, "a", at, ok());
    assert_eq!(
        events(&fx),
        [
            "a Normal ProbeSucceeded",
            "Ingress/shop@u-shop-2 Normal CheckerUp"
        ]
    );
}

#[test]
fn a_route_hears_of_a_checker_down_from_its_first_probe() {
    let mut sim = Sim::warm();
    let at = arrive(&mut sim, generated("a"));
    let (fx, _) = probe(&mut sim, "a", at, refused());
    assert_eq!(
        events(&fx),
        [
            "a Warning ConnectError",
            "Ingress/shop@u-shop Warning CheckerDown"
        ]
    );
}

#[test]
fn a_checker_made_by_hand_tells_only_itself() {
    let mut sim = Sim::warm();
    let at = arrive(&mut sim, checker("a", spec("/", 10, "")));
    let (_, at) = probe(&mut sim, "a", at, ok());
    let (fx, at) = probe(&mut sim, "a", at, refused());
    assert_eq!(events(&fx), ["a Warning ConnectError"]);
    let (fx, _) = probe(&mut sim, "a", at, ok());
    assert_eq!(events(&fx), ["a Normal ProbeSucceeded"]);
}
