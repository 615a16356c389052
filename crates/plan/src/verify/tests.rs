//! The cache against webpki's own verifier, at chosen instants: what it
//! skips it would have accepted, and whatever changed (the instant past a
//! notAfter, the name, the chain) is verified in full.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rustls::client::WebPkiServerVerifier;

use super::*;

/// Counts the full verifications the cache asks of webpki.
#[derive(Debug)]
struct Counting {
    inner: Arc<WebPkiServerVerifier>,
    calls: AtomicUsize,
}

impl ServerCertVerifier for Counting {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// A root, an intermediate (valid 2025..2040) and a way to make leaves.
struct Pki {
    root: rustls::RootCertStore,
    intermediate: CertificateDer<'static>,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

fn ca(name: &str) -> (rcgen::CertificateParams, rcgen::KeyPair) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name.push(rcgen::DnType::CommonName, name);
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    p.not_before = rcgen::date_time_ymd(2025, 1, 1);
    p.not_after = rcgen::date_time_ymd(2040, 1, 1);
    (p, key)
}

fn pki(name: &str) -> Pki {
    let (root_p, root_k) = ca(&format!("{name} root"));
    let root_cert = root_p.clone().self_signed(&root_k).unwrap();
    let root_issuer = rcgen::Issuer::new(root_p, root_k);
    let (int_p, int_k) = ca(&format!("{name} intermediate"));
    let intermediate = int_p.clone().signed_by(&int_k, &root_issuer).unwrap();
    let mut root = rustls::RootCertStore::empty();
    root.add(root_cert.der().clone()).unwrap();
    Pki {
        root,
        intermediate: intermediate.der().clone(),
        issuer: rcgen::Issuer::new(int_p, int_k),
    }
}

impl Pki {
    /// A leaf for `name`, valid from 2026-01-01 to the start of `until`.
    fn leaf(&self, name: &str, until: (i32, u8, u8)) -> Vec<CertificateDer<'static>> {
        let mut p = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap();
        p.not_before = rcgen::date_time_ymd(2026, 1, 1);
        p.not_after = rcgen::date_time_ymd(until.0, until.1, until.2);
        let leaf = p
            .signed_by(&rcgen::KeyPair::generate().unwrap(), &self.issuer)
            .unwrap();
        vec![leaf.der().clone(), self.intermediate.clone()]
    }

    fn verifier(&self) -> (CachingVerifier, Arc<Counting>) {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let inner =
            WebPkiServerVerifier::builder_with_provider(Arc::new(self.root.clone()), provider)
                .build()
                .unwrap();
        let counting = Arc::new(Counting {
            inner,
            calls: AtomicUsize::new(0),
        });
        (CachingVerifier::new(counting.clone()), counting)
    }
}

/// Unix seconds of a day at midnight UTC.
fn day(y: i32, m: u8, d: u8) -> UnixTime {
    let t = rcgen::date_time_ymd(y, m, d).unix_timestamp();
    UnixTime::since_unix_epoch(Duration::from_secs(t as u64))
}

