//! The nouns the engine, the intake and the confirmer share, below all three:
//! one checker of the shard as the engine receives it ([`Checker`],
//! [`Definition`]), what the engine is told ([`Command`]), and the values of
//! the Secret and ConfigMap keys a spec references ([`Resolved`]), what the
//! status writer is told ([`Op`]) and what the metrics say of a checker
//! ([`CheckerInfo`], [`ZoneSample`]).

mod command;
mod info;
mod op;
mod values;

pub use command::{Change, Checker, Command, Definition};
pub use info::{
    CheckerInfo, LabelAllowlist, ZoneSample, parse_label_allowlist, prometheus_label_name,
};
pub use op::Op;
pub use values::Resolved;
