//! The `WebChecker` custom resource (`test.network.io/v1alpha1`).
//!
//! The manifests of the article this operator started from (`examples/seed/`:
//! `spec.host` plus an optional `spec.path`) must keep working unchanged, so
//! every field added here is optional with a default that reproduces its
//! behaviour (10 s interval, 1 s timeout, 2xx/3xx success).
//!
//! The bottom layer of the workspace: the resource's types and the assignment
//! protocol ([`assignment`]), with no client, no runtime and no server.

pub mod assignment;

use kube::core::{Message, Rule};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

mod depends;
mod maintenance;
mod slo;
pub use depends::DependsOn;
pub use maintenance::{
    MaintenanceSpec, MaintenanceStatus, WebCheckerMaintenance, Weekday, WeeklySchedule,
};
pub use slo::{SloSpec, SloStatus, SloWindow};

pub const GROUP: &str = "test.network.io";
/// Label on membership Leases, so replicas can list each other.
pub const MEMBER_LABEL: &str = "webchecker.test.network.io/member";
/// Annotation on a membership Lease: `host:port` of the member's HTTP server,
/// where peers look for evidence that its process is gone.
pub const ADDRESS_ANNOTATION: &str = "webchecker.test.network.io/address";
/// Annotation on a membership Lease: `host:port` of the member's listener
/// of asks (confirmations and zones' probes, `POST /confirm`).
pub const CONFIRM_ADDRESS_ANNOTATION: &str = "webchecker.test.network.io/confirm-address";
/// Annotation on a membership Lease: a random id of the member's process,
/// returned by its /healthz (header [`INCARNATION_HEADER`]).
pub const INCARNATION_ANNOTATION: &str = "webchecker.test.network.io/incarnation";
/// Annotation on a membership Lease: "distrusted" when this process once lost
/// its Lease to evidence that lied; peers then judge it by the Lease alone.
pub const PEER_EVIDENCE_ANNOTATION: &str = "webchecker.test.network.io/peer-evidence";
/// Member Lease annotation: the zone of the replica's node
/// (`topology.kubernetes.io/zone`), where a confirmer is looked for first.
pub const ZONE_ANNOTATION: &str = "webchecker.test.network.io/zone";
/// Member Lease annotation: the node the replica runs on.
pub const NODE_ANNOTATION: &str = "webchecker.test.network.io/node";
/// Member Lease annotation: "true" once the replica was asked to stop. It
/// still probes what it owns; the sharder drains all of it to the others
/// and places nothing on it.
pub const LEAVING_ANNOTATION: &str = "webchecker.test.network.io/leaving";

/// Response header of /healthz naming the process's incarnation.
pub const INCARNATION_HEADER: &str = "webchecker-incarnation";

/// Spec of a WebChecker: one HTTP endpoint to probe on an interval.
// The printcolumn(...) lists repeat `type_ = ...` on purpose.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "test.network.io",
    version = "v1alpha1",
    kind = "WebChecker",
    plural = "webcheckers",
    singular = "webchecker",
    shortname = "wc",
    category = "webchecker-operator",
    namespaced,
    status = "WebCheckerStatus",
    doc = "WebChecker probes one HTTP(S) endpoint on an interval and reports its health in status, metrics and events.",
    validation = Rule::new("!has(self.spec.dependsOn) || !has(self.spec.dependsOn.names) || !(self.metadata.name in self.spec.dependsOn.names)").message("spec.dependsOn.names names this checker itself; a checker cannot depend on itself"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status",
        description = "Whether the endpoint answers as expected"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason",
        description = "Machine-readable reason of the Ready condition"
    ),
    printcolumn(
        name = "Degraded",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Degraded\")].status",
        description = "True while the owner's probes fail where another replica's succeed (its own network is suspect, not the target)"
    ),
    printcolumn(
        name = "Diagnosis",
        type_ = "string",
        json_path = ".status.diagnosis.cause",
        priority = 1,
        description = "While Ready is False: what the cluster says of the target (docs/diagnosis.md)"
    ),
    printcolumn(
        name = "Since",
        type_ = "date",
        json_path = ".status.conditions[?(@.type==\"Ready\")].lastTransitionTime",
        description = "Since when Ready has had its current status"
    ),
    printcolumn(
        name = "Host",
        type_ = "string",
        json_path = ".spec.host",
        description = "Scheme, host and port probed"
    ),
    printcolumn(
        name = "Source",
        type_ = "string",
        json_path = ".metadata.labels.webchecker\\.test\\.network\\.io/source",
        description = "What route discovery generated this checker from (ingress, httproute, grpcroute, service); empty for a checker made by hand"
    ),
    printcolumn(
        name = "Path",
        type_ = "string",
        json_path = ".spec.path",
        priority = 1,
        description = "Path probed"
    ),
    printcolumn(
        name = "Code",
        type_ = "integer",
        json_path = ".status.lastStatusCode",
        priority = 1,
        description = "HTTP status code at the last status write (status is written on changes, not on every probe)"
    ),
    printcolumn(
        name = "Latency ms",
        type_ = "integer",
        json_path = ".status.lastLatencyMillis",
        priority = 1,
        description = "Latency at the last status write (metrics carry every probe)"
    ),
    printcolumn(
        name = "Budget",
        type_ = "string",
        json_path = ".status.slo.budget",
        priority = 1,
        description = "With spec.slo: the error budget left over its window, as a share and as time, at the last status write"
    ),
    printcolumn(
        name = "Availability",
        type_ = "string",
        json_path = ".status.slo.availability",
        priority = 1,
        description = "With spec.slo: good probes over counted ones within its window, at the last status write"
    ),
    printcolumn(
        name = "Owner",
        type_ = "string",
        json_path = ".metadata.labels.webchecker\\.test\\.network\\.io/owner",
        priority = 1,
        description = "Operator replica that probes this checker"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("!has(self.timeoutSeconds) || double(self.timeoutSeconds) < double(self.intervalSeconds)").message("spec.timeoutSeconds must be below spec.intervalSeconds, so that one probe ends before the next is due"))]
