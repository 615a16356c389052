//! The prober: HTTP, and the gRPC health, tcp and tls checks.
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
//! What a probe reads and reports (the plan, the outcome, the forgery
//! guard's policy, the checks of a response) is `crates/plan`, with no I/O.
//! The files here, in layers from the bottom up; a file uses files of its
//! own layer or lower ones, never higher, and no two files use each other:
//! - `resolve` (the async resolver), `dial` (resolution, connect),
//!   `failure` (a hyper error as a probe's failure);
//! - `prober`: the configuration all probes share;
//! - `state`: one probe in progress;
//! - the steps of a probe: `hop` (one request: proxy choice, forgery guard),
//!   `tunnel` (CONNECT through a proxy), `handshake` (TLS), `exchange`
//!   (request and response over HTTP/1.1 or HTTP/2); `grpc` (the health
//!   call) and `tcp` (connect, TLS, the steps of `spec.tcp`), which use
//!   `hop`'s dial and `handshake`;
//! - `run`: [`Prober::probe`] (deadline, redirect loop, outcome).

mod dial;
mod exchange;
mod failure;
mod grpc;
mod handshake;
mod hop;
mod prober;
mod resolve;
mod run;
mod state;
mod tcp;
mod tunnel;

// What a probe is asked and what it found (crates/plan): its modules under
// the names the steps above use, and its items re-exported below.
use webchecker_plan::*;

pub use certs::{CertFacts, Chain, MAX_CHAIN_INFO};
pub use decode::Coding;
pub use dial::CONNECTION_ATTEMPT_DELAY;
pub use env_proxy::{EnvProxy, proxy_target};
pub use error::Reason;
pub use matcher::Matcher;
pub use outcome::{GrpcFacts, Outcome, Phases, Serving, TlsFacts, human_duration, version_name};
pub use plan::{
    AddressFamily, Alpn, CHECKER_PATTERN_BUDGET, Compiled, GRPC_HEALTH_PATH, Http2, JsonCheckPlan,
    MinTlsVersion, PATTERN_CACHE_LIMIT, PATTERN_SIZE_LIMIT, Pattern, PatternError, Patterns,
    ProbePlan, Protocol, ProxyPlan, SloTarget, StatusSet, TcpStepPlan, TlsConfig, TlsPlan,
    ValueRef, ZoneQuorum, base64, compile_patterns, pattern_sources, plan, plan_trusting,
    plan_with, references,
};
pub use policy::{
    AddressPolicy, ClusterAddresses, Denial, KUBELET_PORTS, PRIVATE_NETWORKS, Scope, Why,
    embedded_v4,
};
pub use prober::Prober;
pub use resolv_conf::ResolvConf;
pub use resolve::{
    DEFAULT_HOSTS_FILE, DEFAULT_RESOLV_CONF, LookupError, RESOLUTION_DELAY, Resolver,
};
pub use roots::Roots;
pub use target::Target;
pub use tls::{crypto_provider, operator_preferences};
