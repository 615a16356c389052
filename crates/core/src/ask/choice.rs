//! Which replica confirms a failure: pure, so it is tested in milliseconds.
//!
//! Another zone if any member advertises one, else another node, else any
//! other member; within the best of these, members in the order of their
//! rendezvous score for the checker (crate::ring::score), so
//! the asks of one owner spread over the confirmers and a checker is
//! confirmed by the same one while the members stay the same.

use crate::ring::score;

/// A member that can be asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub identity: String,
    /// Its HTTP server (`host:port`).
    pub address: String,
    /// Empty when unknown.
    pub zone: String,
    /// Empty when unknown.
    pub node: String,
}

/// How far a candidate is from the owner: 0 another zone, 1 another node,
/// 2 possibly the same node.
fn distance(me: &Candidate, c: &Candidate) -> u8 {
    let differs = |a: &str, b: &str| !a.is_empty() && !b.is_empty() && a != b;
    if differs(&me.zone, &c.zone) {
        0
    } else if differs(&me.node, &c.node) {
        1
    } else {
        2
    }
}

/// The members to ask about `key`, best first, at most `at_most`: all of
/// the farthest kind there is, then the next kind.
pub fn confirmers<'a>(
    me: &Candidate,
    key: &str,
    members: &'a [Candidate],
    at_most: usize,
) -> Vec<&'a Candidate> {
    let mut others: Vec<&Candidate> = members
        .iter()
        .filter(|c| c.identity != me.identity)
        .collect();
    others.sort_by_key(|c| (distance(me, c), std::cmp::Reverse(score(&c.identity, key))));
    others.truncate(at_most);
    others
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(identity: &str, zone: &str, node: &str) -> Candidate {
        Candidate {
            identity: identity.into(),
            address: format!("{identity}:8080"),
            zone: zone.into(),
            node: node.into(),
        }
    }

    fn names(v: Vec<&Candidate>) -> Vec<&str> {
        v.into_iter().map(|c| c.identity.as_str()).collect()
    }

    #[test]
    fn another_zone_first_then_another_node_then_anyone() {
        let me = member("r0", "a", "n0");
        let members = vec![
            me.clone(),
            member("same-node", "a", "n0"),
            member("other-node", "a", "n1"),
            member("other-zone", "b", "n2"),
        ];
        let order = names(confirmers(&me, "ns/c", &members, 3));
        assert_eq!(order, ["other-zone", "other-node", "same-node"]);
        let without_zone: Vec<Candidate> = members
            .iter()
            .filter(|c| c.identity != "other-zone")
            .cloned()
            .collect();
        assert_eq!(
            names(confirmers(&me, "ns/c", &without_zone, 1)),
            ["other-node"]
        );
    }

    #[test]
    fn an_unknown_place_is_never_taken_for_a_different_one() {
        let me = member("r0", "", "");
        let members = vec![me.clone(), member("r1", "b", "n1")];
        // Unknown zone on either side: r1 is still a candidate, of the last kind.
        assert_eq!(names(confirmers(&me, "k", &members, 2)), ["r1"]);
        assert_eq!(distance(&me, &members[1]), 2);
    }

    #[test]
    fn the_owner_never_confirms_itself_and_asks_spread_over_the_zone() {
        let me = member("r0", "a", "n0");
        let members: Vec<Candidate> = (1..=4)
            .map(|i| member(&format!("r{i}"), "b", &format!("n{i}")))
            .chain([me.clone()])
            .collect();
        let mut first = std::collections::BTreeMap::<String, usize>::new();
        for k in 0..400 {
            let chosen = confirmers(&me, &format!("ns/c{k}"), &members, 1);
            assert_ne!(chosen[0].identity, "r0");
            *first.entry(chosen[0].identity.clone()).or_default() += 1;
        }
        assert_eq!(first.len(), 4, "{first:?}");
        assert!(first.values().all(|n| *n > 50), "{first:?}");
        // Stable: the same checker is confirmed by the same member.
        assert_eq!(
            confirmers(&me, "ns/c7", &members, 1),
            confirmers(&me, "ns/c7", &members, 1)
        );
    }
}