#[x_kube(validation = Rule::new("!has(self.auth) || !has(self.headers) || !self.headers.exists(h, h.name.lowerAscii() == 'authorization')").message("spec.auth and a header named Authorization cannot be combined; use one of them"))]
#[x_kube(validation = http_only("method"))]
#[x_kube(validation = http_only("body"))]
#[x_kube(validation = http_only("bodyMatch"))]
#[x_kube(validation = http_only("jsonChecks"))]
#[x_kube(validation = http_only("headerChecks"))]
#[x_kube(validation = http_only("followRedirects"))]
#[x_kube(validation = http_only("maxRedirects"))]
#[x_kube(validation = http_only("proxy"))]
#[x_kube(validation = Rule::new("!has(self.connectTo) || !has(self.proxy)").message("spec.connectTo and spec.proxy cannot be combined: through a proxy, the proxy chooses where to connect"))]
#[x_kube(validation = http_only("compression"))]
#[x_kube(validation = http_only("http2"))]
#[x_kube(validation = http_only("httpVersions"))]
#[x_kube(validation = only_for("headers", &["http", "https", "grpc", "grpcs"], "gRPC checks send them as request metadata; tcp:// and tls:// checks send no headers"))]
#[x_kube(validation = only_for("auth", &["http", "https", "grpc", "grpcs"], "gRPC checks send it as authorization metadata; tcp:// and tls:// checks send no headers"))]
#[x_kube(validation = only_for("grpc", &["grpc", "grpcs"], "use a grpc:// or grpcs:// host"))]
#[x_kube(validation = only_for("tcp", &["tcp", "tls"], "use a tcp:// or tls:// host"))]
#[x_kube(validation = Rule::new(format!("{HTTP_HOST} || self.path == '/'")).message("spec.path applies to http:// and https:// hosts only; a gRPC check calls grpc.health.v1.Health/Check (name a service in spec.grpc.service), tcp:// and tls:// checks have no path"))]
#[x_kube(validation = Rule::new(format!("{HTTP_HOST} || self.expectedStatusCodes == ['2xx', '3xx']")).message("spec.expectedStatusCodes applies to http:// and https:// hosts only; a gRPC check needs SERVING, tcp:// and tls:// checks have no status code"))]
#[x_kube(validation = Rule::new("!has(self.tcp) || !has(self.tcp.queryResponse) || !self.tcp.queryResponse.exists(s, has(s.startTls) && s.startTls) || (isURL(self.host) && url(self.host).getScheme() == 'tcp')").message("spec.tcp.queryResponse[].startTls upgrades a tcp:// connection to TLS; a tls:// host speaks TLS from the start"))]
#[serde(rename_all = "camelCase")]
pub struct WebCheckerSpec {
    /// Base URL of the endpoint: scheme and host, optionally a port, for example `https://example.com` or `http://10.0.0.1:8080`. The path goes in `path`. The scheme says what the check speaks: `http`/`https` an HTTP request; `grpc`/`grpcs` the gRPC health check (grpc.health.v1.Health/Check, in the clear or over TLS; see `grpc`); `tcp` a TCP connection (optionally with the steps of `tcp`, STARTTLS among them); `tls` a TLS handshake and the server's certificate chain. The last four need a port: `tls://mail.example.com:465`.
    #[x_kube(validation = Rule::new("isURL(self) && url(self).getScheme() in ['http', 'https', 'grpc', 'grpcs', 'tcp', 'tls']").message("spec.host must be an http://, https://, grpc://, grpcs://, tcp:// or tls:// URL, for example https://example.com or tcp://mail.example.com:25"))]
    #[x_kube(validation = Rule::new("!isURL(self) || url(self).getScheme() in ['http', 'https'] || url(self).getPort() != ''").message("spec.host needs a port with grpc://, grpcs://, tcp:// and tls://, for example grpc://api.example.com:50051 or tls://mail.example.com:465"))]
    #[x_kube(validation = Rule::new("!isURL(self) || url(self).getHostname() != ''").message("spec.host must name a host, for example https://example.com"))]
    #[x_kube(validation = Rule::new("!isURL(self) || url(self).getEscapedPath() in ['', '/']").message("spec.host must not contain a path; put it in spec.path"))]
    #[x_kube(validation = Rule::new("!self.contains('?') && !self.contains('#')").message("spec.host must not contain a query or fragment; put the query in spec.path"))]
    #[x_kube(validation = Rule::new("!self.contains('@')").message("spec.host must not carry credentials (user:password@); put them in a Secret and use spec.auth.basic"))]
    #[schemars(length(min = 1, max = 2048))]
    pub host: String,

