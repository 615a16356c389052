//! Judgements of the campaign on its logs beyond kit/src/oracle.rs: until
//! when a replica could not hear that its Lease was gone (the end of the
//! cut-off exception), and when a (re)started replica was back. Pure
//! functions, tested on made-up histories in campaign_tests.rs.

use super::*;

/// The name of `replica`'s membership Lease.
pub(super) fn member_lease(replica: &str) -> String {
    format!("webchecker-member-{replica}")
}

/// The UIDs of every membership Lease `replica` has held, as seen so far.
pub(super) fn lease_uids(leases: &[LeaseRec], replica: &str) -> HashSet<String> {
    let name = member_lease(replica);
    leases
        .iter()
        .filter(|l| l.name == name)
        .map(|l| l.uid.clone())
        .collect()
}

/// The stretches of the cut-off exception of `replica` behind a proxy that
/// answered only part of its calls from `t0` to `t1`. Its checkers move only
/// after the proof that deletes its Lease, so for each Lease of it deleted
/// from `t0` to `t1 + cutoff_grace()` (seen by the test's watch, which lags
/// by up to `WATCH_SLACK`: later, never earlier): from the deletion (less
/// that lag and a probe's timeout, for probes still running when the
/// checkers moved; `t0` at the earliest) until it could hear the Lease is
/// gone: `hear` after the deletion (its renewals get through meanwhile), or
/// `cutoff_grace()` after the fault ended if that comes first (every call
/// passes again), or after the deletion if that came after the end.
pub(super) fn unheard(
    leases: &[LeaseRec],
    replica: &str,
    (t0, t1): (Instant, Instant),
    hear: Duration,
) -> Vec<(Instant, Instant)> {
    let name = member_lease(replica);
    let grace = cutoff_grace();
    leases
        .iter()
        .filter(|d| {
            d.name == name && d.kind == RecKind::Deleted && d.at >= t0 && d.at <= t1 + grace
        })
        .map(|d| {
            let from = d.at.checked_sub(WATCH_SLACK + PROBE_TIMEOUT).unwrap_or(t0);
            (from.max(t0), (d.at + hear).min(d.at.max(t1) + grace))
        })
        .collect()
}

/// What the logs show of a replica (re)started at `since`, every instant as
/// seen: its new membership Lease (a UID not in `old`), the first checker
/// assigned to that Lease, its first probe.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Return {
    pub lease: Option<Instant>,
    pub assigned: Option<Instant>,
    pub probed: Option<Instant>,
}

impl Return {
    /// When it was back (all three seen).
    pub(super) fn back(&self) -> Option<Instant> {
        Some(self.lease?.max(self.assigned?).max(self.probed?))
    }

    /// What is missing, for a failure message.
    pub(super) fn missing(&self) -> String {
        let mut out = Vec::new();
        if self.lease.is_none() {
            out.push("no new membership Lease");
        }
        if self.assigned.is_none() {
            out.push("no checker assigned to it");
        }
        if self.probed.is_none() {
            out.push("no probe by it");
        }
        out.join(", ")
    }
}

/// The return of `replica`, (re)started at `since` after holding the Leases
/// `old`. Any probe by it after `since` is its new process's (the old one
/// was killed and reaped first).
pub(super) fn rejoin(
    s: &LogState,
    probes: &ProbeLog,
    replica: &str,
    since: Instant,
    old: &HashSet<String>,
) -> Return {
    let name = member_lease(replica);
    let lease = s
        .leases
        .iter()
        .filter(|l| l.name == name && l.at >= since && l.kind != RecKind::Deleted)
        .find(|l| !old.contains(&l.uid));
    let assigned = lease.and_then(|l| {
        s.objs
            .iter()
            .filter(|o| o.at >= since && o.kind != RecKind::Deleted)
            .find(|o| o.assignment() == Some((replica, l.uid.as_str())))
            .map(|o| o.at)
    });
    let probed = probes
        .probes
        .iter()
        .filter(|p| p.start >= since && probes.replica(p.replica) == replica)
        .map(|p| p.start)
        .min();
    Return {
        lease: lease.map(|l| l.at),
        assigned,
        probed,
    }
}
