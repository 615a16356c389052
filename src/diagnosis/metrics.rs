//! The diagnoses' families.

use prometheus::{IntCounterVec, Registry};

use crate::observe::metrics::family::{Family, counter_vec};

const READS: Family = (
    "webchecker_diagnosis_reads_total",
    "API reads made to diagnose failing checkers, by kind of object and result (ok, forbidden, error, timeout)",
);
const DIAGNOSES: Family = (
    "webchecker_diagnoses_total",
    "Diagnoses of checkers that turned Ready=False, by result: found (a cause), none (the cluster sees nothing wrong or nothing readable), dropped (the namespace had its fill waiting)",
);

/// The kinds of object a diagnosis reads.
const KINDS: [&str; 7] = [
    "Service",
    "EndpointSlice",
    "Pod",
    "Ingress",
    "HTTPRoute",
    "GRPCRoute",
    "Gateway",
];

pub struct DiagnosisMetrics {
    reads: IntCounterVec,
    diagnoses: IntCounterVec,
}

impl DiagnosisMetrics {
    pub fn register(r: &Registry) -> Self {
        let reads = counter_vec(r, READS, &["kind", "result"], &[]);
        // From 0, so that increase() sees the first read of each kind.
        for kind in KINDS {
            reads.with_label_values(&[kind, "ok"]);
        }
        DiagnosisMetrics {
            reads,
            diagnoses: counter_vec(r, DIAGNOSES, &["result"], &["found", "none", "dropped"]),
        }
    }

    pub fn read(&self, kind: &str, result: &str) {
        self.reads.with_label_values(&[kind, result]).inc();
    }

    pub fn diagnosed(&self, result: &str) {
        self.diagnoses.with_label_values(&[result]).inc();
    }
}
