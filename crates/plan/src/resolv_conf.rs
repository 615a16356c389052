//! The resolver's configuration files: resolv.conf (name servers, search
//! list, options) and the hosts file, parsed as glibc reads them. Pure.
//!
//! One extension: a `nameserver` may carry a port (`127.0.0.1:5353`,
//! `[::1]:5353`). glibc has no port syntax; the tests use it to point an
//! operator at a name server of their own on an unprivileged port, and a
//! cluster can use it for a node-local cache on a non-standard port.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// glibc reads at most three name servers (MAXNS).
const MAX_NAMESERVERS: usize = 3;

/// What resolv.conf says, with glibc's defaults and caps applied.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvConf {
    pub nameservers: Vec<SocketAddr>,
    /// `search` (or `domain`, which is a one-entry search list): the last of
    /// the two keywords wins, as in glibc.
    pub search: Vec<String>,
    /// Names with at least this many dots are tried as given first.
    pub ndots: usize,
    /// Per query and name server (glibc: RES_TIMEOUT 5 s, at most 30 s).
    pub timeout: Duration,
    /// Queries per name server (glibc: 2, at most 5).
    pub attempts: usize,
    /// Spread queries over the name servers instead of always asking the first.
    pub rotate: bool,
}

impl Default for ResolvConf {
    /// An empty or missing file: glibc asks the local host's name server.
    fn default() -> Self {
        ResolvConf {
            nameservers: Vec::new(),
            search: Vec::new(),
            ndots: 1,
            timeout: Duration::from_secs(5),
            attempts: 2,
            rotate: false,
        }
    }
}

impl ResolvConf {
    /// Parses the text of a resolv.conf. What it does not understand is
    /// skipped, as glibc does; a `nameserver` that is not an address is also
    /// reported (the second value), since the operator should say so in its log.
    pub fn parse(text: &str) -> (Self, Vec<String>) {
        let mut c = ResolvConf::default();
        let mut warnings = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim_start();
            // Comments start a line with '#' or ';'.
            if line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            let mut words = line.split_whitespace();
            let Some(keyword) = words.next() else {
                continue;
            };
            match keyword {
                "nameserver" => {
                    let Some(a) = words.next() else { continue };
                    match parse_nameserver(a) {
                        Some(addr) if c.nameservers.len() < MAX_NAMESERVERS => {
                            c.nameservers.push(addr)
                        }
                        Some(_) => warnings.push(format!(
                            "line {}: more than {MAX_NAMESERVERS} nameservers, {a} is not used",
                            n + 1
                        )),
                        None => warnings.push(format!(
                            "line {}: {a:?} is not a name server address, skipped",
                            n + 1
                        )),
                    }
                }
                "search" => c.search = words.map(domain).filter(|d| !d.is_empty()).collect(),
                "domain" => c.search = words.next().map(domain).into_iter().collect(),
                "options" => {
                    for o in words {
                        c.option(o);
                    }
                }
                _ => {}
            }
        }
        if c.nameservers.is_empty() {
            c.nameservers.push(SocketAddr::from(([127, 0, 0, 1], 53)));
        }
        (c, warnings)
    }

    fn option(&mut self, o: &str) {
        let (name, value) = match o.split_once(':') {
            Some((n, v)) => (n, v.parse::<u64>().ok()),
            None => (o, None),
        };
        match (name, value) {
            ("ndots", Some(v)) => self.ndots = v.min(15) as usize,
            // glibc takes timeout:0 as 1.
            ("timeout", Some(v)) => self.timeout = Duration::from_secs(v.clamp(1, 30)),
            ("attempts", Some(v)) => self.attempts = v.clamp(1, 5) as usize,
            ("rotate", _) => self.rotate = true,
            _ => {}
        }
    }
}

/// `1.2.3.4`, `::1`, `fe80::1%eth0` (the zone is dropped), or with a port:
/// `1.2.3.4:5353`, `[::1]:5353`.
fn parse_nameserver(s: &str) -> Option<SocketAddr> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Some(a);
    }
    let ip = s.split('%').next()?;
    ip.parse::<IpAddr>().ok().map(|ip| SocketAddr::new(ip, 53))
}

fn domain(s: &str) -> String {
    s.trim_end_matches('.').to_ascii_lowercase()
}

