//! Name resolution of probes: the hosts file, then DNS through an async stub
//! resolver (hickory) configured from resolv.conf.
//!
//! Why not getaddrinfo (tokio's `lookup_host`): it runs on tokio's blocking
//! pool and cannot be cancelled. A probe that hit its deadline let go of its
//! worker while the lookup kept a blocking thread for the resolver's whole
//! timeout (5 s x attempts x search domains), so a few dozen checkers on a
//! black-holed zone filled the pool and every name-based probe of every
//! tenant failed. Here a lookup is a future of the probe: dropping the probe
//! (its deadline) closes the query sockets at once, and nothing runs outside
//! the runtime's worker threads.
//!
//! Deadlines: each query has the resolv.conf `timeout` (retransmitted inside
//! it over UDP) and `attempts`; all of it runs inside the probe's deadline,
//! which ends the lookup with `DNSError` "timed out ... during name
//! resolution". With `ipFamily: Auto` the A and AAAA queries run in
//! parallel, and once one family has answered the other gets at most
//! [`RESOLUTION_DELAY`] more (RFC 8305 section 3), so a zone that answers A
//! but drops AAAA queries costs 50 ms, not the probe.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{
    ConnectionConfig, NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts,
    ServerOrderingStrategy,
};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::net::{DnsError, NetError, NoRecords};
use hickory_resolver::proto::op::ResponseCode;
use hickory_resolver::proto::rr::{Name, RecordType};

use super::plan::AddressFamily;
use super::resolv_conf::{ResolvConf, parse_hosts};

/// Once one address family has answered, how long the other may still take
/// (RFC 8305 section 3, "Resolution Delay").
pub const RESOLUTION_DELAY: Duration = Duration::from_millis(50);

pub const DEFAULT_RESOLV_CONF: &str = "/etc/resolv.conf";
pub const DEFAULT_HOSTS_FILE: &str = "/etc/hosts";

/// Why a name did not resolve. [`LookupError::message`] is the probe's message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LookupError {
    /// NXDOMAIN: the name does not exist.
    NoSuchHost,
    /// The name exists but has no address (of the family asked for).
    NoAddress(AddressFamily),
    /// The name servers failed (SERVFAIL, REFUSED, no answer, socket error).
    Failed(String),
}

impl LookupError {
    pub fn message(&self, host: &str) -> String {
        match self {
            LookupError::NoSuchHost => format!("cannot resolve {host}: no such host"),
            LookupError::NoAddress(AddressFamily::Auto) => format!("{host} has no address"),
            LookupError::NoAddress(f) => {
                let fam = if *f == AddressFamily::V4 {
                    "IPv4"
                } else {
                    "IPv6"
                };
                format!("{host} has no {fam} address (spec.ipFamily {fam})")
            }
            LookupError::Failed(why) => format!("cannot resolve {host}: {why}"),
        }
    }
}

/// The probes' resolver: shared by all probes of a replica.
pub struct Resolver {
    /// The hosts file, read once at start (as a pod's /etc/hosts is written once).
    hosts: HashMap<String, Vec<IpAddr>>,
    conf: ResolvConf,
    dns: TokioResolver,
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl Resolver {
    pub fn new(conf: ResolvConf, hosts: HashMap<String, Vec<IpAddr>>) -> Self {
        let name_servers = conf
            .nameservers
            .iter()
            .map(|a| {
                let (mut udp, mut tcp) = (ConnectionConfig::udp(), ConnectionConfig::tcp());
                udp.port = a.port();
                tcp.port = a.port();
                NameServerConfig::new(a.ip(), true, vec![udp, tcp])
            })
            .collect();
        let search = conf
            .search
            .iter()
            .filter_map(|d| Name::from_ascii(d).ok())
            .collect();
        let mut opts = ResolverOpts::default();
        opts.ndots = conf.ndots;
        opts.timeout = conf.timeout;
        opts.attempts = conf.attempts;
        // Ours, read from the configured path, is consulted first (see lookup).
        opts.use_hosts_file = ResolveHosts::Never;
        if conf.rotate {
            opts.server_ordering_strategy = ServerOrderingStrategy::RoundRobin;
        }
        let dns = TokioResolver::builder_with_config(
            ResolverConfig::from_parts(None, search, name_servers),
            TokioRuntimeProvider::default(),
        )
        .with_options(opts)
        .build()
        .expect("a UDP/TCP resolver without TLS always builds");
        Resolver { hosts, conf, dns }
    }

    /// Reads both files. A file that does not exist counts as empty (glibc
    /// does the same: no resolv.conf means the name server on 127.0.0.1);
    /// any other read error is returned. The strings are warnings for the log.
    pub fn from_files(resolv_conf: &Path, hosts: &Path) -> std::io::Result<(Self, Vec<String>)> {
        let mut warnings = Vec::new();
        let mut read = |p: &Path| match std::fs::read_to_string(p) {
            Ok(t) => Ok(t),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                warnings.push(format!(
                    "{} does not exist; using the defaults",
                    p.display()
                ));
                Ok(String::new())
            }
            Err(e) => Err(std::io::Error::new(
                e.kind(),
                format!("cannot read {}: {e}", p.display()),
            )),
        };
        let (conf_text, hosts_text) = (read(resolv_conf)?, read(hosts)?);
        let (conf, w) = ResolvConf::parse(&conf_text);
        warnings.extend(
            w.into_iter()
                .map(|w| format!("{}: {w}", resolv_conf.display())),
        );
        Ok((Resolver::new(conf, parse_hosts(&hosts_text)), warnings))
    }

