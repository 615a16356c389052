//! What the Gateway API's routes (HTTPRoute, GRPCRoute) share: their
//! hostnames, their parent Gateways, the listener of a parent that serves a
//! hostname (and admits the route: `attach`), and the address a checker
//! connects to with `via: gateway`. Pure.

use super::attach::{self, Route};
use super::gateway_api::{Gateway, Listener, ParentRef};
use super::{Defaults, NamespaceInfo, Skip};
use super::{gateway, rules};

/// Names one `spec.dependsOn` may list (the CRD's bound).
const MAX_DEPENDENCIES: usize = 16;

/// A parent Gateway of a route, as found: `namespace/name`, how checkers
/// name it, it, the reference (its listener, its port) and the route.
pub(super) struct Parent<'a> {
    pub key: String,
    pub label: String,
    pub gateway: &'a Gateway,
    pub via: &'a ParentRef,
    pub route: Route<'a>,
}

/// A parent that reaches a hostname with `via: gateway`: its key and label,
/// its listener for the hostname, and the Gateway's address.
pub(super) struct Reach<'a> {
    pub key: &'a str,
    pub label: &'a str,
    pub listener: &'a Listener,
    pub address: String,
}

/// The route's hostnames that can be probed, each once; none at all (the
/// route matches any name) is one [`Skip::NoHost`].
pub(super) fn hosts(names: Option<&[String]>, skipped: &mut Vec<(String, Skip)>) -> Vec<String> {
    let names = names.unwrap_or_default();
    if names.is_empty() {
        skipped.push((String::new(), Skip::NoHost));
    }
    let mut out: Vec<String> = Vec::new();
    for n in names {
        if let Some(h) = rules::probe_host(Some(n), skipped)
            && !out.contains(&h)
        {
            out.push(h);
        }
    }
    out
}

/// The parents (`refs`) of `route` that are Gateways known here. A listener
/// of theirs serves the route only if it admits it (`attach`).
pub(super) fn parents<'a>(
    route: Route<'a>,
    refs: &'a [ParentRef],
    gateways: impl Fn(&str, &str) -> Option<&'a Gateway>,
) -> Vec<Parent<'a>> {
    let mut out: Vec<Parent<'a>> = Vec::new();
    for r in refs {
        if !r.is_gateway() {
            continue;
        }
        let ns = r.namespace.as_deref().unwrap_or(route.namespace);
        let Some(gateway) = gateways(ns, &r.name) else {
            continue;
        };
        let label = if ns == route.namespace {
            r.name.clone()
        } else {
            format!("{ns}.{}", r.name)
        };
        out.push(Parent {
            key: format!("{ns}/{}", r.name),
            label,
            gateway,
            via: r,
            route,
        });
    }
    out
}

/// Whether a listener of one of `parents` serves `host` over HTTPS (TLS
/// terminated at the Gateway).
pub(super) fn https(parents: &[Parent<'_>], host: &str) -> bool {
    parents
        .iter()
        .any(|p| listener(p, host).is_some_and(|l| l.protocol == "HTTPS"))
}

/// The parents that reach `host` with `via: gateway`: a listener for it
/// and an address in the Gateway's status.
pub(super) fn reached<'a>(parents: &'a [Parent<'a>], host: &str) -> Vec<Reach<'a>> {
    parents
        .iter()
        .filter_map(|p| {
            Some(Reach {
                key: &p.key,
                label: &p.label,
                listener: listener(p, host)?,
                address: gateway::address(p.gateway)?,
            })
        })
        .collect()
}

/// What a route's checkers of `host` depend on: the checkers of its parent
/// Gateways (only the one keyed `through`, with `via: gateway`) that serve
/// `host` to the route and make one ([`gateway::plan`]). Only Gateways of
/// the route's own namespace: a dependency is of the dependent's namespace,
/// whose author may read it (docs/dependencies.md, "Tenancy").
pub(super) fn dependencies(
    parents: &[Parent<'_>],
    host: &str,
    through: Option<&str>,
    namespace: &NamespaceInfo,
    defaults: &Defaults,
) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for p in parents {
        let own = p.gateway.metadata.namespace.as_deref() == Some(p.route.namespace);
        if !own || through.is_some_and(|k| k != p.key) || listener(p, host).is_none() {
            continue;
        }
        for d in gateway::plan(p.gateway, namespace, defaults).checkers {
            if !out.contains(&d.name) && out.len() < MAX_DEPENDENCIES {
                out.push(d.name);
            }
        }
    }
    out
}

/// The listener of `p` that serves `host` over HTTP(S), HTTPS first: of
/// the parent reference's section (listener name) and port when it names
/// them, that admits the route, and whose hostname (when it has one)
/// covers `host`.
fn listener<'a>(p: &Parent<'a>, host: &str) -> Option<&'a Listener> {
    let all = p.gateway.spec.listeners.as_deref().unwrap_or_default();
    let gateway_ns = p.gateway.metadata.namespace.as_deref().unwrap_or_default();
    let fits = |l: &&Listener| {
        attach::admits(l, gateway_ns, &p.route)
            && p.via.section_name.as_deref().is_none_or(|s| s == l.name)
            && p.via.port.is_none_or(|port| port == l.port)
            && l.hostname
                .as_deref()
                .is_none_or(|h| rules::covered(&[h.trim().to_ascii_lowercase()], host))
    };
    let of = |protocol: &str| all.iter().filter(fits).find(|l| l.protocol == protocol);
    of("HTTPS").or_else(|| of("HTTP"))
}
