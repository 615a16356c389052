//! The nouns the engine, the intake and the confirmer share, below all three:
//! one checker of the shard as the engine receives it ([`Checker`],
//! [`Definition`]), what the engine is told ([`Command`]), and the values of
//! the Secret and ConfigMap keys a spec references ([`Resolved`]).

mod command;
mod values;

pub use command::{Checker, Command, Definition};
pub use values::Resolved;
