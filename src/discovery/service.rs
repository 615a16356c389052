//! A Service to the checker it wants: one, probing the Service's absolute
//! cluster name `<scheme>://<name>.<namespace>.svc.<cluster domain>.:<port>`
//! on the port its annotation names, else its port named `http`, else
//! `https`. Absolute (the trailing dot): a relative `<name>.<namespace>.svc`
//! would go through the resolver's search list first, where a pod's
//! `svc.<cluster domain>` makes it `<name>.<namespace>.svc.svc.<cluster
//! domain>`, an endpoint of Service `<namespace>` in a namespace named `svc`,
//! whose owner would answer for it. Only a
//! Service that opts in itself gets one: a Namespace's opt-in covers its
//! routes, not its Services, most of which do not speak HTTP. Pure.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Service, ServicePort};

use super::annotations::{self, PORT, PortRef};
use super::rules::{self, HostCheckers};
use super::{Defaults, NamespaceInfo, Plan, Problem, Source};

/// The `source` label's value of checkers generated from Services.
pub const LABEL: &str = "service";

/// The Event reason when a Service opts in but no port of it can be chosen.
pub const NO_HTTP_PORT: &str = "NoHTTPPort";

/// The owner of a Service's checker.
pub fn source(svc: &Service) -> Source {
    Source::of(LABEL, "v1", "Service", &svc.metadata)
}

/// What `svc` wants, given its Namespace (whose opt-in does not cover
/// Services: `rules::start`) and the operator's defaults. Not
/// opted in: nothing, but the problems of its annotations all the same.
pub fn plan(svc: &Service, namespace: &NamespaceInfo, defaults: &Defaults) -> Plan {
    let own = svc.metadata.annotations.as_ref();
    let (settings, mut plan) = rules::start("Service", own, namespace);
    let Some(settings) = settings else {
        return plan;
    };
    let Some((port, named_https)) = port(svc, settings.port.as_ref(), &mut plan.problems) else {
        return plan;
    };
    let name = svc.metadata.name.as_deref().unwrap_or_default();
    let ns = svc.metadata.namespace.as_deref().unwrap_or_default();
    let scheme = if settings.https.unwrap_or(named_https) {
        "https"
    } else {
        "http"
    };
    let url = format!(
        "{scheme}://{}:{port}",
        cluster_name(name, ns, &defaults.cluster_domain)
    );
    HostCheckers {
        kind: LABEL,
        source: name,
        host: "svc",
        gateway: None,
        url: &url,
        connect_to: None,
        paths: &[],
        depends_on: &[],
    }
    .add(&settings, defaults, &mut plan, &mut BTreeSet::new());
    rules::finish(&mut plan, "spec.ports");
    plan
}

/// The absolute DNS name of Service `name` of `namespace`:
/// `<name>.<namespace>.svc.<cluster domain>.` (the trailing dot: never
/// looked up through a search list).
pub fn cluster_name(name: &str, namespace: &str, cluster_domain: &str) -> String {
    let domain = cluster_domain.trim_matches('.');
    format!("{name}.{namespace}.svc.{domain}.")
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
