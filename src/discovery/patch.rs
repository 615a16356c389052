//! What is sent for one generated checker: a server-side apply body with
//! only the fields the source sets, its labels and ownerReference, and a
//! fingerprint of it all; and that body without the fields whose hand-set
//! values must survive (the causes of a 409 conflict). Pure.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Map, Value, json};

use super::names::{label_value, short_hash};
use super::{Desired, FINGERPRINT_ANNOTATION, SOURCE_LABEL, SOURCE_NAME_LABEL, Source};

/// The apply body of `d`, owned by `source`, with its fingerprint.
pub fn body(d: &Desired, source: &Source) -> Value {
    let mut b = unsigned(d, source);
    let print = fingerprint_of(&b);
    b["metadata"]["annotations"] = json!({ FINGERPRINT_ANNOTATION: print });
    b
}

/// The fingerprint `body` carries: it changes whenever anything applied
/// changes (a field, a label, the owner's UID).
pub fn fingerprint(d: &Desired, source: &Source) -> String {
    fingerprint_of(&unsigned(d, source))
}

fn fingerprint_of(unsigned: &Value) -> String {
    // serde_json's maps are sorted by key: the text is canonical.
    short_hash(&unsigned.to_string())
}

fn unsigned(d: &Desired, source: &Source) -> Value {
    let spec = serde_json::to_value(d).unwrap_or_else(|_| json!({}));
    let mut spec = match spec {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    spec.remove("name");
    json!({
        "apiVersion": "test.network.io/v1alpha1",
        "kind": "WebChecker",
        "metadata": {
            "name": d.name,
            "namespace": source.namespace,
            "labels": {
                SOURCE_LABEL: source.label,
                SOURCE_NAME_LABEL: label_value(&source.name),
            },
            "ownerReferences": [{
                "apiVersion": source.api_version,
                "kind": source.kind,
                "name": source.name,
                "uid": source.uid,
                "controller": true,
            }],
        },
        "spec": Value::Object(spec),
    })
}

/// Whether an existing checker may be applied for a source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// This source controls it (its UID then guards the apply), or it was
    /// generated for a source of the same kind, namespace and name (a route
    /// deleted and made again takes back its checkers).
    Ours(String),
    /// Anything else: made by hand, by another source or controller.
    Taken,
}

/// Whether the existing checker `meta` may be applied for `source`: its
/// controller ownerReference is the source's UID, or the same kind (group
/// too) and name with the `source` label of that kind. Never one made by
/// hand or by anyone else, whatever its name.
pub fn claim(meta: &ObjectMeta, source: &Source) -> Claim {
    let group = |v: &str| v.rsplit_once('/').map_or("", |(g, _)| g).to_string();
    let controller = meta
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    let labelled = meta
        .labels
        .as_ref()
        .and_then(|l| l.get(SOURCE_LABEL))
        .is_some_and(|l| l == source.label);
    let uid = meta.uid.clone().unwrap_or_default();
    match controller {
        Some(o) if o.uid == source.uid => Claim::Ours(uid),
        Some(o)
            if labelled
                && o.kind == source.kind
                && o.name == source.name
                && group(&o.api_version) == group(source.api_version) =>
        {
            Claim::Ours(uid)
        }
        _ => Claim::Taken,
    }
}

/// `body` applied only to the checker of UID `uid`: an object of that name
/// made meanwhile (another UID) refuses it.
pub fn guarded(mut body: Value, uid: &str) -> Value {
    body["metadata"]["uid"] = json!(uid);
    body
}

/// Removes from `body` the fields a 409 conflict names (`.spec.intervalSeconds`,
/// `.metadata.labels.<key>`, ...), so that the apply leaves their hand-set
/// values alone. Returns the fields removed, or the first one it does not
/// know (then nothing may be applied: the conflict would only repeat).
pub fn without(body: &mut Value, fields: &[String]) -> Result<Vec<String>, String> {
    let mut removed = Vec::new();
    for f in fields {
        let gone = if let Some(rest) = f.strip_prefix(".spec.") {
            remove(&mut body["spec"], top_key(rest))
        } else if let Some(key) = f.strip_prefix(".metadata.labels.") {
            remove(&mut body["metadata"]["labels"], key)
        } else if let Some(key) = f.strip_prefix(".metadata.annotations.") {
            remove(&mut body["metadata"]["annotations"], key)
        } else if f.starts_with(".metadata.ownerReferences") {
            remove(&mut body["metadata"], "ownerReferences")
        } else {
            false
        };
        if !gone {
            return Err(f.clone());
        }
        removed.push(f.clone());
    }
    Ok(removed)
}

/// The first key of a field path: `intervalSeconds` of `intervalSeconds`,
/// `expectedStatusCodes` of `expectedStatusCodes[...]`.
fn top_key(path: &str) -> &str {
    path.split(['.', '[']).next().unwrap_or(path)
}

