//! Zone quorum (`spec.locations`): which replicas probe a checker from the
//! other zones each interval, and what each zone answered. Pure, so it is
//! tested in milliseconds.
//!
//! The owner probes from its own zone. Of the other zones that have a
//! member, the checker takes those with the highest rendezvous score of the
//! zone's name for the checker (crate::ring::score), and in
//! each zone the member with the highest score: the rule that picks the
//! owner among all members, applied within the zone (the owner is also the
//! highest-scoring member of its own zone when it is the ring's choice).
//! With the same members every replica picks the same prober per zone, and
//! the asks of many checkers spread over a zone's members.

use std::collections::BTreeMap;

use super::Place;
use super::choice::Candidate;
use crate::ring::score;

/// The members that probe `key` from zones other than `me`'s: at most
/// `others` zones, best zone first; each zone's members best first (the
/// first probes, the next when it did not). None when `me`'s zone is
/// unknown (zones cannot be told apart then) or no other zone has a member
/// with a known zone.
pub fn zone_probers<'a>(
    me: &Candidate,
    key: &str,
    members: &'a [Candidate],
    others: usize,
) -> Vec<Vec<&'a Candidate>> {
    if me.zone.is_empty() {
        return Vec::new();
    }
    let mut by_zone: BTreeMap<&str, Vec<&Candidate>> = BTreeMap::new();
    for c in members {
        if c.zone.is_empty() || c.zone == me.zone || c.identity == me.identity {
            continue;
        }
        by_zone.entry(&c.zone).or_default().push(c);
    }
    let mut zones: Vec<Vec<&Candidate>> = by_zone
        .into_values()
        .map(|mut zone| {
            zone.sort_by_key(|c| std::cmp::Reverse(score(&c.identity, key)));
            zone
        })
        .collect();
    zones.sort_by_key(|zone| std::cmp::Reverse(score(&zone[0].zone, key)));
    zones.truncate(others);
    zones
}

/// One zone's answer to a zone ask.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneAnswer {
    pub by: Place,
    pub result: ZoneResult,
}

/// What came back from a zone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ZoneResult {
    /// Its probe ran.
    Probed {
        success: bool,
        reason: String,
        millis: u64,
    },
    /// No probe result: its members refused, could not be reached or did
    /// not answer in time (this replica's log says which).
    NoAnswer,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(identity: &str, zone: &str) -> Candidate {
        Candidate {
            identity: identity.into(),
            address: format!("{identity}:8080"),
            zone: zone.into(),
            node: identity.into(),
        }
    }

    #[test]
    fn one_member_per_other_zone_and_never_the_own_zone() {
        let me = member("a0", "a");
        let members = vec![
            me.clone(),
            member("a1", "a"),
            member("b0", "b"),
            member("b1", "b"),
            member("c0", "c"),
            member("unplaced", ""),
        ];
        for k in 0..200 {
            let key = format!("ns/c{k}");
            let chosen = zone_probers(&me, &key, &members, 4);
            let zones: Vec<&str> = chosen.iter().map(|z| z[0].zone.as_str()).collect();
            assert_eq!(zones.len(), 2, "{key}: {zones:?}");
            assert!(zones.contains(&"b") && zones.contains(&"c"), "{zones:?}");
            // Within b, the member the rendezvous rule prefers, then the other.
            let b = chosen.iter().find(|z| z[0].zone == "b").unwrap();
            assert_eq!(b.len(), 2, "both of b's members, best first");
            assert!(score(&b[0].identity, &key) > score(&b[1].identity, &key));
        }
    }

    #[test]
    fn zones_are_taken_by_their_score_and_spread_over_checkers() {
        let me = member("a0", "a");
        let members: Vec<Candidate> = ["b", "c", "d", "e"]
            .iter()
            .map(|z| member(&format!("{z}0"), z))
            .chain([me.clone()])
            .collect();
        let mut first = BTreeMap::<String, usize>::new();
        for k in 0..400 {
            let key = format!("ns/c{k}");
            let chosen = zone_probers(&me, &key, &members, 2);
            assert_eq!(chosen.len(), 2);
            assert!(score(&chosen[0][0].zone, &key) > score(&chosen[1][0].zone, &key));
            *first.entry(chosen[0][0].zone.clone()).or_default() += 1;
            // The same members, the same choice.
            assert_eq!(chosen, zone_probers(&me, &key, &members, 2));
        }
        assert_eq!(first.len(), 4, "{first:?}");
        assert!(first.values().all(|n| *n > 50), "{first:?}");
    }

    #[test]
    fn without_a_known_zone_there_is_no_other_zone() {
        let me = member("a0", "");
        let members = vec![me.clone(), member("b0", "b")];
        assert!(zone_probers(&me, "ns/c", &members, 2).is_empty());
        let me = member("a0", "a");
        let members = vec![me.clone(), member("x", ""), member("a1", "a")];
        assert!(zone_probers(&me, "ns/c", &members, 2).is_empty());
    }
}
