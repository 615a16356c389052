//! One simulated cluster: the fake API server (api.rs) on a runtime of its
//! own, the simulated replicas that acknowledge drains, their Lease
//! renewals, and the real sharder (`webchecker::coordination::standalone`)
//! on a thread of its own, as in a replica. The driver changes the members
//! and reads the tally.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc, oneshot};
use webchecker::coordination::standalone::{Timings, run_sharder};

use super::api::FakeApi;

/// Drain acknowledgements a replica writes at once (the replica's status
/// writer).
pub const ACK_WRITERS: usize = webchecker::STATUS_WRITERS;
/// The status writer's first retry after a shed write, doubled up to the cap.
const ACK_BACKOFF: Duration = Duration::from_millis(200);
const ACK_BACKOFF_CAP: Duration = Duration::from_secs(5);
const NAMESPACE: &str = "webchecker-system";

pub const TIMINGS: Timings = Timings {
    lease_duration: Duration::from_secs(10),
    renew_deadline: Duration::from_secs(7),
    retry_period: Duration::from_secs(2),
};

pub fn member_name(i: usize) -> String {
    format!("webchecker-operator-{i:02}")
}

pub struct World {
    pub api: Arc<FakeApi>,
    rt: tokio::runtime::Runtime,
    /// A replica's probe in flight when its drain arrives ends within this.
    probe: Duration,
    stop: Option<oneshot::Sender<()>>,
    sharder: Option<std::thread::JoinHandle<()>>,
    pub sharder_tid: i32,
}

/// Acknowledges the drains of `me`'s checkers as its status writer would:
/// after the probe in flight, a few at a time, retrying what was shed.
async fn replica(
    api: Arc<FakeApi>,
    me: String,
    mut jobs: mpsc::UnboundedReceiver<String>,
    probe: Duration,
) {
    let writers = Arc::new(Semaphore::new(ACK_WRITERS));
    while let Some(key) = jobs.recv().await {
        let (api, me, writers) = (api.clone(), me.clone(), writers.clone());
        tokio::spawn(async move {
            tokio::time::sleep(probe.mul_f64(api.random())).await;
            let mut backoff = ACK_BACKOFF;
            loop {
                if !api.is_member(&me) {
                    return;
                }
                let answer = {
                    let _slot = writers.acquire().await;
                    api.acknowledge(&key, &me).await
                };
                if answer.is_ok() {
                    return;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(ACK_BACKOFF_CAP);
            }
        });
    }
}

impl World {
    pub fn new(api: Arc<FakeApi>, probe: Duration) -> World {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("the API server's runtime");
        World {
            api,
            rt,
            probe,
            stop: None,
            sharder: None,
            sharder_tid: 0,
        }
    }

    /// Members `range` join: their Leases appear and they start answering.
    pub fn join(&self, range: std::ops::Range<usize>) {
        let names: Vec<String> = range.map(member_name).collect();
        for (me, jobs) in self.api.join(&names) {
            self.rt
                .spawn(replica(self.api.clone(), me, jobs, self.probe));
        }
    }

    pub fn leave(&self, range: std::ops::Range<usize>) {
        let names: Vec<String> = range.map(member_name).collect();
        self.api.leave(&names);
    }

    /// Renews every member's Lease once per retry period, spread over it.
    pub fn start_renewals(&self, most: usize) {
        let api = self.api.clone();
        self.rt.spawn(async move {
            let mut tick = tokio::time::interval(TIMINGS.retry_period / most as u32);
            for i in (0..most).cycle() {
                tick.tick().await;
                api.renew(&member_name(i));
            }
        });
    }

    /// Starts the sharder (member 0 leads) on a thread of its own.
    pub fn start_sharder(&mut self) {
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (api, handle) = (self.api.clone(), self.rt.handle().clone());
        let thread = std::thread::Builder::new()
            .name("sharder".into())
            .spawn(move || {
                let _ = tid_tx.send(unsafe { libc::gettid() });
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("the sharder's runtime");
                rt.block_on(async move {
                    // The API server answers on its own runtime, as another process would.
                    let service = tower::service_fn(move |req| {
                        let (api, handle) = (api.clone(), handle.clone());
                        async move {
                            let answer = handle.spawn(api.handle(req)).await;
                            Ok::<_, Infallible>(answer.expect("the fake API server's task"))
                        }
                    });
                    let client = kube::Client::new(service, NAMESPACE);
                    let leader = member_name(0);
                    tokio::select! {
                        r = run_sharder(client, &leader, NAMESPACE, TIMINGS) => {
                            eprintln!("bench: the simulated sharder stopped: {r:?}");
                        }
                        _ = stop_rx => {}
                    }
                });
            });
        let thread = thread.expect("the sharder's thread");
        self.sharder_tid = tid_rx.recv().expect("the sharder thread's id");
        self.stop = Some(stop_tx);
        self.sharder = Some(thread);
    }

    /// Stops the sharder and waits until its thread (and runtime) is gone.
    pub fn stop_sharder(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.sharder.take() {
            let _ = t.join();
        }
    }

    /// Waits on the API server's runtime.
    pub fn sleep(&self, d: Duration) {
        self.rt.block_on(async move { tokio::time::sleep(d).await });
    }
}

impl Drop for World {
    fn drop(&mut self) {
        self.stop_sharder();
    }
}
