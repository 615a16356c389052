//! An HTTPRoute (Gateway API) to the checkers it wants: one per hostname
//! (or per hostname and path with `per-path`), over https when a listener
//! of its parent Gateways for that hostname speaks HTTPS. With
//! `via: gateway`, one per hostname and parent Gateway instead, connecting
//! to the first address in the Gateway's status on its listener's port,
//! the request naming the hostname (Host, SNI). Pure.

use std::collections::{BTreeMap, BTreeSet};

use super::annotations::{self, Via};
use super::gateway_api::{Gateway, HTTPRoute, Listener, ParentRef};
use super::rules::{self, HostCheckers};
use super::{Defaults, Plan, Skip, Source};

/// The `source` label's value of checkers generated from HTTPRoutes.
pub const LABEL: &str = "httproute";

/// The owner of an HTTPRoute's checkers.
pub fn source(route: &HTTPRoute) -> Source {
    Source {
        label: LABEL,
        api_version: "gateway.networking.k8s.io/v1",
        kind: "HTTPRoute",
        namespace: route.metadata.namespace.clone().unwrap_or_default(),
        name: route.metadata.name.clone().unwrap_or_default(),
        uid: route.metadata.uid.clone().unwrap_or_default(),
    }
}

/// A parent Gateway of a route, as found: how checkers name it, it, and
/// the reference (its listener, its port).
struct Parent<'a> {
    label: String,
    gateway: &'a Gateway,
    via: &'a ParentRef,
}

/// What `route` wants, given its Namespace's annotations, the defaults and
/// the Gateways known (by namespace and name). Not opted in: no checkers,
/// but the problems of its annotations all the same.
pub fn plan<'a>(
    route: &'a HTTPRoute,
    namespace_annotations: &BTreeMap<String, String>,
    defaults: &Defaults,
    gateways: impl Fn(&str, &str) -> Option<&'a Gateway>,
) -> Plan {
    let (settings, mut plan) = rules::start(
        "HTTPRoute",
        route.metadata.annotations.as_ref(),
        namespace_annotations,
    );
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
    let parents = parents(route, gateways);
    let paths = paths(route);
    let mut seen = BTreeSet::new();
    for host in hosts(route, &mut plan.skipped) {
        if via == Via::Dns {
            let https = parents
                .iter()
                .any(|p| listener(p, &host).is_some_and(|l| l.protocol == "HTTPS"));
            let url = format!("{}://{host}", if https { "https" } else { "http" });
            HostCheckers {
                parts: &[name, &host],
                url: &url,
                connect_to: None,
                paths: &paths,
            }
            .add(&settings, defaults, &mut plan, &mut seen);
            continue;
        }
        let mut reached = false;
        for p in &parents {
            let (Some(l), Some(addr)) = (listener(p, &host), address(p.gateway)) else {
                continue;
            };
            reached = true;
            let https = l.protocol == "HTTPS";
            let scheme = if https { "https" } else { "http" };
            let default_port = if https { 443 } else { 80 };
            let url = match l.port {
                port if port == default_port || port <= 0 => format!("{scheme}://{host}"),
                port => format!("{scheme}://{host}:{port}"),
            };
            HostCheckers {
                parts: &[name, &host, &p.label],
                url: &url,
                connect_to: Some(&addr),
                paths: &paths,
            }
            .add(&settings, defaults, &mut plan, &mut seen);
        }
        if !reached {
            plan.skipped.push((host, Skip::NoAddress));
        }
    }
    rules::finish(&mut plan, "spec.hostnames");
    plan
}

/// The route's hostnames that can be probed, each once; none at all (the
/// route matches any name) is one [`Skip::NoHost`].
fn hosts(route: &HTTPRoute, skipped: &mut Vec<(String, Skip)>) -> Vec<String> {
    let names = route.spec.hostnames.as_deref().unwrap_or_default();
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

/// The paths of the route's matches, in order, each once (`/` for a rule
/// without matches or a match without a path: they match every path).
/// Regular expressions are kept, and left out later when they are patterns.
fn paths(route: &HTTPRoute) -> Vec<String> {
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

/// The route's parents that are Gateways known here, each once.
fn parents<'a>(
    route: &'a HTTPRoute,
    gateways: impl Fn(&str, &str) -> Option<&'a Gateway>,
) -> Vec<Parent<'a>> {
    let own_ns = route.metadata.namespace.as_deref().unwrap_or_default();
    let mut out: Vec<Parent<'a>> = Vec::new();
    for r in route.spec.parent_refs.as_deref().unwrap_or_default() {
        if !r.is_gateway() {
            continue;
        }
        let ns = r.namespace.as_deref().unwrap_or(own_ns);
        let Some(gateway) = gateways(ns, &r.name) else {
            continue;
        };
        let label = if ns == own_ns {
            r.name.clone()
        } else {
            format!("{ns}.{}", r.name)
        };
        out.push(Parent {
            label,
            gateway,
            via: r,
        });
    }
    out
}

/// The listener of `p` that serves `host` over HTTP(S), HTTPS first: of
/// the parent reference's section (listener name) and port when it names
/// them, and whose hostname (when it has one) covers `host`.
fn listener<'a>(p: &Parent<'a>, host: &str) -> Option<&'a Listener> {
    let all = p.gateway.spec.listeners.as_deref().unwrap_or_default();
    let fits = |l: &&Listener| {
        p.via.section_name.as_deref().is_none_or(|s| s == l.name)
            && p.via.port.is_none_or(|port| port == l.port)
            && l.hostname
                .as_deref()
                .is_none_or(|h| rules::covered(&[h.trim().to_ascii_lowercase()], host))
    };
    let of = |protocol: &str| all.iter().filter(fits).find(|l| l.protocol == protocol);
    of("HTTPS").or_else(|| of("HTTP"))
}

/// The first address in the Gateway's status that a probe can dial: an
/// `IPAddress` or a `Hostname` (other types are an implementation's own).
fn address(gw: &Gateway) -> Option<String> {
    let addrs = gw
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_deref())
        .unwrap_or_default();
    addrs
        .iter()
        .filter(|a| matches!(a.type_.as_deref(), None | Some("IPAddress" | "Hostname")))
        .map(|a| a.value.trim())
        .find(|v| !v.is_empty())
        .map(str::to_string)
}
