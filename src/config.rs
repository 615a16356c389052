//! Command-line flags, each with an environment fallback (docs/operator-interface.md).

use std::time::Duration;

use clap::Parser;

use crate::error::Error;

/// A Lease name prefix: a DNS-1123 label of at most 40 characters, so that
/// `<prefix>-member-<pod name>` stays a valid name.
fn parse_lease_prefix(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() <= 40
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-');
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{s:?} is not a Lease name prefix: lower-case letters, digits and '-', at most 40, starting and ending with a letter or digit"
        ))
    }
}

/// Parses `500ms`, `10s`, `5m`, `1h`, or a bare number of seconds.
/// A DNS domain (`cluster.local`): dot-separated labels of letters,
/// digits and `-`; a trailing dot is allowed and dropped.
pub fn parse_cluster_domain(s: &str) -> Result<String, String> {
    let d = s.trim().trim_end_matches('.').to_ascii_lowercase();
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if d.is_empty() || d.len() > 200 || !d.split('.').all(label_ok) {
        return Err(format!("{s:?} is not a DNS domain such as cluster.local"));
    }
    Ok(d)
}

pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 500ms, 10s or 5m"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("{s:?}: unknown unit {unit:?}, use ms, s, m or h")),
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("{s:?} is not a valid duration"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// The default of `--restricted-namespaces`: the label an admin sets on a
/// namespace to close private networks to its checkers.
pub const RESTRICTED_NAMESPACES: &str = "webchecker.test.network.io/private-networks=deny";

/// A comma-separated list of networks; the empty string is the empty list.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cidrs(pub Vec<ipnet::IpNet>);

pub fn parse_cidrs(s: &str) -> Result<Cidrs, String> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            p.parse::<ipnet::IpNet>()
                .or_else(|_| p.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                .map_err(|_| format!("{p:?} is not a CIDR like 10.0.0.0/8 or fe80::/10"))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Cidrs)
}

#[derive(Parser, Debug, Clone)]
#[command(
    name = "webchecker-operator",
    version,
    about = "Probes HTTP endpoints described by WebChecker resources"
)]
pub struct Config {
    /// This replica's identity (the pod name): Lease holder and owner label value.
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,

    /// Namespace of the coordination Leases.
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub namespace: String,

    /// Prefix of the coordination Leases' names: `<prefix>-leader` and
    /// `<prefix>-member-<identity>`. Two installs whose Leases share a
    /// namespace need prefixes of their own; every replica of one install
    /// must use the same.
    #[arg(long, env = "WEBCHECKER_LEASE_PREFIX", default_value = crate::coordination::DEFAULT_LEASE_PREFIX, value_parser = parse_lease_prefix)]
    pub lease_prefix: String,

    /// Only watch WebCheckers in this namespace (default: all namespaces).
    #[arg(long, env = "WEBCHECKER_WATCH_NAMESPACE")]
    pub watch_namespace: Option<String>,

    /// Address of the /metrics, /healthz and /readyz server.
    #[arg(long, env = "WEBCHECKER_LISTEN", default_value = "0.0.0.0:8080")]
    pub listen: std::net::SocketAddr,

