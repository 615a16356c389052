//! The rustls client configurations: which certificates a probe trusts
//! (checked on every handshake; a chain seen before for the same name and
//! valid now is not built again: verify.rs), its client
//! certificate, the ALPN of its kind and `http2` mode, and no session
//! resumption. The handshake that uses them is handshake.rs.

use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{CipherSuite, NamedGroup};

use super::verify::CachingVerifier;

/// The ALPN protocols a probe's TLS handshakes offer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alpn {
    /// h2 and http/1.1 (`http2: Negotiate`).
    H2AndHttp11,
    /// http/1.1 (`http2: Disabled`).
    Http11,
    /// h2 alone (`http2: PriorKnowledge`, gRPC).
    H2,
    /// None: tcp and tls checks speak no HTTP.
    Nothing,
}

impl Alpn {
    pub const ALL: [Alpn; 4] = [Alpn::H2AndHttp11, Alpn::Http11, Alpn::H2, Alpn::Nothing];

    pub fn protocols(self) -> &'static [&'static [u8]] {
        match self {
            Alpn::H2AndHttp11 => &[b"h2", b"http/1.1"],
            Alpn::Http11 => &[b"http/1.1"],
            Alpn::H2 => &[b"h2"],
            Alpn::Nothing => &[],
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// The lowest TLS version a probe accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MinTlsVersion {
    Tls12,
    Tls13,
}

/// Which server certificates a configuration accepts.
pub enum Trust {
    Roots(rustls::RootCertStore),
    /// `insecureSkipVerify`.
    AnyCertificate,
}

/// A client certificate chain and its private key.
pub struct ClientIdentity {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

/// The operator's rustls provider: aws-lc-rs, with [`operator_preferences`].
/// Not ring: its X25519 takes twice the CPU, and a TLS probe spends a
/// third of its CPU in key exchange (docs/benchmarks.md, part 1).
pub fn crypto_provider() -> CryptoProvider {
    operator_preferences(rustls::crypto::aws_lc_rs::default_provider())
}

/// Cipher suites offered, in this order (TLS 1.3's, then 1.2's).
const SUITES: [CipherSuite; 9] = [
    CipherSuite::TLS13_AES_128_GCM_SHA256,
    CipherSuite::TLS13_AES_256_GCM_SHA384,
    CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
    CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
];
/// Key exchange groups offered, in this order.
const GROUPS: [NamedGroup; 3] = [
    NamedGroup::X25519,
    NamedGroup::secp256r1,
    NamedGroup::secp384r1,
];

/// `p` offering [`SUITES`] and [`GROUPS`] (those it has), in their order.
/// AES-128-GCM first, as Go's client does on CPUs with AES instructions
/// (TLS 1.3's mandatory suite; a server that follows the client's order,
/// as rustls's does, picks it):
/// its transcript hash and key schedule run on SHA-256, which the CPU
/// accelerates, where ring computed AES-256's SHA-384 in software, some 10%
/// of a TLS probe's CPU (docs/benchmarks.md, part 1). X25519 is the only key
/// share sent: another provider's defaults may put a post-quantum hybrid
/// first, a larger key generation on every handshake.
pub fn operator_preferences(mut p: CryptoProvider) -> CryptoProvider {
    fn place<T: PartialEq>(all: &[T], x: T) -> Option<usize> {
        all.iter().position(|y| *y == x)
    }
    p.cipher_suites.retain(|s| SUITES.contains(&s.suite()));
    p.cipher_suites.sort_by_key(|s| place(&SUITES, s.suite()));
    p.kx_groups.retain(|g| GROUPS.contains(&g.name()));
    p.kx_groups.sort_by_key(|g| place(&GROUPS, g.name()));
    p
}

/// The provider of the configurations built here: the process's default when
/// one is installed (main.rs installs [`crypto_provider`]; the bench installs
/// another one, or a timed one, in its prober's process), else [`crypto_provider`].
fn provider() -> Arc<CryptoProvider> {
    CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(crypto_provider()))
}

pub fn client_config(
    trust: Trust,
    min_version: MinTlsVersion,
    client: Option<ClientIdentity>,
    alpn: Alpn,
) -> Result<rustls::ClientConfig, rustls::Error> {
    let provider = provider();
    let versions: &[&'static rustls::SupportedProtocolVersion] = match min_version {
        MinTlsVersion::Tls12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
        MinTlsVersion::Tls13 => &[&rustls::version::TLS13],
    };
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)?;
    let builder = match trust {
        // An empty store cannot build a verifier: nothing verifies, as before.
        Trust::Roots(roots) if roots.is_empty() => builder.with_root_certificates(roots),
        Trust::Roots(roots) => {
            let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots),
                provider.clone(),
            )
            .build()
            .map_err(|e| rustls::Error::General(e.to_string()))?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(CachingVerifier::new(webpki)))
        }
        Trust::AnyCertificate => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCert(provider))),
    };
    let mut config = match client {
        Some(c) => builder.with_client_auth_cert(c.chain, c.key)?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.protocols().iter().map(|p| p.to_vec()).collect();
    // Every probe makes a full, verified handshake, as a new client would: a
    // resumed one skips certificate verification and reports the certificate
    // of the cached session, so a server whose certificate was replaced (by
    // an expired or wrong one) would keep passing while it honours old
    // tickets. No session IDs, no tickets, no early data.
    config.resumption = rustls::client::Resumption::disabled();
    config.enable_early_data = false;
    Ok(config)
}