    /// /etc/resolv.conf and /etc/hosts, or the defaults where they cannot be read.
    pub fn system() -> Self {
        Resolver::from_files(
            Path::new(DEFAULT_RESOLV_CONF),
            Path::new(DEFAULT_HOSTS_FILE),
        )
        .map(|(r, _)| r)
        .unwrap_or_else(|_| Resolver::new(ResolvConf::parse("").0, HashMap::new()))
    }

    /// One line for the start-up log.
    pub fn describe(&self) -> String {
        let c = &self.conf;
        let servers: Vec<String> = c.nameservers.iter().map(|a| a.to_string()).collect();
        format!(
            "nameservers [{}], search [{}], ndots {}, timeout {:?}, attempts {}{}, {} names in the hosts file",
            servers.join(", "),
            c.search.join(", "),
            c.ndots,
            c.timeout,
            c.attempts,
            if c.rotate { ", rotate" } else { "" },
            self.hosts.len()
        )
    }

    /// The addresses of `host` (a name, not an address literal): from the
    /// hosts file when it lists the name (every address it lists, the caller
    /// filters by family), else from DNS (only the family asked for).
    pub async fn lookup(
        &self,
        host: &str,
        family: AddressFamily,
    ) -> Result<Vec<IpAddr>, LookupError> {
        let key = host.trim_end_matches('.').to_ascii_lowercase();
        if let Some(ips) = self.hosts.get(&key) {
            return Ok(ips.clone());
        }
        let name = Name::from_ascii(host)
            .map_err(|_| LookupError::Failed("not a valid DNS name".into()))?;
        match family {
            AddressFamily::V4 => self.query(name, RecordType::A).await,
            AddressFamily::V6 => self.query(name, RecordType::AAAA).await,
            AddressFamily::Auto => self.both(name).await,
        }
    }

    /// A and AAAA in parallel; the IPv6 addresses first when there are any.
    async fn both(&self, name: Name) -> Result<Vec<IpAddr>, LookupError> {
        let a = self.query(name.clone(), RecordType::A);
        let aaaa = self.query(name, RecordType::AAAA);
        tokio::pin!(a, aaaa);
        let (mut v4, mut v6) = (None, None);
        tokio::select! {
            r = &mut a => v4 = Some(r),
            r = &mut aaaa => v6 = Some(r),
        }
        let answered = matches!(v4.as_ref().or(v6.as_ref()), Some(Ok(ips)) if !ips.is_empty());
        if v4.is_none() {
            v4 = rest(a, answered).await;
        } else {
            v6 = rest(aaaa, answered).await;
        }
        let ok = |r: &Option<Result<Vec<IpAddr>, LookupError>>| match r {
            Some(Ok(ips)) => ips.clone(),
            _ => Vec::new(),
        };
        let mut ips = ok(&v6);
        ips.extend(ok(&v4));
        if !ips.is_empty() {
            return Ok(ips);
        }
        let errs = [v4, v6].into_iter().flatten().filter_map(Result::err);
        // NXDOMAIN is about the name, whatever the type asked; a failure says
        // more than "no address".
        Err(errs
            .fold(
                LookupError::NoAddress(AddressFamily::Auto),
                |acc, e| match (&acc, &e) {
                    (LookupError::NoSuchHost, _) => acc,
                    (_, LookupError::NoSuchHost) => e,
                    (LookupError::Failed(_), _) => acc,
                    _ => e,
                },
            )
            .into_auto())
    }

    /// One record type, through the search list.
    async fn query(&self, name: Name, rt: RecordType) -> Result<Vec<IpAddr>, LookupError> {
        let family = if rt == RecordType::A {
            AddressFamily::V4
        } else {
            AddressFamily::V6
        };
        match self.dns.lookup(name, rt).await {
            Ok(l) => {
                let ips: Vec<IpAddr> = l
                    .answers()
                    .iter()
                    .filter_map(|r| r.data.ip_addr())
                    .collect();
                if ips.is_empty() {
                    Err(LookupError::NoAddress(family))
                } else {
                    Ok(ips)
                }
            }
            Err(e) => Err(classify(&e, family)),
        }
    }
}

/// The family still out after the other one answered: all the time it needs
/// when the first gave nothing, else [`RESOLUTION_DELAY`] (None when it ran out).
async fn rest<F: std::future::Future>(f: F, answered: bool) -> Option<F::Output> {
    if answered {
        tokio::time::timeout(RESOLUTION_DELAY, f).await.ok()
    } else {
        Some(f.await)
    }
}

impl LookupError {
    /// "No IPv4 address" of one query is "no address" of the pair.
    fn into_auto(self) -> Self {
        match self {
            LookupError::NoAddress(_) => LookupError::NoAddress(AddressFamily::Auto),
            e => e,
        }
    }
}

fn classify(e: &NetError, family: AddressFamily) -> LookupError {
    match e {
        NetError::Dns(DnsError::NoRecordsFound(NoRecords { response_code, .. })) => {
            match *response_code {
                ResponseCode::NXDomain => LookupError::NoSuchHost,
                ResponseCode::NoError => LookupError::NoAddress(family),
                rc => LookupError::Failed(format!("the name server answered {rc}")),
            }
        }
        NetError::Dns(DnsError::ResponseCode(rc)) => {
            LookupError::Failed(format!("the name server answered {rc}"))
        }
        NetError::Timeout => LookupError::Failed("no answer from the name servers".into()),
        other => LookupError::Failed(other.to_string().chars().take(160).collect()),
    }
}
