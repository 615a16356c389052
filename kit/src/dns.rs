//! A loopback name server for the tests, so that no test depends on this
//! machine's DNS or /etc/hosts.
//!
//! It answers, over UDP on 127.0.0.1 and a port of the kit's policy (ports.rs), the names a test
//! registers (A and AAAA, TTL 0 so every probe asks again), whole zones (any
//! name under them), NXDOMAIN at once for every other name, and nothing at all
//! for names under a black-holed zone. The resolver never needs TCP from it:
//! its answers are far below the UDP size limit.
//!
//! The operator finds it through the files it writes: a resolv.conf with
//! `nameserver 127.0.0.1:<port>` (the port is the operator's extension of the
//! syntax, see crates/plan/src/resolv_conf.rs) and a hosts file of the test's own.
//! [`Dns::shared`] is one server per test process, on its own thread (a
//! test's runtime ends with the test); `Operator::start` points every
//! operator at it, so a name no test registered is NXDOMAIN.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use hickory_resolver::proto::op::{Message, MessageType, ResponseCode};
use hickory_resolver::proto::rr::{RData, Record, RecordType};

/// A name the test kit's hosts file lists (127.0.0.1), for hosts-file tests.
pub const HOSTS_FILE_NAME: &str = "from-the-hosts-file.test";

#[derive(Default)]
struct State {
    names: HashMap<String, Vec<IpAddr>>,
    zones: HashMap<String, Vec<IpAddr>>,
    /// Zones never answered: for every type, or for one type only.
    black_holes: Vec<(String, Option<RecordType>)>,
    /// Queries per name (lower case, no trailing dot), answered or not.
    queries: HashMap<String, usize>,
    unanswered: usize,
}

