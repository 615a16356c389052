//! The watches' families: every watch (checkers, leases, sharder, the
//! guard's sources, discovery's) counts its failures here.

use prometheus::{IntCounterVec, Registry};

use super::family::{Family, counter_vec};

const WATCH_RESTARTS: Family = (
    "webchecker_watch_restarts_total",
    "Watch errors and relists",
);
const WATCH_EXPIRED: Family = (
    "webchecker_watch_expired_total",
    "Watches the API server ended with 410 Gone (resourceVersion compacted), followed by a re-list",
);

pub struct WatchMetrics {
    restarts: IntCounterVec,
    expired: IntCounterVec,
}

impl WatchMetrics {
    pub fn register(r: &Registry) -> Self {
        let watches = ["checkers", "leases", "sharder"];
        WatchMetrics {
            restarts: counter_vec(r, WATCH_RESTARTS, &["watch"], &watches),
            expired: counter_vec(r, WATCH_EXPIRED, &["watch"], &watches),
        }
    }

    /// Counts a failed watch (`watch`: checkers, leases, sharder, ...), and
    /// separately when the API server said its resourceVersion is gone (410).
    pub fn failed(&self, watch: &str, e: &kube::runtime::watcher::Error) {
        use kube::runtime::watcher::Error as W;
        self.restarts.with_label_values(&[watch]).inc();
        let gone = match e {
            W::WatchError(s) => s.code == 410,
            W::WatchStartFailed(k) | W::InitialListFailed(k) | W::WatchFailed(k) => {
                crate::error::api_code(k) == Some(410)
            }
            _ => false,
        };
        if gone {
            self.expired.with_label_values(&[watch]).inc();
        }
    }
}
