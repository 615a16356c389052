//! What the certificates a server presented say: the chain from the leaf
//! along issuer names, its earliest notAfter, and per certificate the facts
//! the `webchecker_certificate_info` series carries. Parsed once per distinct
//! chain and shared: most probes see the chain they saw last time.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex};

use rustls::pki_types::CertificateDer;

/// Certificates of a chain that are described (leaf first); the earliest
/// notAfter still counts every certificate on the path.
pub const MAX_CHAIN_INFO: usize = 4;
/// Certificates of what a server sent that are looked at, at most.
const MAX_PRESENTED: usize = 10;
/// Distinct chains remembered by a prober; the cache starts over when full.
const CACHE_LIMIT: usize = 4096;
/// Longest subject or issuer kept (they become label values).
const MAX_NAME: usize = 256;

/// One certificate of a chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertFacts {
    pub subject: String,
    pub issuer: String,
    /// Serial number, lower-case hex.
    pub serial: String,
    /// SHA-256 of the DER, lower-case hex.
    pub fingerprint_sha256: String,
    /// Unix seconds.
    pub not_after: i64,
}

/// The chain of one handshake: from the leaf, each next certificate the one
/// (among those the server sent) whose subject is the previous one's issuer,
/// up to a self-signed one, which is left out (a copy of a root: the
/// verifier ends the path at its trust anchor, whose validity it does not
/// check). This is the path the verifier took; other certificates the server
/// sent are ignored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chain {
    /// The earliest notAfter of the path (unix seconds).
    pub earliest_not_after: i64,
    /// Position in `certificates` of the one that expires first.
    pub earliest: usize,
    /// The first [`MAX_CHAIN_INFO`] certificates of the path, leaf first.
    pub certificates: Vec<CertFacts>,
}

struct Parsed<'a> {
    cert: x509_parser::certificate::X509Certificate<'a>,
    der: &'a [u8],
}

/// The chain of `presented` (leaf first, as a server sends it); `None` when
/// the leaf cannot be parsed.
pub fn chain(presented: &[CertificateDer<'_>]) -> Option<Chain> {
    let mut parsed: Vec<Option<Parsed<'_>>> = presented
        .iter()
        .take(MAX_PRESENTED)
        .map(|der| {
            x509_parser::parse_x509_certificate(der.as_ref())
                .ok()
                .map(|(_, cert)| Parsed {
                    cert,
                    der: der.as_ref(),
                })
        })
        .collect();
    let leaf = parsed.first_mut()?.take()?;
    let mut path = vec![leaf];
    loop {
        let issuer = path[path.len() - 1].cert.issuer().as_raw();
        let next = parsed.iter_mut().find(|p| {
            p.as_ref().is_some_and(|p| {
                p.cert.subject().as_raw() == issuer && p.cert.issuer().as_raw() != issuer
            })
        });
        match next.and_then(Option::take) {
            Some(p) => path.push(p),
            None => break,
        }
    }
    let not_after: Vec<i64> = path
        .iter()
        .map(|p| p.cert.validity().not_after.timestamp())
        .collect();
    let (earliest, &earliest_not_after) = not_after
        .iter()
        .enumerate()
        .min_by_key(|(_, t)| **t)
        .expect("the path has a leaf");
    let certificates = path
        .iter()
        .zip(&not_after)
        .take(MAX_CHAIN_INFO)
        .map(|(p, &not_after)| CertFacts {
            subject: name(p.cert.subject()),
            issuer: name(p.cert.issuer()),
            serial: hex(p.cert.tbs_certificate.raw_serial()),
            fingerprint_sha256: hex(
                aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, p.der).as_ref()
            ),
            not_after,
        })
        .collect();
    Some(Chain {
        earliest_not_after,
        earliest,
        certificates,
    })
}

