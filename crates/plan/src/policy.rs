//! The forgery guard: which addresses a probe may connect to
//! ([`AddressPolicy`]). Pure: the addresses learnt from the cluster (the API
//! server, kubelets, restricted namespaces) come in as [`ClusterAddresses`],
//! kept fresh by `crate::kubeio::egress`. docs/security.md explains the choices.

use std::collections::HashSet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::LazyLock;

use ipnet::IpNet;
use tokio::sync::watch;

/// Kubelet ports denied on every address: the authenticated API and the
/// read-only one (also each Node's own `daemonEndpoints.kubeletEndpoint`).
/// Not only on the addresses Nodes list: a kubelet listens on every interface
/// of its host (bridges such as cni0 or docker0, secondary addresses), which
/// the API cannot enumerate.
pub const KUBELET_PORTS: [u16; 2] = [10250, 10255];

/// Networks closed to the checkers of a restricted namespace by default:
/// RFC 1918, shared address space (RFC 6598, carrier-grade NAT and some
/// clusters' pod networks) and IPv6 unique local addresses.
pub const PRIVATE_NETWORKS: &str = "10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,100.64.0.0/10,fc00::/7";

/// Cloud metadata and platform endpoints that are not link-local (those are
/// denied as link-local anyway: 169.254.169.254 of AWS, GCP, Azure,
/// OpenStack and most others, 169.254.170.2 of AWS ECS).
const METADATA: &[(&str, &str)] = &[
    ("fd00:ec2::254", "AWS instance metadata over IPv6"),
    ("fd20:ce::254", "Google Cloud metadata server over IPv6"),
    ("100.100.100.200", "Alibaba Cloud metadata"),
    ("168.63.129.16", "Azure WireServer"),
    ("192.0.0.192", "Oracle Cloud Classic metadata"),
];

/// What the cluster tells about addresses probes must not reach, kept fresh
/// by watches (`crate::kubeio::egress`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterAddresses {
    /// The API server: as the operator reaches it (its client configuration)
    /// and as the `default/kubernetes` EndpointSlices publish it.
    pub api_endpoints: HashSet<SocketAddr>,
    /// ClusterIPs of the `default/kubernetes` Service: denied on every port.
    pub api_service_ips: HashSet<IpAddr>,
    /// The kubelet ports Nodes report (`daemonEndpoints.kubeletEndpoint`),
    /// denied on every address like [`KUBELET_PORTS`].
    pub kubelet_ports: HashSet<u16>,
    /// Namespaces whose checkers may not reach [`AddressPolicy::private`].
    pub restricted_namespaces: HashSet<String>,
}

/// Why an address is denied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    ApiServer,
    Kubelet,
    Metadata(&'static str),
    Unspecified,
    Loopback,
    LinkLocal,
    DenyList,
    Private,
    NotAllowed,
}

/// A denied address: why, and the IPv4 address an IPv6 one carried when
/// that is what was judged (NAT64, 6to4, IPv4-compatible).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Denial {
    pub why: Why,
    pub embedded: Option<Ipv4Addr>,
}

impl Why {
    /// Denied on some ports of the address only (name the port).
    pub fn port_specific(self) -> bool {
        matches!(self, Why::ApiServer | Why::Kubelet)
    }
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Why::ApiServer => f.write_str("the Kubernetes API server"),
            Why::Kubelet => f.write_str("a kubelet port"),
            Why::Metadata(what) => write!(f, "cloud metadata: {what}"),
            Why::Unspecified => f.write_str("an unspecified address, which reaches this host"),
            Why::Loopback => f.write_str("loopback"),
            Why::LinkLocal => f.write_str("link-local, where cloud metadata lives"),
            Why::DenyList => f.write_str("in --deny-cidrs"),
            Why::Private => f.write_str("a private network, closed to this namespace"),
            Why::NotAllowed => f.write_str("outside --allow-cidrs"),
        }
    }
}

