//! The [`Prober`]: the configuration every probe shares, built once. A probe
//! in progress is state.rs; running one is run.rs.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use http::HeaderValue;

use super::certs::ChainCache;
use super::env_proxy::EnvProxy;
use super::matcher::Matcher;
use super::policy::AddressPolicy;
use super::resolve::Resolver;
use super::roots::Roots;
use super::tls::{Alpn, MinTlsVersion};
use super::tls::{Trust, client_config};

/// Shared, immutable prober configuration.
pub struct Prober {
    pub user_agent: HeaderValue,
    pub replica_header: Option<HeaderValue>,
    pub policy: AddressPolicy,
    pub max_body_bytes: usize,
    /// Proxy settings for `proxy.fromEnvironment`, read from the environment by [`Prober::new`].
    pub env_proxy: EnvProxy,
    /// Names answered without the system resolver, like entries of /etc/hosts
    /// (empty in the operator; tests use it for dual-stack names).
    pub static_hosts: HashMap<String, Vec<IpAddr>>,
    /// Everything else that is not an address: the hosts file, then DNS.
    /// [`Resolver::system`] unless replaced (the operator builds it from
    /// `--resolv-conf` and `--hosts-file`; tests point it at their own server).
    pub resolver: Arc<Resolver>,
    /// The configurations of checkers without TLS options of their own,
    /// built once (building one per probe would cost more than the
    /// handshake), one per ALPN offer, by [`Alpn::index`].
    pub(super) verified: [Arc<rustls::ClientConfig>; 4],
    pub(super) unverified: [Arc<rustls::ClientConfig>; 4],
    /// The roots `verified` trusts (see [`Prober::set_roots`]).
    roots: Roots,
    /// Server certificate chains already parsed (certs.rs).
    pub(super) chains: ChainCache,
    /// Where the content checks run (matcher.rs); one thread unless replaced.
    pub matcher: Arc<Matcher>,
}

fn verified_configs(roots: &Roots) -> [Arc<rustls::ClientConfig>; 4] {
    Alpn::ALL.map(|m| {
        Arc::new(
            client_config(Trust::Roots(roots.store()), MinTlsVersion::Tls12, None, m)
                .expect("the provider supports TLS 1.2 and 1.3"),
        )
    })
}

impl Prober {
    pub fn new(identity: Option<&str>, policy: AddressPolicy, max_body_bytes: usize) -> Self {
        let roots = Roots::builtin();
        let verified = verified_configs(&roots);
        let unverified = Alpn::ALL.map(|m| {
            Arc::new(
                client_config(Trust::AnyCertificate, MinTlsVersion::Tls12, None, m)
                    .expect("the provider supports TLS 1.2 and 1.3"),
            )
        });
        Prober {
            user_agent: HeaderValue::from_str(&format!(
                "webchecker-operator/{}",
                env!("CARGO_PKG_VERSION")
            ))
            .expect("version is ASCII"),
            replica_header: identity.and_then(|i| HeaderValue::from_str(i).ok()),
            policy,
            max_body_bytes,
            env_proxy: EnvProxy::from_env(),
            static_hosts: Default::default(),
            resolver: Arc::new(Resolver::system()),
            verified,
            unverified,
            roots,
            chains: ChainCache::default(),
            matcher: Arc::new(Matcher::new(1)),
        }
    }

    /// Default verification (checkers without a `caBundle`, and every origin
    /// a redirect leads to) trusts `roots`: the operator's `--ca-bundle`.
    /// Plans must be made with the same roots ([`crate::plan_trusting`]).
    pub fn set_roots(&mut self, roots: Roots) {
        self.verified = verified_configs(&roots);
        self.roots = roots;
    }

    pub fn roots(&self) -> &Roots {
        &self.roots
    }
}
