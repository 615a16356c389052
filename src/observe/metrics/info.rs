//! `webchecker_checker_info`: one series per checker (value 1) with what the
//! other per-checker series do not carry: the URL, the host, and the
//! checker's own labels named by `--metric-labels-allowlist`, renamed
//! `label_<name>` as kube-state-metrics does. Only this series has them:
//! queries join it on (namespace, name), which keeps every other series
//! (and its cardinality) as it is.

use super::Snapshot;
use super::exposition::{Kind, Sink};
pub use webchecker_core::checker::{CheckerInfo, LabelAllowlist, parse_label_allowlist};

/// Writes the family; `namespace` and `name` come with each checker.
pub(super) fn render_info(out: &mut dyn Sink, checkers: &Snapshot) {
    out.family(
        "webchecker_checker_info",
        Kind::Gauge,
        "The checker's URL, host, kind (http, grpc, tcp, tls) and allowlisted labels (--metric-labels-allowlist); always 1",
    );
    for (ns, name, c) in checkers {
        let Some(info) = &c.info else { continue };
        // Sorted by label name, as the prometheus crate writes them.
        let mut pairs: Vec<(&str, &str)> = vec![
            ("host", info.host.as_str()),
            ("kind", info.kind),
            ("name", &**name),
            ("namespace", &**ns),
            ("url", info.url.as_str()),
        ];
        pairs.extend(info.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        pairs.retain(|(_, v)| !v.is_empty());
        pairs.sort_by(|a, b| a.0.cmp(b.0));
        out.sample(&pairs, 1.0);
    }
}