    /// Path (and optional query) requested on the host. Must start with `/`.
    #[serde(default = "default_path")]
    #[schemars(length(min = 1, max = 2048))]
    #[x_kube(validation = Rule::new("self.startsWith('/')").message("spec.path must start with '/', for example /healthz"))]
    // A URL reads `//name`, `/\name` or `/<tab>/name` as another host; the
    // operator refuses them at run time as well (src/probe/plan/build.rs).
    #[x_kube(validation = Rule::new("!self.startsWith('//')").message("spec.path must not start with '//', which a URL reads as another host; start it with a single '/', the host goes in spec.host"))]
    #[x_kube(validation = Rule::new("!self.contains('\\\\')").message("spec.path must not contain a backslash, which a URL reads as '/' and which can make it name another host; write it as %5C"))]
    #[x_kube(validation = Rule::new("!self.matches('[\\\\x00-\\\\x1f\\\\x7f]')").message("spec.path must not contain control characters (tab, line breaks), which a URL drops and which can make it name another host; percent-encode them (%09, %0A)"))]
    pub path: String,

    /// Seconds between two probes. Default 10.
    #[serde(default = "default_interval")]
    #[schemars(range(min = 1, max = 86400))]
    pub interval_seconds: i32,

    /// Seconds a probe may take in all (DNS, connect, TLS, request, response), 0.1 to 600, below intervalSeconds; fractions are allowed (0.5). Default 1, or half the interval when that is shorter (0.5 with intervalSeconds 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.1, max = 600.0))]
    pub timeout_seconds: Option<f64>,

