//! The invariants of docs/invariants.md checked from outside the operator: from the
//! witness's probe log and from the object log (objlog.rs). Pure
//! functions over those logs, so that they can be tested on made-up histories
//! (oracle/made_up.rs, oracle/tests.rs) before they judge a real one.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::{Duration, Instant};

use super::Hit;
use super::objlog::{Gap, LeaseRec, ObjRec, RecKind};

pub mod made_up;

/// Prints instants relative to the start of a run.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    pub origin: Instant,
}

impl Clock {
    pub fn t(&self, at: Instant) -> String {
        if at >= self.origin {
            format!("t+{:.3}s", (at - self.origin).as_secs_f64())
        } else {
            format!("t-{:.3}s", (self.origin - at).as_secs_f64())
        }
    }
}

/// One probe as the witness saw it, compact (long runs keep millions).
#[derive(Clone, Copy, Debug)]
pub struct Probe {
    pub checker: u32,
    pub replica: u16,
    pub start: Instant,
    pub end: Instant,
}

/// The witness's log, interned.
#[derive(Default)]
pub struct ProbeLog {
    checkers: Vec<String>,
    checker_ids: HashMap<String, u32>,
    replicas: Vec<String>,
    replica_ids: HashMap<String, u16>,
    pub probes: Vec<Probe>,
}

impl ProbeLog {
    pub fn absorb(&mut self, hits: Vec<Hit>) {
        for h in hits {
            let checker = match self.checker_ids.get(&h.checker) {
                Some(id) => *id,
                None => {
                    let id = self.checkers.len() as u32;
                    self.checkers.push(h.checker.clone());
                    self.checker_ids.insert(h.checker, id);
                    id
                }
            };
            let replica = match self.replica_ids.get(&h.replica) {
                Some(id) => *id,
                None => {
                    let id = self.replicas.len() as u16;
                    self.replicas.push(h.replica.clone());
                    self.replica_ids.insert(h.replica, id);
                    id
                }
            };
            self.probes.push(Probe {
                checker,
                replica,
                start: h.start,
                end: h.end,
            });
        }
    }

    pub fn checker(&self, id: u32) -> &str {
        &self.checkers[id as usize]
    }

    pub fn replica(&self, id: u16) -> &str {
        &self.replicas[id as usize]
    }

    pub fn checker_id(&self, name: &str) -> Option<u32> {
        self.checker_ids.get(name).copied()
    }

    /// Probes that started in [from, to], by checker, sorted by start.
    pub fn by_checker(&self, from: Instant, to: Instant) -> HashMap<u32, Vec<Probe>> {
        let mut by: HashMap<u32, Vec<Probe>> = HashMap::new();
        for p in self
            .probes
            .iter()
            .filter(|p| p.start >= from && p.start <= to)
        {
            by.entry(p.checker).or_default().push(*p);
        }
        for v in by.values_mut() {
            v.sort_by_key(|p| p.start);
        }
        by
    }

    /// Names of the checkers probed in [from, to].
    pub fn probed_since(&self, from: Instant) -> std::collections::HashSet<&str> {
        self.probes
            .iter()
            .filter(|p| p.start >= from)
            .map(|p| self.checker(p.checker))
            .collect()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Inv {
    Coverage,
    Exclusivity,
    Fencing,
    Proof,
    Balance,
    Movement,
    Fresh,
    Sight,
    Liveness,
}

impl fmt::Display for Inv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Inv::Coverage => "1 coverage",
            Inv::Exclusivity => "2 exclusivity",
            Inv::Fencing => "3 fencing",
            Inv::Proof => "2/3 move without proof",
            Inv::Balance => "4 balance",
            Inv::Movement => "5 movement",
            Inv::Fresh => "6 fresh status",
            Inv::Sight => "7 sight through outages",
            Inv::Liveness => "liveness",
        })
    }
}

#[derive(Clone, Debug)]
pub struct Violation {
    pub inv: Inv,
    pub checker: Option<String>,
    pub replicas: Vec<String>,
    pub at: Instant,
    pub detail: String,
}

