//! The HTTP prober.
//!
//! Built on hyper's connection API rather than a pooled client, because a
//! monitoring probe must (a) open a fresh connection so connect and TLS times are
//! honest, (b) time every phase, and (c) check the address it actually connects
//! to against the forgery guard, on every redirect hop. The whole probe runs
//! under one deadline; dropping the future closes the socket.
//!
//! [`plan()`] turns a spec (plus the Secret and ConfigMap values it references,
//! resolved by the caller) into a [`ProbePlan`]; [`Prober::probe`] runs one.
//! Only `plan` reads the API types: the rest works on the plan alone.
//! docs/probes.md describes every field and reason.
//!
//! The parts of a probe, in order: `prober` (deadline, redirect loop,
//! outcome), `hop` (one request: proxy choice, forgery guard), `dial`
//! (resolution, address policy, connect), `proxy` (CONNECT tunnels), `tls`
//! (handshake), `exchange` (request and response), `redirect`, `checks`
//! (status, headers, body, JSON, latency); `error` and `outcome` are what a
//! probe reports.

mod checks;
mod dial;
mod error;
mod exchange;
mod hop;
mod outcome;
mod plan;
mod prober;
mod proxy;
mod redirect;
mod target;
mod tls;

pub use dial::{AddressPolicy, CONNECTION_ATTEMPT_DELAY};
pub use error::Reason;
pub use outcome::{Outcome, Phases, human_duration};
pub use plan::{
    AddressFamily, JsonCheckPlan, MinTlsVersion, ProbePlan, ProxyPlan, StatusSet, TlsConfig,
    TlsPlan, ValueRef, base64, plan, references,
};
pub use prober::Prober;
pub use proxy::{EnvProxy, proxy_target};
pub use target::Target;
