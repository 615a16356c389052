//! The [`Prober`] (shared configuration) and one probe in progress
//! ([`Probe`]): the deadline, the redirect loop and the outcome.

use super::error::HopError;
use super::matcher::Matcher;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use http::HeaderValue;

use super::certs::ChainCache;
use super::checks;
use super::error::{Reason, Stop};
use super::hop::Hop;
use super::outcome::{Outcome, Phase, Phases, TlsFacts, human_duration};
use super::plan::{Http2, MinTlsVersion, ProbePlan};
use super::policy::AddressPolicy;
use super::proxy::EnvProxy;
use super::redirect::next_hop;
use super::resolve::Resolver;
use super::roots::Roots;
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
    /// handshake), one per `http2` mode (their ALPN), by [`Http2::index`].
    pub(super) verified: [Arc<rustls::ClientConfig>; 3],
    pub(super) unverified: [Arc<rustls::ClientConfig>; 3],
    /// The roots `verified` trusts (see [`Prober::set_roots`]).
    roots: Roots,
    /// Server certificate chains already parsed (certs.rs).
    pub(super) chains: ChainCache,
    /// Where the content checks run (matcher.rs); one thread unless replaced.
    pub matcher: Arc<Matcher>,
}

const MODES: [Http2; 3] = [Http2::Negotiate, Http2::Disabled, Http2::PriorKnowledge];

fn verified_configs(roots: &Roots) -> [Arc<rustls::ClientConfig>; 3] {
    MODES.map(|m| {
        Arc::new(
            client_config(Trust::Roots(roots.store()), MinTlsVersion::Tls12, None, m)
                .expect("ring supports TLS 1.2 and 1.3"),
        )
    })
}

impl Prober {
    pub fn new(identity: Option<&str>, policy: AddressPolicy, max_body_bytes: usize) -> Self {
        let roots = Roots::builtin();
        let verified = verified_configs(&roots);
        let unverified = MODES.map(|m| {
            Arc::new(
                client_config(Trust::AnyCertificate, MinTlsVersion::Tls12, None, m)
                    .expect("ring supports TLS 1.2 and 1.3"),
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
    /// Plans must be made with the same roots ([`crate::probe::plan_trusting`]).
    pub fn set_roots(&mut self, roots: Roots) {
        self.verified = verified_configs(&roots);
        self.roots = roots;
    }

    pub fn roots(&self) -> &Roots {
        &self.roots
    }

    /// Runs one probe under the plan's deadline. Never panics on any target.
    ///
    /// `namespace` is the checker's: the address policy may close private
    /// networks to it. `gate` is asked right before each request head is written (the
    /// request of every hop, a redirect's too, and a CONNECT to a proxy).
    /// When it answers false the probe ends there, that request is not sent,
    /// and the result is `None`: the probe did not happen. The operator's
    /// gate is its membership: a process paused after dispatch must not
    /// probe on resume.
    pub async fn probe(
        &self,
        plan: &ProbePlan,
        namespace: &str,
        gate: &(dyn Fn() -> bool + Sync),
    ) -> Option<Outcome> {
        let started = Instant::now();
        let mut probe = Probe {
            prober: self,
            plan,
            namespace,
            gate,
            phase: Phase::Resolve,
            phases: Phases::default(),
            tls: None,
            http_version: None,
            redirects: 0,
        };
        let result = tokio::time::timeout(plan.timeout, probe.run()).await;
        let duration = started.elapsed();
        let (reason, message, status_code) = match result {
            Ok(Ok(code)) => {
                let (reason, message) = checks::latency(plan, code, duration);
                (reason, message, Some(code))
            }
            Ok(Err(Stop::Failed(e))) => (e.reason, e.message, e.status_code),
            Ok(Err(Stop::GateClosed)) => return None,
            Err(_) => {
                let reason = match probe.phase {
                    Phase::Resolve => Reason::DnsError,
                    Phase::Checks => Reason::CheckTimeout,
                    _ => Reason::Timeout,
                };
                let message = format!(
                    "timed out after {} during {}",
                    human_duration(plan.timeout),
                    probe.phase.describe()
                );
                (reason, message, None)
            }
        };
        Some(Outcome {
            reason,
            message,
            status_code,
            duration,
            phases: probe.phases,
            cert_not_after: probe
                .tls
                .as_ref()
                .and_then(|t| t.chain.as_ref())
                .map(|c| c.earliest_not_after),
            tls: probe.tls,
            http_version: probe.http_version,
            redirects: probe.redirects,
        })
    }
}

/// One probe in progress. What it measures lives here rather than in the
/// deadline's future, so that a timeout still reports the phase it hit and
/// the times so far.
pub(super) struct Probe<'a> {
    pub prober: &'a Prober,
    pub plan: &'a ProbePlan,
    pub namespace: &'a str,
    gate: &'a (dyn Fn() -> bool + Sync),
    pub phase: Phase,
    pub phases: Phases,
    /// The last TLS handshake of the probe.
    pub tls: Option<TlsFacts>,
    /// Of the last response.
    pub http_version: Option<http::Version>,
    pub redirects: u32,
}

impl Probe<'_> {
    /// Hops until a final response and checks it; its status code.
    async fn run(&mut self) -> Result<u16, Stop> {
        let mut hop = Hop::first(self.plan);
        loop {
            let resp = self.hop(&hop).await?;
            self.http_version = Some(resp.version);
            match next_hop(self.plan, &hop, &resp, self.redirects)? {
                Some(next) => {
                    hop = next;
                    self.redirects += 1;
                }
                None => {
                    let code = resp.status.as_u16();
                    checks::head(self.plan, &resp)?;
                    if let Some(content) = checks::Content::of(self.plan, resp) {
                        self.phase = Phase::Checks;
                        let failure = self
                            .prober
                            .matcher
                            .run(self.namespace, move || content.failure())
                            .await
                            .unwrap_or_else(|| Some("the response checks could not run".into()));
                        if let Some(why) = failure {
                            return Err(HopError::new(Reason::BodyMismatch, why)
                                .with_status(code)
                                .into());
                        }
                    }
                    return Ok(code);
                }
            }
        }
    }

    /// Called right before a request head is written (see [`Prober::probe`]).
    pub(super) fn pass_gate(&self) -> Result<(), Stop> {
        if (self.gate)() {
            Ok(())
        } else {
            Err(Stop::GateClosed)
        }
    }
}
