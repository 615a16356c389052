//! Membership's families: the Lease renewals, the fences they cause, and
//! this replica's advertised place.

use prometheus::{Histogram, IntCounterVec, IntGauge, IntGaugeVec, Registry};

use crate::observe::metrics::family::{Family, counter_vec, gauge, gauge_vec, histogram};

const LEASE_RENEW_DURATION: Family = (
    "webchecker_lease_renew_duration_seconds",
    "Membership Lease renewals that succeeded: from the attempt's start to its answer being acted on",
);
const LEASE_RENEW_FAILURES: Family = (
    "webchecker_lease_renew_failures_total",
    "Failed Lease renewals",
);
const SELF_FENCES: Family = (
    "webchecker_self_fences_total",
    "Times this replica dropped its checkers because it lost its Lease or paused",
);
const API_REACHABLE: Family = (
    "webchecker_api_reachable",
    "0 while Lease renewals get no answer",
);
const REPLICA_PLACE: Family = (
    "webchecker_replica_place",
    "Where this replica runs (zone and node, as advertised in its member Lease); always 1",
);

pub struct MembershipMetrics {
    pub lease_renew_duration: Histogram,
    /// Also the leader Lease's (the elector's) failed renewals.
    pub lease_renew_failures: IntCounterVec,
    pub self_fences: IntCounterVec,
    pub api_reachable: IntGauge,
    pub replica_place: IntGaugeVec,
}

impl MembershipMetrics {
    pub fn register(r: &Registry) -> Self {
        let m = MembershipMetrics {
            lease_renew_duration: histogram(
                r,
                LEASE_RENEW_DURATION,
                &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0],
            ),
            lease_renew_failures: counter_vec(
                r,
                LEASE_RENEW_FAILURES,
                &["reason"],
                &["unreachable", "lost", "rejected"],
            ),
            self_fences: counter_vec(r, SELF_FENCES, &["reason"], &["lost", "paused"]),
            api_reachable: gauge(r, API_REACHABLE),
            replica_place: gauge_vec(r, REPLICA_PLACE, &["zone", "node"]),
        };
        m.api_reachable.set(1);
        m
    }
}
