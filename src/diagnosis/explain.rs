//! What the cluster's objects say of a failing target, in words a person
//! can act on. Pure: objects in, a [`Diagnosis`] out. Only reasons, names
//! and counts are quoted, never a container's or a controller's message
//! (a termination message is the application's own text).

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use webchecker_api::Diagnosis;

/// Pods named in one diagnosis.
pub const MAX_PODS_NAMED: usize = 3;
/// A container running again less than this after it exited with an error
/// is in a crash loop, between two back-offs (the longest is 5 minutes).
const RECENT_CRASH_SECS: i64 = 600;

fn said(cause: &str, message: String) -> Diagnosis {
    Diagnosis {
        cause: cause.into(),
        message: webchecker_api::condition_message(&message),
    }
}

/// Whether any endpoint of the slices is ready (an endpoint that does not
/// say counts as ready, as kube-proxy reads it).
pub fn has_ready_endpoint(slices: &[EndpointSlice]) -> bool {
    slices
        .iter()
        .flat_map(|s| s.endpoints.iter().flatten())
        .any(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
}

/// Why one pod does not serve, if it is plain: (cause, what to show).
fn pod_trouble(p: &Pod, now: Timestamp) -> Option<(&'static str, String)> {
    let status = p.status.as_ref()?;
    let containers = status.container_statuses.iter().flatten();
    for c in containers.clone() {
        let waiting = c.state.as_ref().and_then(|s| s.waiting.as_ref());
        match waiting.and_then(|w| w.reason.as_deref()) {
            Some("CrashLoopBackOff") => {
                let oom = c
                    .last_state
                    .as_ref()
                    .and_then(|s| s.terminated.as_ref())
                    .is_some_and(|t| t.reason.as_deref() == Some("OOMKilled"));
                let (cause, why) = if oom {
                    ("OOMKilled", "OOMKilled, in CrashLoopBackOff")
                } else {
                    ("CrashLoopBackOff", "CrashLoopBackOff")
                };
                return Some((
                    cause,
                    format!(
                        "{why} (container {}, restarted {} times)",
                        c.name, c.restart_count
                    ),
                ));
            }
            Some(r @ ("ImagePullBackOff" | "ErrImagePull" | "InvalidImageName")) => {
                return Some(("ImagePullBackOff", format!("{r} (image {})", c.image)));
            }
            Some(r @ ("CreateContainerConfigError" | "CreateContainerError")) => {
                return Some((
                    "CreateContainerError",
                    format!("{r} (container {})", c.name),
                ));
            }
            _ => {}
        }
        let terminated = c.state.as_ref().and_then(|s| s.terminated.as_ref());
        if terminated.is_some_and(|t| t.reason.as_deref() == Some("OOMKilled")) {
            return Some(("OOMKilled", format!("OOMKilled (container {})", c.name)));
        }
        // Between two back-offs: exited with an error again, restarted
        // before; or running again (maybe Ready, for a moment) after an
        // error a moment ago.
        let running = c.state.as_ref().is_some_and(|s| s.running.is_some());
        let crashed = c
            .last_state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .filter(|t| {
                t.finished_at
                    .as_ref()
                    .is_some_and(|f| now.as_second() - f.0.as_second() <= RECENT_CRASH_SECS)
            });
        let terminated = terminated.or(crashed.filter(|_| running));
        if let Some(t) = terminated.filter(|t| t.exit_code != 0 && c.restart_count > 0) {
            return Some((
                "CrashLoopBackOff",
                format!(
                    "CrashLoopBackOff (container {}, exited with code {}, restarted {} times)",
                    c.name, t.exit_code, c.restart_count
                ),
            ));
        }
    }
    let condition = |t: &str| status.conditions.iter().flatten().find(|c| c.type_ == t);
    if let Some(c) = condition("PodScheduled").filter(|c| c.status == "False") {
        let reason = c.reason.as_deref().unwrap_or("not scheduled");
        return Some(("Unschedulable", format!("{reason}: no node can run it")));
    }
    let running = containers
        .clone()
        .all(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()));
    let not_ready = condition("Ready").is_some_and(|c| c.status == "False");
    if running && not_ready && containers.clone().next().is_some() {
        return Some(("NotReady", "running, its readiness probe fails".into()));
    }
    None
}

