//! The CONNECT tunnel through an HTTP proxy, for an https target.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::error::{HopError, Reason, Stop, short_io};
use super::state::Probe;
use super::target::Target;

impl Probe<'_> {
    /// Opens a CONNECT tunnel through an HTTP proxy (counted as connect time).
    /// `name` is how messages call the target.
    pub(super) async fn tunnel(
        &self,
        stream: &mut TcpStream,
        target: &Target,
        name: &str,
    ) -> Result<(), Stop> {
        let hp = target.host_port();
        let ua = self
            .prober
            .user_agent
            .to_str()
            .unwrap_or("webchecker-operator");
        let req = format!("CONNECT {hp} HTTP/1.1\r\nHost: {hp}\r\nUser-Agent: {ua}\r\n\r\n");
        // A CONNECT is a request head too, if not one the target sees.
        self.pass_gate()?;
        Ok(connect(stream, &req, name).await?)
    }
}

/// Sends a CONNECT request head and reads the proxy's answer.
async fn connect(stream: &mut TcpStream, req: &str, name: &str) -> Result<(), HopError> {
    stream.write_all(req.as_bytes()).await.map_err(|e| {
        HopError::new(
            Reason::ConnectError,
            format!("proxy CONNECT failed: {}", short_io(&e)),
        )
    })?;
    // The target speaks only after our ClientHello, so nothing may follow
    // the proxy's answer head: read it whole, at most 16 KiB.
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    loop {
        let n = stream.read(&mut buf).await.map_err(|e| {
            HopError::new(
                Reason::ConnectError,
                format!("proxy CONNECT failed: {}", short_io(&e)),
            )
        })?;
        if n == 0 {
            return Err(HopError::new(
                Reason::ConnectError,
                "the proxy closed the connection before answering CONNECT",
            ));
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            if end + 4 != head.len() {
                return Err(HopError::new(
                    Reason::ProtocolError,
                    "the proxy sent data after its CONNECT answer",
                ));
            }
            break;
        }
        if head.len() > 16 * 1024 {
            return Err(HopError::new(
                Reason::ProtocolError,
                "the proxy's CONNECT answer is larger than 16 KiB",
            ));
        }
    }
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let code = match (parts.next(), parts.next()) {
        (Some(v), Some(c)) if v.starts_with("HTTP/1.") => c.parse::<u16>().ok(),
        _ => None,
    };
    match code {
        Some(c) if (200..300).contains(&c) => Ok(()),
        Some(c) => Err(HopError::new(
            Reason::ConnectError,
            format!("the proxy refused CONNECT to {name}: HTTP {c}"),
        )),
        None => Err(HopError::new(
            Reason::ProtocolError,
            "the proxy's CONNECT answer is not HTTP",
        )),
    }
}
