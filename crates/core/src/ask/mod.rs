//! Asking another replica, its pure part: the wire types of an ask and its
//! answer ([`Ask`], [`Reply`], [`Verdict`]), the choice of confirmer
//! ([`choice`]) and of each zone's prober ([`zones`]). The client and the
//! tokens it sends are the operator's (`src/ask/`).

pub mod choice;
pub mod zones;

use serde::{Deserialize, Serialize};

/// How long an ask may wait for its reply at most: the longest probe
/// timeout a checker can have (600 s) plus the confirmer's reads.
pub const ASK_WAIT: std::time::Duration = std::time::Duration::from_secs(630);

/// Where a confirmer serves asks (the replica's HTTP server).
pub const PATH: &str = "/confirm";
/// The audience of the tokens that authenticate asks.
pub const AUDIENCE: &str = "webchecker-operator.test.network.io/confirm";
/// Request header of a confirmation probe: the owner it confirms for, so a
/// target's log (and the test's witness) can tell it from an owner's probe.
pub const CONFIRM_FOR_HEADER: &str = "x-webchecker-confirm-for";

/// Request header of a zone's probe of a checker with `spec.locations`:
/// the owner it probes for.
pub const ZONE_FOR_HEADER: &str = "x-webchecker-zone-for";

/// What the owner asks: the checker, as it saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ask {
    /// The asking replica (it must own the checker).
    pub from: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub generation: Option<i64>,
    /// Why: to confirm a failure, or this zone's probe of the interval.
    #[serde(default)]
    pub purpose: Purpose,
    /// How long the owner waits for the answer: the confirmer gives up
    /// (and cancels its probe) when nobody waits any more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_millis: Option<u64>,
}

impl Ask {
    /// How long the owner waits ([`ASK_WAIT`] when it did not say).
    pub fn wait(&self) -> std::time::Duration {
        self.wait_millis
            .map_or(ASK_WAIT, std::time::Duration::from_millis)
    }
}

/// Why an owner asks another replica to probe.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Purpose {
    /// Confirm a failure that would turn Ready False.
    #[default]
    Confirm,
    /// Probe from the confirmer's zone, every interval (`spec.locations`).
    Zone,
}

/// What the confirmer answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "camelCase")]
pub enum Reply {
    /// Its probe ran: whether it succeeded, and its reason.
    #[serde(rename_all = "camelCase")]
    Probed {
        success: bool,
        reason: String,
        millis: u64,
    },
    /// It did not probe, and why (said in the owner's message).
    Refused { why: String },
}

/// A replica and its zone, as its member Lease advertises them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Place {
    pub replica: String,
    pub zone: String,
}

impl Place {
    /// "replica r2 in zone b", or "replica r2" when its zone is unknown.
    pub fn describe(&self) -> String {
        if self.zone.is_empty() {
            format!("replica {}", self.replica)
        } else {
            format!("replica {} in zone {}", self.replica, self.zone)
        }
    }
}

/// What the owner learns of a failure it asked about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The confirmer's probe failed too: the target is down.
    Confirmed { by: Place },
    /// The confirmer's probe succeeded: the owner's own path is suspect.
    Refuted { by: Place, millis: u64 },
    /// No other replica answered in time, or each refused: Ready keeps its
    /// verdict, Degraded says so; `why` is for this replica's log.
    Unanswered { why: String },
    /// There is no other replica to ask, or the checker opted out: the
    /// owner's failure stands as it is.
    Alone,
}

impl Verdict {
    /// The `result` label of `webchecker_confirmations_total`.
    pub fn result(&self) -> &'static str {
        match self {
            Verdict::Confirmed { .. } => "confirmed",
            Verdict::Refuted { .. } => "refuted",
            Verdict::Unanswered { .. } => "unanswered",
            Verdict::Alone => "none",
        }
    }
}