/// A Service and the pods its selector matches, as of `now`. With no
/// ready endpoint (`ready` false) there is always something to say; with
/// some, only pods in plain trouble are (a crashing container may be Ready
/// for a moment between two back-offs).
pub fn service_pods(service: &str, pods: &[Pod], ready: bool, now: Timestamp) -> Option<Diagnosis> {
    let head = if ready {
        format!("Service {service}")
    } else {
        format!("Service {service} has no ready endpoints")
    };
    let troubled: Vec<(&str, String, &str)> = pods
        .iter()
        .filter_map(|p| {
            let (cause, what) = pod_trouble(p, now)?;
            Some((p.metadata.name.as_deref()?, what, cause))
        })
        .collect();
    let Some((_, what, cause)) = troubled.first() else {
        let none = match pods.len() {
            0 => format!("{head}: no pod matches its selector"),
            1 => format!("{head}: 1 pod matches its selector, not ready"),
            n => format!("{head}: {n} pods match its selector, none ready"),
        };
        return (!ready).then(|| said("NoReadyEndpoints", none));
    };
    // The pods in the same trouble as the first, named; the first's details.
    let same: Vec<&str> = troubled
        .iter()
        .filter(|(_, _, c)| c == cause)
        .map(|(name, _, _)| *name)
        .collect();
    let named = same[..same.len().min(MAX_PODS_NAMED)].join(", ");
    let more = same.len().saturating_sub(MAX_PODS_NAMED);
    let tail = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    let pods = if same.len() == 1 { "pod" } else { "pods" };
    Some(said(cause, format!("{head}: {pods} {named}{tail}: {what}")))
}

/// A route's own word: not Accepted by a parent, or a backend not
/// resolved (`kind`: HTTPRoute or GRPCRoute).
pub fn route(kind: &str, name: &str, route: &Value) -> Option<Diagnosis> {
    let parents = route.pointer("/status/parents")?.as_array()?;
    for p in parents {
        let gateway = p
            .pointer("/parentRef/name")
            .and_then(Value::as_str)
            .unwrap_or("its parent");
        for c in p
            .get("conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let (t, s) = (c["type"].as_str(), c["status"].as_str());
            let reason = c["reason"].as_str().unwrap_or("no reason given");
            match (t, s) {
                (Some("Accepted"), Some("False")) => {
                    return Some(said(
                        "RouteNotAccepted",
                        format!("{kind} {name} is not accepted by Gateway {gateway}: {reason}"),
                    ));
                }
                (Some("ResolvedRefs"), Some("False")) => {
                    return Some(said(
                        "BackendNotResolved",
                        format!(
                            "{kind} {name}: Gateway {gateway} cannot resolve its backends: {reason}"
                        ),
                    ));
                }
                _ => {}
            }
        }
    }
    None
}

/// A Gateway that is not Programmed.
pub fn gateway(name: &str, gateway: &Value) -> Option<Diagnosis> {
    let conditions = gateway.pointer("/status/conditions")?.as_array()?;
    let c = conditions
        .iter()
        .find(|c| c["type"] == "Programmed" && c["status"] == "False")?;
    let reason = c["reason"].as_str().unwrap_or("no reason given");
    Some(said(
        "GatewayNotProgrammed",
        format!("Gateway {name} is not programmed: {reason}"),
    ))
}

/// An Ingress without a load-balancer address.
pub fn ingress(name: &str, ingress: &Value) -> Option<Diagnosis> {
    let addresses = ingress
        .pointer("/status/loadBalancer/ingress")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    (addresses == 0).then(|| {
        said(
            "NoLoadBalancerAddress",
            format!(
                "Ingress {name} has no load-balancer address: no ingress controller has taken it"
            ),
        )
    })
}