impl Violation {
    pub fn new(
        inv: Inv,
        checker: Option<&str>,
        replicas: &[&str],
        at: Instant,
        detail: String,
    ) -> Self {
        Violation {
            inv,
            checker: checker.map(String::from),
            replicas: replicas.iter().map(|r| r.to_string()).collect(),
            at,
            detail,
        }
    }
}

/// Invariant 1: the largest gap between consecutive probes of each checker
/// in [from, to] (from its creation if later; the gap before the first probe
/// in range counts from the last probe before it). Returns the violations
/// (gaps over `bound`) and the largest gap.
pub fn coverage(
    log: &ProbeLog,
    checkers: &[(String, Instant)],
    from: Instant,
    to: Instant,
    bound: Duration,
    clk: &Clock,
) -> (Vec<Violation>, Option<(Duration, String)>) {
    let lookback = Duration::from_secs(60);
    let by = log.by_checker(from.checked_sub(lookback).unwrap_or(from), to);
    let mut out = Vec::new();
    let mut worst: Option<(Duration, String)> = None;
    for (name, since) in checkers {
        let start = from.max(*since);
        let probes: &[Probe] = log
            .checker_id(name)
            .and_then(|id| by.get(&id))
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        // The last probe before the range, but not before `since` (a checker
        // created, or a fleet restarted, then).
        let mut prev: (Instant, Option<u16>) = probes
            .iter()
            .rev()
            .find(|p| p.start < start)
            .map(|p| {
                if p.start >= *since {
                    (p.start, Some(p.replica))
                } else {
                    (*since, None)
                }
            })
            .unwrap_or((
                if *since >= start.checked_sub(lookback).unwrap_or(start) {
                    *since
                } else {
                    start.checked_sub(lookback).unwrap_or(start)
                },
                None,
            ));
        let mut largest: (Duration, Instant, Option<u16>, Instant, Option<u16>) =
            (Duration::ZERO, prev.0, prev.1, prev.0, None);
        for p in probes.iter().filter(|p| p.start >= start) {
            let gap = p.start.saturating_duration_since(prev.0);
            if gap > largest.0 {
                largest = (gap, prev.0, prev.1, p.start, Some(p.replica));
            }
            prev = (p.start, Some(p.replica));
        }
        let tail = to.saturating_duration_since(prev.0);
        if tail > largest.0 {
            largest = (tail, prev.0, prev.1, to, None);
        }
        if worst.as_ref().is_none_or(|w| largest.0 > w.0) {
            worst = Some((largest.0, name.clone()));
        }
        if largest.0 > bound {
            let r = |x: Option<u16>| x.map(|i| log.replica(i).to_string());
            let (before, after) = (r(largest.2), r(largest.4));
            out.push(Violation {
                inv: Inv::Coverage,
                checker: Some(name.clone()),
                replicas: before.iter().chain(after.iter()).cloned().collect(),
                at: largest.1,
                detail: format!(
                    "{name} not probed for {:.1}s ({} .. {}), bound {:.1}s; {}, next {}",
                    largest.0.as_secs_f64(),
                    clk.t(largest.1),
                    clk.t(largest.3),
                    bound.as_secs_f64(),
                    match &before {
                        Some(b) => format!("probe before by {b}"),
                        None =>
                            "no probe before it in range (created then, or not probed for a minute)"
                                .into(),
                    },
                    match &after {
                        Some(a) => format!("by {a}"),
                        None => "none yet".into(),
                    }
                ),
            });
        }
    }
    (out, worst)
}

