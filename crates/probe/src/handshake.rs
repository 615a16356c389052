//! The TLS handshake of a hop, and what it tells (certificate errors,
//! protocol version, cipher suite, the chain: certs.rs). The configurations
//! it uses are tls.rs.

use std::time::Instant;

use rustls::pki_types::ServerName;
use tokio_rustls::client::TlsStream;

use super::dial::CloseOnDrop;
use super::error::{HopError, Reason, rustls_cause, short_io};
use super::outcome::{Phase, TlsFacts};
use super::state::Probe;
use super::target::Target;

impl Probe<'_> {
    /// The TLS handshake with `target` over a connected stream. Records what
    /// it showed (version, cipher suite, the certificate chain).
    ///
    /// The spec's TLS settings (`caBundle`, `serverName`,
    /// `insecureSkipVerify`, `clientCertificate`, `minVersion`) are made for
    /// its own origin; another origin that a redirect leads to gets the
    /// defaults: verified against the built-in roots, its own name in SNI,
    /// no client certificate.
    pub(super) async fn handshake(
        &mut self,
        target: &Target,
        own_origin: bool,
        stream: CloseOnDrop,
    ) -> Result<TlsStream<CloseOnDrop>, HopError> {
        self.phase = Phase::Tls;
        let t = Instant::now();
        let tls = &self.plan.tls;
        let alpn = self.plan.alpn.index();
        let config = match &tls.config {
            _ if !own_origin => self.prober.verified[alpn].clone(),
            Some(c) => c.0.clone(),
            None if tls.insecure_skip_verify => self.prober.unverified[alpn].clone(),
            None => self.prober.verified[alpn].clone(),
        };
        let sni = match &tls.server_name {
            Some(name) if own_origin => name.clone(),
            _ => target.host.clone(),
        };
        let name = ServerName::try_from(sni)
            .map_err(|_| HopError::new(Reason::InvalidSpec, "TLS server name is not valid"))?;
        let stream = tokio_rustls::TlsConnector::from(config)
            .connect(name, stream)
            .await
            .map_err(|e| tls_failure(&e))?;
        self.phases.tls += t.elapsed();
        let conn = stream.get_ref().1;
        self.tls = Some(TlsFacts {
            version: match conn.protocol_version() {
                Some(rustls::ProtocolVersion::TLSv1_3) => "TLS 1.3",
                Some(rustls::ProtocolVersion::TLSv1_2) => "TLS 1.2",
                _ => "unknown",
            },
            cipher: conn
                .negotiated_cipher_suite()
                .and_then(|s| s.suite().as_str())
                .unwrap_or("unknown"),
            chain: conn
                .peer_certificates()
                .and_then(|c| self.prober.chains.get(c)),
        });
        Ok(stream)
    }
}

fn tls_failure(e: &std::io::Error) -> HopError {
    match rustls_cause(e) {
        Some(rustls::Error::InvalidCertificate(c)) => HopError::new(
            Reason::CertificateInvalid,
            format!("server certificate rejected: {}", cert_error(c)),
        ),
        Some(other) => HopError::new(Reason::TlsError, format!("TLS handshake failed: {other}")),
        None => HopError::new(
            Reason::TlsError,
            format!("TLS handshake failed: {}", short_io(e)),
        ),
    }
}

fn cert_error(c: &rustls::CertificateError) -> String {
    use rustls::CertificateError as C;
    match c {
        C::NotValidForName | C::NotValidForNameContext { .. } => {
            "it is not valid for the server name".into()
        }
        C::UnknownIssuer => "issued by an unknown certificate authority".into(),
        C::Expired | C::ExpiredContext { .. } => "it has expired".into(),
        C::NotValidYet | C::NotValidYetContext { .. } => "it is not valid yet".into(),
        C::Revoked => "it is revoked".into(),
        C::BadSignature => "bad signature".into(),
        C::BadEncoding => "bad encoding".into(),
        other => format!("{other:?}").chars().take(160).collect(),
    }
}