/// Verifier for `insecureSkipVerify`: accepts any certificate but still checks
/// the handshake signatures, so the connection is at least to the key holder.
#[derive(Debug)]
struct AcceptAnyCert(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AcceptAnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::HandshakeKind;
    use rustls::pki_types::ServerName;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server that resumes sessions (stateless tickets and a session
    /// cache, rustls's defaults plus a ticketer) and the roots trusting it.
    fn resuming_server(
        versions: &[&'static rustls::SupportedProtocolVersion],
    ) -> (Arc<rustls::ServerConfig>, rustls::RootCertStore) {
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ck.cert.der().clone()).unwrap();
        let key = PrivateKeyDer::Pkcs8(ck.signing_key.serialize_der().into());
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(versions)
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![ck.cert.der().clone()], key)
            .unwrap();
        cfg.ticketer = rustls::crypto::aws_lc_rs::Ticketer::new().unwrap();
        (Arc::new(cfg), roots)
    }

    /// One handshake over an in-memory pipe; the client reads one byte of
    /// application data so that it has taken the TLS 1.3 tickets sent before it.
    async fn handshake(
        client: &Arc<rustls::ClientConfig>,
        server: &Arc<rustls::ServerConfig>,
    ) -> HandshakeKind {
        let (c, s) = tokio::io::duplex(64 * 1024);
        let acceptor = tokio_rustls::TlsAcceptor::from(server.clone());
        let served = tokio::spawn(async move {
            let mut tls = acceptor.accept(s).await.unwrap();
            tls.write_all(b"x").await.unwrap();
            tls.flush().await.unwrap();
            let mut rest = Vec::new();
            let _ = tls.read_to_end(&mut rest).await;
        });
        let name = ServerName::try_from("localhost").unwrap();
        let mut tls = tokio_rustls::TlsConnector::from(client.clone())
            .connect(name, c)
            .await
            .unwrap();
        let mut b = [0u8; 1];
        tls.read_exact(&mut b).await.unwrap();
        let kind = tls.get_ref().1.handshake_kind().unwrap();
        drop(tls);
        served.await.unwrap();
        kind
    }

    #[test]
    fn x25519_is_the_first_key_share_and_aes_128_the_first_suite() {
        let p = crypto_provider();
        let groups: Vec<_> = p.kx_groups.iter().map(|g| g.name()).collect();
        assert_eq!(groups, GROUPS, "{groups:?}");
        let suites: Vec<_> = p.cipher_suites.iter().map(|s| s.suite()).collect();
        assert_eq!(suites, SUITES, "aws-lc-rs has them all: {suites:?}");
    }

    /// The control: the same server and roots with rustls's default
    /// resumption resume from the second handshake on; ours never does.
    #[tokio::test]
    async fn every_handshake_is_full_where_a_default_client_resumes() {
        let both: &[&'static rustls::SupportedProtocolVersion] =
            &[&rustls::version::TLS13, &rustls::version::TLS12];
        for versions in [both, &[&rustls::version::TLS12][..]] {
            let (server, roots) = resuming_server(versions);
            let ours = Arc::new(
                client_config(
                    Trust::Roots(roots),
                    MinTlsVersion::Tls12,
                    None,
                    Alpn::H2AndHttp11,
                )
                .unwrap(),
            );
            let mut resuming = (*ours).clone();
            resuming.resumption = rustls::client::Resumption::default();
            let resuming = Arc::new(resuming);

            assert_eq!(handshake(&resuming, &server).await, HandshakeKind::Full);
            for _ in 0..3 {
                assert_eq!(
                    handshake(&resuming, &server).await,
                    HandshakeKind::Resumed,
                    "the server must offer resumption for this test to mean anything"
                );
            }
            for _ in 0..4 {
                assert_eq!(handshake(&ours, &server).await, HandshakeKind::Full);
            }
        }
    }
}