/// Invariant 2, first half: no two replicas probe one checker at overlapping
/// times. `exempt(replica, at)` covers the cut-off exception (docs/invariants.md). One
/// violation per checker (the first overlap).
pub fn overlaps(
    log: &ProbeLog,
    by: &HashMap<u32, Vec<Probe>>,
    exempt: &dyn Fn(&str, Instant) -> bool,
    clk: &Clock,
) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut ids: Vec<&u32> = by.keys().collect();
    ids.sort();
    for id in ids {
        let probes = &by[id];
        let mut last: HashMap<u16, Probe> = HashMap::new();
        'probes: for p in probes {
            for (r, q) in &last {
                if *r != p.replica
                    && q.end > p.start
                    && !exempt(log.replica(*r), q.start)
                    && !exempt(log.replica(p.replica), p.start)
                {
                    let name = log.checker(*id);
                    let (a, b) = (log.replica(*r), log.replica(p.replica));
                    out.push(Violation::new(
                        Inv::Exclusivity,
                        Some(name),
                        &[a, b],
                        p.start,
                        format!(
                            "{name}: {a} probed {} .. {} and {b} probed {} .. {}: overlapping",
                            clk.t(q.start),
                            clk.t(q.end),
                            clk.t(p.start),
                            clk.t(p.end)
                        ),
                    ));
                    break 'probes;
                }
            }
            if last.get(&p.replica).is_none_or(|q| q.end < p.end) {
                last.insert(p.replica, *p);
            }
        }
    }
    out
}

/// An owner label as the object log saw it appear.
#[derive(Clone, Debug)]
pub struct Assignment {
    pub owner: String,
    pub at: Instant,
    pub rv: u64,
}

/// Per checker, the owners it had in [from, to] in resourceVersion order:
/// the owner as of `from`, then every change of the owner label to another
/// replica (consecutive repeats merged).
pub fn ownership(objs: &[ObjRec], from: Instant, to: Instant) -> HashMap<String, Vec<Assignment>> {
    let mut before: HashMap<&str, &ObjRec> = HashMap::new();
    let mut seq: HashMap<String, Vec<Assignment>> = HashMap::new();
    for r in objs {
        if r.at < from {
            if r.kind == RecKind::Deleted {
                before.remove(r.name.as_str());
            } else {
                before.insert(&r.name, r);
            }
            continue;
        }
        if r.at > to {
            break;
        }
        if !seq.contains_key(&r.name)
            && let Some(b) = before.get(r.name.as_str())
            && let Some(o) = &b.owner
        {
            seq.insert(
                r.name.clone(),
                vec![Assignment {
                    owner: o.clone(),
                    at: b.at,
                    rv: b.rv,
                }],
            );
        }
        if let Some(o) = &r.owner
            && r.kind != RecKind::Deleted
        {
            let s = seq.entry(r.name.clone()).or_default();
            if s.last().is_none_or(|a| &a.owner != o) {
                s.push(Assignment {
                    owner: o.clone(),
                    at: r.at,
                    rv: r.rv,
                });
            }
        }
    }
    for (name, b) in before {
        if let Some(o) = &b.owner {
            seq.entry(name.to_string()).or_insert_with(|| {
                vec![Assignment {
                    owner: o.clone(),
                    at: b.at,
                    rv: b.rv,
                }]
            });
        }
    }
    seq
}

