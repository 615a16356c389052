//! One probe in progress ([`Probe`]): what it has measured so far, and the
//! gate asked before each request head. The steps of a probe (hop.rs,
//! tunnel.rs, handshake.rs, exchange.rs) are its methods.

use super::error::Stop;
use super::outcome::{GrpcFacts, Phase, Phases, TlsFacts};
use super::plan::ProbePlan;
use super::prober::Prober;

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
    /// The answer of a gRPC health check.
    pub grpc: Option<GrpcFacts>,
}

impl<'a> Probe<'a> {
    /// A probe of `plan` that has not started: nothing measured yet.
    pub(super) fn new(
        prober: &'a Prober,
        plan: &'a ProbePlan,
        namespace: &'a str,
        gate: &'a (dyn Fn() -> bool + Sync),
    ) -> Self {
        Probe {
            prober,
            plan,
            namespace,
            gate,
            phase: Phase::Resolve,
            phases: Phases::default(),
            tls: None,
            http_version: None,
            redirects: 0,
            grpc: None,
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
