//! A GRPCRoute (Gateway API) to the checkers it wants: a gRPC health check
//! (`grpc.health.v1.Health/Check`) per hostname, `grpcs://<host>:443` when a
//! listener of its parent Gateways for that hostname speaks HTTPS, else
//! `grpc://<host>:80`. With `via: gateway`, one per hostname and parent
//! Gateway, connecting to the first address in the Gateway's status on its
//! listener's port, the call naming the hostname (`:authority`, SNI). The
//! service asked is the server as a whole, or the annotation's
//! ([`annotations::GRPC_SERVICE`]). Pure.

use std::collections::BTreeSet;

use super::annotations::{self, Via};
use super::gateway_api::{GRPCRoute, Gateway};
use super::rules::{self, HostCheckers};
use super::{Defaults, NamespaceInfo, Plan, Skip, Source};
use super::{attach, gateways};

/// The `source` label's value of checkers generated from GRPCRoutes.
pub const LABEL: &str = "grpcroute";

/// The owner of a GRPCRoute's checkers.
pub fn source(route: &GRPCRoute) -> Source {
    Source::of(
        LABEL,
        "gateway.networking.k8s.io/v1",
        "GRPCRoute",
        &route.metadata,
    )
}

/// What `route` wants, given its Namespace, the defaults and the Gateways
/// known (by namespace and name). Not opted in: no checkers,
/// but the problems of its annotations all the same. The annotations only
/// HTTP has (path, status codes, per-path) are problems, and left out: the
/// CRD refuses them on a grpc:// host.
pub fn plan<'a>(
    route: &'a GRPCRoute,
    namespace: &'a NamespaceInfo,
    defaults: &Defaults,
    gateways: impl Fn(&str, &str) -> Option<&'a Gateway>,
) -> Plan {
    let (settings, mut plan) =
        rules::start("GRPCRoute", route.metadata.annotations.as_ref(), namespace);
    let Some(settings) = settings else {
        return plan;
    };
    let mut via = settings.via;
    if via == Via::LoadBalancer {
        let hint = "a GRPCRoute connects through dns or gateway";
        plan.problems
            .push(annotations::via_not_for("GRPCRoute", via, hint));
        via = Via::Dns;
    }
    let name = route.metadata.name.as_deref().unwrap_or_default();
    let own = attach::Route {
        kind: "GRPCRoute",
        namespace: route.metadata.namespace.as_deref().unwrap_or_default(),
        labels: namespace.labels.as_ref(),
    };
    let refs = route.spec.parent_refs.as_deref().unwrap_or_default();
    let parents = gateways::parents(own, refs, gateways);
    let gw_checkers = gateways::checkers_of(&parents, namespace, defaults);
    let mut seen = BTreeSet::new();
    let names = route.spec.hostnames.as_deref();
    for host in gateways::hosts(names, &mut plan.skipped) {
        if via == Via::Dns {
            // The CRD wants a port with grpc(s)://: the one its users dial.
            let url = url(&host, gateways::https(&parents, &host), 0);
            HostCheckers {
                kind: LABEL,
                source: name,
                host: &host,
                gateway: None,
                url: &url,
                connect_to: None,
                depends_on: &gateways::dependencies(&parents, &gw_checkers, &host, None),
                paths: &[],
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
            let url = url(&host, r.listener.protocol == "HTTPS", r.listener.port);
            HostCheckers {
                kind: LABEL,
                source: name,
                host: &host,
                gateway: Some((r.key, r.label)),
                url: &url,
                connect_to: Some(&r.address),
                depends_on: &gateways::dependencies(&parents, &gw_checkers, &host, Some(r.key)),
                paths: &[],
            }
            .add(&settings, defaults, &mut plan, &mut seen);
        }
    }
    rules::finish(&mut plan, "spec.hostnames");
    plan
}

/// `grpcs://host:port` over TLS, else `grpc://host:port`; a port of 0 (or
/// none) is the scheme's default, 443 or 80.
fn url(host: &str, tls: bool, port: i32) -> String {
    let (scheme, default) = if tls { ("grpcs", 443) } else { ("grpc", 80) };
    let port = if port > 0 { port } else { default };
    format!("{scheme}://{host}:{port}")
}