fn norm(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

fn under(name: &str, zone: &str) -> bool {
    name == zone || name.ends_with(&format!(".{zone}"))
}

impl State {
    /// None: stay silent. Some(None): NXDOMAIN. Some(Some(ips)): the name's addresses.
    fn answer(&mut self, name: &str, rt: RecordType) -> Option<Option<Vec<IpAddr>>> {
        *self.queries.entry(name.to_string()).or_default() += 1;
        let silent =
            |(z, t): &(String, Option<RecordType>)| under(name, z) && t.is_none_or(|t| t == rt);
        if self.black_holes.iter().any(silent) {
            self.unanswered += 1;
            return None;
        }
        if let Some(ips) = self.names.get(name) {
            return Some(Some(ips.clone()));
        }
        let zone = self
            .zones
            .iter()
            .filter(|(z, _)| under(name, z))
            .max_by_key(|(z, _)| z.len());
        Some(zone.map(|(_, ips)| ips.clone()))
    }
}

pub struct Dns {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    dir: PathBuf,
}

static SHARED: OnceLock<Dns> = OnceLock::new();

impl Dns {
    /// The test process's name server (started on first use).
    pub fn shared() -> &'static Dns {
        SHARED.get_or_init(Dns::start)
    }

    /// A server of one's own, on its own thread until the process exits.
    pub fn start() -> Dns {
        Self::serve_on(crate::std_udp())
    }

    /// The same on `addr` (a node's address, port 53: where the node's pods
    /// send their queries).
    pub fn start_on(addr: SocketAddr) -> Dns {
        let socket = std::net::UdpSocket::bind(addr)
            .unwrap_or_else(|e| panic!("the test name server cannot bind {addr}: {e}"));
        Self::serve_on(socket)
    }

    fn serve_on(socket: std::net::UdpSocket) -> Dns {
        socket.set_nonblocking(true).unwrap();
        let addr = socket.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State::default()));
        let st = state.clone();
        std::thread::Builder::new()
            .name(format!("test-dns-{}", addr.port()))
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async move {
                    serve(tokio::net::UdpSocket::from_std(socket).unwrap(), st).await
                });
            })
            .unwrap();
        let dir = super::repo().join("target").join("e2e").join(format!(
            "dns-{}-{}",
            std::process::id(),
            addr.port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("resolv.conf"),
            format!("# the test kit's name server (kit/src/dns.rs)\nnameserver {addr}\n"),
        )
        .unwrap();
        std::fs::write(
            dir.join("hosts"),
            format!("# the test kit's hosts file\n127.0.0.1 {HOSTS_FILE_NAME}\n"),
        )
        .unwrap();
        Dns { addr, state, dir }
    }

    /// Answers `name` (exactly) with these addresses; replaces earlier ones.
    pub fn add(&self, name: &str, ips: &[IpAddr]) {
        self.state
            .lock()
            .unwrap()
            .names
            .insert(norm(name), ips.to_vec());
    }

    /// Answers every name under `zone` (and the zone itself) with these addresses.
    pub fn add_zone(&self, zone: &str, ips: &[IpAddr]) {
        self.state
            .lock()
            .unwrap()
            .zones
            .insert(norm(zone), ips.to_vec());
    }

    /// Never answers a query for a name under `zone`.
    pub fn black_hole(&self, zone: &str) {
        self.state
            .lock()
            .unwrap()
            .black_holes
            .push((norm(zone), None));
    }

    /// Never answers a query of type `rt` for a name under `zone`.
    pub fn black_hole_type(&self, zone: &str, rt: RecordType) {
        self.state
            .lock()
            .unwrap()
            .black_holes
            .push((norm(zone), Some(rt)));
    }

    /// Queries seen for `name` (any type), answered or not.
    pub fn queries(&self, name: &str) -> usize {
        self.state
            .lock()
            .unwrap()
            .queries
            .get(&norm(name))
            .copied()
            .unwrap_or(0)
    }

    /// Queries left without an answer (black-holed).
    pub fn unanswered(&self) -> usize {
        self.state.lock().unwrap().unanswered
    }

    /// Queries seen for names under `zone`.
    pub fn queries_under(&self, zone: &str) -> usize {
        let zone = norm(zone);
        self.state
            .lock()
            .unwrap()
            .queries
            .iter()
            .filter(|(n, _)| under(n, &zone))
            .map(|(_, c)| c)
            .sum()
    }

    pub fn resolv_conf(&self) -> PathBuf {
        self.dir.join("resolv.conf")
    }

    pub fn hosts_file(&self) -> PathBuf {
        self.dir.join("hosts")
    }

    /// The operator's flags that point it at this server.
    pub fn operator_args(&self) -> Vec<String> {
        vec![
            format!("--resolv-conf={}", self.resolv_conf().display()),
            format!("--hosts-file={}", self.hosts_file().display()),
        ]
    }

    /// The environment that does the same (flags win over it).
    pub fn operator_env(&self) -> [(&'static str, PathBuf); 2] {
        [
            ("WEBCHECKER_RESOLV_CONF", self.resolv_conf()),
            ("WEBCHECKER_HOSTS_FILE", self.hosts_file()),
        ]
    }

    /// A resolver for an in-process prober, asking this server.
    pub fn resolver(&self) -> webchecker::probe::Resolver {
        self.resolver_from(&self.resolv_conf())
    }

    /// The same with resolv.conf `options` of the test's choice.
    pub fn resolver_with(&self, options: &str) -> webchecker::probe::Resolver {
        let path = self
            .dir
            .join(format!("resolv-{}.conf", super::rand_suffix()));
        std::fs::write(
            &path,
            format!("nameserver {}\noptions {options}\n", self.addr),
        )
        .unwrap();
        self.resolver_from(&path)
    }

    fn resolver_from(&self, resolv_conf: &Path) -> webchecker::probe::Resolver {
        let (r, warnings) =
            webchecker::probe::Resolver::from_files(resolv_conf, &self.hosts_file()).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        r
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

async fn serve(socket: tokio::net::UdpSocket, state: Arc<Mutex<State>>) {
    let mut buf = vec![0u8; 4096];
    loop {
        let Ok((n, peer)) = socket.recv_from(&mut buf).await else {
            continue;
        };
        let Ok(query) = Message::from_vec(&buf[..n]) else {
            continue;
        };
        if query.metadata.message_type != MessageType::Query {
            continue;
        }
        let Some(reply) = reply(&query, &state) else {
            continue;
        };
        if let Ok(bytes) = reply.to_vec() {
            let _ = socket.send_to(&bytes, peer).await;
        }
    }
}

/// The answer to one query, or None to stay silent.
fn reply(query: &Message, state: &Mutex<State>) -> Option<Message> {
    let q = query.queries.first()?;
    let name = norm(&q.name().to_ascii());
    let found = state.lock().unwrap().answer(&name, q.query_type())?;
    let mut m = Message::response(query.metadata.id, query.metadata.op_code);
    m.metadata.recursion_desired = query.metadata.recursion_desired;
    m.metadata.recursion_available = true;
    m.metadata.authoritative = true;
    m.add_query(q.clone());
    match found {
        None => m.metadata.response_code = ResponseCode::NXDomain,
        Some(ips) => {
            for ip in ips {
                let wanted = matches!(
                    (ip, q.query_type()),
                    (IpAddr::V4(_), RecordType::A) | (IpAddr::V6(_), RecordType::AAAA)
                );
                if wanted {
                    m.add_answer(Record::from_rdata(q.name().clone(), 0, RData::from(ip)));
                }
            }
        }
    }
    Some(m)
}
