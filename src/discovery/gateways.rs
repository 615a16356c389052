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

/// The checker each of `parents` makes ([`gateway::plan`]), in their
/// order; None for a Gateway of another namespace: a dependency is of the
/// dependent's namespace, whose author may read it (docs/dependencies.md,
/// "Tenancy"). Planned once per route, whatever its hostnames.
pub(super) fn checkers_of(
    parents: &[Parent<'_>],
    namespace: &NamespaceInfo,
    defaults: &Defaults,
) -> Vec<Option<String>> {
    parents
        .iter()
        .map(|p| {
            let own = p.gateway.metadata.namespace.as_deref() == Some(p.route.namespace);
            own.then(|| gateway::plan(p.gateway, namespace, defaults).checkers)?
                .into_iter()
                .next()
                .map(|d| d.name)
        })
        .collect()
}

/// What a route's checkers of `host` depend on: of `checkers` (those of
/// its parents, [`checkers_of`]), the ones whose Gateway serves `host` to
/// the route (only the one keyed `through`, with `via: gateway`).
pub(super) fn dependencies(
    parents: &[Parent<'_>],
    checkers: &[Option<String>],
    host: &str,
    through: Option<&str>,
) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (p, checker) in parents.iter().zip(checkers) {
        let Some(name) = checker else { continue };
        if through.is_some_and(|k| k != p.key) || listener(p, host).is_none() {
            continue;
        }
        if !out.contains(name) && out.len() < MAX_DEPENDENCIES {
            out.push(name.clone());
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