fn remove(obj: &mut Value, key: &str) -> bool {
    obj.as_object_mut().is_some_and(|m| m.remove(key).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source() -> Source {
        Source {
            label: "ingress",
            api_version: "networking.k8s.io/v1",
            kind: "Ingress",
            namespace: "shop".into(),
            name: "web".into(),
            uid: "u-1".into(),
        }
    }

    fn desired() -> Desired {
        Desired {
            name: "web-a.example.com".into(),
            host: "https://a.example.com".into(),
            path: Some("/healthz".into()),
            expected_status_codes: None,
            interval_seconds: Some(30),
            failure_threshold: None,
            connect_to: None,
            grpc: None,
            depends_on: None,
        }
    }

    #[test]
    fn a_gateways_checker_is_named_in_depends_on() {
        let mut d = desired();
        d.depends_on = Some(super::super::DependsOnNames {
            names: vec!["edge-gw-0a1b2c3d".into()],
        });
        let b = body(&d, &source());
        assert_eq!(
            b["spec"]["dependsOn"],
            json!({"names": ["edge-gw-0a1b2c3d"]})
        );
        assert_ne!(
            fingerprint(&d, &source()),
            fingerprint(&desired(), &source())
        );
    }

    #[test]
    fn the_body_holds_only_what_the_source_sets() {
        let b = body(&desired(), &source());
        assert_eq!(
            b["spec"],
            json!({"host": "https://a.example.com", "path": "/healthz", "intervalSeconds": 30})
        );
        assert_eq!(b["metadata"]["labels"][SOURCE_NAME_LABEL], "web");
        assert_eq!(b["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(b["metadata"]["ownerReferences"][0]["controller"], true);
        assert_eq!(
            b["metadata"]["annotations"][FINGERPRINT_ANNOTATION],
            fingerprint(&desired(), &source())
        );
        let mut other = desired();
        other.interval_seconds = Some(31);
        assert_ne!(
            fingerprint(&other, &source()),
            fingerprint(&desired(), &source())
        );
        let mut reborn = source();
        reborn.uid = "u-2".into();
        assert_ne!(
            fingerprint(&desired(), &reborn),
            fingerprint(&desired(), &source()),
            "a new Ingress of the same name owns the checker anew"
        );
    }

    #[test]
    fn only_the_sources_own_checkers_are_claimed() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
        let meta = |owner: Option<(&str, &str, &str, &str)>, label: Option<&str>| ObjectMeta {
            name: Some("web-a.example.com".into()),
            uid: Some("c-1".into()),
            labels: label.map(|l| [(SOURCE_LABEL.to_string(), l.to_string())].into()),
            owner_references: owner.map(|(api_version, kind, name, uid)| {
                vec![OwnerReference {
                    api_version: api_version.into(),
                    kind: kind.into(),
                    name: name.into(),
                    uid: uid.into(),
                    controller: Some(true),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        };
        let ing = "networking.k8s.io/v1";
        let ours = meta(Some((ing, "Ingress", "web", "u-1")), Some("ingress"));
        assert_eq!(claim(&ours, &source()), Claim::Ours("c-1".into()));
        let reborn = meta(Some((ing, "Ingress", "web", "u-0")), Some("ingress"));
        assert_eq!(
            claim(&reborn, &source()),
            Claim::Ours("c-1".into()),
            "made again"
        );
        let cases = [
            ("made by hand", meta(None, None)),
            ("labelled by hand", meta(None, Some("ingress"))),
            (
                "another Ingress",
                meta(Some((ing, "Ingress", "shop", "u-9")), Some("ingress")),
            ),
            (
                "an HTTPRoute of that name",
                meta(
                    Some(("gateway.networking.k8s.io/v1", "HTTPRoute", "web", "u-9")),
                    Some("httproute"),
                ),
            ),
            (
                "another group's Ingress",
                meta(
                    Some(("example.com/v1", "Ingress", "web", "u-9")),
                    Some("ingress"),
                ),
            ),
            (
                "unlabelled, old UID",
                meta(Some((ing, "Ingress", "web", "u-0")), None),
            ),
        ];
        for (case, m) in cases {
            assert_eq!(claim(&m, &source()), Claim::Taken, "{case}");
        }
        let mut not_controller = ours.clone();
        not_controller.owner_references.as_mut().unwrap()[0].controller = None;
        assert_eq!(
            claim(&not_controller, &source()),
            Claim::Taken,
            "not its controller"
        );
        let g = guarded(body(&desired(), &source()), "c-1");
        assert_eq!(g["metadata"]["uid"], "c-1");
    }

    #[test]
    fn conflicting_fields_are_left_out() {
        let mut b = body(&desired(), &source());
        let removed = without(
            &mut b,
            &[
                ".spec.intervalSeconds".into(),
                format!(".metadata.labels.{SOURCE_NAME_LABEL}"),
            ],
        )
        .unwrap();
        assert_eq!(removed.len(), 2);
        assert!(b["spec"].get("intervalSeconds").is_none());
        assert_eq!(b["spec"]["path"], "/healthz");
        assert!(b["metadata"]["labels"].get(SOURCE_NAME_LABEL).is_none());
        assert_eq!(b["metadata"]["labels"][SOURCE_LABEL], "ingress");
        let unknown = without(&mut b, &[".status.x".into()]);
        assert_eq!(unknown, Err(".status.x".into()));
        assert!(
            without(&mut b, &[".spec.intervalSeconds".into()]).is_err(),
            "removed already: the conflict is not about what is sent"
        );
    }
}