    /// Status codes that count as success: single codes (`200`), ranges (`200-299`) or classes (`2xx`). Default: every 2xx and 3xx.
    #[serde(default = "default_expected_codes")]
    #[schemars(
        length(min = 1, max = 64),
        inner(
            length(max = 7),
            regex(pattern = r"^([1-5][0-9][0-9]|[1-5]xx|[1-5][0-9][0-9]-[1-5][0-9][0-9])$")
        )
    )]
    #[x_kube(validation = Rule::new("self.all(c, !c.contains('-') || int(c.split('-')[0]) <= int(c.split('-')[1]))").message("spec.expectedStatusCodes: a range must be written low-high, for example 200-299"))]
    pub expected_status_codes: Vec<String>,

    /// HTTP method. Default GET.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<HttpMethod>,

    /// Extra request headers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub headers: Option<Vec<HeaderSpec>>,

    /// Request body (sent as is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 65536))]
    pub body: Option<String>,

    /// A response slower than this many milliseconds fails with reason SlowResponse.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 600000))]
    pub max_response_time_millis: Option<i32>,

    /// Regular expression checked against the first 64 KiB of the response body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_match: Option<BodyMatch>,

    /// Consecutive failed probes before Ready turns False. Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub failure_threshold: Option<i32>,

    /// Consecutive successful probes before Ready turns True. Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub success_threshold: Option<i32>,

    /// Follow redirects (3xx with Location). Default false: a 3xx answer is judged by expectedStatusCodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow_redirects: Option<bool>,

    /// Redirects followed at most when followRedirects is true. Default 5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 20))]
    pub max_redirects: Option<i32>,

    /// TLS settings for https hosts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSpec>,

    /// Before a failure turns Ready False, ask another replica (in another zone where there is one) to probe once more: if its probe succeeds, Ready stays True and the Degraded condition names the replica whose probes fail. Default true; false: the owner's failures alone decide.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirm_failures: Option<bool>,

    /// Probe from several zones every interval, each zone by one replica chosen by the same rendezvous hashing within it: Ready turns False when at least quorum zones fail (failureThreshold in a row each), Degraded names the zones that fail while fewer do, status.zones shows each zone's last result. Costs one probe per zone per interval. Without it, one replica probes and a failure is confirmed from another zone (confirmFailures).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locations: Option<Locations>,

    /// Stop probing while true; the Ready condition then says Suspended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,

    /// Credentials sent in the Authorization header, read from a Secret in the checker's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<AuthSpec>,

    /// Checks on the JSON response body (parsed from the first maxBodyBytes, 64 KiB by default); every check must pass, else BodyMismatch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    pub json_checks: Option<Vec<JsonCheck>>,

    /// Checks on response headers; every check must pass, else BodyMismatch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    pub header_checks: Option<Vec<HeaderCheck>>,

    /// Address family to connect over. Auto (default): every resolved address of both families, interleaved, moving on to the next address when a connection fails or has not completed within 250 ms. IPv4 or IPv6: only addresses of that family.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_family: Option<IpFamily>,

    /// Address (an IP address or a host name) to connect to instead of the addresses of spec.host's host, on spec.host's port; the request still names spec.host's host (Host header, gRPC :authority, TLS SNI and the certificate's name, unless tls.serverName says otherwise), as curl --connect-to does. For example an ingress controller's or a Gateway's address, to probe a route through it whatever DNS says. The forgery guard judges the addresses actually connected to (connectTo's). Applies to spec.host's origin only: a redirect to another host goes where that host resolves to. Cannot be combined with spec.proxy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new(CONNECT_TO_RULE).message("spec.connectTo must be an IP address or a host name, without scheme, port or path, for example 10.0.0.7 or gateway.example.net"))]
    pub connect_to: Option<String>,

    /// HTTP proxy to probe through. Default: none (direct connections, whatever the operator's environment says).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<ProxySpec>,

    /// Content coding asked for in Accept-Encoding. Default identity: the body uncompressed. gzip, deflate, br or zstd: ask for that coding; a response body in any of these codings is decoded before bodyMatch and jsonChecks, and the body limit (--max-body-bytes) applies to the decoded size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<Compression>,

    /// HTTP/2. Negotiate (default): offer h2 and http/1.1 by ALPN over TLS and speak what the server picks; plain http:// uses HTTP/1.1. Disabled: HTTP/1.1 only (ALPN http/1.1). PriorKnowledge: HTTP/2 without negotiation, h2c on http:// (not through a proxy) and ALPN h2 alone on https://.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http2: Option<Http2Mode>,

    /// HTTP versions a response may have, for example ["HTTP/2"]; another version fails the probe with reason UnexpectedHTTPVersion. Default: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 3))]
    pub http_versions: Option<Vec<HttpVersion>>,

    /// The gRPC health check of a grpc:// or grpcs:// host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc: Option<GrpcSpec>,

    /// What a tcp:// or tls:// check says and expects after it connects (and, on tls://, after the handshake).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<TcpSpec>,

    /// A service-level objective over this checker's probes: availability, error budget and burn rates in status.slo and in metrics (docs/slo.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo: Option<SloSpec>,

    /// Checkers of this namespace whose failure explains this one's: while one of them is Ready=False, this checker's failure says DependencyDown, sends a Normal Event and pages nobody; when it recovers and this checker still fails, this one pages (docs/dependencies.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depends_on: Option<DependsOn>,
}

/// CEL: spec.connectTo is an IP address (v4, or v6 without brackets) or a
/// DNS name (lower or upper case letters, digits, hyphens, dots).
const CONNECT_TO_RULE: &str = "isIP(self) || self.matches('^[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?(\\\\.[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?)*\\\\.?$')";

/// A CEL expression that holds when spec.host is http:// or https://.
const HTTP_HOST: &str = "(isURL(self.host) && url(self.host).getScheme() in ['http', 'https'])";

