//! The rules of discovery from YAML fixtures (`fixtures/*.yaml`: an Ingress,
//! a Service, a Gateway, or an HTTPRoute or a GRPCRoute with the Gateways it may name, its Namespace's
//! annotations, the checkers wanted, the annotations named as problems, the
//! rules skipped), and the bound on checkers per source.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::Ingress;
use serde::Deserialize;

use super::gateway_api::{GRPCRoute, Gateway, HTTPRoute};
use super::ingress::{TOO_MANY, plan};
use super::trim::Kept;
use super::{Defaults, Desired, MAX_CHECKERS_PER_SOURCE, NamespaceInfo, Plan, Skip};
use super::{grpcroute, httproute, service};

#[derive(Deserialize)]
struct Fixture {
    /// The Namespace's annotations.
    namespace: BTreeMap<String, String>,
    /// Its labels (for Gateways' selectors).
    #[serde(default)]
    namespace_labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    ingress: Option<serde_yaml::Value>,
    #[serde(default)]
    httproute: Option<serde_yaml::Value>,
    #[serde(default)]
    grpcroute: Option<serde_yaml::Value>,
    #[serde(default)]
    service: Option<serde_yaml::Value>,
    /// A Gateway as the source.
    #[serde(default)]
    gateway: Option<serde_yaml::Value>,
    /// The Gateways a route may name.
    #[serde(default)]
    gateways: Vec<serde_yaml::Value>,
    want: Vec<Desired>,
    #[serde(default)]
    problems: Vec<String>,
    #[serde(default)]
    skipped: Vec<(String, String)>,
}

fn ingress(mut v: serde_yaml::Value) -> Ingress {
    v["apiVersion"] = "networking.k8s.io/v1".into();
    v["kind"] = "Ingress".into();
    serde_yaml::from_value(v).expect("an Ingress")
}

fn route(mut v: serde_yaml::Value) -> HTTPRoute {
    v["apiVersion"] = "gateway.networking.k8s.io/v1".into();
    v["kind"] = "HTTPRoute".into();
    serde_yaml::from_value(v).expect("an HTTPRoute")
}

fn grpc_route(mut v: serde_yaml::Value) -> GRPCRoute {
    v["apiVersion"] = "gateway.networking.k8s.io/v1".into();
    v["kind"] = "GRPCRoute".into();
    serde_yaml::from_value(v).expect("a GRPCRoute")
}

fn svc(mut v: serde_yaml::Value) -> Service {
    v["apiVersion"] = "v1".into();
    v["kind"] = "Service".into();
    serde_yaml::from_value(v).expect("a Service")
}

fn gateway(mut v: serde_yaml::Value) -> Gateway {
    v["apiVersion"] = "gateway.networking.k8s.io/v1".into();
    v["kind"] = "Gateway".into();
    serde_yaml::from_value(v).expect("a Gateway")
}

fn skip_name(s: Skip) -> &'static str {
    match s {
        Skip::NoHost => "NoHost",
        Skip::WildcardHost => "WildcardHost",
        Skip::PathNotPlain => "PathNotPlain",
        Skip::NoAddress => "NoAddress",
    }
}

/// The plan of the fixture's source, with its objects `whole` or trimmed as
/// the watches keep them.
fn plan_of(f: &Fixture, whole: bool) -> Result<Plan, String> {
    let ns = NamespaceInfo {
        annotations: f.namespace.clone(),
        labels: f.namespace_labels.clone(),
    };
    let gateways: Vec<Gateway> = f
        .gateways
        .iter()
        .cloned()
        .map(gateway)
        .map(|mut g| {
            if !whole {
                g.trim();
            }
            g
        })
        .collect();
    let find = |ns: &str, name: &str| {
        gateways.iter().find(|g| {
            g.metadata.namespace.as_deref() == Some(ns) && g.metadata.name.as_deref() == Some(name)
        })
    };
    fn kept<T: Kept>(mut o: T, whole: bool) -> T {
        if !whole {
            o.trim();
        }
        o
    }
    let d = Defaults::default();
    if let Some(g) = &f.gateway {
        let sources = [&f.ingress, &f.httproute, &f.grpcroute, &f.service];
        if sources.iter().any(|s| s.is_some()) {
            return Err("a fixture has one source".into());
        }
        return Ok(super::gateway::plan(
            &kept(gateway(g.clone()), whole),
            &ns,
            &d,
        ));
    }
    Ok(match (&f.ingress, &f.httproute, &f.grpcroute, &f.service) {
        (Some(i), None, None, None) => plan(&kept(ingress(i.clone()), whole), &ns, &d),
        (None, None, None, Some(s)) => service::plan(&kept(svc(s.clone()), whole), &ns, &d),
        (None, Some(r), None, None) => {
            httproute::plan(&kept(route(r.clone()), whole), &ns, &d, find)
        }
        (None, None, Some(r), None) => {
            grpcroute::plan(&kept(grpc_route(r.clone()), whole), &ns, &d, find)
        }
        _ => return Err("a fixture has one of ingress, httproute, grpcroute and service".into()),
    })
}