/// Invariant 2, second half: once a new owner started probing a checker, the
/// old owner never probes it again, unless the checker was assigned back to
/// it. Each run of probes by one replica must match an assignment to that
/// replica, in order, seen at most `slack` after the run began (the test's
/// watch may lag the replica's), or, for a run that began while the test's
/// watch was `blind` (erroring, from its first error to the next event it
/// delivered), by the end of that blindness plus `slack`: the order of what
/// the test could not see is unknown. Exempt probes are left out.
pub fn stale_probes(
    log: &ProbeLog,
    by: &HashMap<u32, Vec<Probe>>,
    owners: &HashMap<String, Vec<Assignment>>,
    exempt: &dyn Fn(&str, Instant) -> bool,
    slack: Duration,
    blind: &[(Instant, Instant)],
    clk: &Clock,
) -> Vec<Violation> {
    let seen_in_time = |probe: Instant, seen: Instant| {
        seen <= probe + slack
            || blind
                .iter()
                .any(|(from, to)| probe + slack >= *from && seen <= *to + slack)
    };
    let mut out = Vec::new();
    let empty = Vec::new();
    let mut ids: Vec<&u32> = by.keys().collect();
    ids.sort();
    for id in ids {
        let name = log.checker(*id);
        let seq = owners.get(name).unwrap_or(&empty);
        let mut j = 0usize;
        let mut current: Option<u16> = None;
        let mut prev_run: Option<(u16, Instant)> = None;
        for p in &by[id] {
            let r = log.replica(p.replica);
            if exempt(r, p.start) || current == Some(p.replica) {
                continue;
            }
            // A new run by `r`.
            let found = (j..seq.len()).find(|k| seq[*k].owner == r);
            let history = || {
                seq.iter()
                    .map(|a| format!("{} ({})", a.owner, clk.t(a.at)))
                    .collect::<Vec<_>>()
                    .join(" -> ")
            };
            match found {
                None => {
                    let after = prev_run
                        .map(|(q, at)| {
                            format!(" after {} probed it from {}", log.replica(q), clk.t(at))
                        })
                        .unwrap_or_default();
                    out.push(Violation::new(
                        Inv::Exclusivity,
                        Some(name),
                        &[r],
                        p.start,
                        format!(
                            "{name}: {r} probed it at {}{after} with no assignment to {r} to match; owners seen: {}",
                            clk.t(p.start),
                            history()
                        ),
                    ));
                    break;
                }
                Some(k) if !seen_in_time(p.start, seq[k].at) => {
                    out.push(Violation::new(
                        Inv::Exclusivity,
                        Some(name),
                        &[r],
                        p.start,
                        format!(
                            "{name}: {r} probed it at {}, {:.1}s before its assignment to {r} was seen ({}); owners seen: {}",
                            clk.t(p.start),
                            (seq[k].at - p.start).as_secs_f64(),
                            clk.t(seq[k].at),
                            history()
                        ),
                    ));
                    break;
                }
                Some(k) => j = k,
            }
            current = Some(p.replica);
            prev_run = Some((p.replica, p.start));
        }
    }
    out
}

/// Lease deletions by UID: (rv, seen at, inferred from a re-list).
pub fn lease_deletions(leases: &[LeaseRec]) -> HashMap<&str, (u64, Instant, bool)> {
    let mut out = HashMap::new();
    for l in leases.iter().filter(|l| l.kind == RecKind::Deleted) {
        out.entry(l.uid.as_str())
            .or_insert((l.rv, l.at, l.inferred));
    }
    out
}

/// Invariant 3 and the proof rule, for every change seen in (from, to]:
/// - a status write (status changed) landed only from the replica that the
///   owner label named in that very version, and not after the Lease named by
///   its epoch was deleted (unless `graceful(writer, at)`: a replica flushing
///   its last writes after SIGTERM, as docs/invariants.md allows);
/// - an owner changed from one replica to another only after the old
///   owner's Lease was deleted, in resourceVersion order (the proof that it
///   was gone), unless the old owner made the change itself: its drain
///   acknowledgement, which assigns the drain's target and says so
///   (`handed-over-from`, an annotation the sharder's writes remove).
pub fn fencing(
    objs: &[ObjRec],
    leases: &[LeaseRec],
    from: Instant,
    to: Instant,
    graceful: &dyn Fn(&str, Instant) -> bool,
    clk: &Clock,
) -> Vec<Violation> {
    let deleted = lease_deletions(leases);
    let mut prev: HashMap<&str, &ObjRec> = HashMap::new();
    let mut out = Vec::new();
    for e in objs {
        match e.kind {
            RecKind::Deleted => {
                prev.remove(e.name.as_str());
                continue;
            }
            RecKind::Listed | RecKind::Added => {
                prev.insert(&e.name, e);
                continue;
            }
            RecKind::Modified => {}
        }
        let Some(p) = prev.insert(&e.name, e) else {
            continue;
        };
        if e.at <= from || e.at > to {
            continue;
        }
        if e.status != p.status {
            out.extend(unfenced_status_write(e, &deleted, graceful, clk));
        }
        out.extend(unproven_move(p, e, &deleted, clk));
    }
    out
}

/// Lease deletions by UID, as [`lease_deletions`] gives them.
type Deletions<'a> = HashMap<&'a str, (u64, Instant, bool)>;

