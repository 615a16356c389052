//! A Gateway (Gateway API) to the checker it wants: one, probing the
//! Gateway itself at the first address in its status, on its first `HTTP`
//! listener (else its first `HTTPS` listener for one name). It answers for
//! the Gateway's data plane, so its default success is any answer below
//! 500: a Gateway asked for a name or path no route serves answers 404,
//! and that is a Gateway that works. The checkers of the routes of its
//! namespace that it serves depend on it (`spec.dependsOn`,
//! [`super::gateways::dependencies`]): when it is down, they say
//! `DependencyDown` and page no one. Only a Gateway that opts in itself
//! gets one: a Namespace's opt-in covers its routes, and the Gateway is
//! often its platform team's. Pure.

use std::collections::BTreeSet;

use super::gateway_api::{Gateway, Listener};
use super::rules::{self, HostCheckers};
use super::{Defaults, NamespaceInfo, Plan, Problem, Skip, Source};

/// The `source` label's value of checkers generated from Gateways.
pub const LABEL: &str = "gateway";

/// The Event reason when a Gateway opts in but has no listener to probe.
pub const NO_HTTP_LISTENER: &str = "NoHTTPListener";

/// What a Gateway's checker counts as success unless its annotation says
/// otherwise: any answer of its data plane but a server error.
pub const DEFAULT_CODES: [&str; 3] = ["2xx", "3xx", "4xx"];

/// The owner of a Gateway's checker.
pub fn source(gw: &Gateway) -> Source {
    Source::of(
        LABEL,
        "gateway.networking.k8s.io/v1",
        "Gateway",
        &gw.metadata,
    )
}

/// The name of the checker of Gateway `name`: `<name>-gw-<hash>`.
pub fn checker_name(name: &str) -> String {
    super::names::generated(LABEL, name, "gw", None, None)
}

/// What `gw` wants, given its Namespace (whose opt-in does not cover
/// Gateways) and the operator's defaults. Not opted in: nothing, but the
/// problems of its annotations all the same. No address in its status yet:
/// nothing until its controller writes one (the Gateways are watched).
pub fn plan(gw: &Gateway, namespace: &NamespaceInfo, defaults: &Defaults) -> Plan {
    let own = gw.metadata.annotations.as_ref();
    let (settings, mut plan) = rules::start("Gateway", own, namespace);
    let Some(mut settings) = settings else {
        return plan;
    };
    let Some(address) = address(gw) else {
        plan.skipped.push((String::new(), Skip::NoAddress));
        return plan;
    };
    let Some((url, connect_to)) = target(gw, &address) else {
        plan.problems.push(Problem {
            reason: NO_HTTP_LISTENER,
            subject: "spec.listeners".into(),
            message: "the Gateway opts in, but has no HTTP listener, nor an HTTPS listener for one hostname: no checker is made".into(),
        });
        return plan;
    };
    if settings.expected_status_codes.is_none() {
        settings.expected_status_codes = Some(DEFAULT_CODES.map(str::to_string).to_vec());
    }
    let name = gw.metadata.name.as_deref().unwrap_or_default();
    HostCheckers {
        kind: LABEL,
        source: name,
        host: "gw",
        gateway: None,
        url: &url,
        connect_to: connect_to.as_deref(),
        paths: &[],
        depends_on: &[],
    }
    .add(&settings, defaults, &mut plan, &mut BTreeSet::new());
    rules::finish(&mut plan, "spec.listeners");
    plan
}

/// The URL probed and the address connected to, if not the URL's host: the
/// first `HTTP` listener, at its hostname when it has one name (connecting
/// to `address`), else at `address`; else the first `HTTPS` listener with
/// one name (a certificate names it; an address would fail its check).
fn target(gw: &Gateway, address: &str) -> Option<(String, Option<String>)> {
    let listeners = gw.spec.listeners.as_deref().unwrap_or_default();
    let exact = |l: &Listener| {
        l.hostname
            .as_deref()
            .map(|h| h.trim().to_ascii_lowercase())
            .filter(|h| !h.is_empty() && !h.starts_with('*'))
    };
    let url = |scheme: &str, host: &str, port: i32, default: i32| match port {
        p if p == default || p <= 0 => format!("{scheme}://{host}"),
        p => format!("{scheme}://{host}:{p}"),
    };
    if let Some(l) = listeners.iter().find(|l| l.protocol == "HTTP") {
        return Some(match exact(l) {
            Some(h) => (url("http", &h, l.port, 80), Some(address.to_string())),
            None => (url("http", &bracketed(address), l.port, 80), None),
        });
    }
    listeners
        .iter()
        .filter(|l| l.protocol == "HTTPS")
        .find_map(|l| {
            Some((
                url("https", &exact(l)?, l.port, 443),
                Some(address.to_string()),
            ))
        })
}

