//! A Service to the checker it wants: one, probing the Service's cluster
//! name `<scheme>://<name>.<namespace>.svc:<port>` on the port its
//! annotation names, else its port named `http`, else `https`. Only a
//! Service that opts in itself gets one: a Namespace's opt-in covers its
//! routes, not its Services, most of which do not speak HTTP. Pure.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::annotations::{self, PORT, PortRef};
use super::rules::{self, HostCheckers};
use super::{Defaults, Plan, Problem, Source};

/// The `source` label's value of checkers generated from Services.
pub const LABEL: &str = "service";

/// The Event reason when a Service opts in but no port of it can be chosen.
pub const NO_HTTP_PORT: &str = "NoHTTPPort";

/// The owner of a Service's checker.
pub fn source(svc: &Service) -> Source {
    Source::of(LABEL, "v1", "Service", &svc.metadata)
}

/// What `svc` wants, given its Namespace's annotations (whose opt-in does
/// not cover Services: `rules::start`) and the operator's defaults. Not
/// opted in: nothing, but the problems of its annotations all the same.
pub fn plan(
    svc: &Service,
    namespace_annotations: &BTreeMap<String, String>,
    defaults: &Defaults,
) -> Plan {
    let own = svc.metadata.annotations.as_ref();
    let (settings, mut plan) = rules::start("Service", own, namespace_annotations);
    let Some(settings) = settings else {
        return plan;
    };
    let Some((port, named_https)) = port(svc, settings.port.as_ref(), &mut plan.problems) else {
        return plan;
    };
    let name = svc.metadata.name.as_deref().unwrap_or_default();
    let namespace = svc.metadata.namespace.as_deref().unwrap_or_default();
    let scheme = if settings.https.unwrap_or(named_https) {
        "https"
    } else {
        "http"
    };
    let url = format!("{scheme}://{name}.{namespace}.svc:{port}");
    HostCheckers {
        parts: &[name, "svc"],
        url: &url,
        connect_to: None,
        paths: &[],
    }
    .add(&settings, defaults, &mut plan, &mut BTreeSet::new());
    rules::finish(&mut plan, "spec.ports");
    plan
}

/// The port probed and whether it says https (named `https`, or its
/// `appProtocol`): the annotation's (a name must be a TCP port of the
/// Service; a number is taken as it is, as a headless or ExternalName
/// Service may list none), else the TCP port named (or `appProtocol`)
/// `http`, else `https`. None, and a problem, when there is none.
fn port(
    svc: &Service,
    wanted: Option<&PortRef>,
    problems: &mut Vec<Problem>,
) -> Option<(i32, bool)> {
    let tcp: Vec<&ServicePort> = svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_deref())
        .unwrap_or_default()
        .iter()
        .filter(|p| p.protocol.as_deref().is_none_or(|v| v == "TCP"))
        .collect();
    let says = |p: &ServicePort, what: &str| {
        p.name.as_deref() == Some(what) || p.app_protocol.as_deref() == Some(what)
    };
    let chosen = match wanted {
        Some(PortRef::Number(n)) => Some(
            tcp.iter()
                .find(|p| p.port == *n)
                .map_or((*n, false), |p| (*n, says(p, "https"))),
        ),
        Some(PortRef::Name(n)) => {
            let found = tcp.iter().find(|p| p.name.as_deref() == Some(n.as_str()));
            if found.is_none() {
                let why =
                    "names no TCP port of the Service; the port named http or https is probed";
                problems.push(annotations::invalid(PORT, n, why));
            }
            found.map(|p| (p.port, says(p, "https")))
        }
        None => None,
    };
    let chosen = chosen
        .or_else(|| {
            tcp.iter()
                .find(|p| says(p, "http"))
                .map(|p| (p.port, false))
        })
        .or_else(|| {
            tcp.iter()
                .find(|p| says(p, "https"))
                .map(|p| (p.port, true))
        });
    if chosen.is_none() {
        problems.push(Problem {
            reason: NO_HTTP_PORT,
            subject: "spec.ports".into(),
            message: format!(
                "the Service opts in, but has no TCP port named http or https and no annotation {PORT} naming one: no checker is made"
            ),
        });
    }
    chosen
}

/// What discovery keeps of a watched Service: its name, namespace, UID,
/// the annotations of ours and its ports. Most Services never opt in; the
/// rest of each (its other annotations, managed fields, status) would be
/// memory for nothing.
pub fn trim(svc: &mut Service) {
    let meta = std::mem::take(&mut svc.metadata);
    let ours: BTreeMap<String, String> = meta
        .annotations
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| k.starts_with(annotations::PREFIX))
        .collect();
    svc.metadata = ObjectMeta {
        name: meta.name,
        namespace: meta.namespace,
        uid: meta.uid,
        resource_version: meta.resource_version,
        annotations: (!ours.is_empty()).then_some(ours),
        ..ObjectMeta::default()
    };
    let ports = svc.spec.take().and_then(|s| s.ports);
    svc.spec = Some(ServiceSpec {
        ports,
        ..ServiceSpec::default()
    });
    svc.status = None;
}