/// Refuses `field` unless spec.host has one of `schemes`; `hint` says what to do instead.
fn only_for(field: &str, schemes: &[&str], hint: &str) -> Rule {
    let list = schemes
        .iter()
        .map(|s| format!("'{s}'"))
        .collect::<Vec<_>>()
        .join(", ");
    let names = schemes
        .iter()
        .map(|s| format!("{s}://"))
        .collect::<Vec<_>>()
        .join(", ");
    Rule::new(format!(
        "!has(self.{field}) || (isURL(self.host) && url(self.host).getScheme() in [{list}])"
    ))
    .message(Message::Message(format!(
        "spec.{field} applies to {names} hosts only; {hint}"
    )))
}

/// Refuses an HTTP-only `field` on the other kinds of checks.
fn http_only(field: &str) -> Rule {
    only_for(
        field,
        &["http", "https"],
        "remove it for a grpc://, grpcs://, tcp:// or tls:// host",
    )
}

/// What a checker speaks: the scheme of spec.host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CheckKind {
    Http,
    Grpc,
    Tcp,
    Tls,
}

impl CheckKind {
    /// The kind of a spec.host; `None` for another scheme.
    pub fn of_host(host: &str) -> Option<CheckKind> {
        let scheme = host.trim().split_once("://")?.0.to_ascii_lowercase();
        match scheme.as_str() {
            "http" | "https" => Some(CheckKind::Http),
            "grpc" | "grpcs" => Some(CheckKind::Grpc),
            "tcp" => Some(CheckKind::Tcp),
            "tls" => Some(CheckKind::Tls),
            _ => None,
        }
    }

    /// The `kind` label of the metrics: http, grpc, tcp or tls.
    pub fn as_str(self) -> &'static str {
        match self {
            CheckKind::Http => "http",
            CheckKind::Grpc => "grpc",
            CheckKind::Tcp => "tcp",
            CheckKind::Tls => "tls",
        }
    }
}

/// The gRPC health check (grpc.health.v1.Health/Check, one unary call).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GrpcSpec {
    /// The service whose health is asked, for example `grpc.health.v1.Health` or `mycompany.Orders`. Default: the empty name, the server as a whole. The answer must be SERVING; NOT_SERVING fails with reason NotServing, a service the server does not know with ServiceUnknown, another gRPC status with UnexpectedGRPCStatus.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub service: Option<String>,
}

/// The conversation of a tcp:// or tls:// check.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TcpSpec {
    /// Steps run in order after the connection opens, as blackbox_exporter's query_response: each may wait for a line matching `expect`, then `send` text, then (on tcp://) upgrade the connection to TLS with `startTls`. Without steps, connecting is the check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    pub query_response: Option<Vec<TcpStep>>,
}

/// One step of a TCP conversation.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.expect) || has(self.send) || (has(self.startTls) && self.startTls)").message("a spec.tcp.queryResponse step needs at least one of expect, send or startTls: true"))]
pub struct TcpStep {
    /// Regular expression (Rust regex syntax) that a line the server sends must match; lines that do not match are skipped until one does (the first 64 KiB). A server that closes the connection or stays silent first fails the probe with reason UnexpectedResponse.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub expect: Option<String>,
    /// Text sent as is (write line ends yourself: "EHLO probe\r\n").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    pub send: Option<String>,
    /// After expect and send, start TLS on the connection (STARTTLS of SMTP, IMAP, POP3 and the like), with the options of spec.tls; the certificate is checked as on https.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_tls: Option<bool>,
}

/// Zones to probe from, and how many must fail (spec.locations).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.quorum <= self.zones").message("spec.locations.quorum cannot exceed spec.locations.zones: Ready turns False when quorum of the zones probed fail, for example zones: 3, quorum: 2"))]
pub struct Locations {
    /// Zones that probe every interval, the owner's among them (2 to 5). Where the cluster has fewer zones with a replica, every one of them probes and status.zones shows how many.
    #[schemars(range(min = 2, max = 5))]
    pub zones: i32,
    /// Zones that must fail before Ready turns False (1 to zones). When fewer zones answer than quorum, all that answer must fail.
    #[schemars(range(min = 1, max = 5))]
    pub quorum: i32,
}

fn default_path() -> String {
    "/".to_string()
}
fn default_interval() -> i32 {
    10
}
/// The timeout of a spec without `timeoutSeconds`: 1 s, or half
/// the interval when that is shorter, so that every interval has a timeout
/// that fits it.
pub fn default_timeout(interval_seconds: i32) -> f64 {
    (f64::from(interval_seconds) / 2.0).min(1.0)
}
fn default_expected_codes() -> Vec<String> {
    vec!["2xx".to_string(), "3xx".to_string()]
}

/// HTTP method of the probe request.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum HttpMethod {
    #[serde(rename = "GET")]
    Get,
    #[serde(rename = "HEAD")]
    Head,
    #[serde(rename = "POST")]
    Post,
    #[serde(rename = "PUT")]
    Put,
    #[serde(rename = "PATCH")]
    Patch,
    #[serde(rename = "DELETE")]
    Delete,
    #[serde(rename = "OPTIONS")]
    Options,
}