fn check(path: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let f: Fixture = serde_yaml::from_str(&text).map_err(|e| e.to_string())?;
    let p = plan_of(&f, true)?;
    // What the watches keep plans alike.
    let trimmed = plan_of(&f, false)?;
    if trimmed.checkers != p.checkers || trimmed.problems != p.problems {
        return Err(format!("trimmed: {trimmed:?}, whole: {p:?}"));
    }
    let json = |v: &Vec<Desired>| serde_json::to_string(v).unwrap_or_default();
    if p.checkers != f.want {
        return Err(format!(
            "checkers:\n got  {}\n want {}",
            json(&p.checkers),
            json(&f.want)
        ));
    }
    for d in &p.checkers {
        admitted(d)?;
    }
    let named: Vec<&str> = p.problems.iter().map(|p| p.subject.as_str()).collect();
    if named != f.problems {
        return Err(format!("problems: got {named:?}, want {:?}", f.problems));
    }
    let skipped: Vec<(String, String)> = p
        .skipped
        .iter()
        .map(|(w, s)| (w.clone(), skip_name(*s).to_string()))
        .collect();
    if skipped != f.skipped {
        return Err(format!("skipped: got {skipped:?}, want {:?}", f.skipped));
    }
    Ok(())
}

/// What would be applied for `d` is a WebChecker spec that the operator
/// plans: it holds the CRD's rules of each kind (an HTTP-only field on a
/// grpc:// host, a grpc:// host without a port, are refused there too).
fn admitted(d: &Desired) -> Result<(), String> {
    let owner = super::Source {
        label: "test",
        api_version: "v1",
        kind: "Test",
        namespace: "web".into(),
        name: "t".into(),
        uid: "u".into(),
    };
    let body = super::patch::body(d, &owner);
    let spec: crate::api::WebCheckerSpec =
        serde_json::from_value(body["spec"].clone()).map_err(|e| format!("{}: {e}", d.name))?;
    crate::probe::plan(&spec, &|_| Err("no references".into()))
        .map(|_| ())
        .map_err(|e| format!("{}: not admitted: {e}", d.name))
}

#[test]
fn every_fixture_gives_what_it_wants() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/discovery/fixtures");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 16, "fixtures in {}", dir.display());
    let failures: Vec<String> = files
        .iter()
        .filter_map(|f| check(f).err().map(|e| format!("{}: {e}", f.display())))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn an_ingress_makes_at_most_the_bound_of_checkers_and_says_so() {
    let rules: Vec<serde_yaml::Value> = (0..MAX_CHECKERS_PER_SOURCE + 6)
        .map(|i| serde_yaml::from_str(&format!("host: h{i:03}.example.com")).unwrap())
        .collect();
    let mut v: serde_yaml::Value = serde_yaml::from_str(
        "metadata: {name: big, namespace: web, uid: u, annotations: {webchecker.test.network.io/check: 'true'}}",
    )
    .unwrap();
    v["spec"]["rules"] = serde_yaml::Value::Sequence(rules);
    let whole = ingress(v);
    let p = plan(&whole, &NamespaceInfo::default(), &Defaults::default());
    assert_eq!(p.checkers.len(), MAX_CHECKERS_PER_SOURCE);
    assert!(p.checkers[0].name.starts_with("big-h000.example.com-"));
    assert!(
        !p.checkers.iter().any(|c| c.host.contains("h064")),
        "the first 64 in the order of the rules"
    );
    assert_eq!(p.problems.len(), 1);
    assert_eq!(p.problems[0].reason, TOO_MANY);
    let mut kept = whole.clone();
    kept.trim();
    assert_eq!(
        kept.spec.as_ref().unwrap().rules.as_ref().unwrap().len(),
        MAX_CHECKERS_PER_SOURCE + 1,
        "one more host than can be made is kept"
    );
    assert_eq!(
        plan(&kept, &NamespaceInfo::default(), &Defaults::default()),
        p
    );
}

#[test]
fn the_operators_defaults_apply_unless_annotated() {
    let v: serde_yaml::Value = serde_yaml::from_str(
        "metadata: {name: s, namespace: web, uid: u, annotations: {webchecker.test.network.io/check: 'true', webchecker.test.network.io/interval-seconds: '5'}}\nspec: {rules: [{host: a.example.com}]}",
    )
    .unwrap();
    let defaults = Defaults {
        interval_seconds: Some(60),
        failure_threshold: Some(2),
        ..Defaults::default()
    };
    let p = plan(&ingress(v), &NamespaceInfo::default(), &defaults);
    assert_eq!(p.checkers[0].interval_seconds, Some(5), "annotated");
    assert_eq!(p.checkers[0].failure_threshold, Some(2), "the default");
}