/// The hosts file: lower-case name (no trailing dot) to its addresses, in
/// file order. A name listed on several lines gets the addresses of all.
pub fn parse_hosts(text: &str) -> HashMap<String, Vec<IpAddr>> {
    let mut hosts: HashMap<String, Vec<IpAddr>> = HashMap::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or_default();
        let mut words = line.split_whitespace();
        let Some(ip) = words.next().and_then(|w| w.split('%').next()?.parse().ok()) else {
            continue;
        };
        for name in words {
            let ips = hosts.entry(domain(name)).or_default();
            if !ips.contains(&ip) {
                ips.push(ip);
            }
        }
    }
    hosts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kubernetes_pod_resolv_conf() {
        let c = ResolvConf::parse(
            "search shop.svc.cluster.local svc.cluster.local cluster.local\n\
             nameserver 10.96.0.10\n\
             options ndots:5\n",
        )
        .0;
        assert_eq!(c.nameservers, vec!["10.96.0.10:53".parse().unwrap()]);
        assert_eq!(
            c.search,
            [
                "shop.svc.cluster.local",
                "svc.cluster.local",
                "cluster.local"
            ]
        );
        assert_eq!(c.ndots, 5);
        assert_eq!(c.timeout, Duration::from_secs(5));
        assert_eq!(c.attempts, 2);
        assert!(!c.rotate);
    }

    #[test]
    fn options_are_capped_as_glibc_caps_them() {
        let c = ResolvConf::parse(
            "options timeout:0 attempts:9 ndots:40 rotate edns0 single-request\noptions timeout:3",
        )
        .0;
        assert_eq!(c.timeout, Duration::from_secs(3));
        assert_eq!(c.attempts, 5);
        assert_eq!(c.ndots, 15);
        assert!(c.rotate);
        let c = ResolvConf::parse("options timeout:0 attempts:0 ndots:x").0;
        assert_eq!(c.timeout, Duration::from_secs(1));
        assert_eq!(c.attempts, 1);
        assert_eq!(c.ndots, 1);
    }

    #[test]
    fn nameservers_ports_comments_and_the_default() {
        let (c, w) = ResolvConf::parse(
            "# generated\n; also a comment\nnameserver 127.0.0.1:5353\n\
             nameserver [::1]:5300\n  nameserver fe80::1%eth0\nnameserver 10.0.0.4\n",
        );
        assert_eq!(w, ["line 6: more than 3 nameservers, 10.0.0.4 is not used"]);
        assert_eq!(
            c.nameservers,
            vec![
                "127.0.0.1:5353".parse().unwrap(),
                "[::1]:5300".parse().unwrap(),
                "[fe80::1]:53".parse().unwrap(),
            ],
            "at most three, in order"
        );
        let (c, w) = ResolvConf::parse("");
        assert_eq!(c.nameservers, vec!["127.0.0.1:53".parse().unwrap()]);
        assert!(c.search.is_empty() && w.is_empty());
        let (c, w) = ResolvConf::parse("nameserver 10.0.0.300\nnameserver 10.0.0.3\n");
        assert_eq!(c.nameservers, vec!["10.0.0.3:53".parse().unwrap()]);
        assert_eq!(
            w,
            ["line 1: \"10.0.0.300\" is not a name server address, skipped"]
        );
    }

    #[test]
    fn the_last_of_search_and_domain_wins() {
        let c = ResolvConf::parse("search a.example b.example\ndomain Corp.Example.\n").0;
        assert_eq!(c.search, ["corp.example"]);
        let c = ResolvConf::parse("domain corp.example\nsearch a.example. b.example\n").0;
        assert_eq!(c.search, ["a.example", "b.example"]);
    }

    #[test]
    fn hosts_file() {
        let h = parse_hosts(
            "127.0.0.1 localhost\n::1 localhost ip6-localhost # loopback\n\
             # 10.0.0.1 commented.example\n10.1.2.3 Db.Internal. db\nnot-an-ip x\n\n\
             10.1.2.4 db\n",
        );
        assert_eq!(
            h["localhost"],
            vec![
                "127.0.0.1".parse::<IpAddr>().unwrap(),
                "::1".parse().unwrap()
            ]
        );
        assert_eq!(h["ip6-localhost"], vec!["::1".parse::<IpAddr>().unwrap()]);
        assert_eq!(
            h["db"],
            vec![
                "10.1.2.3".parse::<IpAddr>().unwrap(),
                "10.1.2.4".parse().unwrap()
            ]
        );
        assert_eq!(
            h["db.internal"],
            vec!["10.1.2.3".parse::<IpAddr>().unwrap()]
        );
        assert!(!h.contains_key("commented.example"));
        assert!(!h.contains_key("x"));
    }
}
