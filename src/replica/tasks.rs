//! The replica's vital tasks: each one's end is the process's end (the pod
//! restarts), and the first to end, or SIGTERM/SIGINT, is what `wait` returns.

use tokio::task::JoinHandle;
use tracing::error;

use crate::error::Error;

type Vital = JoinHandle<Result<(), Error>>;

/// The tasks a replica cannot go on without, by name.
pub(super) struct Tasks {
    pub engine: Vital,
    pub writer: Vital,
    pub view: Vital,
    pub lease: Vital,
    pub leader: Vital,
    pub watch: Vital,
    pub peers: Vital,
    /// The Event publisher.
    pub events: Vital,
    /// The watch of maintenance windows.
    pub maintenance: Vital,
    /// The watch of every checker's dependencies and Ready.
    pub dependencies: Vital,
    /// The service answering other replicas' asks, once started.
    pub confirm: Option<Vital>,
    pub server_stopped: tokio::sync::oneshot::Receiver<()>,
}

impl Tasks {
    /// Until a signal (Ok) or the first vital task ends (its error).
    pub async fn wait(&mut self) -> Result<(), Error> {
        tokio::select! {
            _ = shutdown_signal() => Ok(()),
            r = &mut self.engine => Err(vital("engine", r)),
            r = &mut self.writer => Err(vital("status writer", r)),
            r = &mut self.view => Err(vital("membership view", r)),
            r = &mut self.lease => Err(vital("membership lease", r)),
            r = &mut self.leader => Err(vital("leader election", r)),
            r = &mut self.watch => Err(vital("checker watch", r)),
            r = &mut self.peers => Err(vital("peer evidence", r)),
            r = &mut self.events => Err(vital("event publisher", r)),
            r = &mut self.maintenance => Err(vital("maintenance watch", r)),
            r = &mut self.dependencies => Err(vital("dependency watch", r)),
            r = optional(&mut self.confirm) => Err(vital("confirmation service", r)),
            _ = &mut self.server_stopped => Err(vital("http server", Ok(Ok(())))),
        }
    }
}

/// The end of a task that may not have been started (never, then).
async fn optional(task: &mut Option<Vital>) -> Result<Result<(), Error>, tokio::task::JoinError> {
    match task {
        Some(t) => t.await,
        None => std::future::pending().await,
    }
}

/// Turns a finished vital task into the process's error.
fn vital(what: &'static str, r: Result<Result<(), Error>, tokio::task::JoinError>) -> Error {
    let e = match r {
        Ok(Err(e)) => e,
        Ok(Ok(())) => Error::TaskDied(what),
        Err(j) if j.is_panic() => Error::TaskPanicked(what, panic_text(j)),
        Err(_) => Error::TaskDied(what),
    };
    error!(task = what, error = %e, "a vital task stopped; exiting so the pod restarts");
    e
}

fn panic_text(j: tokio::task::JoinError) -> String {
    let p = j.into_panic();
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
