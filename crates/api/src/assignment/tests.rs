//! The protocol's steps applied as the API server applies a merge patch
//! (RFC 7386), read back with `Assignment::of`.

use serde_json::{Value, json};

use super::*;

/// RFC 7386: objects merge, null removes, anything else replaces.
fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let t = target.as_object_mut().unwrap();
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
        } else {
            merge(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

fn object() -> Value {
    json!({"metadata": {"namespace": "ns", "name": "a", "resourceVersion": "1"}})
}

fn read(obj: &Value) -> Assignment {
    let meta: ObjectMeta = serde_json::from_value(obj["metadata"].clone()).unwrap();
    Assignment::of(&meta)
}

#[test]
fn an_unassigned_checker_has_no_assignment() {
    assert_eq!(read(&object()), Assignment::default());
}

#[test]
fn assigned_it_is_held_by_that_incarnation_only() {
    let mut o = object();
    merge(&mut o, &assign("1", "r1", Some("uid-1")));
    let a = read(&o);
    assert!(a.held_by("r1", Some("uid-1")));
    assert!(!a.held_by("r1", Some("uid-0")), "an earlier incarnation");
    assert!(!a.held_by("r1", None));
    assert!(!a.held_by("r2", Some("uid-1")));
    assert!(!a.draining());
    assert_eq!(o["metadata"]["resourceVersion"], "1", "the precondition");
}

#[test]
fn a_drain_acknowledged_assigns_the_target_with_the_cadence() {
    let mut o = object();
    merge(&mut o, &assign("1", "r1", Some("uid-1")));
    merge(&mut o, &drain("2", "r2", Some("uid-2")));
    let a = read(&o);
    assert!(a.draining() && a.held_by("r1", Some("uid-1")));
    let h = a.handover().unwrap();
    assert_eq!(
        h,
        Handover {
            to: "r2".into(),
            epoch: "uid-2".into()
        }
    );
    merge(
        &mut o,
        &acknowledge_drain(Some("3"), Some(1234), Some(&h), "r1"),
    );
    let b = read(&o);
    assert!(b.held_by("r2", Some("uid-2")));
    assert!(!b.draining() && b.drain_epoch.is_none());
    assert_eq!(b.handed_over_from.as_deref(), Some("r1"));
    assert_eq!(b.last_probe_unix_ms, Some(1234));
    // The sharder's next assignment drops the handover mark.
    merge(&mut o, &assign("4", "r3", Some("uid-3")));
    let c = read(&o);
    assert!(c.held_by("r3", Some("uid-3")) && c.handed_over_from.is_none());
}

#[test]
fn a_drain_without_epoch_is_acknowledged_by_clearing_for_the_sharder() {
    let mut o = object();
    merge(&mut o, &assign("1", "r1", Some("uid-1")));
    merge(&mut o, &drain("2", "r2", None));
    let a = read(&o);
    assert!(a.draining() && a.handover().is_none());
    merge(&mut o, &acknowledge_drain(Some("3"), None, None, "r1"));
    let b = read(&o);
    assert_eq!((b.owner, b.epoch), (None, None));
    assert_eq!(
        b.drain.as_deref(),
        Some("r2"),
        "the drain stays for the sharder"
    );
}

#[test]
fn a_withdrawn_drain_leaves_the_owner() {
    let mut o = object();
    merge(&mut o, &assign("1", "r1", Some("uid-1")));
    merge(&mut o, &drain("2", "r2", Some("uid-2")));
    merge(&mut o, &withdraw_drain("3"));
    let a = read(&o);
    assert!(a.held_by("r1", Some("uid-1")) && !a.draining() && a.drain_epoch.is_none());
}

#[test]
fn a_last_probe_that_is_no_number_is_ignored() {
    let mut o = object();
    merge(
        &mut o,
        &json!({"metadata": {"annotations": {LAST_PROBE_ANNOTATION: "soon"}}}),
    );
    assert_eq!(read(&o).last_probe_unix_ms, None);
}

#[test]
fn the_selector_names_the_owner_label() {
    assert_eq!(owned_by("r1"), format!("{OWNER_LABEL}=r1"));
    assert_eq!(KEYS.len(), 6);
}
