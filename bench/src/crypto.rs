//! The rustls providers part 1 runs our prober's worker with: the
//! operator's (`webchecker::probe::crypto_provider`, aws-lc-rs), ring (when
//! the bench is built with its `ring` feature, as `make bench` does), and
//! either of them timed: key exchange and signature verification wrapped so
//! that the CPU time spent in them is counted (the CPU split of a TLS probe).
//! Only the worker installs these; the operator never sees them.

use std::sync::atomic::{AtomicU64, Ordering};

use rustls::crypto::{
    ActiveKeyExchange, CryptoProvider, SharedSecret, SupportedKxGroup, WebPkiSupportedAlgorithms,
};
use rustls::pki_types::{AlgorithmIdentifier, InvalidSignature, SignatureVerificationAlgorithm};
use rustls::{Error, NamedGroup, SignatureScheme};

/// The providers a worker can run with, by name: the operator's first.
pub fn names() -> Vec<&'static str> {
    let mut v = vec!["aws-lc-rs"];
    if cfg!(feature = "ring") {
        v.push("ring");
    }
    v
}

/// The provider called `name` (see [`names`]); `None` if not compiled in.
/// ring gets the operator's preferences (X25519 first, the same suites in
/// the same order): the comparison is of the same handshake.
pub fn provider(name: &str) -> Option<CryptoProvider> {
    match name {
        "aws-lc-rs" => Some(webchecker::probe::crypto_provider()),
        #[cfg(feature = "ring")]
        "ring" => Some(webchecker::probe::operator_preferences(
            rustls::crypto::ring::default_provider(),
        )),
        _ => None,
    }
}

/// CPU time (ns) and calls counted by the timed provider since [`reset`].
static KX_NS: AtomicU64 = AtomicU64::new(0);
static KX_CALLS: AtomicU64 = AtomicU64::new(0);
static SIG_NS: AtomicU64 = AtomicU64::new(0);
static SIG_CALLS: AtomicU64 = AtomicU64::new(0);

/// What the timed provider counted: key exchange ns, key exchanges started,
/// signature verification ns, signatures verified.
pub fn counted() -> [u64; 4] {
    [&KX_NS, &KX_CALLS, &SIG_NS, &SIG_CALLS].map(|c| c.load(Ordering::Relaxed))
}

pub fn reset() {
    for c in [&KX_NS, &KX_CALLS, &SIG_NS, &SIG_CALLS] {
        c.store(0, Ordering::Relaxed);
    }
}

/// The calling thread's CPU time in ns: a preemption inside a timed call
/// (the core is shared with the target's loopback work and other processes)
/// does not count, as it would with a wall clock.
fn thread_cpu_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn timed<T>(ns: &AtomicU64, f: impl FnOnce() -> T) -> T {
    let t = thread_cpu_ns();
    let r = f();
    ns.fetch_add(thread_cpu_ns().saturating_sub(t), Ordering::Relaxed);
    r
}

/// `p` with its key exchange groups and signature verification algorithms
/// timed. Leaks the wrappers (once per worker process).
pub fn timed_provider(p: CryptoProvider) -> CryptoProvider {
    fn sig(
        a: &'static dyn SignatureVerificationAlgorithm,
    ) -> &'static dyn SignatureVerificationAlgorithm {
        Box::leak(Box::new(TimedSig(a)))
    }
    let algs = p.signature_verification_algorithms;
    let all: Vec<_> = algs.all.iter().map(|a| sig(*a)).collect();
    let mapping: Vec<(
        SignatureScheme,
        &'static [&'static dyn SignatureVerificationAlgorithm],
    )> = algs
        .mapping
        .iter()
        .map(|(scheme, list)| {
            let list: Vec<_> = list.iter().map(|a| sig(*a)).collect();
            (*scheme, &*Box::leak(list.into_boxed_slice()))
        })
        .collect();
    CryptoProvider {
        kx_groups: p
            .kx_groups
            .iter()
            .map(|g| &*Box::leak(Box::new(TimedKx(*g))) as &'static dyn SupportedKxGroup)
            .collect(),
        signature_verification_algorithms: WebPkiSupportedAlgorithms {
            all: Box::leak(all.into_boxed_slice()),
            mapping: Box::leak(mapping.into_boxed_slice()),
        },
        ..p
    }
}

#[derive(Debug)]
struct TimedKx(&'static dyn SupportedKxGroup);

impl SupportedKxGroup for TimedKx {
    fn start(&self) -> Result<Box<dyn ActiveKeyExchange>, Error> {
        KX_CALLS.fetch_add(1, Ordering::Relaxed);
        let kx = timed(&KX_NS, || self.0.start())?;
        Ok(Box::new(TimedActive(kx)))
    }

    fn ffdhe_group(&self) -> Option<rustls::ffdhe_groups::FfdheGroup<'static>> {
        self.0.ffdhe_group()
    }

    fn name(&self) -> NamedGroup {
        self.0.name()
    }

    fn fips(&self) -> bool {
        self.0.fips()
    }

    fn usable_for_version(&self, version: rustls::ProtocolVersion) -> bool {
        self.0.usable_for_version(version)
    }
}

struct TimedActive(Box<dyn ActiveKeyExchange>);

impl ActiveKeyExchange for TimedActive {
    fn complete(self: Box<Self>, peer_pub_key: &[u8]) -> Result<SharedSecret, Error> {
        timed(&KX_NS, || self.0.complete(peer_pub_key))
    }

    fn complete_for_tls_version(
        self: Box<Self>,
        peer_pub_key: &[u8],
        tls_version: &rustls::SupportedProtocolVersion,
    ) -> Result<SharedSecret, Error> {
        timed(&KX_NS, || {
            self.0.complete_for_tls_version(peer_pub_key, tls_version)
        })
    }

    fn hybrid_component(&self) -> Option<(NamedGroup, &[u8])> {
        self.0.hybrid_component()
    }

    fn complete_hybrid_component(
        self: Box<Self>,
        peer_pub_key: &[u8],
    ) -> Result<SharedSecret, Error> {
        timed(&KX_NS, || self.0.complete_hybrid_component(peer_pub_key))
    }

    fn pub_key(&self) -> &[u8] {
        self.0.pub_key()
    }

    fn ffdhe_group(&self) -> Option<rustls::ffdhe_groups::FfdheGroup<'static>> {
        self.0.ffdhe_group()
    }

    fn group(&self) -> NamedGroup {
        self.0.group()
    }
}

#[derive(Debug)]
struct TimedSig(&'static dyn SignatureVerificationAlgorithm);

impl SignatureVerificationAlgorithm for TimedSig {
    fn verify_signature(
        &self,
        public_key: &[u8],
        message: &[u8],
        signature: &[u8],
    ) -> Result<(), InvalidSignature> {
        SIG_CALLS.fetch_add(1, Ordering::Relaxed);
        timed(&SIG_NS, || {
            self.0.verify_signature(public_key, message, signature)
        })
    }

    fn public_key_alg_id(&self) -> AlgorithmIdentifier {
        self.0.public_key_alg_id()
    }

    fn signature_alg_id(&self) -> AlgorithmIdentifier {
        self.0.signature_alg_id()
    }

    fn fips(&self) -> bool {
        self.0.fips()
    }
}