impl HttpMethod {
    pub fn as_http(self) -> http::Method {
        match self {
            HttpMethod::Get => http::Method::GET,
            HttpMethod::Head => http::Method::HEAD,
            HttpMethod::Post => http::Method::POST,
            HttpMethod::Put => http::Method::PUT,
            HttpMethod::Patch => http::Method::PATCH,
            HttpMethod::Delete => http::Method::DELETE,
            HttpMethod::Options => http::Method::OPTIONS,
        }
    }
}

/// A content coding (RFC 9110 8.4.1).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum Compression {
    #[serde(rename = "identity")]
    Identity,
    #[serde(rename = "gzip")]
    Gzip,
    #[serde(rename = "deflate")]
    Deflate,
    #[serde(rename = "br")]
    Br,
    #[serde(rename = "zstd")]
    Zstd,
}

/// Whether and how a probe speaks HTTP/2.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum Http2Mode {
    Negotiate,
    Disabled,
    PriorKnowledge,
}

/// An HTTP version of a response.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum HttpVersion {
    #[serde(rename = "HTTP/1.0")]
    Http10,
    #[serde(rename = "HTTP/1.1")]
    Http11,
    #[serde(rename = "HTTP/2")]
    Http2,
}

/// One request header.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.value) != has(self.valueFrom)").message("a header needs exactly one of value or valueFrom"))]
pub struct HeaderSpec {
    /// Header name, for example X-Api-Key.
    #[schemars(
        length(min = 1, max = 256),
        regex(pattern = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
    )]
    pub name: String,
    /// Literal header value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 8192))]
    pub value: Option<String>,
    /// Header value taken from a key of a Secret in the checker's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<HeaderValueSource>,
}

/// Where a header value comes from.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeaderValueSource {
    /// A key of a Secret in the checker's namespace.
    pub secret_key_ref: SecretKeyRef,
}

/// Reference to one key of a Secret in the checker's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, schemars::JsonSchema)]
pub struct SecretKeyRef {
    /// Secret name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key within the Secret.
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

/// A regular expression the response body must (or must not) match.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BodyMatch {
    /// Regular expression (Rust regex syntax) searched in the body.
    #[schemars(length(min = 1, max = 1024))]
    pub regex: String,
    /// When true the probe fails if the expression matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invert: Option<bool>,
}

/// TLS options.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!(has(self.insecureSkipVerify) && self.insecureSkipVerify && has(self.caBundle))").message("spec.tls.caBundle has no effect with insecureSkipVerify: true; set one of them"))]
pub struct TlsSpec {
    /// Accept any server certificate (expiry is still reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insecure_skip_verify: Option<bool>,
    /// Server name sent in SNI and verified in the certificate, instead of the host's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub server_name: Option<String>,
    /// PEM certificates of the certificate authorities to trust instead of the built-in (Mozilla) roots, from a Secret or ConfigMap key in the checker's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<CaBundleSource>,
    /// Client certificate presented to the server: a Secret of type kubernetes.io/tls (keys tls.crt and tls.key) in the checker's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_certificate: Option<ClientCertificate>,
    /// Lowest TLS version accepted: TLS12 (default) or TLS13.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_version: Option<TlsVersion>,
    /// When the server certificate expires within this many days, the condition CertificateExpiring turns True and a Warning event is emitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 3650))]
    pub certificate_expiry_warning_days: Option<i32>,
}

/// Where the CA bundle comes from: exactly one of a Secret key or a ConfigMap key.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.secretKeyRef) != has(self.configMapKeyRef)").message("spec.tls.caBundle needs exactly one of secretKeyRef or configMapKeyRef"))]
pub struct CaBundleSource {
    /// A key of a Secret in the checker's namespace holding PEM certificates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<SecretKeyRef>,
    /// A key of a ConfigMap in the checker's namespace holding PEM certificates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_key_ref: Option<ConfigMapKeyRef>,
}

/// Reference to one key of a ConfigMap in the checker's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, schemars::JsonSchema)]
pub struct ConfigMapKeyRef {
    /// ConfigMap name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key within the ConfigMap.
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

/// A client certificate for mutual TLS.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientCertificate {
    /// Name of a Secret in the checker's namespace with the keys tls.crt (PEM chain) and tls.key (PEM private key).
    #[schemars(length(min = 1, max = 253))]
    pub secret_name: String,
}

