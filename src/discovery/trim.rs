//! What discovery keeps of each watched object, cut as it arrives: its
//! name, namespace, UID, age and deletion mark, the annotations of ours
//! (each value cut just past the longest valid one), and of its spec and
//! status only what a plan reads, at most what a plan can use (more than
//! [`MAX_CHECKERS_PER_SOURCE`] hosts, paths or parents is `TooManyCheckers`
//! anyway). Everything else (other annotations and labels, managed fields,
//! backends, filters, conditions) would be memory for nothing, and anyone
//! who may create an Ingress could fill it: a few hundred Ingresses with
//! 250 KiB of annotations each are more than the operator's memory limit.
//! An object that cannot opt in keeps only its metadata ([`Kept::stub`]).
//! Pure.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServiceSpec};
use k8s_openapi::api::networking::v1::{
    HTTPIngressPath, HTTPIngressRuleValue, Ingress, IngressLoadBalancerIngress,
    IngressLoadBalancerStatus, IngressRule, IngressSpec, IngressStatus, IngressTLS,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::annotations::{self, PER_PATH};
use super::gateway_api::{
    GRPCRoute, Gateway, GatewayStatus, HTTPRoute, PathMatch, RouteMatch, RouteRule,
};
use super::{MAX_CHECKERS_PER_SOURCE, Skip, httproute, rules};

/// The annotations of ours that are kept (the others of our prefix mean
/// nothing to a plan).
const OURS: &[&str] = &[
    annotations::CHECK,
    annotations::PATH,
    annotations::EXPECTED_STATUS_CODES,
    annotations::INTERVAL_SECONDS,
    annotations::FAILURE_THRESHOLD,
    PER_PATH,
    annotations::VIA,
    annotations::PORT,
    annotations::SCHEME,
    annotations::GRPC_SERVICE,
    annotations::ROUTES_MAY_OPT_IN,
];

/// Characters kept of an annotation value: one more than the longest
/// valid one (a path of 2048 bytes), so that a longer one is still named
/// as too long.
pub const MAX_VALUE: usize = 2049;

/// Hosts, paths and parents kept of a source: one more than a source may
/// generate checkers, so that the plan still sees there were too many.
const KEEP: usize = MAX_CHECKERS_PER_SOURCE + 1;

/// An object discovery watches, trimmed as it arrives.
pub(super) trait Kept {
    /// Keeps only what a plan reads.
    fn trim(&mut self);
    /// Drops what only a source that opts in needs (its spec and status).
    fn stub(&mut self);
}

/// The annotations of ours in `all`, each value cut to [`MAX_VALUE`].
pub fn ours(all: Option<BTreeMap<String, String>>) -> BTreeMap<String, String> {
    all.unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| OURS.contains(&k.as_str()))
        .map(|(k, v)| {
            let v = if v.len() > MAX_VALUE {
                v.chars().take(MAX_VALUE).collect()
            } else {
                v
            };
            (k, v)
        })
        .collect()
}

/// The metadata a plan (and the work queue's order) reads.
pub fn meta(m: ObjectMeta) -> ObjectMeta {
    let ours = ours(m.annotations);
    ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        resource_version: m.resource_version,
        creation_timestamp: m.creation_timestamp,
        deletion_timestamp: m.deletion_timestamp,
        annotations: (!ours.is_empty()).then_some(ours),
        ..ObjectMeta::default()
    }
}

/// Whether the object asks for a checker per path (only then are its paths kept).
fn per_path(m: &ObjectMeta) -> bool {
    let v = m.annotations.as_ref().and_then(|a| a.get(PER_PATH));
    v.is_some_and(|v| v.trim() == "true")
}

/// The paths kept of a source: at most [`KEEP`] that a checker can probe
/// and [`KEEP`] that it cannot (each cut to [`MAX_VALUE`], which keeps it
/// one it cannot): a host whose paths are all patterns must still read so.
#[derive(Default)]
struct Paths {
    plain: usize,
    other: usize,
}

impl Paths {
    fn keep(&mut self, p: String) -> Option<String> {
        let n = if rules::is_plain(&p) {
            &mut self.plain
        } else {
            &mut self.other
        };
        if *n >= KEEP {
            return None;
        }
        *n += 1;
        Some(if p.len() > MAX_VALUE {
            p.chars().take(MAX_VALUE).collect()
        } else {
            p
        })
    }
}

/// `host` as a plan probes it, when it can be probed.
fn probe_host(host: Option<&str>) -> Option<String> {
    rules::probe_host(host, &mut Vec::<(String, Skip)>::new())
}