    /// Address of the listener of other replicas' asks (`POST /confirm`:
    /// confirmations and zones' probes), a port of its own so a
    /// NetworkPolicy can admit only the release's pods to it.
    #[arg(
        long,
        env = "WEBCHECKER_CONFIRM_LISTEN",
        default_value = "0.0.0.0:8081"
    )]
    pub confirm_listen: std::net::SocketAddr,

    /// Accept asks whose token is not bound to the asking replica's pod
    /// (replicas run outside pods); such a token proves the ServiceAccount
    /// but not which replica asks.
    #[arg(long, env = "WEBCHECKER_CONFIRM_ALLOW_UNBOUND_TOKENS", default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub confirm_allow_unbound_tokens: bool,

    /// Where peers reach this replica's HTTP server (`host:port`), advertised
    /// in its membership Lease. Default: the listen address, or POD_IP and the
    /// listen port when listening on every address.
    #[arg(long, env = "WEBCHECKER_ADVERTISE_ADDRESS")]
    pub advertise_address: Option<String>,

    /// This pod's IP (downward API), used for the advertised address.
    #[arg(long, env = "POD_IP")]
    pub pod_ip: Option<std::net::IpAddr>,

    /// This pod's UID (downward API): the membership Lease names the pod as
    /// its owner, so the garbage collector deletes a Lease its pod left
    /// behind (a pod that could not release it, e.g. after `helm uninstall`
    /// removed its Role first).
    #[arg(long, env = "POD_UID")]
    pub pod_uid: Option<String>,

    /// The node this replica runs on (downward API `spec.nodeName`),
    /// advertised in its member Lease; its zone is read from the Node's
    /// `topology.kubernetes.io/zone` label unless `--zone` is given.
    #[arg(long, env = "NODE_NAME")]
    pub node_name: Option<String>,

    /// The zone this replica runs in (for replicas run outside a pod, or to
    /// override the Node's label). Confirmations are asked of another zone
    /// first.
    #[arg(long, env = "WEBCHECKER_ZONE")]
    pub zone: Option<String>,

    /// Before a failure turns a checker Ready=False, ask another replica
    /// (in another zone where there is one) to probe it once more; a
    /// checker opts out with `spec.confirmFailures: false`.
    #[arg(long, env = "WEBCHECKER_CONFIRM_FAILURES", default_value_t = true, action = clap::ArgAction::Set)]
    pub confirm_failures: bool,

    /// When a checker of an in-cluster target (generated from a Service,
    /// Ingress or route, or whose host names a Service of its namespace)
    /// turns Ready=False, read what the cluster says of that target (its
    /// endpoints, pods, route and Gateway conditions) into status.diagnosis
    /// and the Warning Event. Needs get/list on those objects (the chart's
    /// `rbac.diagnose`).
    #[arg(long, env = "WEBCHECKER_DIAGNOSIS", default_value_t = true, action = clap::ArgAction::Set)]
    pub diagnosis: bool,

    /// The ServiceAccount of the replicas (in --namespace): asks for a
    /// confirmation carry a token of it, and only asks with one are served.
    #[arg(
        long,
        env = "WEBCHECKER_SERVICE_ACCOUNT",
        default_value = "webchecker-operator"
    )]
    pub service_account: String,

    /// Move a member's checkers as soon as its process is proven gone
    /// (connection refused at its advertised address), not one lease later.
    #[arg(long, env = "WEBCHECKER_FAST_FAILOVER", default_value_t = true, action = clap::ArgAction::Set)]
    pub fast_failover: bool,

    /// Probes in flight at most (worker pool size).
    #[arg(long, env = "WEBCHECKER_WORKERS", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub workers: u32,

    /// Threads that run the response checks (headerChecks, bodyMatch,
    /// jsonChecks), namespaces taking turns; a check that outlasts its
    /// probe's timeout ends with reason CheckTimeout.
    #[arg(long, env = "WEBCHECKER_MATCH_THREADS", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub match_threads: u32,

    /// Compiled size of the patterns (headerChecks, bodyMatch) that the
    /// checkers of one namespace may use on each replica, in MiB; beyond it
    /// the newest checkers are Ready=False with reason QuotaExceeded.
    #[arg(long, env = "WEBCHECKER_NAMESPACE_PATTERN_BUDGET_MIB", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub namespace_pattern_budget_mib: u32,

    /// Bytes of the Secret and ConfigMap values that the checkers of one
    /// namespace reference on each replica, in MiB (each checker counts the
    /// values it names); beyond it the newest checkers are Ready=False with
    /// reason QuotaExceeded.
    #[arg(long, env = "WEBCHECKER_NAMESPACE_VALUE_BUDGET_MIB", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub namespace_value_budget_mib: u32,

    /// Status is rewritten at least this often when nothing changes.
    #[arg(long, env = "WEBCHECKER_HEARTBEAT", default_value = "20m", value_parser = parse_duration)]
    pub heartbeat: Duration,

    /// Lease duration (membership and leader Leases).
    #[arg(long, env = "WEBCHECKER_LEASE_DURATION", default_value = "10s", value_parser = parse_duration)]
    pub lease_duration: Duration,

    /// The leader gives up leadership when it cannot renew within this.
    #[arg(long, env = "WEBCHECKER_RENEW_DEADLINE", default_value = "7s", value_parser = parse_duration)]
    pub renew_deadline: Duration,

    /// Lease renew and retry period.
    #[arg(long, env = "WEBCHECKER_RETRY_PERIOD", default_value = "2s", value_parser = parse_duration)]
    pub retry_period: Duration,

    /// Graceful shutdown budget; keep it below terminationGracePeriodSeconds.
    /// Its first half at most goes to handing every checker over while
    /// still probing it (each new owner keeps its cadence); what is left
    /// then moves as from a replica that left.
    #[arg(long, env = "WEBCHECKER_SHUTDOWN_TIMEOUT", default_value = "20s", value_parser = parse_duration)]
    pub shutdown_timeout: Duration,

    /// The replica's memory limit in bytes, exported as
    /// webchecker_memory_limit_bytes for the alert WebCheckerReplicaMemoryHigh
    /// (the chart passes the container's limits.memory); without it, its
    /// cgroup's limit, if any.
    #[arg(long, env = "WEBCHECKER_MEMORY_LIMIT", value_parser = clap::value_parser!(u64).range(1..))]
    pub memory_limit: Option<u64>,

    /// Send `X-Webchecker-Replica: <identity>` with each probe.
    #[arg(long, env = "WEBCHECKER_REPLICA_HEADER", default_value_t = true, action = clap::ArgAction::Set)]
    pub replica_header: bool,

    /// Export the per-checker latency histogram.
    #[arg(long, env = "WEBCHECKER_PER_CHECKER_HISTOGRAM", default_value_t = true, action = clap::ArgAction::Set)]
    pub per_checker_histogram: bool,

    /// Give the per-checker latency histogram native (sparse, exponential)
    /// buckets, exposed in the protobuf format to scrapers that ask for it
    /// (Prometheus 3 with scrape_native_histograms: true); docs/metrics.md.
    #[arg(long, env = "WEBCHECKER_NATIVE_HISTOGRAMS", default_value_t = false, action = clap::ArgAction::Set)]
    pub native_histograms: bool,

    /// With --native-histograms: keep the classic buckets beside the native
    /// ones (false drops them; without native buckets they are always kept).
    #[arg(long, env = "WEBCHECKER_CLASSIC_HISTOGRAMS", default_value_t = true, action = clap::ArgAction::Set)]
    pub classic_histograms: bool,

    /// Probes never connect to these networks (comma separated CIDRs), on top
    /// of the built-in denials (docs/security.md).
    #[arg(long, env = "WEBCHECKER_DENY_CIDRS", default_value = "", value_parser = parse_cidrs)]
    pub deny_cidrs: Cidrs,

    /// If set, probes only connect to these networks (comma separated CIDRs).
    #[arg(long, env = "WEBCHECKER_ALLOW_CIDRS", default_value = "", value_parser = parse_cidrs)]
    pub allow_cidrs: Cidrs,

    /// Let probes reach loopback (local demos and tests only); the API server
    /// and the kubelets stay denied.
    #[arg(long, env = "WEBCHECKER_ALLOW_LOOPBACK", default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub allow_loopback: bool,

    /// Label selector of the namespaces whose checkers may not reach
    /// --private-cidrs; empty: no namespace is restricted.
    #[arg(long, env = "WEBCHECKER_RESTRICTED_NAMESPACES", default_value = RESTRICTED_NAMESPACES)]
    pub restricted_namespaces: String,

    /// Networks closed to the checkers of restricted namespaces.
    #[arg(long, env = "WEBCHECKER_PRIVATE_CIDRS", default_value = crate::probe::PRIVATE_NETWORKS, value_parser = parse_cidrs)]
    pub private_cidrs: Cidrs,

    /// Resolve a proxied target's name and refuse it when any of its
    /// addresses is denied, before the proxy is asked.
    #[arg(long, env = "WEBCHECKER_CHECK_PROXIED_TARGETS", default_value_t = true, action = clap::ArgAction::Set)]
    pub check_proxied_targets: bool,

    /// Name servers, search list and options (ndots, timeout, attempts, rotate)
    /// of the probes' resolver. A `nameserver` may carry a port (`127.0.0.1:5353`).
    #[arg(long, env = "WEBCHECKER_RESOLV_CONF", default_value = crate::probe::DEFAULT_RESOLV_CONF)]
    pub resolv_conf: std::path::PathBuf,

    /// Names the probes' resolver answers before asking DNS.
    #[arg(long, env = "WEBCHECKER_HOSTS_FILE", default_value = crate::probe::DEFAULT_HOSTS_FILE)]
    pub hosts_file: std::path::PathBuf,

    /// PEM file of certificate authorities trusted in addition to the
    /// built-in roots by every checker without a `tls.caBundle` of its own
    /// (a cluster's private CA). Read at start: a file that cannot be read
    /// or holds no usable certificate stops the process.
    #[arg(long, env = "WEBCHECKER_CA_BUNDLE")]
    pub ca_bundle: Option<std::path::PathBuf>,

    /// Checker labels copied to `webchecker_checker_info` as `label_<name>`
    /// (comma separated label keys, e.g. `team,env`), to route alerts and
    /// group dashboards by them. Only that series carries them.
    #[arg(long, env = "WEBCHECKER_METRIC_LABELS_ALLOWLIST", default_value = "", value_parser = crate::observe::metrics::parse_label_allowlist)]
    pub metric_labels_allowlist: crate::observe::metrics::LabelAllowlist,

    /// Generate WebCheckers for the Ingresses that opt in (annotation
    /// `webchecker.test.network.io/check: "true"` on the Ingress or its
    /// Namespace), within --watch-namespace; done by the leader
    /// (docs/discovery.md).
    #[arg(long, env = "WEBCHECKER_DISCOVER_ROUTES", default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub discover_routes: bool,

    /// Route discovery: generated WebCheckers per namespace at most; the
    /// oldest routes (and Services) of a namespace are served first, one
    /// that does not fit gets a TooManyCheckers Warning.
    #[arg(long, env = "WEBCHECKER_DISCOVERY_MAX_CHECKERS_PER_NAMESPACE", default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub discovery_max_checkers_per_namespace: u32,

    /// The cluster's DNS domain: a Service's generated checker probes the
    /// absolute name <service>.<namespace>.svc.<cluster domain>.
    #[arg(long, env = "WEBCHECKER_CLUSTER_DOMAIN", default_value = crate::discovery::CLUSTER_DOMAIN, value_parser = parse_cluster_domain)]
    pub cluster_domain: String,

    /// Response body bytes read at most.
    #[arg(long, env = "WEBCHECKER_MAX_BODY_BYTES", default_value_t = 65536)]
    pub max_body_bytes: usize,

    /// Log format: plain or json.
    #[arg(long, env = "WEBCHECKER_LOG_FORMAT", default_value = "plain", value_parser = ["plain", "json"])]
    pub log_format: String,

    /// Log filter (tracing syntax); RUST_LOG overrides it.
    #[arg(long, env = "WEBCHECKER_LOG_LEVEL", default_value = "info")]
    pub log_level: String,
}