/// Invariant 3 for the status write that made version `e`: from the owner
/// its owner label names, before the Lease of its epoch was deleted.
fn unfenced_status_write(
    e: &ObjRec,
    deleted: &Deletions<'_>,
    graceful: &dyn Fn(&str, Instant) -> bool,
    clk: &Clock,
) -> Option<Violation> {
    let name = e.name.as_str();
    let writer = e.status_owner.as_deref().unwrap_or("(none)");
    if e.status_owner != e.owner {
        return Some(Violation::new(
            Inv::Fencing,
            Some(name),
            &[writer],
            e.at,
            format!(
                "{name}: status written by {writer} landed at rv {} (seen {}) while the owner label named {} (epoch {}{})",
                e.rv,
                clk.t(e.at),
                e.owner.as_deref().unwrap_or("nobody"),
                e.epoch.as_deref().unwrap_or("-"),
                e.drain
                    .as_ref()
                    .map(|d| format!(", draining to {d}"))
                    .unwrap_or_default()
            ),
        ));
    }
    let epoch = e.epoch.as_ref()?;
    let (drv, dat, _) = deleted.get(epoch.as_str())?;
    (*drv < e.rv && !graceful(writer, e.at)).then(|| {
        Violation::new(
            Inv::Fencing,
            Some(name),
            &[writer],
            e.at,
            format!(
                "{name}: status written by {writer} landed at rv {} (seen {}) after its Lease {epoch} was deleted at rv {drv} (seen {})",
                e.rv,
                clk.t(e.at),
                clk.t(*dat)
            ),
        )
    })
}

/// The proof rule for the change from version `p` to `e`: a move from one
/// replica to another comes after the old owner's Lease was deleted, unless
/// it is the old owner's own drain acknowledgement.
fn unproven_move(
    p: &ObjRec,
    e: &ObjRec,
    deleted: &Deletions<'_>,
    clk: &Clock,
) -> Option<Violation> {
    let handed_over =
        p.drain.as_ref() == e.owner.as_ref() && e.handed_over_from.as_ref() == p.owner.as_ref();
    let (Some(po), Some(eo)) = (&p.owner, &e.owner) else {
        return None;
    };
    if (po, &p.epoch) == (eo, &e.epoch) || handed_over {
        return None;
    }
    let deletion = p.epoch.as_deref().and_then(|pe| deleted.get(pe));
    let proven = match deletion {
        Some((drv, _, false)) => *drv < e.rv,
        // Deleted during a gap of the Lease watch: the rv is only an
        // upper bound, the order unknown; give the benefit of the doubt.
        Some((_, _, true)) => true,
        None => false,
    };
    if proven {
        return None;
    }
    let lease = match deletion {
        Some((drv, dat, _)) => {
            format!("deleted only later, at rv {drv} (seen {})", clk.t(*dat))
        }
        None => "never deleted".to_string(),
    };
    let name = e.name.as_str();
    Some(Violation::new(
        Inv::Proof,
        Some(name),
        &[po, eo],
        e.at,
        format!(
            "{name}: moved from {po} to {eo} at rv {} (seen {}) without proof that {po} was gone: its Lease {} was {lease}",
            e.rv,
            clk.t(e.at),
            p.epoch.as_deref().unwrap_or("-")
        ),
    ))
}

