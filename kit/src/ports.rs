//! One policy for the ports the tests and the bench listen on: below the
//! kernel's ephemeral range (as hack/cluster.sh picks the control plane's),
//! so that the outgoing connections of thousands of probes, which take
//! ephemeral ports, can never hold a port between its choice and its bind.

use std::net::{Ipv4Addr, SocketAddr};
use std::ops::Range;

/// The lowest port handed out (below it sit well-known services).
const FLOOR: u16 = 20000;

/// The ports handed out: from FLOOR up to the start of the ephemeral range,
/// at most 32767 (hack/cluster.sh's `free_ports` draws from the same range).
pub fn port_range() -> Range<u16> {
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .next()
                .and_then(|v| v.parse::<u16>().ok())
        });
    match ephemeral {
        Some(e) if e > FLOOR + 1000 => FLOOR..e.min(32768),
        _ => FLOOR..32768,
    }
}

fn candidate() -> u16 {
    let r = port_range();
    r.start + rand::random::<u16>() % (r.end - r.start)
}

/// A port free on 127.0.0.1 now, for a process of another program to listen
/// on (an operator's `--listen`). Prefer [`listener`] where this process
/// listens itself: it keeps the port.
pub fn free_port() -> u16 {
    free_port_on("127.0.0.1")
}

/// A listener on `ip` at a port of the policy.
pub async fn listener_on(ip: &str) -> tokio::net::TcpListener {
    bind(&SocketAddr::new(ip.parse().expect("an IP address"), 0).to_string())
        .await
        .unwrap_or_else(|e| panic!("no free port in {:?} on {ip}: {e}", port_range()))
}

/// Binds `addr` ("ip:port"); port 0 asks for a port of the policy, not the
/// kernel's ephemeral choice.
pub async fn bind(addr: &str) -> std::io::Result<tokio::net::TcpListener> {
    let a: SocketAddr = addr.parse().map_err(|e| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{addr}: {e}"))
    })?;
    if a.port() != 0 {
        return listen(a);
    }
    let mut last = None;
    for _ in 0..1000 {
        match listen(SocketAddr::new(a.ip(), candidate())) {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
    }
    Err(last.expect("tried"))
}

/// Listens on `a` with the longest accept queue the kernel allows
/// (`net.core.somaxconn`; tokio's own bind asks for 1,024). A witness that
/// 1,500 fresh connections a second reach falls that far behind when the
/// two cores are saturated for under a second, and a connection the full
/// queue drops waits out the client's 1 s SYN retransmission: a probe
/// timeout the operator did not cause.
fn listen(a: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    static BACKLOG: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    let backlog = *BACKLOG.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
            .unwrap_or(4096)
            .max(1024)
    });
    let socket = if a.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(a)?;
    socket.listen(backlog)
}

/// A port free on `ip` now (see [`free_port`]).
pub fn free_port_on(ip: &str) -> u16 {
    let ip: std::net::IpAddr = ip.parse().expect("an IP address");
    loop {
        let p = candidate();
        if std::net::TcpListener::bind(SocketAddr::new(ip, p)).is_ok() {
            return p;
        }
    }
}

/// A listener on 127.0.0.1 at a port of the policy.
pub async fn listener() -> tokio::net::TcpListener {
    listener_on("127.0.0.1").await
}

/// The same, blocking (std).
pub fn std_listener() -> std::net::TcpListener {
    for _ in 0..1000 {
        if let Ok(l) = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, candidate())) {
            return l;
        }
    }
    panic!("no free port in {:?}", port_range())
}

/// A UDP socket on 127.0.0.1 at a port of the policy (blocking, std).
pub fn std_udp() -> std::net::UdpSocket {
    for _ in 0..1000 {
        if let Ok(s) = std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, candidate())) {
            return s;
        }
    }
    panic!("no free UDP port in {:?}", port_range())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_stay_below_the_ephemeral_range() {
        let r = port_range();
        assert!(r.start < r.end);
        for _ in 0..50 {
            assert!(r.contains(&free_port()));
        }
        let l = std_listener();
        assert!(r.contains(&l.local_addr().unwrap().port()));
    }
}
