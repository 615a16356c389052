//! One look at a peer's /healthz: whether the process at an address a Lease
//! advertises is still the incarnation that Lease names. The evidence the
//! leader and followers gather (`shard::peers`) and the check a joining
//! replica makes of a Lease that still names its address (`membership`).

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::api::INCARNATION_HEADER;

/// What one look at a peer's address says of its process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Evidence {
    Alive,
    Gone,
    Unknown,
}

/// One look at a peer's /healthz: a fresh connection, so a refusal is seen.
pub async fn look(address: &str, incarnation: &str, limit: Duration) -> Evidence {
    let attempt = async {
        let mut s = match TcpStream::connect(address).await {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                return Evidence::Gone;
            }
            Err(_) => return Evidence::Unknown,
        };
        let req = format!("GET /healthz HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
        if s.write_all(req.as_bytes()).await.is_err() {
            return Evidence::Unknown;
        }
        let mut head = Vec::with_capacity(512);
        let mut buf = [0u8; 512];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 4096 {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        evidence_of_head(&String::from_utf8_lossy(&head), incarnation)
    };
    tokio::time::timeout(limit, attempt)
        .await
        .unwrap_or(Evidence::Unknown)
}

/// Reads the incarnation header of a /healthz answer.
fn evidence_of_head(head: &str, incarnation: &str) -> Evidence {
    if !head.starts_with("HTTP/1.") || !head.contains("\r\n\r\n") {
        return Evidence::Unknown;
    }
    let named = head.lines().skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case(INCARNATION_HEADER)
            .then(|| v.trim().to_string())
    });
    match named {
        Some(v) if v == incarnation => Evidence::Alive,
        // Another process answers at that address: ours is gone.
        Some(v) if !v.is_empty() => Evidence::Gone,
        _ => Evidence::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn the_head_names_the_process() {
        let ok = "HTTP/1.1 200 OK\r\nwebchecker-incarnation: abc\r\ncontent-length: 3\r\n\r\n";
        assert_eq!(evidence_of_head(ok, "abc"), Evidence::Alive);
        assert_eq!(evidence_of_head(ok, "def"), Evidence::Gone);
        let other = "HTTP/1.1 503 Service Unavailable\r\nWebchecker-Incarnation: abc\r\n\r\n";
        assert_eq!(evidence_of_head(other, "abc"), Evidence::Alive);
        // An older version, a foreign server, a cut answer: no evidence.
        assert_eq!(
            evidence_of_head("HTTP/1.1 200 OK\r\n\r\n", "abc"),
            Evidence::Unknown
        );
        assert_eq!(
            evidence_of_head("HTTP/1.1 200 OK\r\nwebchecker-inc", "abc"),
            Evidence::Unknown
        );
        assert_eq!(evidence_of_head("", "abc"), Evidence::Unknown);
    }

    #[tokio::test]
    async fn a_closed_port_is_gone_a_silent_one_is_unknown() {
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        };
        let limit = Duration::from_millis(300);
        assert_eq!(look(&closed, "x", limit).await, Evidence::Gone);
        // Accepts (the kernel does, even for a stopped process) and never answers.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = silent.local_addr().unwrap().to_string();
        assert_eq!(look(&addr, "x", limit).await, Evidence::Unknown);
        drop(silent);
    }

    #[tokio::test]
    async fn the_real_server_answers_with_its_incarnation() {
        let health = Arc::new(crate::observe::server::HealthFlags {
            incarnation: "inc-1".into(),
            ..Default::default()
        });
        let metrics = Arc::new(crate::observe::metrics::Metrics::new("r1", false));
        let refused = prometheus::IntCounter::new("refused", "refused").unwrap();
        let (addr, _stopped) =
            crate::observe::server::spawn("127.0.0.1:0".parse().unwrap(), metrics, health, refused)
                .unwrap();
        let addr = addr.to_string();
        let limit = Duration::from_secs(2);
        assert_eq!(look(&addr, "inc-1", limit).await, Evidence::Alive);
        assert_eq!(look(&addr, "inc-0", limit).await, Evidence::Gone);
    }
}
