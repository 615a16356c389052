//! What is sent for one generated checker: a server-side apply body with
//! only the fields the source sets, its labels and ownerReference, and a
//! fingerprint of it all; and that body without the fields whose hand-set
//! values must survive (the causes of a 409 conflict). Pure.

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
        }
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
