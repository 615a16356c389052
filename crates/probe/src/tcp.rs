//! The tcp and tls checks: connect (tls://: and the handshake), then the
//! steps of `spec.tcp.queryResponse` in order, as blackbox_exporter's
//! query_response: wait for a line matching `expect`, `send` text, and on
//! tcp:// upgrade the connection with `startTls`. Lines are matched on the
//! matching pool in the namespace's turn (matcher.rs), like response bodies;
//! what the server said never appears in a message.

use std::time::Instant;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_rustls::client::TlsStream;

use super::dial::CloseOnDrop;
use super::error::{HopError, Reason, Stop, short_io};
use super::message::Hop;
use super::outcome::Phase;
use super::plan::{Pattern, TcpStepPlan};
use super::run::Passed;
use super::state::Probe;

/// The connection of a tcp check, before or after TLS.
enum Conn {
    Plain(CloseOnDrop),
    Tls(Box<TlsStream<CloseOnDrop>>),
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

impl Conn {
    fn io(&mut self) -> &mut dyn Io {
        match self {
            Conn::Plain(s) => s,
            Conn::Tls(s) => s.as_mut(),
        }
    }
}

/// What the server sent and no step has read yet, and how much it sent in all.
#[derive(Default)]
struct Received {
    pending: Vec<u8>,
    total: usize,
    /// The first bytes of `pending` known to hold no line end: a server
    /// that trickles one long line is searched once per byte, not once per
    /// byte per read.
    scanned: usize,
}

impl Received {
    /// The end of the last whole line pending (its `\n`), searching only
    /// the bytes not searched before.
    fn last_line_end(&mut self) -> Option<usize> {
        let from = self.scanned;
        self.scanned = self.pending.len();
        self.pending[from..]
            .iter()
            .rposition(|&b| b == b'\n')
            .map(|i| from + i)
    }

    /// Drops the first `n` bytes; what is left of a searched stretch stays
    /// searched.
    fn consume(&mut self, n: usize) {
        self.pending.drain(..n);
        self.scanned = self.scanned.saturating_sub(n);
    }
}

impl Probe<'_> {
    pub(super) async fn tcp(&mut self, steps: &[TcpStepPlan]) -> Result<Passed, Stop> {
        let hop = Hop::first(self.plan);
        let stream = CloseOnDrop(self.dial(&hop).await?);
        let mut conn = if hop.target.https {
            Conn::Tls(Box::new(self.handshake(&hop.target, true, stream).await?))
        } else {
            Conn::Plain(stream)
        };
        let mut received = Received::default();
        for (i, step) in steps.iter().enumerate() {
            self.phase = Phase::Steps;
            let t = Instant::now();
            if let Some(p) = &step.expect {
                self.expect(conn.io(), &mut received, i, p).await?;
            }
            if !step.send.is_empty() {
                self.pass_gate()?;
                let io = conn.io();
                let sent = async {
                    io.write_all(&step.send).await?;
                    io.flush().await
                };
                sent.await.map_err(|e| broken(i, &e))?;
            }
            self.phases.processing += t.elapsed();
            if step.start_tls {
                conn = self.start_tls(&hop, conn, &received, i).await?;
            }
        }
        let said = match (&conn, steps.len()) {
            (Conn::Tls(_), 0) => "TLS handshake done".to_string(),
            (_, 0) => "connected".to_string(),
            (Conn::Tls(_), n) => format!("{n} steps done, over TLS"),
            (_, n) => format!("{n} steps done"),
        };
        Ok(Passed { code: None, said })
    }

    /// Reads lines until one matches `pattern`, within the body limit.
    async fn expect(
        &mut self,
        io: &mut dyn Io,
        received: &mut Received,
        step: usize,
        pattern: &Pattern,
    ) -> Result<(), Stop> {
        let max = self.prober.max_body_bytes;
        let mut chunk = vec![0u8; 4096];
        loop {
            if let Some(end) = received.last_line_end() {
                let lines: Vec<u8> = received.pending[..=end].to_vec();
                if let Some(used) = self.first_match(pattern, lines).await? {
                    // The lines after the match are the next step's: searched again.
                    received.consume(used);
                    received.scanned = 0;
                    return Ok(());
                }
                received.consume(end + 1);
            }
            if received.total >= max {
                return Err(unmatched(
                    step,
                    pattern,
                    &format!("in the first {max} bytes"),
                ));
            }
            let n = io.read(&mut chunk).await.map_err(|e| broken(step, &e))?;
            if n == 0 {
                // A last line without a line end counts.
                let rest = std::mem::take(&mut received.pending);
                received.scanned = 0;
                if !rest.is_empty() && self.first_match(pattern, rest).await?.is_some() {
                    return Ok(());
                }
                return Err(unmatched(
                    step,
                    pattern,
                    "before the server closed the connection",
                ));
            }
            let n = n.min(max - received.total);
            received.pending.extend_from_slice(&chunk[..n]);
            received.total += n;
        }
    }

