//! The feeder's glue between the value resolver and the engine: fills the
//! Secret/ConfigMap values into an Upsert and turns changed values into
//! Refresh commands. The resolver (secrets.rs) deals in values only and knows
//! nothing of the engine's commands; the engine (scheduler.rs) takes the
//! values as they come. These methods live here, not in secrets.rs, so that
//! neither of the two imports the other.

use crate::probe::references;
use crate::scheduler::{Command, Incoming};
use crate::secrets::SecretResolver;

impl SecretResolver {
    /// Fills in the values of an Upsert, and tracks (or forgets) the checkers
    /// of the other commands.
    pub async fn attach(&mut self, cmd: Command) -> Command {
        if let Some(key) = cmd.forgotten_key() {
            self.forget(&key);
        }
        match cmd {
            Command::Upsert {
                checker: Incoming::Valid(wc, _, compiled),
                initial,
                seen,
            } => {
                let namespace = wc.metadata.namespace.clone().unwrap_or_default();
                let key = crate::api::object_key(
                    &namespace,
                    wc.metadata.name.as_deref().unwrap_or_default(),
                );
                let resolved = self.track(key, namespace, references(&wc.spec)).await;
                Command::Upsert {
                    checker: Incoming::Valid(wc, resolved, compiled),
                    initial,
                    seen,
                }
            }
            Command::Resync { present } => {
                self.retain(&present);
                Command::Resync { present }
            }
            other => other,
        }
    }

    /// Re-resolves every tracked checker; a Refresh for each whose values
    /// changed.
    pub async fn refresh(&mut self) -> Vec<Command> {
        self.changed()
            .await
            .into_iter()
            .map(|(key, resolved)| Command::Refresh { key, resolved })
            .collect()
    }
}
