//! Reaching a target: name resolution and the TCP connection (the forgery
//! guard that sits between them is `policy`).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use super::error::{HopError, Reason};
use super::plan::AddressFamily;
use super::resolve::Resolver;

/// Delay before the next address is tried while a connection attempt is still
/// pending (Happy Eyeballs, RFC 8305 section 5).
pub const CONNECTION_ATTEMPT_DELAY: Duration = Duration::from_millis(250);

/// The addresses of `host` of the plan's family, interleaved by family
/// (Auto) so a fallback to the other family comes early. Messages call the
/// host `name` (a host from a redirect is not named).
pub(super) async fn resolve(
    static_hosts: &HashMap<String, Vec<IpAddr>>,
    resolver: &Resolver,
    host: &str,
    name: &str,
    port: u16,
    family: AddressFamily,
) -> Result<Vec<SocketAddr>, HopError> {
    let addrs: Vec<SocketAddr> = if let Ok(ip) = host.parse::<IpAddr>() {
        vec![SocketAddr::new(ip, port)]
    } else if let Some(ips) = static_hosts.get(&host.trim_end_matches('.').to_ascii_lowercase()) {
        ips.iter().map(|ip| SocketAddr::new(*ip, port)).collect()
    } else {
        resolver
            .lookup(host, family)
            .await
            .map_err(|e| HopError::new(Reason::DnsError, e.message(name)))?
            .into_iter()
            .map(|ip| SocketAddr::new(ip, port))
            .collect()
    };
    if addrs.is_empty() {
        return Err(HopError::new(
            Reason::DnsError,
            format!("{name} has no address"),
        ));
    }
    let (v4, v6): (Vec<SocketAddr>, Vec<SocketAddr>) = addrs.iter().partition(|a| {
        // An IPv4-mapped IPv6 address is reached over IPv4.
        match a.ip() {
            IpAddr::V4(_) => true,
            IpAddr::V6(v6) => v6.to_ipv4_mapped().is_some(),
        }
    });
    let picked = match family {
        AddressFamily::V4 => v4,
        AddressFamily::V6 => v6,
        AddressFamily::Auto => {
            let (first, second) = if addrs[0].is_ipv6() && !v6.is_empty() {
                (v6, v4)
            } else {
                (v4, v6)
            };
            let mut out = Vec::with_capacity(addrs.len());
            let (mut a, mut b) = (first.into_iter(), second.into_iter());
            loop {
                match (a.next(), b.next()) {
                    (None, None) => break,
                    (x, y) => out.extend(x.into_iter().chain(y)),
                }
            }
            out
        }
    };
    if picked.is_empty() {
        let fam = if family == AddressFamily::V4 {
            "IPv4"
        } else {
            "IPv6"
        };
        return Err(HopError::new(
            Reason::DnsError,
            format!("{name} has no {fam} address (spec.ipFamily {fam})"),
        ));
    }
    Ok(picked)
}

/// Opens one TCP connection to the first address that answers. Attempts start
/// in order; the next one starts when the previous failed or after
/// [`CONNECTION_ATTEMPT_DELAY`] without an answer, and the first connection
/// wins (the others are dropped).
pub(super) async fn connect_any(addrs: &[SocketAddr]) -> std::io::Result<TcpStream> {
    let mut pending = FuturesUnordered::new();
    let mut next = 0;
    let mut last_err = None;
    loop {
        if pending.is_empty() {
            match addrs.get(next) {
                Some(a) => {
                    pending.push(TcpStream::connect(*a));
                    next += 1;
                }
                None => {
                    return Err(last_err.unwrap_or_else(|| {
                        std::io::Error::new(std::io::ErrorKind::NotFound, "no address")
                    }));
                }
            }
        }
        let more = next < addrs.len();
        tokio::select! {
            Some(r) = pending.next() => match r {
                Ok(s) => return Ok(s),
                Err(e) => last_err = Some(e),
            },
            _ = tokio::time::sleep(CONNECTION_ATTEMPT_DELAY), if more => {
                pending.push(TcpStream::connect(addrs[next]));
                next += 1;
            }
        }
    }
}

/// A probe connection that is closed by dropping it. hyper shuts the write
/// side down before it lets go of a `Connection: close` exchange; that is a
/// system call (with its own FIN) per probe for nothing, since the socket is
/// closed right after, which sends the FIN anyway. A profile showed it as 16%
/// of the prober's CPU time.
pub(super) struct CloseOnDrop(pub TcpStream);

impl AsyncRead for CloseOnDrop {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for CloseOnDrop {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}