impl fmt::Display for Denial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.embedded {
            Some(v4) => write!(f, "it carries {v4}: {}", self.why),
            None => write!(f, "{}", self.why),
        }
    }
}

/// Whose connection is judged: a checker of a namespace, or the operator's
/// own proxy from its environment (chosen by the admin, so not subject to a
/// namespace's private-network restriction).
#[derive(Clone, Copy, Debug)]
pub enum Scope<'a> {
    Namespace(&'a str),
    Admin,
}

/// Where probes may connect. `Default` is the secure default: loopback,
/// unspecified, link-local and metadata addresses denied, nothing else
/// listed, no namespace restricted.
#[derive(Clone, Debug)]
pub struct AddressPolicy {
    /// `--deny-cidrs`: denied on top of the built-in classes.
    pub deny: Vec<IpNet>,
    /// `--allow-cidrs`: when not empty, only these networks.
    pub allow: Vec<IpNet>,
    /// `--allow-loopback`: lifts the loopback class (local demos and tests);
    /// the API server and kubelet ports stay denied.
    pub allow_loopback: bool,
    /// `--private-cidrs`: closed to the checkers of restricted namespaces.
    pub private: Vec<IpNet>,
    /// `--check-proxied-targets`: resolve a target's name before asking a
    /// proxy for it, and refuse it when any of its addresses is denied.
    pub check_proxied_targets: bool,
    pub cluster: watch::Receiver<ClusterAddresses>,
}

impl Default for AddressPolicy {
    fn default() -> Self {
        AddressPolicy {
            deny: Vec::new(),
            allow: Vec::new(),
            allow_loopback: false,
            private: parse_nets(PRIVATE_NETWORKS),
            check_proxied_targets: true,
            cluster: watch::channel(ClusterAddresses::default()).1,
        }
    }
}

pub fn parse_nets(list: &str) -> Vec<IpNet> {
    list.split(',')
        .map(|n| n.parse().expect("a built-in network"))
        .collect()
}

fn net(s: &str) -> IpNet {
    s.parse().expect("a built-in network")
}

/// The built-in classes, parsed once.
struct Builtin {
    metadata: Vec<(IpAddr, &'static str)>,
    unspecified: [IpNet; 2],
    loopback: [IpNet; 2],
    link_local: [IpNet; 2],
}

static BUILTIN: LazyLock<Builtin> = LazyLock::new(|| Builtin {
    metadata: METADATA
        .iter()
        .map(|(a, what)| (a.parse().expect("a built-in address"), *what))
        .collect(),
    unspecified: [net("0.0.0.0/8"), net("::/128")],
    loopback: [net("127.0.0.0/8"), net("::1/128")],
    link_local: [net("169.254.0.0/16"), net("fe80::/10")],
});

impl AddressPolicy {
    /// A policy that reaches loopback (tests, demos).
    pub fn with_loopback() -> Self {
        AddressPolicy {
            allow_loopback: true,
            ..Default::default()
        }
    }

    /// Ok when a probe of `scope` may connect to `addr`.
    pub fn judge(&self, addr: SocketAddr, scope: Scope<'_>) -> Result<(), Denial> {
        let cluster = self.cluster.borrow();
        self.judge_with(&cluster, addr, scope)
    }

    /// [`Self::judge`] against the given cluster addresses.
    pub fn judge_with(
        &self,
        cluster: &ClusterAddresses,
        addr: SocketAddr,
        scope: Scope<'_>,
    ) -> Result<(), Denial> {
        let ip = canonical(addr.ip());
        let restricted = match scope {
            Scope::Namespace(ns) => cluster.restricted_namespaces.contains(ns),
            Scope::Admin => false,
        };
        let port = addr.port();
        let mut judged = Vec::with_capacity(2);
        judged.push((ip, None));
        if let IpAddr::V6(v6) = ip {
            judged.extend(
                embedded_v4(v6)
                    .into_iter()
                    .map(|v4| (IpAddr::V4(v4), Some(v4))),
            );
        }
        for (ip, embedded) in judged {
            if let Some(why) = self.class(cluster, ip, port, restricted) {
                return Err(Denial { why, embedded });
            }
        }
        if !self.allow.is_empty() && !self.allow.iter().any(|n| n.contains(&ip)) {
            return Err(Denial {
                why: Why::NotAllowed,
                embedded: None,
            });
        }
        Ok(())
    }

