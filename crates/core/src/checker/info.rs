//! What the metrics say of one checker besides its namespace and name
//! (`webchecker_checker_info`: URL, host, kind and the labels the
//! operator's `--metric-labels-allowlist` names), and one zone's result of a
//! round as the owner exports it.

use webchecker_api::CheckKind;

/// The checker label keys to copy, each with its Prometheus label name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelAllowlist(pub Vec<(String, String)>);

/// `label_` + the key with every character outside `[a-zA-Z0-9_]` replaced
/// by `_` (kube-state-metrics' rule): `app.kubernetes.io/team` becomes
/// `label_app_kubernetes_io_team`.
pub fn prometheus_label_name(key: &str) -> String {
    let mut s = String::with_capacity(key.len() + 6);
    s.push_str("label_");
    s.extend(
        key.chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }),
    );
    s
}

/// A Kubernetes label key: an optional DNS subdomain prefix and `/`, then a
/// name of 1-63 characters, alphanumeric at both ends, `-`, `_`, `.` inside.
fn valid_label_key(key: &str) -> bool {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let alnum_ends = |s: &str| {
        s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
            && s.chars().last().is_some_and(|c| c.is_ascii_alphanumeric())
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && alnum_ends(name)
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|part| {
                !part.is_empty()
                    && alnum_ends(part)
                    && part
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            })
    });
    name_ok && prefix_ok
}

/// Parses `team,env,app.kubernetes.io/part-of` (commas, spaces ignored; empty
/// is the empty list). Refuses what is not a label key, and two keys that
/// would become the same Prometheus label.
pub fn parse_label_allowlist(s: &str) -> Result<LabelAllowlist, String> {
    let mut out: Vec<(String, String)> = Vec::new();
    for key in s.split(',').map(str::trim).filter(|k| !k.is_empty()) {
        if key == "*" {
            return Err(
                "\"*\" is not supported: name each label (every label of every checker would \
                 become a Prometheus label)"
                    .into(),
            );
        }
        if !valid_label_key(key) {
            return Err(format!(
                "{key:?} is not a Kubernetes label key (like team or app.kubernetes.io/part-of)"
            ));
        }
        let name = prometheus_label_name(key);
        if let Some((other, _)) = out.iter().find(|(_, n)| *n == name) {
            if other == key {
                continue;
            }
            return Err(format!(
                "{other:?} and {key:?} would both become the label {name}"
            ));
        }
        out.push((key.to_string(), name));
    }
    Ok(LabelAllowlist(out))
}

/// What `webchecker_checker_info` says of one checker besides its namespace
/// and name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CheckerInfo {
    /// spec.host + spec.path without the query, which may carry credentials
    /// (`?token=...`): metrics are read more widely than the WebChecker.
    pub url: String,
    /// The host name of spec.host (no scheme, port or brackets).
    pub host: String,
    /// What the checker speaks: http, grpc, tcp or tls.
    pub kind: &'static str,
    /// (Prometheus label name, value), sorted by name; labels the checker
    /// does not have are left out (Prometheus reads an empty label as none).
    pub labels: Vec<(String, String)>,
}

impl CheckerInfo {
    pub fn new(
        spec_host: &str,
        spec_path: &str,
        labels: Option<&std::collections::BTreeMap<String, String>>,
        allowlist: &LabelAllowlist,
    ) -> CheckerInfo {
        let path = spec_path.split(['?', '#']).next().unwrap_or_default();
        let host = url::Url::parse(spec_host)
            .ok()
            .and_then(|u| u.host_str().map(|h| h.trim_matches(['[', ']']).to_string()))
            .unwrap_or_default();
        let mut copied: Vec<(String, String)> = allowlist
            .0
            .iter()
            .filter_map(|(key, name)| {
                let v = labels?.get(key)?;
                (!v.is_empty()).then(|| (name.clone(), v.clone()))
            })
            .collect();
        copied.sort();
        CheckerInfo {
            url: format!("{}{path}", spec_host.trim_end_matches('/')),
            host,
            kind: CheckKind::of_host(spec_host)
                .unwrap_or(CheckKind::Http)
                .as_str(),
            labels: copied,
        }
    }
}

/// One zone's result of a round, as the owner exports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneSample {
    pub zone: String,
    /// Success and milliseconds; `None`: no probe result came.
    pub result: Option<(bool, u64)>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn allowlist_keys_are_checked_and_sanitised() {
        let a = parse_label_allowlist(" team, app.kubernetes.io/part-of ,env,team").unwrap();
        assert_eq!(
            a.0,
            [
                ("team".into(), "label_team".into()),
                (
                    "app.kubernetes.io/part-of".into(),
                    "label_app_kubernetes_io_part_of".into()
                ),
                ("env".into(), "label_env".into()),
            ]
        );
        assert_eq!(
            parse_label_allowlist("").unwrap(),
            LabelAllowlist::default()
        );
        let long = "a".repeat(64);
        for bad in [
            "*",
            "-team",
            "team-",
            "a/b/c",
            "Example.com/x",
            "x/",
            long.as_str(),
        ] {
            assert!(parse_label_allowlist(bad).is_err(), "{bad:?} accepted");
        }
        let e = parse_label_allowlist("team.a,team_a").unwrap_err();
        assert!(e.contains("label_team_a"), "{e}");
    }

    #[test]
    fn info_keeps_the_url_without_its_query_and_only_allowlisted_labels() {
        let allow = parse_label_allowlist("team,severity,env").unwrap();
        let labels: BTreeMap<String, String> = [
            ("team", "payments"),
            ("severity", "critical"),
            ("secret-project", "x"),
            ("env", ""),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let i = CheckerInfo::new(
            "https://[2001:db8::1]:8443",
            "/health?token=s3cret",
            Some(&labels),
            &allow,
        );
        assert_eq!(i.url, "https://[2001:db8::1]:8443/health");
        assert_eq!(i.host, "2001:db8::1");
        assert_eq!(
            i.labels,
            [
                ("label_severity".into(), "critical".into()),
                ("label_team".into(), "payments".into())
            ]
        );
        let none = CheckerInfo::new("http://shop.example.com", "/", None, &allow);
        assert!(none.labels.is_empty());
        assert_eq!(none.url, "http://shop.example.com/");
    }
}