/// The first address in the Gateway's status that a probe can dial: an
/// `IPAddress` or a `Hostname` (other types are an implementation's own).
pub(super) fn address(gw: &Gateway) -> Option<String> {
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

/// An IPv6 address in brackets, as a URL's host.
fn bracketed(address: &str) -> String {
    if address.contains(':') {
        format!("[{address}]")
    } else {
        address.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::super::annotations::{CHECK, EXPECTED_STATUS_CODES, VIA};
    use super::super::gateway_api::{GatewayAddress, GatewaySpec, GatewayStatus};
    use super::*;

    fn gw(annotations: &[(&str, &str)], listeners: &[(&str, &str, i32)], addr: &str) -> Gateway {
        let mut g = Gateway::new(
            "edge",
            GatewaySpec {
                listeners: Some(
                    listeners
                        .iter()
                        .map(|(protocol, host, port)| Listener {
                            name: format!("l{port}"),
                            hostname: (!host.is_empty()).then(|| host.to_string()),
                            port: *port,
                            protocol: protocol.to_string(),
                            allowed_routes: None,
                        })
                        .collect(),
                ),
            },
        );
        g.metadata.namespace = Some("shop".into());
        g.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        g.status = (!addr.is_empty()).then(|| GatewayStatus {
            addresses: Some(vec![GatewayAddress {
                type_: Some("IPAddress".into()),
                value: addr.into(),
            }]),
        });
        g
    }

    fn one(g: &Gateway) -> super::super::Desired {
        let p = plan(g, &NamespaceInfo::default(), &Defaults::default());
        assert_eq!(p.checkers.len(), 1, "{p:?}");
        p.checkers[0].clone()
    }

    #[test]
    fn an_http_listener_for_every_name_is_probed_at_the_address() {
        let d = one(&gw(&[(CHECK, "true")], &[("HTTP", "", 8080)], "10.0.0.9"));
        assert_eq!(d.name, checker_name("edge"));
        assert!(d.name.starts_with("edge-gw-"), "{}", d.name);
        assert_eq!(d.host, "http://10.0.0.9:8080");
        assert_eq!(d.connect_to, None);
        assert_eq!(
            d.expected_status_codes,
            Some(vec!["2xx".into(), "3xx".into(), "4xx".into()])
        );
        let v6 = one(&gw(
            &[(CHECK, "true")],
            &[("HTTP", "*.example.com", 80)],
            "fd00::9",
        ));
        assert_eq!(v6.host, "http://[fd00::9]");
    }

    #[test]
    fn a_listener_for_one_name_is_probed_at_that_name_through_the_address() {
        let g = gw(
            &[(CHECK, "true"), (EXPECTED_STATUS_CODES, "200")],
            &[("TLS", "", 9443), ("HTTPS", "shop.example.com", 443)],
            "10.0.0.9",
        );
        let d = one(&g);
        assert_eq!(d.host, "https://shop.example.com");
        assert_eq!(d.connect_to.as_deref(), Some("10.0.0.9"));
        assert_eq!(d.expected_status_codes, Some(vec!["200".into()]));
    }

    #[test]
    fn no_checker_without_opt_in_address_or_listener() {
        let plan_of = |g: &Gateway, ns: &NamespaceInfo| plan(g, ns, &Defaults::default());
        let none = NamespaceInfo::default();
        let listeners = [("HTTP", "", 80)];
        assert!(
            plan_of(&gw(&[], &listeners, "10.0.0.9"), &none)
                .checkers
                .is_empty()
        );
        let namespace = NamespaceInfo {
            annotations: [(CHECK.to_string(), "true".to_string())].into(),
            labels: None,
        };
        let p = plan_of(&gw(&[], &listeners, "10.0.0.9"), &namespace);
        assert!(p.checkers.is_empty(), "a Namespace's opt-in is its routes'");
        let p = plan_of(&gw(&[(CHECK, "true")], &listeners, ""), &none);
        assert_eq!(p.skipped, vec![(String::new(), Skip::NoAddress)]);
        let wildcard = [("HTTPS", "*.example.com", 443)];
        let p = plan_of(&gw(&[(CHECK, "true")], &wildcard, "10.0.0.9"), &none);
        assert!(p.checkers.is_empty());
        assert_eq!(p.problems[0].reason, NO_HTTP_LISTENER);
        let p = plan_of(
            &gw(&[(CHECK, "true"), (VIA, "gateway")], &listeners, "10.0.0.9"),
            &none,
        );
        assert_eq!(p.checkers.len(), 1);
        assert_eq!(p.problems[0].subject, VIA, "{p:?}");
    }
}
