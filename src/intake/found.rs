//! What travels between the intake stages (feed -> compiler -> resolver):
//! a checker found valid by the feed, on its way to the engine, and the
//! commands that go to the engine as they are.

use std::sync::Arc;
use std::time::Instant;

use kube::{Resource, ResourceExt};

use crate::api::{WebChecker, object_key};
use crate::assignment::Assignment;
use crate::checker::Change;
use crate::checker::Resolved;
use crate::engine::{Checker, Command, Definition};
use crate::observe::metrics::CheckerInfo;
use crate::probe::Compiled;

/// A valid checker as the watch delivered it: the compiler attaches its
/// patterns, the resolver the values it references, and then it is a
/// [`Checker`] for the engine.
#[derive(Debug)]
pub struct Found {
    pub wc: Box<WebChecker>,
    /// URL and allowlisted labels (the feed knows the allowlist).
    pub info: Arc<CheckerInfo>,
    /// Delivered during a (re)list.
    pub initial: bool,
    /// When the watch delivered it.
    pub seen: Instant,
}

impl Found {
    pub fn namespace(&self) -> String {
        self.wc.namespace().unwrap_or_default()
    }

    pub fn key(&self) -> String {
        object_key(&self.namespace(), &self.wc.name_any())
    }

    /// The engine's Upsert, with everything attached.
    pub fn upsert(self, values: Resolved, patterns: Compiled) -> Command {
        let Found {
            wc,
            info,
            initial,
            seen,
        } = self;
        let assignment = Assignment::of(&wc.metadata);
        let checker = Checker {
            key: object_key(&wc.namespace().unwrap_or_default(), &wc.name_any()),
            namespace: wc.namespace().unwrap_or_default(),
            name: wc.name_any(),
            generation: wc.metadata.generation,
            resource_version: wc.resource_version().unwrap_or_default(),
            object_ref: wc.object_ref(&()),
            source_ref: crate::discovery::route_events::source_of(&wc.metadata),
            info,
            labels: wc.metadata.labels.clone().unwrap_or_default(),
            last_probe: assignment.last_probe_unix_ms,
            status: wc.status.clone(),
            epoch: assignment.epoch,
            definition: Ok(Definition {
                spec: wc.spec,
                values,
                patterns,
            }),
        };
        Command::Change(Change::Upsert {
            checker: Box::new(checker),
            initial,
            seen,
        })
    }
}

/// The engine's Upsert of an object that does not deserialise (for example
/// written under an older schema): reported, never probed.
pub fn malformed(
    namespace: String,
    name: String,
    resource_version: String,
    generation: Option<i64>,
    error: String,
    initial: bool,
    seen: Instant,
) -> Command {
    let object_ref = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(WebChecker::api_version(&()).to_string()),
        kind: Some("WebChecker".into()),
        namespace: Some(namespace.clone()),
        name: Some(name.clone()),
        ..Default::default()
    };
    let checker = Checker {
        key: object_key(&namespace, &name),
        namespace,
        name,
        generation,
        resource_version,
        object_ref,
        // Never probed: no Ready transition for its source to hear of.
        source_ref: None,
        definition: Err(error),
        info: Default::default(),
        labels: Default::default(),
        status: None,
        last_probe: None,
        // Set by the feed, which read the annotation.
        epoch: None,
    };
    Command::Change(Change::Upsert {
        checker: Box::new(checker),
        initial,
        seen,
    })
}

/// A step of the intake. `P` is what the patterns are: `()` from the feed,
/// `Compiled` once the compiler has been.
#[derive(Debug)]
pub enum Step<P> {
    /// A valid checker, with its patterns once compiled.
    Found(Box<Found>, P),
    /// Goes on to the engine as it is.
    Command(Command),
}

/// The checker that the intake's per-checker caches forget on this command:
/// it is no longer handed over as a valid checker (removed, draining or
/// malformed).
pub fn forgotten(cmd: &Command) -> Option<String> {
    match cmd {
        Command::Change(Change::Remove { key }) | Command::Change(Change::Drain { key, .. }) => {
            Some(key.clone())
        }
        Command::Change(Change::Upsert { checker, .. }) if checker.definition.is_err() => {
            Some(checker.key.clone())
        }
        _ => None,
    }
}
