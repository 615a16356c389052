//! Diagnosis: when a checker of an in-cluster target turns Ready=False, its
//! owner asks the cluster's own objects why (src/diagnosis reads them).
//! Pure here: which object a checker's target is, and the fair queue of
//! diagnoses waiting for a reader.

mod queue;
#[cfg(test)]
mod tests;

pub use queue::{Queue, Queued};

/// An object of the checker's own namespace that its target is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    Service(String),
    Ingress(String),
    HttpRoute(String),
    GrpcRoute(String),
}

impl Target {
    pub fn describe(&self) -> String {
        match self {
            Target::Service(n) => format!("Service {n}"),
            Target::Ingress(n) => format!("Ingress {n}"),
            Target::HttpRoute(n) => format!("HTTPRoute {n}"),
            Target::GrpcRoute(n) => format!("GRPCRoute {n}"),
        }
    }
}

/// What one diagnosis reads: the target's objects, and for a failed TLS
/// handshake first the namespace's cert-manager Certificates for the host.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Subject {
    pub target: Option<Target>,
    /// The host whose certificate the probe refused or could not use.
    pub certificate_host: Option<String>,
}

impl Subject {
    pub fn describe(&self) -> String {
        let certificates = self
            .certificate_host
            .as_ref()
            .map(|h| format!("Certificates for {h}"));
        let parts: Vec<String> = certificates
            .into_iter()
            .chain(self.target.as_ref().map(Target::describe))
            .collect();
        parts.join(", then ")
    }
}

/// Whether a failure's reason is one a Certificate may explain.
pub fn tls_failure(reason: &str) -> bool {
    matches!(reason, "TLSError" | "CertificateInvalid")
}

/// What to diagnose of a checker of `namespace` that failed for `reason`:
/// its target (see [`target_of`]) and, for a TLS failure, its host's
/// Certificates. None when neither applies.
pub fn subject_of(
    namespace: &str,
    host: &str,
    source: Option<(&str, &str, &str)>,
    reason: &str,
) -> Option<Subject> {
    let target = target_of(namespace, host, source);
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let certificate_host = (tls_failure(reason) && !host.is_empty()).then_some(host);
    (target.is_some() || certificate_host.is_some()).then_some(Subject {
        target,
        certificate_host,
    })
}

/// The target of a checker of `namespace`: the object discovery generated
/// it from (`source`: its kind and name), else a Service its host names
/// (`<service>.<namespace>.svc`, with or without `.cluster.local`). An
/// object of another namespace is no target: a diagnosis tells a namespace
/// only of its own objects.
pub fn target_of(
    namespace: &str,
    host: &str,
    source: Option<(&str, &str, &str)>,
) -> Option<Target> {
    if let Some((kind, ns, name)) = source {
        if ns != namespace {
            return None;
        }
        let name = name.to_string();
        return match kind {
            "Service" => Some(Target::Service(name)),
            "Ingress" => Some(Target::Ingress(name)),
            "HTTPRoute" => Some(Target::HttpRoute(name)),
            "GRPCRoute" => Some(Target::GrpcRoute(name)),
            _ => None,
        };
    }
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let rest = host
        .strip_suffix(".svc.cluster.local")
        .or_else(|| host.strip_suffix(".svc"))?;
    let (service, ns) = rest.split_once('.')?;
    (ns == namespace && !service.is_empty()).then(|| Target::Service(service.to_string()))
}
