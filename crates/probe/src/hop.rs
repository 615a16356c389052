//! One hop of a probe: pick the proxy, apply the forgery guard to the
//! target behind a proxy and to the addresses actually dialled, connect,
//! tunnel, TLS, then the exchange.

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use tokio::net::TcpStream;

use super::dial::{CloseOnDrop, connect_any, resolve};
use super::error::{HopError, Reason, Stop, short_io};
use super::message::{Hop, Response};
use super::outcome::Phase;
use super::plan::{AddressFamily, Http2, ProxyPlan};
use super::policy::Scope;
use super::state::Probe;
use super::target::Target;

/// The proxy of a hop, and whether the admin chose it (the operator's
/// environment) rather than the checker's author (`proxy.url`).
struct Proxy {
    target: Target,
    admin: bool,
}

impl Probe<'_> {
    pub(super) async fn hop(&mut self, hop: &Hop) -> Result<Response, Stop> {
        match self.hop_inner(hop).await {
            Err(Stop::Failed(e)) => Err(Stop::Failed(hop.failure(e))),
            other => other,
        }
    }

    async fn hop_inner(&mut self, hop: &Hop) -> Result<Response, Stop> {
        let target = &hop.target;
        let name = hop.host_name();
        let proxy = self.proxy_for(target)?;
        if proxy.is_some() {
            self.check_proxied(target, &name).await?;
        }
        let direct = self.direct(hop);
        let (dial, scope) = match &proxy {
            Some(p) if p.admin => (&p.target, Scope::Admin),
            Some(p) => (&p.target, Scope::Namespace(self.namespace)),
            None => (&direct.0, Scope::Namespace(self.namespace)),
        };
        // The proxy comes from the spec or the operator: it may be named.
        let dial_name = match &proxy {
            Some(p) => p.target.host.clone(),
            None => direct.1.clone(),
        };
        let allowed = self
            .allowed_addresses(dial, &dial_name, scope, proxy.is_some())
            .await?;
        let stream = self.open(hop, &name, &allowed, proxy.as_ref()).await?;
        self.speak(hop, stream, proxy.is_some()).await
    }

    /// Connects straight to the plan's target, for the checks that are not
    /// HTTP (no proxy): the forgery guard, then the gate, since for them
    /// connecting is already probing.
    pub(super) async fn dial(&mut self, hop: &Hop) -> Result<TcpStream, Stop> {
        let name = hop.host_name();
        let scope = Scope::Namespace(self.namespace);
        let (dial, dial_name) = self.direct(hop);
        let allowed = self
            .allowed_addresses(&dial, &dial_name, scope, false)
            .await?;
        self.pass_gate()?;
        self.open(hop, &name, &allowed, None).await
    }

    /// Where a hop without a proxy connects, and how messages name it: the
    /// hop's target, or on the checker's own origin with `connectTo` that
    /// address on the target's port (the request still names the target).
    fn direct(&self, hop: &Hop) -> (Target, String) {
        match &self.plan.connect_to {
            Some(to) if hop.own_origin => (
                Target {
                    host: to.trim_end_matches('.').to_string(),
                    absolute: to.ends_with('.'),
                    ..hop.target.clone()
                },
                format!("connectTo {to}"),
            ),
            _ => (hop.target.clone(), hop.host_name()),
        }
    }

    /// The addresses of `dial` the forgery guard allows in `scope`. Denied
    /// ones are skipped; when none is left, the first denial explains the
    /// refusal. `proxied`: `dial` is the hop's proxy.
    async fn allowed_addresses(
        &mut self,
        dial: &Target,
        dial_name: &str,
        scope: Scope<'_>,
        proxied: bool,
    ) -> Result<Vec<SocketAddr>, Stop> {
        self.phase = Phase::Resolve;
        let t = Instant::now();
        let resolved = resolve(
            &self.prober.static_hosts,
            &self.prober.resolver,
            &dial.lookup_name(),
            dial_name,
            dial.port,
            self.plan.ip_family,
        )
        .await;
        self.phases.resolve += t.elapsed();
        let mut denied = None;
        let allowed: Vec<SocketAddr> = resolved?
            .into_iter()
            .filter(|a| match self.prober.policy.judge(*a, scope) {
                Ok(()) => true,
                Err(d) => {
                    denied.get_or_insert(d);
                    false
                }
            })
            .collect();
        // `resolve` returns at least one address: nothing allowed means
        // something denied.
        if let (true, Some(why)) = (allowed.is_empty(), denied) {
            let who = if proxied { "the proxy " } else { "" };
            let what = if dial.host.parse::<IpAddr>().is_ok() {
                // An address written in the spec (or a Location): say all.
                let shown = if why.why.port_specific() && dial_name == dial.host {
                    dial.host_port()
                } else {
                    dial_name.to_string()
                };
                format!("{who}{shown} is an address the operator may not probe ({why})")
            } else {
                // What a name resolves to is the resolver's business, not
                // the checker author's: only the class is said.
                format!(
                    "{who}{dial_name} resolves only to addresses the operator may not probe ({})",
                    why.why
                )
            };
            return Err(HopError::new(Reason::Forbidden, what).into());
        }
        Ok(allowed)
    }

    /// Connects to the first of `allowed` that answers, then through `proxy`
    /// (when the hop has one and its target is https) opens the tunnel: both
    /// count as connect time. `name` is how messages call the target.
    async fn open(
        &mut self,
        hop: &Hop,
        name: &str,
        allowed: &[SocketAddr],
        proxy: Option<&Proxy>,
    ) -> Result<TcpStream, Stop> {
        let target = &hop.target;
        self.phase = Phase::Connect;
        let t = Instant::now();
        let connected = connect_any(allowed).await;
        let mut stream = match connected {
            Ok(s) => s,
            Err(e) => {
                self.phases.connect += t.elapsed();
                let what = match proxy {
                    Some(p) => format!("proxy {}", p.target.host_port()),
                    None if hop.own_origin => match &self.plan.connect_to {
                        Some(to) => format!("{} through connectTo {to}", target.host_port()),
                        None => target.host_port(),
                    },
                    None => name.to_string(),
                };
                return Err(HopError::new(
                    Reason::ConnectError,
                    format!("cannot connect to {what}: {}", short_io(&e)),
                )
                .into());
            }
        };
        let _ = stream.set_nodelay(true);
        if proxy.is_some() && target.https {
            let tunnel = self.tunnel(&mut stream, target, name).await;
            self.phases.connect += t.elapsed();
            tunnel?;
        } else {
            self.phases.connect += t.elapsed();
        }
        Ok(stream)
    }

    /// The hop's request and response over a connected `stream`: TLS first
    /// for https, then HTTP/1.1 or HTTP/2. `proxied`: `stream` leads to the
    /// hop's proxy (for https, through its tunnel).
    async fn speak(
        &mut self,
        hop: &Hop,
        stream: TcpStream,
        proxied: bool,
    ) -> Result<Response, Stop> {
        if hop.target.https {
            let tls = self
                .handshake(&hop.target, hop.own_origin, CloseOnDrop(stream))
                .await?;
            let h2 = match self.plan.http2 {
                Http2::Negotiate => tls.get_ref().1.alpn_protocol() == Some(b"h2"),
                Http2::Disabled => false,
                // Offered alone; a server that ignores ALPN gets it anyway.
                Http2::PriorKnowledge => true,
            };
            self.exchange(hop, tls, false, h2).await
        } else {
            // An HTTP proxy forwards HTTP/1.1 requests: no h2c through it.
            let absolute_form = proxied;
            let h2 = self.plan.http2 == Http2::PriorKnowledge && !absolute_form;
            self.exchange(hop, CloseOnDrop(stream), absolute_form, h2)
                .await
        }
    }

    /// Behind a proxy the proxy connects to the target, so the guard judges
    /// the target before the proxy is asked for it: a literal address always,
    /// a name by resolving it here (unless `--check-proxied-targets=false`)
    /// and refusing it when any of its addresses is denied, since the proxy
    /// may pick any of them. The proxy resolves the name again: a name whose
    /// answers change between the two lookups is the proxy's to police.
    async fn check_proxied(&mut self, target: &Target, name: &str) -> Result<(), Stop> {
        let policy = &self.prober.policy;
        let scope = Scope::Namespace(self.namespace);
        if let Ok(ip) = target.host.parse::<IpAddr>() {
            return match policy.judge(SocketAddr::new(ip, target.port), scope) {
                Ok(()) => Ok(()),
                Err(why) => {
                    let shown = if why.why.port_specific() && name == target.host {
                        target.host_port()
                    } else {
                        name.to_string()
                    };
                    let what = format!("{shown} is an address the operator may not probe ({why})");
                    Err(HopError::new(Reason::Forbidden, what).into())
                }
            };
        }
        if !policy.check_proxied_targets {
            return Ok(());
        }
        self.phase = Phase::Resolve;
        let t = Instant::now();
        let resolved = resolve(
            &self.prober.static_hosts,
            &self.prober.resolver,
            &target.lookup_name(),
            name,
            target.port,
            AddressFamily::Auto,
        )
        .await;
        self.phases.resolve += t.elapsed();
        let addrs = resolved.map_err(|mut e| {
            e.message.push_str(
                " (the operator resolves a proxied target to check its addresses; \
                 --check-proxied-targets=false leaves that to the proxy)",
            );
            e
        })?;
        if let Some(why) = addrs.iter().find_map(|a| policy.judge(*a, scope).err()) {
            let what = format!(
                "{name} resolves to an address the operator may not probe ({}); \
                 the proxy was not asked",
                why.why
            );
            return Err(HopError::new(Reason::Forbidden, what).into());
        }
        Ok(())
    }

    /// The proxy of this hop, if any.
    fn proxy_for(&self, target: &Target) -> Result<Option<Proxy>, HopError> {
        match &self.plan.proxy {
            ProxyPlan::Direct => Ok(None),
            ProxyPlan::Url(p) => Ok(Some(Proxy {
                target: p.clone(),
                admin: false,
            })),
            ProxyPlan::FromEnvironment => match self.prober.env_proxy.for_target(target) {
                None => Ok(None),
                Some(Ok(p)) => Ok(Some(Proxy {
                    target: p.clone(),
                    admin: true,
                })),
                Some(Err(e)) => Err(HopError::new(
                    Reason::InvalidSpec,
                    format!("the operator's proxy environment is not usable: {e}"),
                )),
            },
        }
    }
}
