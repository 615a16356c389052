//! An Ingress to the checkers it wants: one per rule host (or per host and
//! path with `per-path`), `https` when the host is in `spec.tls[].hosts`,
//! the annotations' settings over the operator's defaults. Pure.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::networking::v1::Ingress;

use super::annotations::{self, Settings};
use super::names::checker_name;
use super::{Defaults, Desired, MAX_CHECKERS_PER_SOURCE, Plan, Problem, Skip, Source};

/// The `source` label's value of checkers generated from Ingresses.
pub const LABEL: &str = "ingress";

/// The Event reason when an Ingress asks for more checkers than allowed.
pub const TOO_MANY: &str = "TooManyCheckers";

/// The owner of an Ingress's checkers.
pub fn source(ing: &Ingress) -> Source {
    Source {
        label: LABEL,
        api_version: "networking.k8s.io/v1",
        kind: "Ingress",
        namespace: ing.metadata.namespace.clone().unwrap_or_default(),
        name: ing.metadata.name.clone().unwrap_or_default(),
        uid: ing.metadata.uid.clone().unwrap_or_default(),
    }
}

/// What `ing` wants, given its Namespace's annotations and the defaults.
/// Not opted in: no checkers (the existing ones are then deleted), but the
/// problems of its annotations all the same.
pub fn plan(
    ing: &Ingress,
    namespace_annotations: &BTreeMap<String, String>,
    defaults: &Defaults,
) -> Plan {
    let empty = BTreeMap::new();
    let own = ing.metadata.annotations.as_ref().unwrap_or(&empty);
    let (settings, problems) = annotations::read(own);
    let mut plan = Plan {
        problems,
        ..Plan::default()
    };
    if !annotations::opted_in(settings.check, namespace_annotations) {
        return plan;
    }
    let name = ing.metadata.name.as_deref().unwrap_or_default();
    let tls = tls_hosts(ing);
    let mut seen = BTreeSet::new();
    for (host, paths) in rule_hosts(ing, &mut plan.skipped) {
        let scheme = if covered(&tls, &host) {
            "https"
        } else {
            "http"
        };
        let url = format!("{scheme}://{host}");
        let targets: Vec<(String, Option<String>)> = if settings.per_path {
            per_path_targets(name, &host, &paths, &mut plan.skipped)
        } else {
            vec![(checker_name(&[name, &host]), settings.path.clone())]
        };
        for (checker, path) in targets {
            if seen.insert(checker.clone()) {
                plan.checkers
                    .push(desired(checker, &url, path, &settings, defaults));
            }
        }
    }
    plan.checkers.sort_by(|a, b| a.name.cmp(&b.name));
    if plan.checkers.len() > MAX_CHECKERS_PER_SOURCE {
        plan.problems.push(Problem {
            reason: TOO_MANY,
            subject: "spec.rules".into(),
            message: format!(
                "the rules ask for {} checkers; only the first {MAX_CHECKERS_PER_SOURCE} by name are made",
                plan.checkers.len()
            ),
        });
        plan.checkers.truncate(MAX_CHECKERS_PER_SOURCE);
    }
    plan
}

fn desired(
    name: String,
    url: &str,
    path: Option<String>,
    settings: &Settings,
    defaults: &Defaults,
) -> Desired {
    Desired {
        name,
        host: url.to_string(),
        path,
        expected_status_codes: settings.expected_status_codes.clone(),
        interval_seconds: settings.interval_seconds.or(defaults.interval_seconds),
        failure_threshold: settings.failure_threshold.or(defaults.failure_threshold),
    }
}

/// Each probe-able host once, in rule order, with the paths of its rules;
/// hosts that are not (no host, a wildcard) go to `skipped`.
fn rule_hosts(ing: &Ingress, skipped: &mut Vec<(String, Skip)>) -> Vec<(String, Vec<String>)> {
    let rules = ing
        .spec
        .as_ref()
        .and_then(|s| s.rules.as_deref())
        .unwrap_or_default();
    let mut hosts: Vec<(String, Vec<String>)> = Vec::new();
    for rule in rules {
        let host = rule.host.as_deref().unwrap_or_default().trim();
        if host.is_empty() {
            skipped.push((String::new(), Skip::NoHost));
            continue;
        }
        if host.starts_with('*') {
            skipped.push((host.to_string(), Skip::WildcardHost));
            continue;
        }
        let host = host.to_ascii_lowercase();
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

/// One checker per plain path of the host's rules (`/` when it has none):
/// named `<ingress>-<host>-<path>` with a hash of the path, as `/a-b` and
/// `/a/b` would otherwise meet; `/` is named like a per-host checker.
fn per_path_targets(
    ingress: &str,
    host: &str,
    paths: &[String],
    skipped: &mut Vec<(String, Skip)>,
) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    let mut paths: Vec<&str> = paths.iter().map(String::as_str).collect();
    if paths.is_empty() {
        paths.push("/");
    }
    for p in paths {
        if !is_plain(p) {
            skipped.push((format!("{host}{p}"), Skip::PathNotPlain));
            continue;
        }
        let name = if p == "/" {
            checker_name(&[ingress, host])
        } else {
            let slug = p.trim_matches('/').replace('/', "-");
            let hash = super::names::short_hash(p);
            checker_name(&[ingress, host, &slug, &hash])
        };
        out.push((name, Some(p.to_string())));
    }
    out
}

/// A path probed as it is: one the CRD accepts, and no pattern (controllers'
/// ImplementationSpecific paths may be regular expressions).
fn is_plain(p: &str) -> bool {
    const PATTERN: &[char] = &[
        '(', ')', '[', ']', '{', '}', '*', '+', '|', '^', '$', '?', '#',
    ];
    annotations::plain_path(p).is_ok() && !p.contains(PATTERN)
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

/// `host` is in the TLS hosts, or under a wildcard one (`*.example.com`
/// covers one label, as a certificate's wildcard does).
fn covered(tls: &[String], host: &str) -> bool {
    tls.iter().any(|t| match t.strip_prefix("*.") {
        Some(zone) => host
            .split_once('.')
            .is_some_and(|(first, rest)| !first.is_empty() && rest == zone),
        None => t == host,
    })
}
