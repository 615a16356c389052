//! The API calls of one source object: server-side apply of each checker it
//! wants that differs from what was last applied, deletion of those it no
//! longer wants, Warning Events about its annotations. Every call has a
//! deadline and is made only while this replica leads. Nothing is applied
//! to, or deleted from, a checker the source does not control: an apply
//! names the UID of the checker it is for (one of that name not seen before
//! is looked at first, and left alone with a `NameTaken` Warning when made
//! by hand or by anyone else), a deletion carries it as a precondition.

use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::events::{Event, EventType};
use kube::{Api, Client};
use tracing::{debug, info, warn};

use super::metrics::DiscoveryMetrics;
use super::patch::{self, Claim};
use super::{Desired, FIELD_MANAGER, Problem, Source};
use crate::api::WebChecker;
use crate::coordination::shard::LeaderGate;
use crate::error::api_code;
use crate::kubeio::client::CALL_DEADLINE;
use crate::observe::events::Recorder;

/// The Event reason when the API server refuses a generated checker.
pub const INVALID_CHECKER: &str = "InvalidChecker";

/// The Event reason when a checker of the name a source would generate
/// exists and was not generated for it: it is left alone.
pub const NAME_TAKEN: &str = "NameTaken";

/// Conflicts resolved in a row for one checker before it is retried later
/// (each removes the fields a conflict named; a new one means someone is
/// editing it right now).
const CONFLICT_ROUNDS: usize = 3;

/// What to do for one source object.
pub struct Work {
    pub source: Source,
    /// Applied in this order, each with the UID of the checker of its name
    /// that this source controls, when one was seen.
    pub apply: Vec<(Desired, Option<String>)>,
    /// Checkers of this source it no longer wants: (name, UID).
    pub delete: Vec<(String, String)>,
    /// To say on the source object (new since the last time).
    pub problems: Vec<Problem>,
}

pub struct Writer {
    client: Client,
    leader: Arc<LeaderGate>,
    metrics: Arc<DiscoveryMetrics>,
    recorder: Recorder,
}

/// Why the work stopped before its end.
#[derive(Debug)]
pub enum Stopped {
    /// No longer the leader: nothing more is written.
    NotLeading,
    /// A call failed in a way a later try may not (retried with backoff).
    Failed(String),
}

impl Writer {
    pub fn new(
        client: Client,
        leader: Arc<LeaderGate>,
        metrics: Arc<DiscoveryMetrics>,
        recorder: Recorder,
    ) -> Self {
        Writer {
            client,
            leader,
            metrics,
            recorder,
        }
    }

    fn leading(&self) -> Result<(), Stopped> {
        if self.leader.valid_at(Instant::now()) {
            Ok(())
        } else {
            Err(Stopped::NotLeading)
        }
    }

    /// Carries out `work`: Events first (they do not wait on the rest), then
    /// every apply and deletion even when one fails; the first failure is
    /// returned (the whole source is retried: unchanged checkers cost nothing).
    pub async fn run(&self, work: Work) -> Result<(), Stopped> {
        let reference = reference(&work.source);
        for p in &work.problems {
            self.warn(&reference, p.reason, &p.message).await;
        }
        let api: Api<WebChecker> = Api::namespaced(self.client.clone(), &work.source.namespace);
        let mut first_failure = None;
        for (d, uid) in &work.apply {
            let to = Checker {
                api: &api,
                source: &work.source,
                reference: &reference,
            };
            if let Err(e) = self.apply(&to, d, uid.as_deref()).await {
                if matches!(e, Stopped::NotLeading) {
                    return Err(e);
                }
                first_failure.get_or_insert(e);
            }
        }
        for (name, uid) in &work.delete {
            if let Err(e) = self.delete(&api, &work.source, name, uid).await {
                if matches!(e, Stopped::NotLeading) {
                    return Err(e);
                }
                first_failure.get_or_insert(e);
            }
        }
        first_failure.map_or(Ok(()), Err)
    }

    /// Server-side apply, force=false, of a checker this source controls
    /// (UID `uid`), or of one not seen before once `claim` allows it. A
    /// conflict means a person changed a field by hand: apply again
    /// without the fields it names, so their values stay as set.
    async fn apply(&self, to: &Checker<'_>, d: &Desired, uid: Option<&str>) -> Result<(), Stopped> {
        let uid = match uid {
            Some(uid) => Some(uid.to_string()),
            None => match self.claim(to, d).await? {
                Some(Claim::Ours(uid)) => Some(uid),
                Some(Claim::Taken) => return Ok(()),
                None => None,
            },
        };
        let mut body = patch::body(d, to.source);
        if let Some(uid) = &uid {
            body = patch::guarded(body, uid);
        }
        let mut kept: Vec<String> = Vec::new();
        let params = PatchParams::apply(FIELD_MANAGER);
        for _ in 0..CONFLICT_ROUNDS {
            self.leading()?;
            let apply = Patch::Apply(&body);
            let call = to.api.patch(&d.name, &params, &apply);
            let err = match tokio::time::timeout(CALL_DEADLINE, call).await {
                Ok(Ok(_)) => {
                    self.applied(to.source, d, &kept);
                    return Ok(());
                }
                Ok(Err(e)) => e,
                Err(_) => return Err(self.apply_failed(d, "no answer within the call deadline")),
            };
            match (&err, api_code(&err)) {
                (kube::Error::Api(s), Some(409)) => {
                    let fields: Vec<String> = s
                        .details
                        .iter()
                        .flat_map(|d| d.causes.iter())
                        .map(|c| c.field.clone())
                        .filter(|f| !f.is_empty())
                        .collect();
                    if fields.is_empty() {
                        return Err(self.apply_failed(d, &err.to_string()));
                    }
                    match patch::without(&mut body, &fields) {
                        Ok(removed) => kept.extend(removed),
                        Err(f) => {
                            let why = format!("conflict on {f}, which it cannot leave out");
                            return Err(self.apply_failed(d, &why));
                        }
                    }
                }
                (_, Some(400 | 422)) => {
                    self.metrics.applied("invalid");
                    let msg = format!("the API server refused checker {}: {err}", d.name);
                    warn!(namespace = %to.source.namespace, source = %to.source.name, "{msg}");
                    self.warn(to.reference, INVALID_CHECKER, &msg).await;
                    // Retrying cannot help before the source changes.
                    return Ok(());
                }
                (_, Some(403)) => {
                    let why = format!(
                        "{err} (route discovery needs get, patch and create on webcheckers: the chart grants them with discovery.enabled)"
                    );
                    return Err(self.apply_failed(d, &why));
                }
                _ => return Err(self.apply_failed(d, &err.to_string())),
            }
        }
        Err(self.apply_failed(d, "conflicts kept coming (someone is editing it)"))
    }