/// Whether a certificate name (`dnsNames`, `ipAddresses`, `commonName`)
/// covers `host`: the same, or a wildcard for one label.
fn covers(name: &str, host: &str) -> bool {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    match name.strip_prefix("*.") {
        Some(parent) => host
            .split_once('.')
            .is_some_and(|(label, rest)| !label.is_empty() && rest == parent),
        None => name == host,
    }
}

/// The first cert-manager Certificate of `certs` that covers `host` (lower
/// case) and is not Ready: its Ready reason, its issuer, its failed
/// issuances (never its messages, which quote the issuer's answers).
pub fn certificate(host: &str, certs: &[Value]) -> Option<Diagnosis> {
    let names = |c: &Value| -> Vec<String> {
        let spec = &c["spec"];
        let list = |k: &str| {
            spec[k]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect::<Vec<_>>()
        };
        let mut n = list("dnsNames");
        n.extend(list("ipAddresses"));
        n.extend(spec["commonName"].as_str().map(String::from));
        n
    };
    let ready = |c: &Value| {
        c.pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Ready")
            .cloned()
    };
    let (cert, condition) = certs
        .iter()
        .filter(|c| names(c).iter().any(|n| covers(n, host)))
        .map(|c| (c, ready(c)))
        .find(|(_, r)| r.as_ref().is_none_or(|r| r["status"] != "True"))?;
    let name = cert.pointer("/metadata/name")?.as_str()?;
    let reason = condition
        .as_ref()
        .and_then(|r| r["reason"].as_str().map(String::from))
        .unwrap_or_else(|| "not issued yet".into());
    let issuer = &cert["spec"]["issuerRef"];
    let mut about = format!(
        "issuer {} {}",
        issuer["kind"].as_str().unwrap_or("Issuer"),
        issuer["name"].as_str().unwrap_or("unnamed")
    );
    match cert
        .pointer("/status/failedIssuanceAttempts")
        .and_then(Value::as_u64)
    {
        Some(1) => about.push_str(", 1 failed issuance"),
        Some(n) if n > 1 => about.push_str(&format!(", {n} failed issuances")),
        _ => {}
    }
    Some(said(
        "CertificateNotReady",
        format!("Certificate {name} for {host} is not ready: {reason} ({about})"),
    ))
}

/// The Services of the checker's namespace a route or an Ingress sends
/// to, in order (at most `max`).
pub fn backend_services(route_or_ingress: &Value, namespace: &str, max: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut add = |name: Option<&str>, ns: Option<&str>, kind: Option<&str>| {
        let same = ns.is_none_or(|n| n == namespace);
        let service = kind.is_none_or(|k| k == "Service");
        if let (Some(n), true, true) = (name, same, service)
            && !out.iter().any(|o| o == n)
            && out.len() < max
        {
            out.push(n.to_string());
        }
    };
    let spec = &route_or_ingress["spec"];
    for rule in spec["rules"].as_array().into_iter().flatten() {
        for b in rule["backendRefs"].as_array().into_iter().flatten() {
            add(
                b["name"].as_str(),
                b["namespace"].as_str(),
                b["kind"].as_str(),
            );
        }
        for p in rule
            .pointer("/http/paths")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            add(
                p.pointer("/backend/service/name").and_then(Value::as_str),
                None,
                None,
            );
        }
    }
    add(
        spec.pointer("/defaultBackend/service/name")
            .and_then(Value::as_str),
        None,
        None,
    );
    out
}

/// The Gateways of the checker's namespace a route names as parents.
pub fn parent_gateways(route: &Value, namespace: &str, max: usize) -> Vec<String> {
    route
        .pointer("/spec/parentRefs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|p| p["kind"].as_str().is_none_or(|k| k == "Gateway"))
        .filter(|p| p["namespace"].as_str().is_none_or(|n| n == namespace))
        .filter_map(|p| p["name"].as_str().map(String::from))
        .take(max)
        .collect()
}

#[cfg(test)]
#[path = "explain_tests.rs"]
mod tests;
