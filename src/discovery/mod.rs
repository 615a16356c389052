//! Route discovery (`--discover-routes`, docs/discovery.md): WebCheckers
//! generated for the cluster's routes that opt in: Ingresses and Gateway API
//! HTTPRoutes and GRPCRoutes, and annotated Services.
//!
//! The pure parts turn a source object into the checkers it wants, and those
//! into what is sent:
//! - [`annotations`]: the `webchecker.test.network.io/*` annotations a route
//!   author sets, and the opt-in of the object or of its Namespace;
//! - [`names`]: deterministic DNS-1123 names and label values, cut with a
//!   short hash;
//! - [`ingress`]: an Ingress (and its Namespace's annotations, the
//!   operator's defaults) to a [`Plan`]; [`httproute`]: an HTTPRoute (and
//!   the Gateways it names, [`gateway_api`]) to one; [`grpcroute`]: a
//!   GRPCRoute to gRPC health checkers; [`service`]: a Service to its one
//!   checker; `rules`: what they share (opt-in, hosts, per-path checkers,
//!   the bound); `gateways`: what the two routes share (parent Gateways,
//!   listeners, addresses);
//! - [`patch`]: the server-side apply body of one checker, its fingerprint,
//!   and the same body without the fields a person set by hand;
//! - [`queue`]: the work queue (one entry per source object, retries with
//!   backoff).
//!
//! The I/O parts run only on the leader: [`task`] (follows leadership,
//! restarts after a panic), `session` (the watches and the queue while
//! leading) with `views` (what the watches keep), `writer` (the API calls
//! of one source object), [`metrics`].

pub mod annotations;
mod attach;
pub mod gateway;
use webchecker_core::generated_cap as budget;
pub mod gateway_api;
mod gateways;
pub mod grpcroute;
pub mod httproute;
pub mod ingress;
pub(crate) mod metrics;
pub mod names;
mod objects;
pub mod patch;
pub mod queue;
mod refill;
pub mod route_events;
mod rules;
pub mod service;
mod session;
pub(crate) mod task;
pub mod trim;
mod views;
mod writer;

#[cfg(test)]
mod tests;

pub use rules::TOO_MANY;
pub use writer::{INVALID_CHECKER, NAME_TAKEN};

use std::collections::BTreeMap;

/// The field manager of every server-side apply of a generated checker.
pub const FIELD_MANAGER: &str = "webchecker-discovery";
/// Label on a generated checker: the kind of its source (`ingress`,
/// `httproute`, `grpcroute`, `service`, `gateway`); the `SOURCE` column of `kubectl get wc`.
pub const SOURCE_LABEL: &str = "webchecker.test.network.io/source";
/// Label on a generated checker: the name of its source object (cut to a
/// label value).
pub const SOURCE_NAME_LABEL: &str = "webchecker.test.network.io/source-name";
/// Annotation on a generated checker: the fingerprint of what was last
/// applied, so that an unchanged source costs no API call.
pub const FINGERPRINT_ANNOTATION: &str = "webchecker.test.network.io/source-fingerprint";

/// Checkers one source object may generate at most: a bound on the work of
/// one event (and on what one route author can make the operator probe).
pub const MAX_CHECKERS_PER_SOURCE: usize = 64;

/// A generated checker as its source wants it: only the fields the source
/// sets (the rest keep the CRD's defaults, and a person may set them).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Desired {
    pub name: String,
    /// `http://host`, `https://host`, `grpc://host:port` or `grpcs://host:port`.
    pub host: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_status_codes: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_seconds: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_threshold: Option<i32>,
    /// `spec.connectTo`: the address of the Gateway (or load balancer) the
    /// checker connects to instead of the host's (`via`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_to: Option<String>,
    /// `spec.grpc`: the service a gRPC health check asks about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc: Option<GrpcCheck>,
    /// `spec.dependsOn`: the checkers of the Gateways of its namespace that
    /// serve it (`gateways::dependencies`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depends_on: Option<DependsOnNames>,
}

/// `spec.dependsOn` of a generated checker: names only.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DependsOnNames {
    pub names: Vec<String>,
}

/// `spec.grpc` of a generated gRPC checker.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GrpcCheck {
    pub service: String,
}

/// Something wrong in a source object that its author should hear of (a
/// Warning Event on the object): the annotation (or field) and why.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Problem {
    /// The Event's reason: `InvalidAnnotation`, `TooManyCheckers` or
    /// `NoHTTPPort` (a Service).
    pub reason: &'static str,
    /// The annotation named, or the field.
    pub subject: String,
    pub message: String,
}

/// Why a rule of a source object has no checker (logged, documented).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// A rule without a host: it matches any name, there is no URL to probe.
    NoHost,
    /// `*.example.com`: no one name to probe.
    WildcardHost,
    /// A path (per-path checkers) that is a pattern or that the CRD refuses.
    PathNotPlain,
    /// `via`: the route's Gateway (or the Ingress's status) has no address
    /// yet, or no listener for the host (HTTP or HTTPS).
    NoAddress,
}

/// What one source object wants.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Sorted by name, names unique.
    pub checkers: Vec<Desired>,
    pub problems: Vec<Problem>,
    /// Rules (host, and path for per-path checkers) left without a checker.
    pub skipped: Vec<(String, Skip)>,
}

/// Settings the operator applies to every generated checker unless the
/// source's annotations say otherwise (None: the CRD's default), and the
/// cluster's DNS domain (a Service's checker probes its absolute name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Defaults {
    pub interval_seconds: Option<i32>,
    pub failure_threshold: Option<i32>,
    pub cluster_domain: String,
}

/// The cluster DNS domain unless `--cluster-domain` says otherwise.
pub const CLUSTER_DOMAIN: &str = "cluster.local";

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            interval_seconds: None,
            failure_threshold: None,
            cluster_domain: CLUSTER_DOMAIN.to_string(),
        }
    }
}

/// What a plan reads of a source's Namespace (and all discovery keeps of
/// it): the annotations of ours, and its labels for the `Selector` of a
/// Gateway listener's `allowedRoutes`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamespaceInfo {
    pub annotations: BTreeMap<String, String>,
    /// None when it has more than [`MAX_NAMESPACE_LABELS`] (not kept: no
    /// `Selector` then admits its routes).
    pub labels: Option<BTreeMap<String, String>>,
}

/// Labels of a Namespace kept for Gateways' selectors; a Namespace with
/// more is selected by none.
pub const MAX_NAMESPACE_LABELS: usize = 64;

/// The object a generated checker comes from: its owner (the garbage
/// collector deletes the checker with it) and the labels it is found by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// The `source` label's value: `ingress`, `httproute`, `grpcroute`,
    /// `service`, `gateway`.
    pub label: &'static str,
    pub api_version: &'static str,
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl Source {
    /// The source of kind `kind` (its `source` label, API version) whose
    /// metadata is `meta`.
    pub fn of(
        label: &'static str,
        api_version: &'static str,
        kind: &'static str,
        meta: &kube::api::ObjectMeta,
    ) -> Source {
        Source {
            label,
            api_version,
            kind,
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
        }
    }
}