    /// The bytes up to and including the first line of `lines` that
    /// `pattern` matches, or `None`; on the matching pool.
    async fn first_match(&self, pattern: &Pattern, lines: Vec<u8>) -> Result<Option<usize>, Stop> {
        let pattern = pattern.clone();
        let job = move || {
            let mut start = 0;
            for line in lines.split_inclusive(|&b| b == b'\n') {
                start += line.len();
                let text = String::from_utf8_lossy(line);
                if pattern.is_match(text.trim_end_matches(['\r', '\n'])) {
                    return Some(start);
                }
            }
            None
        };
        self.prober
            .matcher
            .run(self.namespace, job)
            .await
            .ok_or_else(|| {
                HopError::new(Reason::UnexpectedResponse, "the line checks could not run").into()
            })
    }

    /// STARTTLS after step `step`: the TLS handshake over the plain
    /// connection, with the checker's `tls` options and the host's name.
    async fn start_tls(
        &mut self,
        hop: &Hop,
        conn: Conn,
        received: &Received,
        step: usize,
    ) -> Result<Conn, Stop> {
        let Conn::Plain(stream) = conn else {
            return Err(HopError::new(
                Reason::InvalidSpec,
                format!(
                    "spec.tcp.queryResponse[{step}].startTls: the connection speaks TLS already"
                ),
            )
            .into());
        };
        // Bytes after the server's go-ahead would be read as TLS records.
        if !received.pending.is_empty() {
            return Err(HopError::new(
                Reason::ProtocolError,
                format!(
                    "the server sent more than the line expected before spec.tcp.queryResponse[{step}].startTls"
                ),
            )
            .into());
        }
        let tls = self.handshake(&hop.target, true, stream).await?;
        Ok(Conn::Tls(Box::new(tls)))
    }
}

fn unmatched(step: usize, pattern: &Pattern, when: &str) -> Stop {
    HopError::new(
        Reason::UnexpectedResponse,
        format!(
            "no line matched spec.tcp.queryResponse[{step}].expect {:?} {when}",
            pattern.as_str()
        ),
    )
    .into()
}

fn broken(step: usize, e: &std::io::Error) -> Stop {
    HopError::new(
        Reason::ProtocolError,
        format!(
            "the connection broke during spec.tcp.queryResponse[{step}]: {}",
            short_io(e)
        ),
    )
    .into()
}

#[cfg(test)]
mod tests {
    use super::Received;

    fn push(r: &mut Received, bytes: &[u8]) {
        r.pending.extend_from_slice(bytes);
        r.total += bytes.len();
    }

    #[test]
    fn a_trickled_line_is_searched_once_per_byte() {
        let mut r = Received::default();
        for _ in 0..10_000 {
            push(&mut r, b"x");
            assert_eq!(r.last_line_end(), None);
        }
        // A line end planted in bytes searched before is not seen again:
        // each read searches only what it added.
        r.pending[0] = b'\n';
        assert_eq!(r.last_line_end(), None);
        push(&mut r, b"yy\nz");
        assert_eq!(r.last_line_end(), Some(10_002));
    }

    #[test]
    fn what_is_left_after_a_line_is_searched_from_where_it_stopped() {
        let mut r = Received::default();
        push(&mut r, b"one\ntwo\nthr");
        assert_eq!(r.last_line_end(), Some(7));
        r.consume(8);
        assert_eq!(r.pending, b"thr");
        assert_eq!(r.last_line_end(), None);
        push(&mut r, b"ee\nfo");
        assert_eq!(r.last_line_end(), Some(5));
        r.consume(4);
        assert_eq!(r.pending, b"e\nfo");
        // A match consumed part of the lines: the rest is searched again.
        r.scanned = 0;
        assert_eq!(r.last_line_end(), Some(1));
    }
}
