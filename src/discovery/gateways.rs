//! What the Gateway API's routes (HTTPRoute, GRPCRoute) share: their
//! hostnames, their parent Gateways, the listener of a parent that serves a
//! hostname, and the address a checker connects to with `via: gateway`.
//! Pure.

use super::Skip;
use super::gateway_api::{Gateway, Listener, ParentRef};
use super::rules;

/// A parent Gateway of a route, as found: how checkers name it, it, and
/// the reference (its listener, its port).
pub(super) struct Parent<'a> {
    pub label: String,
    pub gateway: &'a Gateway,
    pub via: &'a ParentRef,
}

/// A parent that reaches a hostname with `via: gateway`: its label, its
/// listener for the hostname, and the Gateway's address.
pub(super) struct Reach<'a> {
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

/// The route's parents (`refs`, of a route in `own_ns`) that are Gateways
/// known here, each once.
pub(super) fn parents<'a>(
    own_ns: &str,
    refs: &'a [ParentRef],
    gateways: impl Fn(&str, &str) -> Option<&'a Gateway>,
) -> Vec<Parent<'a>> {
    let mut out: Vec<Parent<'a>> = Vec::new();
    for r in refs {
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
                label: &p.label,
                listener: listener(p, host)?,
                address: address(p.gateway)?,
            })
        })
        .collect()
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