impl Kept for Ingress {
    fn trim(&mut self) {
        self.metadata = meta(std::mem::take(&mut self.metadata));
        let paths_too = per_path(&self.metadata);
        let spec = self.spec.take().unwrap_or_default();
        let (mut rules, mut paths) = (Vec::<IngressRule>::new(), Paths::default());
        for rule in spec.rules.into_iter().flatten() {
            let Some(host) = probe_host(rule.host.as_deref()) else {
                continue;
            };
            let i = match rules.iter().position(|r| r.host.as_deref() == Some(&host)) {
                Some(i) => i,
                None if rules.len() < KEEP => {
                    rules.push(IngressRule {
                        host: Some(host),
                        http: None,
                    });
                    rules.len() - 1
                }
                None => continue,
            };
            let wanted = rule.http.into_iter().flat_map(|h| h.paths);
            for p in wanted.filter(|_| paths_too) {
                let Some(p) = paths.keep(p.path.unwrap_or_else(|| "/".into())) else {
                    continue;
                };
                let http = rules[i]
                    .http
                    .get_or_insert_with(HTTPIngressRuleValue::default);
                http.paths.push(HTTPIngressPath {
                    path: Some(p),
                    ..HTTPIngressPath::default()
                });
            }
        }
        let tls_hosts: Vec<String> = spec
            .tls
            .into_iter()
            .flatten()
            .flat_map(|t| t.hosts.unwrap_or_default())
            .map(|h| h.trim().to_ascii_lowercase())
            .collect();
        let covered: Vec<String> = rules
            .iter()
            .filter_map(|r| r.host.clone())
            .filter(|h| rules::covered(&tls_hosts, h))
            .collect();
        self.spec = Some(IngressSpec {
            rules: Some(rules),
            tls: (!covered.is_empty()).then(|| {
                vec![IngressTLS {
                    hosts: Some(covered),
                    secret_name: None,
                }]
            }),
            ..IngressSpec::default()
        });
        self.status = load_balancer(self.status.take());
    }

    fn stub(&mut self) {
        self.spec = None;
        self.status = None;
    }
}

/// Of an Ingress's load balancer status, the first entry with an IP and the
/// first with a host name (all `via: load-balancer` reads).
fn load_balancer(status: Option<IngressStatus>) -> Option<IngressStatus> {
    let all = status?.load_balancer?.ingress.unwrap_or_default();
    let ip = all
        .iter()
        .find(|l| l.ip.as_deref().is_some_and(|v| !v.is_empty()));
    let name = all
        .iter()
        .find(|l| l.hostname.as_deref().is_some_and(|v| !v.is_empty()));
    let keep = |l: &IngressLoadBalancerIngress| IngressLoadBalancerIngress {
        ip: l.ip.clone(),
        hostname: l.hostname.clone(),
        ports: None,
    };
    let kept: Vec<_> = ip.into_iter().chain(name).map(keep).collect();
    Some(IngressStatus {
        load_balancer: Some(IngressLoadBalancerStatus {
            ingress: Some(kept),
        }),
    })
}

/// The distinct hostnames a plan can probe, at most [`KEEP`].
fn hostnames(all: Option<Vec<String>>) -> Option<Vec<String>> {
    let all = all?;
    let mut out: Vec<String> = Vec::new();
    for h in all.iter().filter_map(|h| probe_host(Some(h))) {
        if out.len() >= KEEP {
            break;
        }
        if !out.contains(&h) {
            out.push(h);
        }
    }
    Some(out)
}

/// The parent references that may be Gateways, at most [`KEEP`].
fn parents(
    all: Option<Vec<super::gateway_api::ParentRef>>,
) -> Option<Vec<super::gateway_api::ParentRef>> {
    all.map(|refs| {
        refs.into_iter()
            .filter(|r| r.is_gateway())
            .take(KEEP)
            .collect()
    })
}

impl Kept for HTTPRoute {
    fn trim(&mut self) {
        self.metadata = meta(std::mem::take(&mut self.metadata));
        let paths: Vec<String> = if per_path(&self.metadata) {
            let mut kept = Paths::default();
            let all = httproute::paths(self).into_iter();
            all.filter_map(|p| kept.keep(p)).collect()
        } else {
            Vec::new()
        };
        self.spec.hostnames = hostnames(self.spec.hostnames.take());
        self.spec.parent_refs = parents(self.spec.parent_refs.take());
        let matches = paths
            .into_iter()
            .map(|p| RouteMatch {
                path: Some(PathMatch {
                    type_: None,
                    value: Some(p),
                }),
            })
            .collect();
        self.spec.rules = Some(vec![RouteRule {
            matches: Some(matches),
        }]);
    }

    fn stub(&mut self) {
        self.spec = Default::default();
    }
}