impl Config {
    pub fn identity(&self) -> String {
        self.identity.clone().unwrap_or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "webchecker-operator".into())
        })
    }

    /// The `host:port` advertised to peers, if any (see `--advertise-address`).
    pub fn advertised(&self, bound: std::net::SocketAddr) -> Option<String> {
        if !self.fast_failover {
            return None;
        }
        if let Some(a) = &self.advertise_address {
            return Some(a.clone());
        }
        if bound.ip().is_unspecified() {
            self.pod_ip
                .map(|ip| std::net::SocketAddr::new(ip, bound.port()).to_string())
        } else {
            Some(bound.to_string())
        }
    }

    /// The `host:port` where peers send their asks, advertised in the
    /// membership Lease: the confirm listener's address, or POD_IP and its
    /// port when it listens on every address; `None` when neither is known.
    pub fn advertised_confirm(&self, bound: std::net::SocketAddr) -> Option<String> {
        if bound.ip().is_unspecified() {
            self.pod_ip
                .map(|ip| std::net::SocketAddr::new(ip, bound.port()).to_string())
        } else {
            Some(bound.to_string())
        }
    }

    /// Lease timings must leave room for renewals: duration > deadline > 1.2 x retry.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |m: String| Err(Error::Config(m));
        if self.retry_period.is_zero() {
            return bad("--retry-period must be above zero".into());
        }
        if self.renew_deadline.as_secs_f64() <= 1.2 * self.retry_period.as_secs_f64() {
            return bad(format!(
                "--renew-deadline ({:?}) must be more than 1.2 x --retry-period ({:?})",
                self.renew_deadline, self.retry_period
            ));
        }
        if self.lease_duration <= self.renew_deadline {
            return bad(format!(
                "--lease-duration ({:?}) must be more than --renew-deadline ({:?})",
                self.lease_duration, self.renew_deadline
            ));
        }
        if self.lease_duration.as_secs() < 1 {
            return bad("--lease-duration must be at least 1s (Leases count whole seconds)".into());
        }
        let id = self.identity();
        if id.is_empty()
            || id.len() > 63
            || !id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_')
        {
            return bad(format!(
                "--identity {id:?} must be 1-63 characters of letters, digits, '-', '.', '_' (it becomes a label value)"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_domains() {
        assert_eq!(
            parse_cluster_domain("cluster.local"),
            Ok("cluster.local".into())
        );
        assert_eq!(
            parse_cluster_domain("Corp.Example."),
            Ok("corp.example".into())
        );
        for bad in ["", ".", "a..b", "-a.b", "a_b.c", "a b"] {
            assert!(parse_cluster_domain(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert!(parse_duration("10 seconds").is_err());
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn cidr_lists() {
        assert_eq!(parse_cidrs("").unwrap(), Cidrs(vec![]));
        assert_eq!(parse_cidrs("10.0.0.0/8, ::1").unwrap().0.len(), 2);
        assert!(parse_cidrs("10.0.0.0/33").is_err());
        let c = Config::parse_from(["x", "--identity", "r0"]);
        assert!(
            c.deny_cidrs.0.is_empty(),
            "the built-in denials need no flag"
        );
        assert!(c.allow_cidrs.0.is_empty());
        assert_eq!(c.private_cidrs.0.len(), 5);
        assert!(!c.allow_loopback && c.check_proxied_targets);
        assert_eq!(c.restricted_namespaces, RESTRICTED_NAMESPACES);
        for (args, want) in [
            (&["--allow-loopback"][..], true),
            (&["--allow-loopback=true"], true),
            (&["--allow-loopback=false"], false),
        ] {
            let c = Config::parse_from(["x"].iter().chain(args));
            assert_eq!(c.allow_loopback, want, "{args:?}");
        }
    }

    #[test]
    fn defaults_are_valid_and_lease_timings_are_checked() {
        let c = Config::parse_from(["x", "--identity", "r0"]);
        c.validate().unwrap();
        assert_eq!(c.lease_duration, Duration::from_secs(10));
        assert_eq!(c.renew_deadline, Duration::from_secs(7));
        assert_eq!(c.retry_period, Duration::from_secs(2));
        let c = Config::parse_from(["x", "--identity", "r0", "--renew-deadline", "2s"]);
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("1.2 x --retry-period")
        );
        let c = Config::parse_from(["x", "--identity", "r0", "--lease-duration", "7s"]);
        assert!(c.validate().is_err());
        let c = Config::parse_from(["x", "--identity", "bad identity"]);
        assert!(c.validate().is_err());
    }

    #[test]
    fn the_advertised_address_follows_the_listen_address_or_the_pod_ip() {
        let bound: std::net::SocketAddr = "127.0.0.1:9000".parse().unwrap();
        let any: std::net::SocketAddr = "0.0.0.0:8080".parse().unwrap();
        let c = Config::parse_from(["x", "--identity", "r0"]);
        assert_eq!(c.advertised(bound).as_deref(), Some("127.0.0.1:9000"));
        let c = Config::parse_from(["x", "--pod-ip", "10.1.2.3"]);
        assert_eq!(c.advertised(any).as_deref(), Some("10.1.2.3:8080"));
        let c = Config::parse_from(["x", "--advertise-address", "peer.example:81"]);
        assert_eq!(c.advertised(any).as_deref(), Some("peer.example:81"));
        let c = Config::parse_from(["x", "--fast-failover=false", "--pod-ip", "10.1.2.3"]);
        assert_eq!(c.advertised(any), None);
        // Asks are served whatever fast failover says.
        let confirm: std::net::SocketAddr = "0.0.0.0:8081".parse().unwrap();
        assert_eq!(c.confirm_listen, confirm);
        assert_eq!(
            c.advertised_confirm(confirm).as_deref(),
            Some("10.1.2.3:8081")
        );
    }
}
