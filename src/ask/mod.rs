//! Asking another replica: a failure that would turn a checker `Ready=False`
//! is probed once more by another replica (in another zone where there is
//! one, else on another node) before it is believed, and each zone of
//! `spec.locations` probes through its own replica (docs/architecture.md,
//! "Verdicts"). This is the asking side: the wire types ([`Ask`], [`Reply`],
//! [`Verdict`]), the choice of confirmer and of each zone's prober
//! ([`choice`], [`zones`]), the client ([`asker`]) and the tokens it sends
//! ([`tokens`]). The answering side is `crate::confirm`.

pub mod asker;
pub mod tokens;

pub use webchecker_core::ask::*;
