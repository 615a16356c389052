//! Running one probe ([`Prober::probe`]): the deadline, the redirect loop,
//! the checks of the final response, and the [`Outcome`].

use std::time::Instant;

use super::checks;
use super::error::{HopError, Reason, Stop};
use super::message::Hop;
use super::outcome::{Outcome, Phase, human_duration};
use super::plan::{ProbePlan, Protocol};
use super::prober::Prober;
use super::redirect::next_hop;
use super::state::Probe;

impl Prober {
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
        let mut probe = Probe::new(self, plan, namespace, gate);
        let result = tokio::time::timeout(plan.timeout, probe.run()).await;
        let duration = started.elapsed();
        let (reason, message, status_code) = match result {
            Ok(Ok(done)) => {
                let (reason, message) = checks::latency(plan, done.said, duration);
                (reason, message, done.code)
            }
            Ok(Err(Stop::Failed(e))) => (e.reason, e.message, e.status_code),
            Ok(Err(Stop::GateClosed)) => return None,
            Err(_) => {
                let reason = match probe.phase {
                    Phase::Resolve => Reason::DnsError,
                    Phase::Checks => Reason::CheckTimeout,
                    Phase::Steps => Reason::UnexpectedResponse,
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
            grpc: probe.grpc,
        })
    }
}

/// A probe that passed its checks (the latency is checked after).
pub(super) struct Passed {
    /// The final response's HTTP status code.
    pub code: Option<u16>,
    /// What the Ready condition says: `HTTP 200`, `SERVING`, ...
    pub said: String,
}

impl Probe<'_> {
    async fn run(&mut self) -> Result<Passed, Stop> {
        let plan = self.plan;
        match &plan.protocol {
            Protocol::Http => {
                let code = self.http().await?;
                Ok(Passed {
                    code: Some(code),
                    said: format!("HTTP {code}"),
                })
            }
            Protocol::GrpcHealth { service } => self.grpc_health(service).await,
            Protocol::Tcp { steps } => self.tcp(steps).await,
        }
    }

    /// Hops until a final response and checks it; its status code.
    async fn http(&mut self) -> Result<u16, Stop> {
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
}
