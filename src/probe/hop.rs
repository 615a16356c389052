//! One hop of a probe: pick the proxy, apply the forgery guard to the
//! addresses actually dialled, connect, tunnel, TLS, then the exchange.

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use bytes::Bytes;
use http::Method;

use super::dial::{CloseOnDrop, connect_any, resolve};
use super::error::{HopError, Reason, Stop, short_io};
use super::exchange::Response;
use super::outcome::Phase;
use super::plan::{ProbePlan, ProxyPlan};
use super::prober::Probe;
use super::target::Target;

/// The request of one hop: the checker's own, or one a redirect led to.
pub(super) struct Hop {
    pub target: Target,
    pub method: Method,
    pub body: Bytes,
}

impl Hop {
    pub fn first(plan: &ProbePlan) -> Self {
        Hop {
            target: plan.target.clone(),
            method: plan.method.clone(),
            body: plan.body.clone(),
        }
    }
}

impl Probe<'_> {
    pub(super) async fn hop(&mut self, hop: &Hop) -> Result<Response, Stop> {
        let target = &hop.target;
        let proxy = self.proxy_for(target)?;
        let policy = &self.prober.policy;
        // Behind a proxy the proxy resolves the target's name; a literal address
        // is still checked here.
        if proxy.is_some()
            && let Ok(ip) = target.host.parse::<IpAddr>()
            && !policy.permits(ip)
        {
            let what = format!("{} is an address the operator may not probe", target.host);
            return Err(self.forbidden(target, what).into());
        }
        let dial = proxy.as_ref().unwrap_or(target);

        self.phase = Phase::Resolve;
        let t = Instant::now();
        let resolved = resolve(
            &self.prober.static_hosts,
            &dial.host,
            dial.port,
            self.plan.ip_family,
        )
        .await;
        self.phases.resolve += t.elapsed();
        let allowed: Vec<SocketAddr> = resolved?
            .into_iter()
            .filter(|a| policy.permits(a.ip()))
            .collect();
        if allowed.is_empty() {
            let who = if proxy.is_some() { "the proxy " } else { "" };
            let what = if dial.host.parse::<IpAddr>().is_ok() {
                format!(
                    "{who}{} is an address the operator may not probe",
                    dial.host
                )
            } else {
                format!(
                    "{who}{} resolves only to addresses the operator may not probe",
                    dial.host
                )
            };
            return Err(self.forbidden(target, what).into());
        }

        self.phase = Phase::Connect;
        let t = Instant::now();
        let connected = connect_any(&allowed).await;
        let mut stream = match connected {
            Ok(s) => s,
            Err(e) => {
                self.phases.connect += t.elapsed();
                let what = if proxy.is_some() { "proxy " } else { "" };
                return Err(HopError::new(
                    Reason::ConnectError,
                    format!(
                        "cannot connect to {what}{}: {}",
                        dial.host_port(),
                        short_io(&e)
                    ),
                )
                .into());
            }
        };
        let _ = stream.set_nodelay(true);
        if proxy.is_some() && target.https {
            let tunnel = self.tunnel(&mut stream, target).await;
            self.phases.connect += t.elapsed();
            tunnel?;
        } else {
            self.phases.connect += t.elapsed();
        }

        if target.https {
            let tls = self.handshake(target, CloseOnDrop(stream)).await?;
            self.exchange(hop, tls, false).await
        } else {
            let absolute_form = proxy.is_some();
            self.exchange(hop, CloseOnDrop(stream), absolute_form).await
        }
    }

    /// The proxy of this hop, if any.
    fn proxy_for(&self, target: &Target) -> Result<Option<Target>, HopError> {
        match &self.plan.proxy {
            ProxyPlan::Direct => Ok(None),
            ProxyPlan::Url(p) => Ok(Some(p.clone())),
            ProxyPlan::FromEnvironment => match self.prober.env_proxy.for_target(target) {
                None => Ok(None),
                Some(Ok(p)) => Ok(Some(p.clone())),
                Some(Err(e)) => Err(HopError::new(
                    Reason::InvalidSpec,
                    format!("the operator's proxy environment is not usable: {e}"),
                )),
            },
        }
    }

    /// A Forbidden failure; names the hop when it is not the checker's own URL
    /// (a redirect).
    fn forbidden(&self, target: &Target, message: String) -> HopError {
        let message = if *target == self.plan.target {
            message
        } else {
            format!("redirected to {}: {message}", target.url())
        };
        HopError::new(Reason::Forbidden, message)
    }
}