fn name(n: &x509_parser::x509::X509Name<'_>) -> String {
    let mut s = n.to_string();
    if s.len() > MAX_NAME {
        let mut cut = MAX_NAME;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes.iter().take(64) {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// Chains already parsed, by a keyed hash of the certificates a server sent
/// (keyed per process, so a server cannot make two chains collide).
#[derive(Default)]
pub struct ChainCache {
    hasher: RandomState,
    chains: Mutex<HashMap<u64, Arc<Chain>>>,
}

impl ChainCache {
    pub fn get(&self, presented: &[CertificateDer<'_>]) -> Option<Arc<Chain>> {
        let key = self.hasher.hash_one(presented);
        if let Some(c) = self.lock().get(&key) {
            return Some(c.clone());
        }
        let c = Arc::new(chain(presented)?);
        let mut map = self.lock();
        if map.len() >= CACHE_LIMIT {
            map.clear();
        }
        map.insert(key, c.clone());
        Some(c)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Chain>>> {
        self.chains.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ca(name: &str) -> (rcgen::CertificateParams, rcgen::KeyPair) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(rcgen::DnType::CommonName, name);
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        (p, key)
    }

    #[test]
    fn the_path_follows_issuers_and_its_earliest_expiry_wins() {
        let (root_p, root_k) = ca("root");
        let root = root_p.clone().self_signed(&root_k).unwrap();
        let root_issuer = rcgen::Issuer::new(root_p, root_k);
        let (mut int_p, int_k) = ca("intermediate");
        int_p.not_after = rcgen::date_time_ymd(2031, 1, 1);
        let int = int_p.clone().signed_by(&int_k, &root_issuer).unwrap();
        let int_issuer = rcgen::Issuer::new(int_p, int_k);
        let mut leaf_p = rcgen::CertificateParams::new(vec!["a.test".to_string()]).unwrap();
        leaf_p.not_after = rcgen::date_time_ymd(2032, 1, 1);
        leaf_p.serial_number = Some(vec![0x01, 0xab].into());
        let leaf = leaf_p
            .signed_by(&rcgen::KeyPair::generate().unwrap(), &int_issuer)
            .unwrap();
        let (stray_p, stray_k) = ca("stray");
        let stray = stray_p.self_signed(&stray_k).unwrap();

        // Sent out of order, with a stray certificate and the root.
        let sent = vec![
            leaf.der().clone(),
            stray.der().clone(),
            root.der().clone(),
            int.der().clone(),
        ];
        let c = chain(&sent).unwrap();
        assert_eq!(c.certificates.len(), 2, "{c:?}");
        assert_eq!(c.certificates[0].issuer, "CN=intermediate");
        assert_eq!(c.certificates[0].serial, "01ab");
        assert_eq!(c.certificates[1].subject, "CN=intermediate");
        assert_eq!(c.certificates[1].issuer, "CN=root");
        assert_eq!(c.earliest, 1);
        assert_eq!(c.earliest_not_after, c.certificates[1].not_after);
        assert_eq!(c.certificates[0].fingerprint_sha256.len(), 64);
        assert_ne!(
            c.certificates[0].fingerprint_sha256,
            c.certificates[1].fingerprint_sha256
        );

        // A self-signed leaf is its own chain.
        let c = chain(&[stray.der().clone()]).unwrap();
        assert_eq!((c.certificates.len(), c.earliest), (1, 0));
        assert!(chain(&[CertificateDer::from(vec![1, 2, 3])]).is_none());
    }

    #[test]
    fn the_cache_hands_out_one_parse_per_chain() {
        let (p, k) = ca("x");
        let one = vec![p.self_signed(&k).unwrap().der().clone()];
        let (p, k) = ca("y");
        let two = vec![p.self_signed(&k).unwrap().der().clone()];
        let cache = ChainCache::default();
        let a = cache.get(&one).unwrap();
        assert!(Arc::ptr_eq(&a, &cache.get(&one).unwrap()));
        assert!(!Arc::ptr_eq(&a, &cache.get(&two).unwrap()));
    }
}
