//! What one probe is asked to do and what it found, with no I/O: the plan a
//! spec becomes ([`plan()`], [`ProbePlan`], with its roots, TLS
//! configuration and compiled patterns), the forgery guard's policy, the
//! outcome and its reasons, and the pure steps that judge a response
//! (`checks`, `redirect`, `message`, `grpc_wire`). The prober
//! (`crates/probe`) runs a plan; the engine plans with it and reads outcomes
//! without a runtime.

pub mod certs;
pub mod checks;
pub mod decode;
pub mod env_proxy;
pub mod error;
pub mod grpc_wire;
pub mod matcher;
pub mod message;
pub mod outcome;
pub mod plan;
pub mod policy;
pub mod redirect;
pub mod resolv_conf;
pub mod roots;
pub mod target;
pub mod tls;
pub mod verify;

pub use certs::{CertFacts, Chain, MAX_CHAIN_INFO};
pub use decode::Coding;
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
pub use resolv_conf::ResolvConf;
pub use roots::Roots;
pub use target::Target;
pub use tls::{crypto_provider, operator_preferences};
