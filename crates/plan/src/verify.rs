//! Certificate verification that does not build the same chain twice: most
//! probes see byte for byte the chain they saw last time, and path building
//! and the chain's signatures are most of a TLS probe's verification cost.
//!
//! A chain that verified for a server name is remembered (keyed by the
//! presented certificates, the name and the OCSP response; one cache per
//! set of trust roots) with the span in which every presented certificate is
//! valid. A later handshake presenting the same bytes for the same name, at
//! an instant inside that span, is accepted without building the path
//! again; anything else (another chain, another name, an instant past a
//! notAfter) is verified in full. Failures are never remembered. The
//! handshake's own signature, which proves the server holds the key now, is
//! checked on every handshake.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use rustls::DigitallySignedStruct;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

/// Chains remembered per verifier; the cache starts over when full.
const CACHE_LIMIT: usize = 4096;
/// Presented certificates looked at: a longer chain is verified every time.
const MAX_PRESENTED: usize = 10;

/// Seconds since the epoch in which every presented certificate is valid.
#[derive(Clone, Copy, Debug)]
struct Span {
    not_before: u64,
    not_after: u64,
}

impl Span {
    /// As webpki judges it: valid from notBefore to notAfter, both included.
    fn contains(&self, now: UnixTime) -> bool {
        let t = now.as_secs();
        self.not_before <= t && t <= self.not_after
    }
}

pub struct CachingVerifier {
    inner: Arc<dyn ServerCertVerifier>,
    verified: Mutex<HashMap<[u8; 32], Span>>,
}

impl fmt::Debug for CachingVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachingVerifier")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl CachingVerifier {
    pub fn new(inner: Arc<dyn ServerCertVerifier>) -> Self {
        CachingVerifier {
            inner,
            verified: Mutex::new(HashMap::new()),
        }
    }

    fn remembered(&self, key: &[u8; 32]) -> Option<Span> {
        self.verified
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .copied()
    }

    fn remember(&self, key: [u8; 32], span: Span) {
        let mut g = self.verified.lock().unwrap_or_else(|e| e.into_inner());
        if g.len() >= CACHE_LIMIT && !g.contains_key(&key) {
            g.clear();
        }
        g.insert(key, span);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.verified.lock().unwrap().len()
    }
}

/// The cache key: SHA-256 over the name, the certificates and the OCSP
/// response, each with its length (no two inputs share an encoding).
fn key(
    end_entity: &CertificateDer<'_>,
    intermediates: &[CertificateDer<'_>],
    name: &ServerName<'_>,
    ocsp: &[u8],
) -> [u8; 32] {
    let mut ctx = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
    let mut part = |bytes: &[u8]| {
        ctx.update(&(bytes.len() as u64).to_be_bytes());
        ctx.update(bytes);
    };
    part(format!("{name:?}").as_bytes());
    part(ocsp);
    part(end_entity.as_ref());
    for c in intermediates {
        part(c.as_ref());
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

/// The span in which every presented certificate is valid; None when one
/// does not parse (then nothing is remembered).
fn span(end_entity: &CertificateDer<'_>, intermediates: &[CertificateDer<'_>]) -> Option<Span> {
    if intermediates.len() + 1 > MAX_PRESENTED {
        return None;
    }
    let mut s = Span {
        not_before: 0,
        not_after: u64::MAX,
    };
    for der in std::iter::once(end_entity).chain(intermediates) {
        let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref()).ok()?;
        let v = cert.validity();
        let from = u64::try_from(v.not_before.timestamp()).unwrap_or(0);
        let until = u64::try_from(v.not_after.timestamp()).ok()?;
        s.not_before = s.not_before.max(from);
        s.not_after = s.not_after.min(until);
    }
    Some(s)
}

impl ServerCertVerifier for CachingVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let key = key(end_entity, intermediates, server_name, ocsp_response);
        if self.remembered(&key).is_some_and(|s| s.contains(now)) {
            return Ok(ServerCertVerified::assertion());
        }
        let verified = self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )?;
        if let Some(s) = span(end_entity, intermediates)
            && s.contains(now)
        {
            self.remember(key, s);
        }
        Ok(verified)
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

    fn root_hint_subjects(&self) -> Option<&[rustls::DistinguishedName]> {
        self.inner.root_hint_subjects()
    }
}

#[cfg(test)]
mod tests;