/// A TLS protocol version.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum TlsVersion {
    #[serde(rename = "TLS12")]
    Tls12,
    #[serde(rename = "TLS13")]
    Tls13,
}

/// Credentials for the Authorization header: exactly one of basic or bearer.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.basic) != has(self.bearer)").message("spec.auth needs exactly one of basic or bearer"))]
pub struct AuthSpec {
    /// HTTP Basic authentication (RFC 7617) with a user name and password from a Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic: Option<BasicAuth>,
    /// A bearer token (RFC 6750) from a Secret key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer: Option<BearerAuth>,
}

/// Basic authentication credentials from one Secret.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BasicAuth {
    /// Name of a Secret in the checker's namespace.
    #[schemars(length(min = 1, max = 253))]
    pub secret_name: String,
    /// Key holding the user name. Default `username` (as in a kubernetes.io/basic-auth Secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub username_key: Option<String>,
    /// Key holding the password. Default `password`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub password_key: Option<String>,
}

/// A bearer token from a Secret key.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BearerAuth {
    /// The Secret key holding the token.
    pub secret_key_ref: SecretKeyRef,
}

/// One check on the JSON response body.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct JsonCheck {
    /// JSON pointer (RFC 6901) into the body, for example /status or /items/0/name; the empty string is the whole document.
    #[schemars(length(max = 1024))]
    #[x_kube(validation = Rule::new("self == '' || self.startsWith('/')").message("a jsonChecks pointer must be empty or start with '/', for example /status"))]
    pub pointer: String,
    /// Expected value. A string value is compared as is; any other value (number, boolean, null, object, array) is compared as JSON, so `equals: "42"` matches 42 and `equals: "true"` matches true; numbers compare by value (`equals: "1"` matches 1, 1.0 and 1e0, inside objects and arrays too). Without equals the pointer must merely exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub equals: Option<String>,
}

/// One check on a response header.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeaderCheck {
    /// Header name (case-insensitive). The header must be present.
    #[schemars(
        length(min = 1, max = 256),
        regex(pattern = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
    )]
    pub name: String,
    /// Regular expression (Rust regex syntax) one of the header's values must match. Without it the header must merely be present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub regex: Option<String>,
}

/// Address family of the connection.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum IpFamily {
    Auto,
    IPv4,
    IPv6,
}

/// Probe through an HTTP proxy: exactly one of url or fromEnvironment: true.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.url) != (has(self.fromEnvironment) && self.fromEnvironment)").message("spec.proxy needs exactly one of url or fromEnvironment: true"))]
pub struct ProxySpec {
    /// Use the operator's HTTP_PROXY, HTTPS_PROXY and NO_PROXY environment variables (or their lower-case forms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_environment: Option<bool>,
    /// An http:// proxy URL, for example http://proxy.example:3128. https targets are tunnelled with CONNECT, http targets are requested in absolute form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048))]
    #[x_kube(validation = Rule::new("isURL(self) && url(self).getScheme() == 'http' && url(self).getHostname() != ''").message("spec.proxy.url must be an http:// URL with a host, for example http://proxy.example:3128"))]
    #[x_kube(validation = Rule::new("!self.contains('@')").message("spec.proxy.url must not carry credentials"))]
    pub url: Option<String>,
}

/// Observed state, written by the replica that owns the checker.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebCheckerStatus {
    /// Conditions, at most one per type (a list-type map keyed by type, as metav1.Condition lists are): `Ready` says whether the endpoint answers as expected; `CertificateExpiring` appears with spec.tls.certificateExpiryWarningDays.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "lenient_conditions"
    )]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// Generation of the spec that the recorded probe used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When the probe recorded by the last status write ran (RFC 3339). Status is written when something a reader acts on changes and at least once per heartbeat, not on every probe: this and the other last* fields describe that probe, and may lag the latest one; metrics carry every probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_probe_time: Option<String>,
    /// HTTP status code of the probe recorded by the last status write (absent when no response came).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_status_code: Option<i32>,
    /// Latency in milliseconds of the probe recorded by the last status write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_latency_millis: Option<i64>,
    /// HTTP version of the response recorded by the last status write (HTTP/1.0, HTTP/1.1 or HTTP/2; absent when no response came).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_http_version: Option<String>,
    /// Replica that wrote this status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// With spec.locations: each probing zone's last result, written when a zone's result changes (and with the heartbeat).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 5))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["zone".into()]))]
    pub zones: Vec<ZoneStatus>,
    /// With spec.slo: availability, error budget and burn rates over its window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo: Option<SloStatus>,
    /// While Ready is False and the target is in the cluster: what the cluster's own objects say of it, looked at once when Ready turned False (docs/diagnosis.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnosis: Option<Diagnosis>,
}