    fn class(
        &self,
        cluster: &ClusterAddresses,
        ip: IpAddr,
        port: u16,
        restricted: bool,
    ) -> Option<Why> {
        if cluster.api_service_ips.contains(&ip)
            || cluster.api_endpoints.contains(&SocketAddr::new(ip, port))
        {
            return Some(Why::ApiServer);
        }
        // Whatever the address: see KUBELET_PORTS.
        if KUBELET_PORTS.contains(&port) || cluster.kubelet_ports.contains(&port) {
            return Some(Why::Kubelet);
        }
        let b = &*BUILTIN;
        if let Some((_, what)) = b.metadata.iter().find(|(a, _)| *a == ip) {
            return Some(Why::Metadata(what));
        }
        let any = |nets: &[IpNet]| nets.iter().any(|n| n.contains(&ip));
        if any(&b.unspecified) {
            return Some(Why::Unspecified);
        }
        if !self.allow_loopback && any(&b.loopback) {
            return Some(Why::Loopback);
        }
        if any(&b.link_local) {
            return Some(Why::LinkLocal);
        }
        if self.deny.iter().any(|n| n.contains(&ip)) {
            return Some(Why::DenyList);
        }
        if restricted && self.private.iter().any(|n| n.contains(&ip)) {
            return Some(Why::Private);
        }
        None
    }
}

/// An IPv4-mapped IPv6 address (::ffff:a.b.c.d) is the IPv4 address: the
/// kernel connects to it over IPv4.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

/// The IPv4 addresses an IPv6 address may stand for on the way: IPv4-
/// translated (::ffff:0:a.b.c.d, RFC 2765), IPv4-compatible (::a.b.c.d,
/// deprecated), NAT64 with the well-known prefix 64:ff9b::/96 (RFC 6052),
/// NAT64 with the local-use prefix 64:ff9b:1::/48 (RFC 8215) at each RFC 6052
/// prefix length that fits in it (the network picks one; every reading
/// whose reserved bits are zero is judged), and 6to4 (2002::/16, RFC 3056).
pub fn embedded_v4(v6: Ipv6Addr) -> Vec<Ipv4Addr> {
    let o = v6.octets();
    let v4 = |a: u8, b: u8, c: u8, d: u8| Ipv4Addr::new(a, b, c, d);
    let last = v4(o[12], o[13], o[14], o[15]);
    let zero = |r: std::ops::Range<usize>| o[r].iter().all(|b| *b == 0);
    let mut out = Vec::new();
    if zero(0..8) && o[8..12] == [0xff, 0xff, 0, 0] {
        out.push(last); // IPv4-translated
    }
    if zero(0..12) && o[12] != 0 {
        out.push(last); // IPv4-compatible; not ::, ::1 nor other 0.0.0.0/8
    }
    if o[0..12] == [0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0] {
        out.push(last);
    }
    if o[0..6] == [0, 0x64, 0xff, 0x9b, 0, 1] && o[8] == 0 {
        // Shortest prefix first: its reading needs the most zero bits, so it
        // is the likeliest when it fits. 0.0.0.0/8 is no destination (the
        // /96 reading of a shorter form's zero suffix): skipped.
        let readings = [
            zero(11..16).then(|| v4(o[6], o[7], o[9], o[10])),
            zero(12..16).then(|| v4(o[7], o[9], o[10], o[11])),
            zero(13..16).then(|| v4(o[9], o[10], o[11], o[12])),
            Some(last),
        ];
        out.extend(
            readings
                .into_iter()
                .flatten()
                .filter(|a| a.octets()[0] != 0),
        );
    }
    if o[0..2] == [0x20, 0x02] {
        out.push(v4(o[2], o[3], o[4], o[5])); // 6to4
    }
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn why(p: &AddressPolicy, c: &ClusterAddresses, a: &str, ns: &str) -> Option<Why> {
        p.judge_with(c, sa(a), Scope::Namespace(ns))
            .err()
            .map(|d| d.why)
    }

    #[test]
    fn secure_defaults() {
        let p = AddressPolicy::default();
        let c = ClusterAddresses::default();
        let cases = [
            ("127.0.0.1:80", Some(Why::Loopback)),
            ("127.255.0.9:80", Some(Why::Loopback)),
            ("[::1]:80", Some(Why::Loopback)),
            ("[::ffff:127.0.0.1]:80", Some(Why::Loopback)),
            ("0.0.0.0:80", Some(Why::Unspecified)),
            ("0.1.2.3:80", Some(Why::Unspecified)),
            ("[::]:80", Some(Why::Unspecified)),
            ("169.254.169.254:80", Some(Why::LinkLocal)),
            ("169.254.170.2:80", Some(Why::LinkLocal)),
            ("[fe80::1]:80", Some(Why::LinkLocal)),
            (
                "[fd00:ec2::254]:80",
                Some(Why::Metadata("AWS instance metadata over IPv6")),
            ),
            (
                "[fd20:ce::254]:80",
                Some(Why::Metadata("Google Cloud metadata server over IPv6")),
            ),
            (
                "100.100.100.200:80",
                Some(Why::Metadata("Alibaba Cloud metadata")),
            ),
            ("168.63.129.16:80", Some(Why::Metadata("Azure WireServer"))),
            ("10.1.2.3:80", None),
            ("172.16.0.1:80", None),
            ("192.168.1.1:80", None),
            ("100.64.0.1:80", None),
            ("[fd00::1]:80", None),
            ("192.0.2.10:443", None),
            ("[2001:db8::1]:443", None),
        ];
        for (a, want) in cases {
            assert_eq!(why(&p, &c, a, "any"), want, "{a}");
        }
        // --allow-loopback lifts loopback only.
        let l = AddressPolicy::with_loopback();
        assert_eq!(why(&l, &c, "127.0.0.1:80", "any"), None);
        assert_eq!(why(&l, &c, "[::1]:80", "any"), None);
        assert_eq!(why(&l, &c, "0.0.0.0:80", "any"), Some(Why::Unspecified));
        assert_eq!(why(&l, &c, "[::]:80", "any"), Some(Why::Unspecified));
        assert_eq!(
            why(&l, &c, "169.254.169.254:80", "any"),
            Some(Why::LinkLocal)
        );
    }

    #[test]
    fn nat64_and_other_embeddings_are_judged_by_the_ipv4_address() {
        let p = AddressPolicy::with_loopback();
        let c = ClusterAddresses::default();
        let judge = |a: &str| p.judge_with(&c, sa(a), Scope::Namespace("ns")).err();
        let d = judge("[64:ff9b::a9fe:a9fe]:80").unwrap();
        assert_eq!(d.why, Why::LinkLocal);
        assert_eq!(d.embedded, Some(Ipv4Addr::new(169, 254, 169, 254)));
        assert_eq!(
            d.to_string(),
            "it carries 169.254.169.254: link-local, where cloud metadata lives"
        );
        assert_eq!(
            judge("[64:ff9b::0.0.0.0]:80").unwrap().why,
            Why::Unspecified
        );
        assert_eq!(judge("[64:ff9b::8.8.8.8]:80"), None);
        // Local-use prefix: /96, /64, /56 and /48 readings.
        assert_eq!(
            judge("[64:ff9b:1::a9fe:a9fe]:80").unwrap().why,
            Why::LinkLocal
        );
        // 169.254.169.254 at /64: bits 72-103.
        assert_eq!(
            judge("[64:ff9b:1:0:a9:fea9:fe00:0]:80").unwrap().embedded,
            Some(Ipv4Addr::new(169, 254, 169, 254))
        );
        // at /56: bits 56-63 and 72-95.
        assert_eq!(
            judge("[64:ff9b:1:a9:fe:a9fe::]:80").unwrap().embedded,
            Some(Ipv4Addr::new(169, 254, 169, 254))
        );
        // at /48: bits 48-63 and 72-87.
        assert_eq!(
            judge("[64:ff9b:1:a9fe:a9:fe00::]:80").unwrap().embedded,
            Some(Ipv4Addr::new(169, 254, 169, 254))
        );
        // An ordinary /96 address reads as garbage at the shorter lengths,
        // whose reserved bits are then not zero: only the /96 reading counts.
        assert_eq!(judge("[64:ff9b:1::808:808]:80"), None);
        assert_eq!(
            embedded_v4("64:ff9b:1::808:808".parse().unwrap()),
            vec![Ipv4Addr::new(8, 8, 8, 8)]
        );
        // The reserved octet (bits 64-71) set: not a NAT64 address at all.
        assert!(embedded_v4("64:ff9b:1:0:ff00::a9fe:a9fe".parse().unwrap()).is_empty());
        // IPv4-mapped, -translated, -compatible, 6to4.
        assert_eq!(
            judge("[::ffff:169.254.169.254]:80").unwrap().why,
            Why::LinkLocal
        );
        assert_eq!(
            judge("[::ffff:0:169.254.169.254]:80").unwrap().embedded,
            Some(Ipv4Addr::new(169, 254, 169, 254))
        );
        assert_eq!(judge("[::169.254.169.254]:80").unwrap().why, Why::LinkLocal);
        assert_eq!(judge("[2002:a9fe:a9fe::1]:80").unwrap().why, Why::LinkLocal);
        // ::1 is loopback (allowed here), not the IPv4-compatible 0.0.0.1.
        assert_eq!(judge("[::1]:80"), None);
        // Loopback embedded, loopback allowed: allowed as well.
        assert_eq!(judge("[64:ff9b::7f00:1]:80"), None);
        let strict = AddressPolicy::default();
        assert_eq!(
            strict
                .judge_with(&c, sa("[64:ff9b::7f00:1]:80"), Scope::Admin)
                .unwrap_err()
                .why,
            Why::Loopback
        );
    }

    #[test]
    fn cluster_addresses_are_denied_even_with_loopback_allowed() {
        let p = AddressPolicy::with_loopback();
        let mut c = ClusterAddresses::default();
        c.api_endpoints.insert(sa("127.0.0.1:6443"));
        c.api_endpoints.insert(sa("192.0.2.10:6443"));
        c.api_service_ips.insert("10.96.0.1".parse().unwrap());
        c.kubelet_ports.insert(31000);
        let w = |a: &str| why(&p, &c, a, "ns");
        assert_eq!(w("127.0.0.1:6443"), Some(Why::ApiServer));
        assert_eq!(w("[::ffff:127.0.0.1]:6443"), Some(Why::ApiServer));
        assert_eq!(w("192.0.2.10:6443"), Some(Why::ApiServer));
        assert_eq!(w("[64:ff9b::c000:20a]:6443"), Some(Why::ApiServer));
        assert_eq!(w("192.0.2.10:443"), None, "only the endpoint's port");
        assert_eq!(w("127.0.0.1:6444"), None);
        assert_eq!(w("10.96.0.1:443"), Some(Why::ApiServer));
        assert_eq!(w("10.96.0.1:80"), Some(Why::ApiServer), "every port");
        // Kubelet ports on every address, listed by a Node or not (bridges,
        // secondary addresses), loopback and embedded forms included.
        for a in [
            "127.0.0.77:10250",
            "127.0.0.77:10255",
            "127.0.0.77:31000",
            "10.244.0.1:10250",
            "172.17.0.1:10255",
            "192.0.2.200:31000",
            "[::1]:10250",
            "[fd00::1]:31000",
            "[::ffff:10.0.0.1]:10250",
            "[64:ff9b::a00:1]:10255",
        ] {
            assert_eq!(w(a), Some(Why::Kubelet), "{a}");
        }
        assert_eq!(w("127.0.0.77:8080"), None);
        assert_eq!(w("10.244.0.1:31001"), None);
        // The defaults need no Node at all, and hold without loopback too.
        let none = ClusterAddresses::default();
        for p in [&p, &AddressPolicy::default()] {
            assert_eq!(why(p, &none, "203.0.113.5:10250", "ns"), Some(Why::Kubelet));
            assert_eq!(why(p, &none, "127.0.0.1:10255", "ns"), Some(Why::Kubelet));
            assert_eq!(why(p, &none, "203.0.113.5:31000", "ns"), None);
        }
        let d = p
            .judge_with(&c, sa("10.244.0.1:10250"), Scope::Namespace("ns"))
            .unwrap_err();
        assert_eq!(d.to_string(), "a kubelet port");
    }

    #[test]
    fn private_networks_closed_to_restricted_namespaces_only() {
        let p = AddressPolicy::default();
        let mut c = ClusterAddresses::default();
        c.restricted_namespaces.insert("tenant".into());
        for a in [
            "10.0.0.1:80",
            "172.31.255.1:80",
            "192.168.0.1:80",
            "100.127.0.1:80",
            "[fd12::1]:80",
            "[::ffff:10.0.0.1]:80",
            "[64:ff9b::a00:1]:80",
        ] {
            assert_eq!(why(&p, &c, a, "tenant"), Some(Why::Private), "{a}");
            assert_eq!(why(&p, &c, a, "other"), None, "{a}");
            // The operator's own proxy is the admin's choice.
            assert_eq!(p.judge_with(&c, sa(a), Scope::Admin), Ok(()), "{a}");
        }
        assert_eq!(why(&p, &c, "192.0.2.1:80", "tenant"), None);
        assert_eq!(why(&p, &c, "172.32.0.1:80", "tenant"), None);
    }

    #[test]
    fn deny_and_allow_lists() {
        let p = AddressPolicy {
            deny: vec![net("192.0.2.0/24")],
            allow: vec![net("192.0.2.0/23"), net("10.0.0.0/8")],
            ..AddressPolicy::with_loopback()
        };
        let c = ClusterAddresses::default();
        assert_eq!(why(&p, &c, "192.0.2.7:80", "a"), Some(Why::DenyList));
        assert_eq!(why(&p, &c, "192.0.3.7:80", "a"), None);
        assert_eq!(why(&p, &c, "10.9.9.9:80", "a"), None);
        assert_eq!(why(&p, &c, "198.51.100.1:80", "a"), Some(Why::NotAllowed));
        // The allow list does not lift a built-in class.
        let p = AddressPolicy {
            allow: vec![net("169.254.0.0/16")],
            ..Default::default()
        };
        assert_eq!(why(&p, &c, "169.254.1.1:80", "a"), Some(Why::LinkLocal));
        // The deny list applies to loopback even when loopback is allowed.
        let p = AddressPolicy {
            deny: vec![net("127.0.0.2/32")],
            ..AddressPolicy::with_loopback()
        };
        assert_eq!(why(&p, &c, "127.0.0.2:80", "a"), Some(Why::DenyList));
        assert_eq!(why(&p, &c, "127.0.0.1:80", "a"), None);
    }
}
