//! Sharding's families: the member view's ring, leadership, and the
//! sharder's assignments and handovers (the sharder's only on the leader).

use prometheus::{Histogram, IntCounterVec, IntGauge, Registry};

use crate::observe::metrics::family::{ASSIGN_BUCKETS, Family, counter_vec, gauge, histogram};

const LEADER: Family = ("webchecker_leader", "1 on the sharder replica");
const RING_MEMBERS: Family = ("webchecker_ring_members", "Live members this replica sees");
const ORPHANED_CHECKERS: Family = (
    "webchecker_orphaned_checkers",
    "Checkers the sharder has seen without a valid, live owner for longer than a lease, or draining for longer than six (leader only)",
);
const HANDOVER_WINDOW: Family = (
    "webchecker_handover_window",
    "Handovers (drains) the sharder lets be in progress at once, sized from its writes' answer times (leader only)",
);
const HANDOVER_DURATION: Family = (
    "webchecker_handover_duration_seconds",
    "From a drain to the old owner's handover, as the sharder's watch sees them (leader only)",
);
const MOVES: Family = (
    "webchecker_moves_total",
    "Assignments written by the sharder, by cause",
);
const ASSIGNMENT_LATENCY: Family = (
    "webchecker_assignment_latency_seconds",
    "Sharder: checker seen unassigned to assignment written",
);
const PEER_PROOFS: Family = (
    "webchecker_peer_evidence_proofs_total",
    "Members proven gone at once because their address refused connections (result=proven), or whose evidence lied (result=refuted: the member renewed)",
);

pub struct ShardMetrics {
    pub leader: IntGauge,
    pub ring_members: IntGauge,
    pub orphaned_checkers: IntGauge,
    pub handover_window: IntGauge,
    pub handover_duration: Histogram,
    pub moves: IntCounterVec,
    pub assignment_latency: Histogram,
    pub peer_proofs: IntCounterVec,
}

impl ShardMetrics {
    pub fn register(r: &Registry) -> Self {
        ShardMetrics {
            leader: gauge(r, LEADER),
            ring_members: gauge(r, RING_MEMBERS),
            orphaned_checkers: gauge(r, ORPHANED_CHECKERS),
            handover_window: gauge(r, HANDOVER_WINDOW),
            handover_duration: histogram(r, HANDOVER_DURATION, ASSIGN_BUCKETS),
            moves: counter_vec(
                r,
                MOVES,
                &["cause"],
                &["new", "rebalance", "dead", "departed"],
            ),
            assignment_latency: histogram(r, ASSIGNMENT_LATENCY, ASSIGN_BUCKETS),
            peer_proofs: counter_vec(r, PEER_PROOFS, &["result"], &["proven", "refuted"]),
        }
    }
}
