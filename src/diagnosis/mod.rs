//! Diagnosis from the cluster's own state: when a checker of an in-cluster
//! target turns Ready=False, its owner reads, once, what the API server
//! knows of that target (its Service's endpoints and pods, its route's and
//! Gateway's conditions, its Ingress's address) and puts the cause in
//! status.diagnosis and in the message of the Warning Event
//! (docs/diagnosis.md).
//!
//! Bounded: one namespace keeps at most [`PER_NAMESPACE`] diagnoses
//! waiting and takes its turn with the others (webchecker_core::diagnosis
//! ::Queue); [`CONCURRENT`] run at once, each at most
//! [`read::MAX_READS`] reads of its checker's own namespace, and at most
//! [`PER_SECOND`] start each second. The task runs on the engine's
//! runtime beside probing; the engine never waits for it (its Events wait
//! at most until the checker's next probe).

mod explain;
pub mod metrics;
mod read;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use kube::Client;
use tokio::sync::mpsc;
use tracing::debug;

use crate::checker::Command;
use metrics::DiagnosisMetrics;
use webchecker_core::diagnosis::{Queue, Queued};

/// Diagnoses one namespace may have waiting.
pub const PER_NAMESPACE: usize = 4;
/// Diagnoses made at once.
pub const CONCURRENT: usize = 2;
/// Diagnoses started per second, in all.
pub const PER_SECOND: u32 = 10;

/// Where the engine sends its checkers to diagnose.
#[derive(Clone)]
pub struct Diagnoser {
    tx: mpsc::Sender<Queued>,
    metrics: Arc<DiagnosisMetrics>,
}

impl Diagnoser {
    /// Hands `q` over; a full hand-over channel drops it (its Events go
    /// out at the checker's next probe without a diagnosis).
    pub fn diagnose(&self, q: Queued) {
        if self.tx.try_send(q).is_err() {
            self.metrics.diagnosed("dropped");
        }
    }
}

/// Starts the task: it ends with the engine's command channel.
pub fn spawn(
    client: Client,
    commands: mpsc::Sender<Command>,
    metrics: Arc<DiagnosisMetrics>,
) -> Diagnoser {
    let (tx, rx) = mpsc::channel(256);
    tokio::spawn(run(rx, client, commands, metrics.clone()));
    Diagnoser { tx, metrics }
}

async fn run(
    mut rx: mpsc::Receiver<Queued>,
    client: Client,
    commands: mpsc::Sender<Command>,
    metrics: Arc<DiagnosisMetrics>,
) {
    let mut queue = Queue::new(PER_NAMESPACE);
    let mut running = FuturesUnordered::new();
    let mut pace = tokio::time::interval(Duration::from_secs(1) / PER_SECOND);
    pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let may_start = running.len() < CONCURRENT && !queue.is_empty();
        tokio::select! {
            q = rx.recv() => {
                let Some(q) = q else { return };
                if !queue.push(q.clone()) {
                    metrics.diagnosed("dropped");
                    let _ = commands.try_send(answer(q, None));
                }
            }
            Some((q, d)) = running.next() => {
                if commands.send(answer(q, d)).await.is_err() {
                    return;
                }
            }
            _ = pace.tick(), if may_start => {
                if let Some(q) = queue.pop() {
                    running.push(diagnose(client.clone(), q, metrics.clone()));
                }
            }
        }
    }
}

fn answer(q: Queued, diagnosis: Option<webchecker_api::Diagnosis>) -> Command {
    Command::Diagnosis {
        key: q.key,
        seq: q.seq,
        diagnosis,
    }
}

async fn diagnose(
    client: Client,
    q: Queued,
    metrics: Arc<DiagnosisMetrics>,
) -> (Queued, Option<webchecker_api::Diagnosis>) {
    let mut reader = read::Reader {
        client,
        namespace: &q.namespace,
        metrics: &metrics,
        reads: 0,
    };
    let d = reader.subject(&q.subject).await.ok().flatten();
    metrics.diagnosed(if d.is_some() { "found" } else { "none" });
    debug!(checker = %q.key, reads = reader.reads, found = d.is_some(), "diagnosed");
    (q, d)
}
