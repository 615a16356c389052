//! An HTTPRoute (Gateway API) to the checkers it wants: one per hostname
//! (or per hostname and path with `per-path`), over https when a listener
//! of its parent Gateways for that hostname speaks HTTPS. With
//! `via: gateway`, one per hostname and parent Gateway instead, connecting
//! to the first address in the Gateway's status on its listener's port,
//! the request naming the hostname (Host, SNI). Pure.

use std::collections::BTreeSet;

use super::annotations::{self, Via};
use super::gateway_api::{Gateway, HTTPRoute};
use super::rules::{self, HostCheckers};
use super::{Defaults, NamespaceInfo, Plan, Skip, Source};
use super::{attach, gateways};

/// The `source` label's value of checkers generated from HTTPRoutes.
pub const LABEL: &str = "httproute";

/// The owner of an HTTPRoute's checkers.
pub fn source(route: &HTTPRoute) -> Source {
    Source::of(
        LABEL,
        "gateway.networking.k8s.io/v1",
        "HTTPRoute",
        &route.metadata,
    )
}

/// What `route` wants, given its Namespace, the defaults and the Gateways
/// known (by namespace and name). Not opted in: no checkers,
/// but the problems of its annotations all the same.
pub fn plan<'a>(
    route: &'a HTTPRoute,
    namespace: &'a NamespaceInfo,
    defaults: &Defaults,
    gateways: impl Fn(&str, &str) -> Option<&'a Gateway>,
) -> Plan {
    let (settings, mut plan) =
        rules::start("HTTPRoute", route.metadata.annotations.as_ref(), namespace);
    let Some(settings) = settings else {
        return plan;
    };
    let mut via = settings.via;
    if via == Via::LoadBalancer {
        let hint = "an HTTPRoute connects through dns or gateway";
        plan.problems
            .push(annotations::via_not_for("HTTPRoute", via, hint));
        via = Via::Dns;
    }
    let name = route.metadata.name.as_deref().unwrap_or_default();
    let own = attach::Route {
        kind: "HTTPRoute",
        namespace: route.metadata.namespace.as_deref().unwrap_or_default(),
        labels: namespace.labels.as_ref(),
    };
    let refs = route.spec.parent_refs.as_deref().unwrap_or_default();
    let parents = gateways::parents(own, refs, gateways);
    let gw_checkers = gateways::checkers_of(&parents, namespace, defaults);
    let paths = paths(route);
    let mut seen = BTreeSet::new();
    let names = route.spec.hostnames.as_deref();
    for host in gateways::hosts(names, &mut plan.skipped) {
        if via == Via::Dns {
            let scheme = if gateways::https(&parents, &host) {
                "https"
            } else {
                "http"
            };
            let url = format!("{scheme}://{host}");
            HostCheckers {
                kind: LABEL,
                source: name,
                host: &host,
                gateway: None,
                url: &url,
                connect_to: None,
                depends_on: &gateways::dependencies(&parents, &gw_checkers, &host, None),
                paths: &paths,
            }
            .add(&settings, defaults, &mut plan, &mut seen);
            continue;
        }
        let reached = gateways::reached(&parents, &host);
        if reached.is_empty() {
            plan.skipped.push((host, Skip::NoAddress));
            continue;
        }
        for r in reached {
            let https = r.listener.protocol == "HTTPS";
            let scheme = if https { "https" } else { "http" };
            let default_port = if https { 443 } else { 80 };
            let url = match r.listener.port {
                port if port == default_port || port <= 0 => format!("{scheme}://{host}"),
                port => format!("{scheme}://{host}:{port}"),
            };
            HostCheckers {
                kind: LABEL,
                source: name,
                host: &host,
                gateway: Some((r.key, r.label)),
                url: &url,
                connect_to: Some(&r.address),
                depends_on: &gateways::dependencies(&parents, &gw_checkers, &host, Some(r.key)),
                paths: &paths,
            }
            .add(&settings, defaults, &mut plan, &mut seen);
        }
    }
    rules::finish(&mut plan, "spec.hostnames");
    plan
}

/// The paths of the route's matches, in order, each once (`/` for a rule
/// without matches or a match without a path: they match every path).
/// Regular expressions are kept, and left out later when they are patterns.
pub(super) fn paths(route: &HTTPRoute) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for rule in route.spec.rules.as_deref().unwrap_or_default() {
        let matches = rule.matches.as_deref().unwrap_or_default();
        let each: Vec<String> = if matches.is_empty() {
            vec!["/".into()]
        } else {
            matches
                .iter()
                .map(|m| {
                    m.path
                        .as_ref()
                        .and_then(|p| p.value.clone())
                        .unwrap_or_else(|| "/".into())
                })
                .collect()
        };
        for p in each {
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}