/// What the cluster says of a checker's target.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Diagnosis {
    /// NoService, NoReadyEndpoints, CrashLoopBackOff, ImagePullBackOff, OOMKilled, Unschedulable, NotReady, RouteNotAccepted, BackendNotResolved, GatewayNotProgrammed, NoLoadBalancerAddress or Healthy (the cluster sees nothing wrong).
    #[schemars(length(max = 64))]
    pub cause: String,
    /// What was found, naming at most a few objects of the checker's namespace.
    #[schemars(length(max = 512))]
    pub message: String,
}

/// One zone's last probe of a checker with spec.locations.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ZoneStatus {
    /// The zone (topology.kubernetes.io/zone of the probing replica's node).
    #[schemars(length(max = 253))]
    pub zone: String,
    /// The replica that probed from it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 253))]
    pub replica: String,
    /// Succeeded, Failed (failureThreshold probes in a row), Failing (below the threshold) or Unknown (its replica did not answer).
    #[schemars(extend("enum" = ["Succeeded", "Failing", "Failed", "Unknown"]))]
    pub result: String,
    /// The probe's reason (ProbeSucceeded, ConnectError, ...), or why no result came.
    #[schemars(length(max = 1024))]
    pub reason: String,
    /// Latency of its last probe in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_millis: Option<i64>,
}

/// A condition with the fields and validation of metav1.Condition (kept as
/// our own type: the times stay the RFC 3339 strings the status code writes).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Condition type, for example Ready.
    #[serde(rename = "type")]
    #[schemars(
        length(min = 1, max = 316),
        regex(
            pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
        )
    )]
    pub type_: String,
    /// True, False or Unknown.
    #[schemars(extend("enum" = ["True", "False", "Unknown"]))]
    pub status: String,
    /// Machine-readable reason in CamelCase, for example ProbeSucceeded or ConnectError.
    #[schemars(
        length(min = 1, max = 1024),
        regex(pattern = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    )]
    pub reason: String,
    /// Short human-readable explanation. Never contains response bodies or secret values.
    #[schemars(length(max = 32768))]
    pub message: String,
    /// When the status last changed (RFC 3339). Always written; optional only when read.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(required, extend("format" = "date-time"))]
    pub last_transition_time: Option<String>,
    /// Generation of the spec this condition was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub observed_generation: Option<i64>,
}

/// Reads conditions as leniently as before the schema required every field:
/// a status written by hand or by an older tool (no message, no reason)
/// still parses, and is replaced by the next status write.
fn lenient_conditions<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Condition>, D::Error> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Read {
        #[serde(rename = "type")]
        type_: String,
        status: String,
        #[serde(default)]
        reason: String,
        #[serde(default)]
        message: String,
        #[serde(default)]
        last_transition_time: Option<String>,
        #[serde(default)]
        observed_generation: Option<i64>,
    }
    Ok(Vec::<Read>::deserialize(d)?
        .into_iter()
        .map(|r| Condition {
            type_: r.type_,
            status: r.status,
            reason: r.reason,
            message: r.message,
            last_transition_time: r.last_transition_time,
            observed_generation: r.observed_generation,
        })
        .collect())
}

/// The most characters of a message a user is shown (a condition's, an
/// Event's): a line of `kubectl describe`, about the target. Longer ones
/// (a long host name quoted in it) are cut.
pub const MAX_MESSAGE: usize = 200;

/// `message` cut to [`MAX_MESSAGE`] characters, the last being `…`.
pub fn condition_message(message: &str) -> String {
    if message.chars().count() <= MAX_MESSAGE {
        return message.to_string();
    }
    let mut cut: String = message.chars().take(MAX_MESSAGE - 1).collect();
    cut.push('…');
    cut
}

impl WebCheckerStatus {
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

/// The namespace/name key of a checker, used by the ring and every table.
pub fn object_key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// The namespace and name of an [`object_key`] (a namespace has no `/`).
pub fn split_object_key(key: &str) -> Option<(&str, &str)> {
    key.split_once('/')
}

#[cfg(test)]
mod tests {
    #[test]
    fn condition_messages_are_cut_on_a_character_boundary() {
        use super::{MAX_MESSAGE, condition_message};
        assert_eq!(condition_message("short"), "short");
        let exact = "é".repeat(MAX_MESSAGE);
        assert_eq!(condition_message(&exact), exact);
        let cut = condition_message(&"é".repeat(MAX_MESSAGE + 1));
        assert_eq!(cut.chars().count(), MAX_MESSAGE);
        assert!(cut.ends_with('…') && cut.starts_with("éé"));
    }
}
