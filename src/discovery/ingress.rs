//! An Ingress to the checkers it wants: one per rule host (or per host and
//! path with `per-path`), `https` when the host is in `spec.tls[].hosts`,
//! the annotations' settings over the operator's defaults. Pure.

use std::collections::BTreeSet;

use k8s_openapi::api::networking::v1::Ingress;

use super::annotations::{self, Via};
use super::rules;
use super::{Defaults, NamespaceInfo, Plan, Skip, Source};

pub use super::rules::TOO_MANY;

/// The `source` label's value of checkers generated from Ingresses.
pub const LABEL: &str = "ingress";

/// The owner of an Ingress's checkers.
pub fn source(ing: &Ingress) -> Source {
    Source::of(LABEL, "networking.k8s.io/v1", "Ingress", &ing.metadata)
}

/// What `ing` wants, given its Namespace and the defaults.
/// Not opted in: no checkers (the existing ones are then deleted), but the
/// problems of its annotations all the same.
pub fn plan(ing: &Ingress, namespace: &NamespaceInfo, defaults: &Defaults) -> Plan {
    let (settings, mut plan) =
        rules::start("Ingress", ing.metadata.annotations.as_ref(), namespace);
    let Some(settings) = settings else {
        return plan;
    };
    let connect_to = match settings.via {
        Via::Dns => None,
        Via::LoadBalancer => load_balancer(ing),
        other => {
            let hint = "an Ingress connects through dns or load-balancer";
            plan.problems
                .push(annotations::via_not_for("Ingress", other, hint));
            None
        }
    };
    let name = ing.metadata.name.as_deref().unwrap_or_default();
    let tls = tls_hosts(ing);
    let mut seen = BTreeSet::new();
    for (host, paths) in rule_hosts(ing, &mut plan.skipped) {
        if settings.via == Via::LoadBalancer && connect_to.is_none() {
            plan.skipped.push((host, Skip::NoAddress));
            continue;
        }
        let scheme = if rules::covered(&tls, &host) {
            "https"
        } else {
            "http"
        };
        let url = format!("{scheme}://{host}");
        rules::HostCheckers {
            kind: LABEL,
            source: name,
            host: &host,
            gateway: None,
            url: &url,
            connect_to: connect_to.as_deref(),
            paths: &paths,
            depends_on: &[],
        }
        .add(&settings, defaults, &mut plan, &mut seen);
    }
    rules::finish(&mut plan, "spec.rules");
    plan
}

/// The first address of the Ingress's load balancer (its status, as the
/// ingress controller writes it): an IP, else a host name.
fn load_balancer(ing: &Ingress) -> Option<String> {
    let lbs = ing
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|l| l.ingress.as_deref())
        .unwrap_or_default();
    let ip = lbs
        .iter()
        .find_map(|l| l.ip.clone().filter(|v| !v.is_empty()));
    ip.or_else(|| {
        lbs.iter()
            .find_map(|l| l.hostname.clone().filter(|v| !v.is_empty()))
    })
}

/// Each probe-able host once, in rule order, with the paths of its rules;
/// hosts that are not (no host, a wildcard) go to `skipped`.
fn rule_hosts(ing: &Ingress, skipped: &mut Vec<(String, Skip)>) -> Vec<(String, Vec<String>)> {
    let ing_rules = ing
        .spec
        .as_ref()
        .and_then(|s| s.rules.as_deref())
        .unwrap_or_default();
    let mut hosts: Vec<(String, Vec<String>)> = Vec::new();
    for rule in ing_rules {
        let Some(host) = rules::probe_host(rule.host.as_deref(), skipped) else {
            continue;
        };
        let paths = rule
            .http
            .as_ref()
            .map(|h| {
                h.paths
                    .iter()
                    .map(|p| p.path.clone().unwrap_or_else(|| "/".into()))
                    .collect()
            })
            .unwrap_or_default();
        match hosts.iter_mut().find(|(h, _)| *h == host) {
            Some((_, known)) => known.extend(paths),
            None => hosts.push((host, paths)),
        }
    }
    hosts
}

fn tls_hosts(ing: &Ingress) -> Vec<String> {
    ing.spec
        .as_ref()
        .and_then(|s| s.tls.as_deref())
        .unwrap_or_default()
        .iter()
        .flat_map(|t| t.hosts.iter().flatten())
        .map(|h| h.trim().to_ascii_lowercase())
        .collect()
}