impl Kept for GRPCRoute {
    fn trim(&mut self) {
        self.metadata = meta(std::mem::take(&mut self.metadata));
        self.spec.hostnames = hostnames(self.spec.hostnames.take());
        self.spec.parent_refs = parents(self.spec.parent_refs.take());
    }

    fn stub(&mut self) {
        self.spec = Default::default();
    }
}

/// A watched Service keeps its metadata as [`meta`] keeps it and its ports.
/// Most Services never opt in; the rest of each (its other annotations,
/// managed fields, status) would be memory for nothing.
impl Kept for Service {
    fn trim(&mut self) {
        self.metadata = meta(std::mem::take(&mut self.metadata));
        let ports = self.spec.take().and_then(|s| s.ports);
        self.spec = Some(ServiceSpec {
            ports,
            ..ServiceSpec::default()
        });
        self.status = None;
    }

    fn stub(&mut self) {
        self.spec = None;
        self.status = None;
    }
}

/// A Gateway: its metadata as [`meta`] keeps it (it is a source too), its
/// HTTP and HTTPS listeners (at most the 64 the Gateway API allows) and the
/// first address in its status that a checker can dial.
impl Kept for Gateway {
    fn trim(&mut self) {
        self.metadata = meta(std::mem::take(&mut self.metadata));
        if let Some(listeners) = self.spec.listeners.as_mut() {
            listeners.retain(|l| matches!(l.protocol.as_str(), "HTTP" | "HTTPS"));
            listeners.truncate(64);
        }
        let first = super::gateway::address(self);
        self.status = Some(GatewayStatus {
            addresses: first
                .map(|value| vec![super::gateway_api::GatewayAddress { type_: None, value }]),
        });
    }

    /// Gateways are few, and routes read them whether or not they opt in:
    /// they are kept whole (trimmed).
    fn stub(&mut self) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;

    fn big_ingress() -> Ingress {
        let mut annotations: BTreeMap<String, String> =
            [("example.com/blob".to_string(), "x".repeat(250 * 1024))].into();
        annotations.insert(annotations::CHECK.into(), "true".into());
        annotations.insert(annotations::PATH.into(), format!("/{}", "p".repeat(4000)));
        annotations.insert(format!("{}unknown", annotations::PREFIX), "y".repeat(100));
        let rules: Vec<serde_json::Value> = (0..200)
            .map(|i| serde_json::json!({"host": format!("h{i}.example.com"), "http": {"paths": [{"path": "/a", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}))
            .collect();
        let mut ing: Ingress = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "big", "namespace": "web", "uid": "u", "labels": {"team": "x"}},
            "spec": {"rules": rules, "tls": [{"hosts": ["h1.example.com", "*.other.net"], "secretName": "s"}]},
            "status": {"loadBalancer": {"ingress": [{"hostname": "lb.example.net"}, {"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}]}},
        }))
        .unwrap();
        ing.metadata.annotations = Some(annotations);
        ing.metadata.managed_fields = Some(vec![ManagedFieldsEntry::default(); 50]);
        ing
    }

    #[test]
    fn an_ingress_keeps_only_what_a_plan_reads() {
        let mut ing = big_ingress();
        ing.trim();
        let m = &ing.metadata;
        assert!(m.managed_fields.is_none() && m.labels.is_none());
        let kept = m.annotations.as_ref().unwrap();
        assert_eq!(
            kept.keys().map(String::as_str).collect::<Vec<_>>(),
            [annotations::CHECK, annotations::PATH],
            "only ours that a plan reads"
        );
        assert_eq!(
            kept[annotations::PATH].len(),
            MAX_VALUE,
            "cut, still too long"
        );
        let spec = ing.spec.as_ref().unwrap();
        let rules = spec.rules.as_ref().unwrap();
        assert_eq!(rules.len(), KEEP);
        assert!(
            rules.iter().all(|r| r.http.is_none()),
            "no paths without per-path"
        );
        let tls = spec.tls.as_ref().unwrap();
        assert_eq!(
            tls[0].hosts.as_deref(),
            Some(&["h1.example.com".to_string()][..])
        );
        let lb = ing.status.as_ref().unwrap().load_balancer.as_ref().unwrap();
        let addresses: Vec<_> = lb
            .ingress
            .iter()
            .flatten()
            .map(|l| (l.ip.clone(), l.hostname.clone()))
            .collect();
        assert_eq!(
            addresses,
            [
                (Some("10.0.0.1".into()), None),
                (None, Some("lb.example.net".into()))
            ]
        );
        let size = serde_json::to_string(&ing).unwrap().len();
        assert!(size < 8 * 1024, "{size} bytes kept");
        ing.stub();
        assert!(ing.spec.is_none() && ing.status.is_none());
    }
}
