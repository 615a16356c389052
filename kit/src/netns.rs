//! A network namespace of its own for one replica, joined to the host by a
//! veth pair: the replica reaches the API server (through a proxy on the
//! host's end), its peers and the targets over the pair, and an nftables
//! drop inside the namespace cuts its path to the targets alone, as a
//! broken NIC, a misapplied egress rule or a zone's lost uplink would.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// The addresses of the pairs: /30 networks of 10.231.0.0/16 (the real
/// node's pods use 10.213.0.0/24).
const BASE: [u8; 2] = [10, 231];
/// The nftables table of the cut.
const CUT_TABLE: &str = "webchecker_cut";

pub struct Netns {
    pub name: String,
    /// The host's end of the pair: where the namespace reaches the host.
    pub host_ip: String,
    /// The namespace's end: where the host reaches the replica.
    pub ns_ip: String,
    host_if: String,
}

fn run(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", args.join(" ")));
    assert!(
        out.status.success(),
        "{} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn address_in_use(ip: &str) -> bool {
    let out = Command::new("ip")
        .args(["-o", "addr", "show", "to", ip])
        .output()
        .expect("ip");
    !out.stdout.is_empty()
}

impl Netns {
    /// A new namespace with a veth pair to the host, loopback up and a
    /// default route through the host's end.
    pub fn create() -> Netns {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let pid = std::process::id();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let (host_ip, ns_ip) = (0..16384u32)
            .map(|i| (pid.wrapping_mul(8).wrapping_add(n).wrapping_add(i)) % 16384)
            .map(|block| {
                let (hi, lo) = ((block >> 6) as u8, ((block & 63) * 4) as u8);
                (
                    format!("{}.{}.{hi}.{}", BASE[0], BASE[1], lo + 1),
                    format!("{}.{}.{hi}.{}", BASE[0], BASE[1], lo + 2),
                )
            })
            .find(|(h, ns)| !address_in_use(h) && !address_in_use(ns))
            .expect("a free /30 in 10.231.0.0/16");
        let name = format!("wc{pid}n{n}");
        let host_if = format!("wch{pid}{n}");
        let ns_if = format!("wcn{pid}{n}");
        assert!(host_if.len() <= 15, "interface name {host_if} too long");
        run(&["ip", "netns", "add", &name]);
        let ns = Netns {
            name: name.clone(),
            host_ip: host_ip.clone(),
            ns_ip: ns_ip.clone(),
            host_if: host_if.clone(),
        };
        run(&[
            "ip", "link", "add", &host_if, "type", "veth", "peer", "name", &ns_if, "netns", &name,
        ]);
        run(&[
            "ip",
            "addr",
            "add",
            &format!("{host_ip}/30"),
            "dev",
            &host_if,
        ]);
        run(&["ip", "link", "set", &host_if, "up"]);
        run(&["ip", "-n", &name, "link", "set", "lo", "up"]);
        run(&[
            "ip",
            "-n",
            &name,
            "addr",
            "add",
            &format!("{ns_ip}/30"),
            "dev",
            &ns_if,
        ]);
        run(&["ip", "-n", &name, "link", "set", &ns_if, "up"]);
        run(&[
            "ip", "-n", &name, "route", "add", "default", "via", &host_ip,
        ]);
        ns
    }

    /// The command line prefix that runs a program inside the namespace.
    pub fn exec_prefix(&self) -> Vec<String> {
        ["ip", "netns", "exec", &self.name]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    /// Drops, inside the namespace, every packet to the host's end on these
    /// TCP ports (the targets'): connections to them time out, as on a
    /// black-holed path; the API server and peers stay reachable.
    pub fn cut_tcp_to(&self, ports: &[u16]) {
        self.drop_tcp(ports, &[]);
    }

    /// Cuts the namespace off from the targets on `target_ports` and from
    /// its peers: every packet to the host's end on `peer_ports` (the other
    /// replicas' listeners) and every connection from the host's end to
    /// `own_ports` (this replica's listeners) are dropped, as in a zone cut
    /// off from the others; the API server (through its proxy) stays.
    pub fn isolate(&self, target_ports: &[u16], peer_ports: &[u16], own_ports: &[u16]) {
        let out: Vec<u16> = target_ports.iter().chain(peer_ports).copied().collect();
        self.drop_tcp(&out, own_ports);
    }

    /// The cut's table: packets to the host's end on `to` and connections
    /// from it to `from` (if any) dropped inside the namespace.
    fn drop_tcp(&self, to: &[u16], from: &[u16]) {
        let list = |ports: &[u16]| {
            ports
                .iter()
                .map(u16::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let host = &self.host_ip;
        let mut rules = format!(
            "table inet {CUT_TABLE} {{\n chain out {{\n  type filter hook output priority 0; policy accept;\n  ip daddr {host} tcp dport {{ {} }} drop\n }}\n",
            list(to)
        );
        if !from.is_empty() {
            rules.push_str(&format!(
                " chain in {{\n  type filter hook input priority 0; policy accept;\n  ip saddr {host} tcp dport {{ {} }} drop\n }}\n",
                list(from)
            ));
        }
        rules.push_str("}\n");
        let path = std::env::temp_dir().join(format!("{}-cut.nft", self.name));
        std::fs::write(&path, rules).unwrap();
        run(&[
            "ip",
            "netns",
            "exec",
            &self.name,
            "nft",
            "-f",
            path.to_str().unwrap(),
        ]);
    }

    /// Another address of the host's end of the pair (a /32 of
    /// 10.232.0.0/16): a pod's address of its own, which no replica
    /// advertises; the namespace reaches it through its default route.
    pub fn add_host_address(&self) -> std::net::IpAddr {
        let pid = std::process::id();
        let ip = (0..65536u32)
            .map(|i| (pid.wrapping_add(i)) % 65534 + 1)
            .map(|n| format!("10.232.{}.{}", n >> 8, n & 255))
            .find(|ip| !ip.ends_with(".0") && !ip.ends_with(".255") && !address_in_use(ip))
            .expect("a free address in 10.232.0.0/16");
        run(&[
            "ip",
            "addr",
            "add",
            &format!("{ip}/32"),
            "dev",
            &self.host_if,
        ]);
        ip.parse().unwrap()
    }

    /// Removes the cut.
    pub fn heal(&self) {
        run(&[
            "ip", "netns", "exec", &self.name, "nft", "delete", "table", "inet", CUT_TABLE,
        ]);
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// Three replicas in zones a, b and c (`<prefix>-a`, ...) with `extra`
/// flags; the one of zone c runs in a network namespace of its own (its
/// path to the targets can be cut there), reaching the API server through
/// a proxy on the host's end of the pair. The others listen on that end
/// too, so that every replica reaches every other; targets that all of
/// them reach listen there (`Netns::host_ip`).
pub struct ZonedReplicas {
    pub netns: Netns,
    pub proxy: crate::TcpProxy,
    pub ops: Vec<crate::Operator>,
}

impl ZonedReplicas {
    pub async fn spawn(
        cluster: &crate::Cluster,
        ns: &str,
        prefix: &str,
        extra: &[&str],
    ) -> ZonedReplicas {
        Self::spawn_with(cluster, ns, prefix, extra, false).await
    }

    /// Same, the replicas watching every namespace (`watch_all`: for a
    /// control plane of the test's own), their Leases in `ns`.
    pub async fn spawn_with(
        cluster: &crate::Cluster,
        ns: &str,
        prefix: &str,
        extra: &[&str],
        watch_all: bool,
    ) -> ZonedReplicas {
        let spawn = if watch_all {
            crate::Operator::spawn_placed_watching_all
        } else {
            crate::Operator::spawn_placed
        };
        let netns = Netns::create();
        let proxy = crate::TcpProxy::start_on(&cluster.kubeconfig, &netns.host_ip).await;
        let ops = ["a", "b", "c"]
            .into_iter()
            .map(|zone| {
                let zone_flag = format!("--zone={zone}");
                let flags: Vec<&str> = extra.iter().copied().chain([zone_flag.as_str()]).collect();
                let identity = format!("{prefix}-{zone}");
                if zone == "c" {
                    spawn(
                        cluster,
                        &identity,
                        ns,
                        &flags,
                        &proxy.kubeconfig,
                        &netns.ns_ip,
                        Some(&netns),
                    )
                } else {
                    spawn(
                        cluster,
                        &identity,
                        ns,
                        &flags,
                        &cluster.kubeconfig,
                        &netns.host_ip,
                        None,
                    )
                }
            })
            .collect();
        ZonedReplicas { netns, proxy, ops }
    }
}