    /// Whether checker `d` may be applied: None when there is none of its
    /// name (it is made); else whether the source may claim it
    /// (`patch::claim`). One it may not is left alone, said on the source.
    async fn claim(&self, to: &Checker<'_>, d: &Desired) -> Result<Option<Claim>, Stopped> {
        self.leading()?;
        let call = to.api.get_metadata_opt(&d.name);
        let found = match tokio::time::timeout(CALL_DEADLINE, call).await {
            Ok(Ok(found)) => found,
            Ok(Err(e)) => return Err(self.apply_failed(d, &e.to_string())),
            Err(_) => return Err(self.apply_failed(d, "no answer within the call deadline")),
        };
        let Some(found) = found else {
            return Ok(None);
        };
        let claim = patch::claim(&found.metadata, to.source);
        if claim == Claim::Taken {
            self.metrics.applied("name_taken");
            let s = to.source;
            let msg = format!(
                "WebChecker {} was made by hand and is left alone, so {} gets no checker from this {}: rename or delete it to have one generated",
                d.name, d.host, s.kind
            );
            info!(namespace = %s.namespace, source = %s.name, checker = %d.name, "name taken: the existing checker is left alone");
            self.warn(to.reference, NAME_TAKEN, &msg).await;
        }
        Ok(Some(claim))
    }

    fn applied(&self, source: &Source, d: &Desired, kept: &[String]) {
        if kept.is_empty() {
            self.metrics.applied("applied");
            debug!(namespace = %source.namespace, checker = %d.name, "generated checker applied");
        } else {
            self.metrics.applied("conflict");
            info!(
                namespace = %source.namespace,
                checker = %d.name,
                kept = ?kept,
                "generated checker applied without the fields set by hand (their values stay)"
            );
        }
    }

    fn apply_failed(&self, d: &Desired, why: &str) -> Stopped {
        self.metrics.applied("error");
        warn!(checker = %d.name, "cannot apply a generated checker (retried): {why}");
        Stopped::Failed(why.to_string())
    }

    /// Deletes a checker the source no longer wants, if it is still the one
    /// seen (UID precondition: never a new checker of the same name).
    async fn delete(
        &self,
        api: &Api<WebChecker>,
        source: &Source,
        name: &str,
        uid: &str,
    ) -> Result<(), Stopped> {
        self.leading()?;
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_string()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let outcome = tokio::time::timeout(CALL_DEADLINE, api.delete(name, &params)).await;
        match outcome {
            Ok(Ok(_)) => {
                self.metrics.deleted("deleted");
                info!(namespace = %source.namespace, source = %source.name, checker = name, "generated checker deleted: its source no longer wants it");
                Ok(())
            }
            // Gone already, or another object of that name by now.
            Ok(Err(e)) if matches!(api_code(&e), Some(404 | 409)) => Ok(()),
            Ok(Err(e)) => {
                self.metrics.deleted("error");
                warn!(checker = name, error = %e, "cannot delete a generated checker (retried)");
                Err(Stopped::Failed(e.to_string()))
            }
            Err(_) => {
                self.metrics.deleted("error");
                Err(Stopped::Failed("no answer within the call deadline".into()))
            }
        }
    }

    /// A Warning Event on the source object; not retried (the next change
    /// of the source says it again).
    async fn warn(&self, reference: &ObjectReference, reason: &str, note: &str) {
        let ev = Event {
            type_: EventType::Warning,
            reason: reason.to_string(),
            note: Some(crate::api::condition_message(note)),
            action: "GenerateCheckers".into(),
            secondary: None,
        };
        match tokio::time::timeout(CALL_DEADLINE, self.recorder.publish(&ev, reference)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => debug!(error = %e, "cannot publish an Event about a route"),
            Err(_) => debug!("publishing an Event about a route timed out"),
        }
    }
}

/// The checkers of one source: where they are, whose they are, where their
/// Events go.
struct Checker<'a> {
    api: &'a Api<WebChecker>,
    source: &'a Source,
    reference: &'a ObjectReference,
}

fn reference(s: &Source) -> ObjectReference {
    ObjectReference {
        api_version: Some(s.api_version.to_string()),
        kind: Some(s.kind.to_string()),
        namespace: Some(s.namespace.clone()),
        name: Some(s.name.clone()),
        uid: Some(s.uid.clone()),
        ..ObjectReference::default()
    }
}
