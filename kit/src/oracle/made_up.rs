//! Made-up histories: probes, checker versions and membership Leases written
//! by hand, for the tests of the oracle (oracle/tests.rs) and of the fault
//! campaign's judges (tests/chaos/), on histories whose verdict is known.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::Hit;
use crate::objlog::{LeaseRec, ObjRec, RecKind};

/// A probe of `checker` by `replica` from `start`, lasting `ms` milliseconds.
pub fn hit(checker: &str, replica: &str, start: Instant, ms: u64) -> Hit {
    Hit {
        checker: checker.into(),
        replica: replica.into(),
        start,
        end: start + Duration::from_millis(ms),
        headers: HashMap::new(),
    }
}

/// A version of checker `name` at generation 1, observed: no owner, no
/// drain, no status ([`ObjRec::owned_by`], [`ObjRec::draining_to`] and
/// [`ObjRec::status_by`] add them).
pub fn rec(at: Instant, rv: u64, kind: RecKind, name: &str) -> ObjRec {
    ObjRec {
        at,
        rv,
        kind,
        name: name.into(),
        generation: Some(1),
        owner: None,
        epoch: None,
        drain: None,
        handed_over_from: None,
        status_owner: None,
        observed_generation: Some(1),
        status: String::new(),
    }
}

impl ObjRec {
    /// Assigned to `owner` under its Lease `epoch`.
    pub fn owned_by(mut self, owner: &str, epoch: &str) -> ObjRec {
        self.owner = Some(owner.into());
        self.epoch = Some(epoch.into());
        self
    }

    /// Draining to `target`.
    pub fn draining_to(mut self, target: &str) -> ObjRec {
        self.drain = Some(target.into());
        self
    }

    /// With the status `status` (serialized), written by `writer`.
    pub fn status_by(mut self, writer: &str, status: &str) -> ObjRec {
        self.status_owner = Some(writer.into());
        self.status = status.into();
        self
    }
}

/// A version of the membership Lease of `holder`, whose UID is `uid`.
pub fn lease(at: Instant, rv: u64, kind: RecKind, holder: &str, uid: &str) -> LeaseRec {
    LeaseRec {
        at,
        rv,
        kind,
        name: format!("webchecker-member-{holder}"),
        holder: Some(holder.into()),
        uid: uid.into(),
        inferred: false,
    }
}