fn verify(
    v: &CachingVerifier,
    chain: &[CertificateDer<'static>],
    name: &str,
    now: UnixTime,
) -> Result<(), rustls::Error> {
    let name = ServerName::try_from(name.to_string()).unwrap();
    v.verify_server_cert(&chain[0], &chain[1..], &name, &[], now)
        .map(|_| ())
}

#[test]
fn the_same_chain_for_the_same_name_is_built_once() {
    let pki = pki("a");
    let chain = pki.leaf("a.test", (2027, 1, 1));
    let (v, inner) = pki.verifier();
    for d in 1..=20 {
        verify(&v, &chain, "a.test", day(2026, 6, d)).unwrap();
    }
    assert_eq!(inner.calls.load(Ordering::SeqCst), 1);
}

#[test]
fn an_expired_chain_is_caught_on_the_next_probe() {
    let pki = pki("a");
    let chain = pki.leaf("a.test", (2027, 1, 1));
    let (v, inner) = pki.verifier();
    verify(&v, &chain, "a.test", day(2026, 12, 31)).unwrap();
    let err = verify(&v, &chain, "a.test", day(2027, 1, 2)).unwrap_err();
    assert!(
        matches!(
            err,
            rustls::Error::InvalidCertificate(rustls::CertificateError::ExpiredContext { .. })
                | rustls::Error::InvalidCertificate(rustls::CertificateError::Expired)
        ),
        "{err:?}"
    );
    assert_eq!(inner.calls.load(Ordering::SeqCst), 2);
    // Not yet valid is caught as well (a clock set back, a chain of tomorrow).
    assert!(verify(&v, &chain, "a.test", day(2025, 6, 1)).is_err());
}

#[test]
fn the_intermediates_expiry_bounds_what_is_remembered() {
    let pki = pki("a");
    // The leaf outlives the intermediate (2040): the span ends with the latter.
    let chain = pki.leaf("a.test", (2045, 1, 1));
    let (v, _) = pki.verifier();
    verify(&v, &chain, "a.test", day(2030, 1, 1)).unwrap();
    assert!(verify(&v, &chain, "a.test", day(2041, 1, 1)).is_err());
}

#[test]
fn another_name_is_verified_in_full() {
    let pki = pki("a");
    let chain = pki.leaf("a.test", (2027, 1, 1));
    let (v, inner) = pki.verifier();
    verify(&v, &chain, "a.test", day(2026, 6, 1)).unwrap();
    assert!(verify(&v, &chain, "b.test", day(2026, 6, 1)).is_err());
    assert_eq!(inner.calls.load(Ordering::SeqCst), 2);
}

#[test]
fn a_replaced_chain_is_verified_in_full() {
    let trusted = pki("a");
    let stranger = pki("b");
    let (v, inner) = trusted.verifier();
    verify(
        &v,
        &trusted.leaf("a.test", (2027, 1, 1)),
        "a.test",
        day(2026, 6, 1),
    )
    .unwrap();
    // The same name, a chain from a CA nobody trusts.
    let forged = stranger.leaf("a.test", (2027, 1, 1));
    assert!(verify(&v, &forged, "a.test", day(2026, 6, 2)).is_err());
    // A new chain from the trusted CA (a renewal) is verified, then remembered.
    let renewed = trusted.leaf("a.test", (2028, 1, 1));
    verify(&v, &renewed, "a.test", day(2026, 6, 3)).unwrap();
    verify(&v, &renewed, "a.test", day(2026, 6, 4)).unwrap();
    assert_eq!(inner.calls.load(Ordering::SeqCst), 3);
}

#[test]
fn a_failure_is_never_remembered() {
    let trusted = pki("a");
    let stranger = pki("b");
    let (v, inner) = trusted.verifier();
    let forged = stranger.leaf("a.test", (2027, 1, 1));
    for d in 1..=3 {
        assert!(verify(&v, &forged, "a.test", day(2026, 6, d)).is_err());
    }
    assert_eq!(inner.calls.load(Ordering::SeqCst), 3);
    assert_eq!(v.len(), 0);
}

#[test]
fn the_cache_is_bounded() {
    let pki = pki("a");
    let (v, _) = pki.verifier();
    let chain = pki.leaf("a.test", (2027, 1, 1));
    let name = ServerName::try_from("a.test").unwrap();
    let now = day(2026, 6, 1);
    for i in 0..CACHE_LIMIT + 10 {
        // Distinct keys without making thousands of certificates: the OCSP
        // bytes are part of the key (webpki ignores them).
        let ocsp = (i as u64).to_be_bytes();
        v.verify_server_cert(&chain[0], &chain[1..], &name, &ocsp, now)
            .unwrap();
        assert!(v.len() <= CACHE_LIMIT);
    }
}