/// Ownership changes of assigned checkers seen in [from, to]: drains
/// requested, acknowledged, reassignments. One entry per checker (its first).
pub fn moves(objs: &[ObjRec], from: Instant, to: Instant, clk: &Clock) -> Vec<Violation> {
    let mut prev: HashMap<&str, &ObjRec> = HashMap::new();
    let mut out: BTreeMap<&str, Violation> = BTreeMap::new();
    for e in objs {
        if e.kind == RecKind::Deleted {
            prev.remove(e.name.as_str());
            continue;
        }
        let p = prev.insert(&e.name, e);
        if e.kind != RecKind::Modified || e.at < from || e.at > to {
            continue;
        }
        let Some(p) = p else { continue };
        let Some(po) = &p.owner else { continue };
        if (&p.owner, &p.epoch, &p.drain) == (&e.owner, &e.epoch, &e.drain) {
            continue;
        }
        let what = match (&e.owner, &e.drain) {
            (Some(o), None) if o == po => format!("re-assigned to {o} under a new epoch"),
            (Some(o), None) if e.handed_over_from.as_ref() == Some(po) => {
                format!("handed over to {o}")
            }
            (Some(o), None) => format!("moved to {o}"),
            (Some(_), Some(d)) => format!("drain to {d} requested"),
            (None, d) => format!(
                "released by its owner{}",
                d.as_ref()
                    .map(|d| format!(" (drain to {d})"))
                    .unwrap_or_default()
            ),
        };
        out.entry(e.name.as_str()).or_insert_with(|| {
            Violation::new(
                Inv::Sight,
                Some(&e.name),
                &[po],
                e.at,
                format!(
                    "{}: owned by {po}, {what} at rv {} (seen {})",
                    e.name,
                    e.rv,
                    clk.t(e.at)
                ),
            )
        });
    }
    out.into_values().collect()
}

/// Owner label of every checker as of `at` (the last version seen by then).
pub fn owners_at(objs: &[ObjRec], at: Instant) -> HashMap<String, Option<String>> {
    let mut out = HashMap::new();
    for r in objs.iter().take_while(|r| r.at <= at) {
        if r.kind == RecKind::Deleted {
            out.remove(&r.name);
        } else {
            out.insert(r.name.clone(), r.owner.clone());
        }
    }
    out
}

/// Checkers whose owner differs between two snapshots (both assigned).
pub fn moved_between(
    a: &HashMap<String, Option<String>>,
    b: &HashMap<String, Option<String>>,
) -> usize {
    a.iter()
        .filter(|(k, o)| o.is_some() && b.get(*k).is_some_and(|n| n.is_some() && n != *o))
        .count()
}

/// Shard sizes over checkers with a valid owner.
pub fn shard_sizes<'a>(owners: impl Iterator<Item = &'a str>) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for o in owners {
        *m.entry(o.to_string()).or_default() += 1;
    }
    m
}

/// Invariant 4's bound: the largest shard holds at most this many, what the
/// ring's tight targets give (`crates/core/src/ring.rs`).
pub fn balance_bound(m: usize, n: usize) -> usize {
    m.div_ceil(n.max(1))
}

/// Invariant 5's bound for one N -> N+1 step (n_after = N+1): the newcomer's
/// share, which the ring moves exactly (`floor`; `ceil` for the checkers
/// created while the step settles).
pub fn movement_bound(m: usize, n_after: usize) -> usize {
    m.div_ceil(n_after.max(1))
}

/// Gaps of the object log in [from, to], for reports.
pub fn gaps_in(gaps: &[Gap], from: Instant, to: Instant) -> Vec<&Gap> {
    gaps.iter().filter(|g| g.at >= from && g.at <= to).collect()
}

/// Invariant 2 per zone, for checkers with `spec.locations`: of one checker,
/// no two replicas of one zone probe at overlapping times (each zone has one
/// prober at a time, as the owner is one). `hits` holds the owners' probes
/// and the zone probes together; `zone_of` names a replica's zone. One line
/// per checker and zone (the first overlap).
pub fn zone_overlaps(hits: &[Hit], zone_of: &dyn Fn(&str) -> String) -> Vec<String> {
    let mut by: BTreeMap<(String, String), Vec<&Hit>> = BTreeMap::new();
    for h in hits {
        by.entry((h.checker.clone(), zone_of(&h.replica)))
            .or_default()
            .push(h);
    }
    let mut out = Vec::new();
    for ((checker, zone), mut hs) in by {
        hs.sort_by_key(|h| h.start);
        let mut latest: Option<&Hit> = None;
        for h in hs {
            if let Some(q) = latest
                && q.replica != h.replica
                && q.end > h.start
            {
                out.push(format!(
                    "{checker} in zone {zone}: {} and {} probed at overlapping times",
                    q.replica, h.replica
                ));
                break;
            }
            if latest.is_none_or(|q| q.end < h.end) {
                latest = Some(h);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
