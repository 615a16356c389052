//! What the plans of every kind of source share: the opt-in, the hosts a
//! checker can be made for, the checkers of one host (per host, or per host
//! and path), their fields, and the bound on their number. Pure.

use std::collections::{BTreeMap, BTreeSet};

use super::annotations::{self, Settings};
use super::names;
use super::{
    Defaults, DependsOnNames, Desired, GrpcCheck, MAX_CHECKERS_PER_SOURCE, NamespaceInfo, Plan,
    Problem, Skip,
};

/// The Event reason when a source asks for more checkers than allowed.
pub const TOO_MANY: &str = "TooManyCheckers";

/// A source's settings and the start of its plan (the problems of its
/// annotations, said whether or not it opts in); `None` for the settings
/// when it does not opt in (no checkers: the existing ones are deleted).
/// `kind` (`Ingress`, ...) names the source in the problems of annotations
/// it does not have.
pub(super) fn start(
    kind: &str,
    own: Option<&BTreeMap<String, String>>,
    namespace: &NamespaceInfo,
) -> (Option<Settings>, Plan) {
    let empty = BTreeMap::new();
    let (mut settings, mut problems) = annotations::read(own.unwrap_or(&empty));
    problems.extend(annotations::not_for_kind(kind, &mut settings));
    let (opted, refused) = annotations::opted_in(
        settings.check,
        &namespace.annotations,
        namespace_covers(kind),
    );
    problems.extend(refused);
    let plan = Plan {
        problems,
        ..Plan::default()
    };
    (opted.then_some(settings), plan)
}

/// Whether a Namespace's opt-in covers sources of `kind`: its routes (gRPC
/// ones too), not its Services (most do not speak HTTP: databases, queues,
/// DNS) nor its Gateways (often another team's), each of which says so itself.
pub(super) fn namespace_covers(kind: &str) -> bool {
    !matches!(kind, "Service" | "Gateway")
}

/// The host a checker can probe, lower case; a rule without one (it matches
/// any name) or with a wildcard (no one name) goes to `skipped`.
pub(super) fn probe_host(raw: Option<&str>, skipped: &mut Vec<(String, Skip)>) -> Option<String> {
    let host = raw.unwrap_or_default().trim();
    if host.is_empty() {
        skipped.push((String::new(), Skip::NoHost));
        return None;
    }
    if host.starts_with('*') {
        skipped.push((host.to_string(), Skip::WildcardHost));
        return None;
    }
    Some(host.to_ascii_lowercase())
}

/// One host's checkers: `url` (scheme, host, port), connecting to
/// `connect_to` when set. Named from the source's name, `host` and the
/// Gateway with `via: gateway` (`names::checker_name`, hashed with the
/// source's `kind`); with `per-path`, one per plain path of `paths` (`/`
/// when none), named with the path too (`/` is named like a per-host
/// checker).
pub(super) struct HostCheckers<'a> {
    /// The `source` label of the source's kind.
    pub kind: &'a str,
    pub source: &'a str,
    /// The host (for a Service, `svc`: its checker reads `<service>-svc-...`).
    pub host: &'a str,
    /// With `via: gateway`: the Gateway as `namespace/name`, and as names show it.
    pub gateway: Option<(&'a str, &'a str)>,
    pub url: &'a str,
    pub connect_to: Option<&'a str>,
    pub paths: &'a [String],
    /// The checkers its checkers depend on (its Gateways').
    pub depends_on: &'a [String],
}

impl HostCheckers<'_> {
    /// Adds them to `plan`, each name once; stops once the plan holds more
    /// than [`MAX_CHECKERS_PER_SOURCE`] (`finish` says so): the work of a
    /// plan is bounded whatever the route lists.
    pub(super) fn add(
        &self,
        settings: &Settings,
        defaults: &Defaults,
        plan: &mut Plan,
        seen: &mut BTreeSet<String>,
    ) {
        let targets = if settings.per_path {
            self.per_path(&mut plan.skipped)
        } else {
            vec![(self.name(None), settings.path.clone())]
        };
        for (name, path) in targets {
            if plan.checkers.len() > MAX_CHECKERS_PER_SOURCE {
                return;
            }
            if seen.insert(name.clone()) {
                plan.checkers.push(Desired {
                    name,
                    host: self.url.to_string(),
                    path,
                    expected_status_codes: settings.expected_status_codes.clone(),
                    interval_seconds: settings.interval_seconds.or(defaults.interval_seconds),
                    failure_threshold: settings.failure_threshold.or(defaults.failure_threshold),
                    connect_to: self.connect_to.map(str::to_string),
                    grpc: settings
                        .grpc_service
                        .clone()
                        .map(|service| GrpcCheck { service }),
                    depends_on: (!self.depends_on.is_empty()).then(|| DependsOnNames {
                        names: self.depends_on.to_vec(),
                    }),
                });
            }
        }
    }

    /// The name of the checker of `path` (None, or `/`: the host's).
    fn name(&self, path: Option<&str>) -> String {
        names::generated(self.kind, self.source, self.host, self.gateway, path)
    }

    fn per_path(&self, skipped: &mut Vec<(String, Skip)>) -> Vec<(String, Option<String>)> {
        let mut out = Vec::new();
        let mut paths: Vec<&str> = self.paths.iter().map(String::as_str).collect();
        if paths.is_empty() {
            paths.push("/");
        }
        for p in paths {
            if !is_plain(p) {
                skipped.push((format!("{}{p}", self.host), Skip::PathNotPlain));
                continue;
            }
            let name = self.name(Some(p));
            if !out.iter().any(|(n, _)| *n == name) {
                out.push((name, Some(p.to_string())));
            }
        }
        out
    }
}

/// A path probed as it is: one the CRD accepts, and no pattern (controllers'
/// ImplementationSpecific paths, and HTTPRoute's RegularExpression ones, may
/// be regular expressions).
pub(super) fn is_plain(p: &str) -> bool {
    const PATTERN: &[char] = &[
        '(', ')', '[', ']', '{', '}', '*', '+', '|', '^', '$', '?', '#',
    ];
    annotations::plain_path(p).is_ok() && !p.contains(PATTERN)
}

/// Keeps the first [`MAX_CHECKERS_PER_SOURCE`] checkers (in the order of
/// the source's rules), saying so (on `subject`) when there were more, and
/// sorts them by name.
pub(super) fn finish(plan: &mut Plan, subject: &str) {
    if plan.checkers.len() > MAX_CHECKERS_PER_SOURCE {
        plan.problems.push(Problem {
            reason: TOO_MANY,
            subject: subject.into(),
            message: format!(
                "{subject} ask for more than {MAX_CHECKERS_PER_SOURCE} checkers; only the first {MAX_CHECKERS_PER_SOURCE} (in the order of {subject}) are made"
            ),
        });
        plan.checkers.truncate(MAX_CHECKERS_PER_SOURCE);
    }
    plan.checkers.sort_by(|a, b| a.name.cmp(&b.name));
}

/// `host` is in `names`, or under a wildcard one (`*.example.com` covers
/// one label, as a certificate's wildcard does).
pub(super) fn covered(names: &[String], host: &str) -> bool {
    names.iter().any(|t| match t.strip_prefix("*.") {
        Some(zone) => host
            .split_once('.')
            .is_some_and(|(first, rest)| !first.is_empty() && rest == zone),
        None => t == host,
    })
}
