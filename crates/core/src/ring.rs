//! Assignment of checkers to replicas: rendezvous (highest-random-weight)
//! hashing with tightly balanced, sticky loads.
//!
//! Pure logic, no I/O: the sharder feeds it the live members and the current
//! holder of every checker and gets back the moves to make.
//!
//! Why not a plain hash ring: with M = 1000 checkers on N = 20 replicas a purely
//! random placement cannot keep the largest shard within 1.10 x M/N (the
//! standard deviation alone is 14% of the mean). So the hash only gives each
//! checker an order of preference over the members, and the loads are set
//! explicitly: every member holds `floor(M/N)` or `ceil(M/N)` checkers.
//!
//! Why tight targets and not just a cap of `ceil(M/N)`: with a cap alone, loads
//! drift apart over a chain of scale-outs (some members at the cap, others well
//! below), so one step N -> N+1 can move nothing and the next one twice
//! M/(N+1). With tight targets the `M mod N` members that get `ceil(M/N)` are
//! those that hold the most now (see `targets` for ties), and a checker stays
//! where it is unless its holder left or is over its target. From a settled
//! assignment:
//!
//! - N -> N+1: only the new member is under its target, so the others shed
//!   exactly its share, `floor(M/(N+1))` checkers, all towards it;
//! - a member leaves: no survivor is over its target, so only the departed
//!   member's checkers move;
//! - a member replaced by a new name: only the departed member's checkers move.
//!
//! That is the least any scheme can move, and the largest shard is `ceil(M/N)`.
//! The price: deleting a checker from a member at `floor(M/N)` can cost one
//! drain from a fuller member, where a cap alone would move nothing.
//! A member over its target sheds the checkers it prefers least; unassigned and
//! shed checkers go to the highest-scoring member with room.
//!
//! The hash is specified (FNV-1a 64 over UTF-8 bytes, then the SplitMix64
//! finaliser), not Rust's `DefaultHasher`, so replicas of different builds agree;
//! golden values in the tests pin it.

use std::collections::HashMap;

/// FNV-1a, 64 bit.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// SplitMix64 finaliser: spreads the bits of a 64-bit value.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Rendezvous score of `member` for `key` ("namespace/name"); higher wins.
pub fn score(member: &str, key: &str) -> u64 {
    score_hashed(member_hash(member), fnv1a64(key.as_bytes()))
}

/// The member half of [`score`].
pub(crate) fn member_hash(member: &str) -> u64 {
    mix64(fnv1a64(member.as_bytes()))
}

/// [`score`] from the member half and the FNV-1a hash of the key.
pub(crate) fn score_hashed(member_hash: u64, key_hash: u64) -> u64 {
    mix64(key_hash ^ member_hash)
}

/// The member that `key` prefers most among `members`.
pub fn preferred<'a>(members: &'a [String], key: &str) -> Option<&'a str> {
    members
        .iter()
        .max_by_key(|m| (score(m, key), m.as_str()))
        .map(String::as_str)
}

/// Where one checker stands today.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    pub key: String,
    /// The live member it counts against: its valid owner, or the target of a
    /// drain in progress. `None` when unassigned or its owner is gone.
    pub holder: Option<String>,
}

/// A [`Placement`] borrowed from where the caller keeps it (the sharder's
/// book: no copy of 100,000 keys per decision).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlacementRef<'a> {
    pub key: &'a str,
    pub holder: Option<&'a str>,
}

/// One change the sharder should make.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Move {
    /// The checker has no live holder: assign it to `to` at once.
    Assign { key: String, to: String },
    /// The checker's holder is over its target: drain it towards `to`.
    Drain {
        key: String,
        from: String,
        to: String,
    },
}

/// Largest shard allowed for `m` checkers on `n` members: `ceil(m/n)`.
pub fn capacity(m: usize, n: usize) -> usize {
    if n == 0 { 0 } else { m.div_ceil(n) }
}

/// What each member should hold, from how many checkers it holds now.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Targets {
    /// `floor(M/N)`, or `ceil(M/N)` for the members that hold the most now.
    pub(crate) target: Vec<usize>,
    /// Members that may take one checker more than `target`, as long as
    /// `extras` is not used up: the `ceil(M/N)` slots left over among members
    /// tied at the boundary that would not shed either way.
    pub(crate) flexible: Vec<bool>,
    pub(crate) extras: usize,
}

/// The loads to converge to, for `members` holding `held` checkers each now
/// (same order) and `m` checkers in all: every member gets `floor(m/n)`, and the
/// `m mod n` that hold the most now get one more. That the fullest members keep
/// the extra slots is what makes a settled assignment move only the share of
/// a new member, or only the checkers of a departed one.
///
/// Ties at the boundary: if the tied members hold more than `floor(m/n)`, some
/// of them must shed one; the smaller names keep the extra slot. If they hold
/// `floor(m/n)` or less (a new member, or placement from scratch), none sheds
/// either way, and the slots go to whichever of them the checkers being placed
/// prefer (`flexible`), so that a new checker goes to its preferred member.
pub(crate) fn targets(members: &[&str], held: &[usize], m: usize) -> Targets {
    let n = members.len();
    let base = m.checked_div(n).unwrap_or(0);
    let mut t = Targets {
        target: vec![base; n],
        flexible: vec![false; n],
        extras: 0,
    };
    let extra = if n == 0 { 0 } else { m % n };
    if extra == 0 {
        return t;
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| held[b].cmp(&held[a]).then(members[a].cmp(members[b])));
    let boundary = held[order[extra - 1]];
    if boundary > base {
        for &i in &order[..extra] {
            t.target[i] += 1;
        }
        return t;
    }
    for &i in &order {
        if held[i] > boundary {
            t.target[i] += 1;
        } else if held[i] == boundary {
            t.flexible[i] = true;
        }
    }
    t.extras = extra - order.iter().filter(|&&i| held[i] > boundary).count();
    t
}

/// Computes the moves that bring `placements` to a tightly balanced assignment
/// over `members` (every member holds `floor(M/N)` or `ceil(M/N)` checkers),
/// moving as few checkers as possible: a checker moves only when it has no live
/// holder or its holder is over its target. Deterministic for a given input,
/// and independent of the order of `members`.
pub fn plan(members: &[String], placements: &[Placement]) -> Vec<Move> {
    let refs: Vec<PlacementRef<'_>> = placements
        .iter()
        .map(|p| PlacementRef {
            key: &p.key,
            holder: p.holder.as_deref(),
        })
        .collect();
    plan_refs(members, &refs)
}

/// [`plan`] over borrowed placements, in any order: the moves depend on
/// the placements, not on their order.
pub fn plan_refs(members: &[String], placements: &[PlacementRef<'_>]) -> Vec<Move> {
    // Distinct members in name order.
    let mut names: Vec<&str> = members.iter().map(String::as_str).collect();
    names.sort_unstable();
    names.dedup();
    if names.is_empty() {
        return Vec::new();
    }
    let index: HashMap<&str, usize> = names.iter().enumerate().map(|(i, &m)| (m, i)).collect();
    let mut held: Vec<Vec<&str>> = vec![Vec::new(); names.len()];
    let mut orphans: Vec<&str> = Vec::new();
    for p in placements {
        match p.holder.and_then(|h| index.get(h)) {
            Some(&i) => held[i].push(p.key),
            None => orphans.push(p.key),
        }
    }
    let mut load: Vec<usize> = held.iter().map(Vec::len).collect();
    let Targets {
        target,
        flexible,
        mut extras,
    } = targets(&names, &load, placements.len());
    let hashes: Vec<u64> = names.iter().map(|m| member_hash(m)).collect();
    // Members over their target shed the checkers they prefer least.
    let mut pending: Vec<(u64, &str, Option<usize>)> = orphans
        .into_iter()
        .map(|k| (fnv1a64(k.as_bytes()), k, None))
        .collect();
    for (i, keys) in held.iter().enumerate() {
        if keys.len() > target[i] {
            let mut ranked: Vec<(u64, u64, &str)> = keys
                .iter()
                .map(|k| {
                    let kh = fnv1a64(k.as_bytes());
                    (score_hashed(hashes[i], kh), kh, *k)
                })
                .collect();
            let excess = keys.len() - target[i];
            // The `excess` it prefers least, in no order (pending is sorted below).
            ranked.select_nth_unstable_by(excess - 1, |a, b| (a.0, a.2).cmp(&(b.0, b.2)));
            pending.extend(ranked[..excess].iter().map(|&(_, kh, k)| (kh, k, Some(i))));
            load[i] = target[i];
        }
    }
    // Each goes to the highest-scoring member with room. The room adds up to
    // the number of pending checkers (the targets and extras add up to M), so
    // there always is some.
    pending.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    let has_room = |i: usize, load: &[usize], extras: usize| {
        load[i] < target[i] || (flexible[i] && extras > 0 && load[i] == target[i])
    };
    let mut room: Vec<usize> = (0..names.len())
        .filter(|&i| has_room(i, &load, extras))
        .collect();
    let mut moves = Vec::with_capacity(pending.len());
    for (kh, key, from) in pending {
        let to = *room
            .iter()
            .max_by_key(|&&i| (score_hashed(hashes[i], kh), names[i]))
            .expect("the targets add up to the number of checkers");
        if load[to] == target[to] {
            extras -= 1;
        }
        load[to] += 1;
        room.retain(|&i| has_room(i, &load, extras));
        moves.push(match from {
            None => Move::Assign {
                key: key.to_string(),
                to: names[to].to_string(),
            },
            Some(from) => Move::Drain {
                key: key.to_string(),
                from: names[from].to_string(),
                to: names[to].to_string(),
            },
        });
    }
    moves
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("webchecker-operator-{i}")).collect()
    }

    fn keys(m: usize) -> Vec<String> {
        (0..m)
            .map(|i| format!("ns-{}/checker-{i}", i % 7))
            .collect()
    }

    /// Applies a plan (drains complete at once) and returns the new holders.
    fn apply(placements: &mut [Placement], moves: &[Move]) {
        let idx: HashMap<String, usize> = placements
            .iter()
            .enumerate()
            .map(|(i, p)| (p.key.clone(), i))
            .collect();
        for mv in moves {
            let (key, to) = match mv {
                Move::Assign { key, to } | Move::Drain { key, to, .. } => (key, to),
            };
            placements[idx[key]].holder = Some(to.clone());
        }
    }

    fn settle(members: &[String], placements: &mut [Placement]) -> usize {
        let moves = plan(members, placements);
        let n = moves.len();
        apply(placements, &moves);
        assert!(
            plan(members, placements).is_empty(),
            "a settled assignment is stable"
        );
        n
    }

    fn max_load(placements: &[Placement]) -> usize {
        let mut c: HashMap<&str, usize> = HashMap::new();
        for p in placements {
            *c.entry(p.holder.as_deref().unwrap()).or_default() += 1;
        }
        c.values().copied().max().unwrap_or(0)
    }

    #[test]
    fn hash_golden_values() {
        // Pinned (computed independently with a Python FNV-1a/SplitMix64): changing
        // these breaks agreement between versions during a rollout.
        assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a64(b"default/flant"), 0xf5f679dd203a06a2);
        assert_eq!(mix64(0), 0);
        assert_eq!(mix64(1), 0x5692161d100b05e5);
        assert_eq!(
            score("webchecker-operator-0", "default/flant"),
            0x4aaa9556924a0e1d
        );
        assert_eq!(
            score("webchecker-operator-1", "default/badnews"),
            0x884c90d4f531a3be
        );
    }

    /// The book hands its placements over in its map's order.
    #[test]
    fn the_plan_does_not_depend_on_the_order_of_its_placements() {
        let members = names(5);
        let mut placements: Vec<Placement> = keys(400)
            .into_iter()
            .enumerate()
            .map(|(i, key)| Placement {
                key,
                // Some unassigned, the rest on the first three: both kinds of move.
                holder: (i % 5 != 0).then(|| members[i % 3].clone()),
            })
            .collect();
        let moves = plan(&members, &placements);
        assert!(moves.iter().any(|m| matches!(m, Move::Drain { .. })));
        assert!(moves.iter().any(|m| matches!(m, Move::Assign { .. })));
        placements.reverse();
        assert_eq!(plan(&members, &placements), moves);
        placements.sort_by_key(|p| fnv1a64(p.key.as_bytes()));
        assert_eq!(plan(&members, &placements), moves);
    }

    #[test]
    fn empty_inputs() {
        assert!(
            plan(
                &[],
                &[Placement {
                    key: "a/b".into(),
                    holder: None
                }]
            )
            .is_empty()
        );
        assert!(plan(&names(3), &[]).is_empty());
    }

    #[test]
    fn unassigned_checkers_go_to_their_preferred_member_when_there_is_room() {
        let members = names(3);
        let p = vec![Placement {
            key: "default/flant".into(),
            holder: None,
        }];
        let moves = plan(&members, &p);
        assert_eq!(
            moves,
            vec![Move::Assign {
                key: "default/flant".into(),
                to: preferred(&members, "default/flant").unwrap().to_string()
            }]
        );
    }

    #[test]
    fn a_dead_members_checkers_move_and_nothing_else_does() {
        let members = names(4);
        let mut p: Vec<Placement> = keys(4000)
            .into_iter()
            .map(|key| Placement { key, holder: None })
            .collect();
        settle(&members, &mut p);
        let before = p.clone();
        let survivors: Vec<String> = members[..3].to_vec();
        for pl in p.iter_mut() {
            if pl.holder.as_deref() == Some(members[3].as_str()) {
                pl.holder = None;
            }
        }
        let moves = plan(&survivors, &p);
        assert!(moves.iter().all(|m| matches!(m, Move::Assign { .. })));
        apply(&mut p, &moves);
        for (a, b) in before.iter().zip(&p) {
            if a.holder.as_deref() != Some(members[3].as_str()) {
                assert_eq!(a.holder, b.holder, "{} moved without cause", a.key);
            }
        }
        assert!(max_load(&p) <= capacity(4000, 3));
    }

    #[test]
    fn scale_out_3_to_4_moves_about_a_quarter_through_drains() {
        let mut p: Vec<Placement> = keys(3000)
            .into_iter()
            .map(|key| Placement { key, holder: None })
            .collect();
        settle(&names(3), &mut p);
        let moves = plan(&names(4), &p);
        assert!(
            moves
                .iter()
                .all(|m| matches!(m, Move::Drain { to, .. } if to == "webchecker-operator-3"))
        );
        assert_eq!(moves.len(), 750);
    }

    /// Loads of `members` (in their order); panics if a checker has no live holder.
    fn loads(members: &[String], placements: &[Placement]) -> Vec<usize> {
        let mut c = vec![0usize; members.len()];
        for p in placements {
            let h = p.holder.as_deref().expect("every checker is held");
            let i = members
                .iter()
                .position(|m| m == h)
                .unwrap_or_else(|| panic!("{} held by {h}, not a member", p.key));
            c[i] += 1;
        }
        c
    }

    /// Every member holds floor(M/N) or ceil(M/N).
    fn assert_tight(members: &[String], placements: &[Placement], what: &str) {
        let l = loads(members, placements);
        let (lo, hi) = (
            placements.len() / members.len(),
            placements.len().div_ceil(members.len()),
        );
        assert!(
            l.iter().all(|&x| x == lo || x == hi),
            "{what}: loads {l:?} not all in {{{lo}, {hi}}}"
        );
    }

    /// Scale-out one replica at a time, N = 1..=50: every single step moves
    /// the new member's share and nothing else, and balance holds at every N.
    /// Returns the largest (moved / (M/(N+1))) and (largest / (M/N)).
    fn scale_out_chain(m: usize) -> (f64, f64) {
        let all = names(50);
        let mut p: Vec<Placement> = keys(m)
            .into_iter()
            .map(|key| Placement { key, holder: None })
            .collect();
        settle(&all[..1], &mut p);
        let (mut worst_move, mut worst_balance) = (0f64, 1f64);
        for n in 1..50 {
            let moves = plan(&all[..n + 1], &p);
            let ideal = m as f64 / (n + 1) as f64;
            worst_move = worst_move.max(moves.len() as f64 / ideal);
            assert!(
                moves.len() as f64 <= 1.1 * ideal,
                "M={m}: {n} -> {} moved {} (ideal {ideal:.1})",
                n + 1,
                moves.len()
            );
            assert_eq!(moves.len(), m / (n + 1), "M={m}: {n} -> {}", n + 1);
            assert!(
                moves
                    .iter()
                    .all(|mv| matches!(mv, Move::Drain { to, .. } if *to == all[n])),
                "M={m}: {n} -> {}: a move not towards the new member",
                n + 1
            );
            apply(&mut p, &moves);
            assert!(plan(&all[..n + 1], &p).is_empty(), "settled at N={}", n + 1);
            assert_tight(&all[..n + 1], &p, &format!("M={m} N={}", n + 1));
            let balance = max_load(&p) as f64 / (m as f64 / (n + 1) as f64);
            worst_balance = worst_balance.max(balance);
            assert!(balance <= 1.10, "M={m} N={}: largest/mean {balance}", n + 1);
        }
        (worst_move, worst_balance)
    }

    #[test]
    fn scale_out_chain_m1000_moves_at_most_the_new_share_at_every_step() {
        let (mv, bal) = scale_out_chain(1000);
        eprintln!("M=1000: worst step {mv:.3}x the ideal, largest {bal:.3}x the mean");
    }

    #[test]
    fn scale_out_chain_m10000_moves_at_most_the_new_share_at_every_step() {
        let (mv, bal) = scale_out_chain(10_000);
        eprintln!("M=10000: worst step {mv:.3}x the ideal, largest {bal:.3}x the mean");
    }

    /// Scale out, scale in, replace members by new names, in one chain: after
    /// every step the assignment is tight; a new member gets its share and
    /// only that moves; a departed (or replaced) member's checkers move and
    /// nothing else does.
    #[test]
    fn mixed_chain_moves_only_what_the_membership_change_requires() {
        for m in [1000usize, 4321] {
            let mut p: Vec<Placement> = keys(m)
                .into_iter()
                .map(|key| Placement { key, holder: None })
                .collect();
            let mut next = 0usize;
            let mut fresh = || {
                next += 1;
                format!("webchecker-operator-5f{next:03}")
            };
            let mut members: Vec<String> = (0..3).map(|_| fresh()).collect();
            settle(&members, &mut p);
            // +: add one, -i: remove the i-th, ri: replace the i-th.
            let script = [
                "+", "+", "+", "r0", "-2", "+", "+", "r4", "r1", "-0", "-0", "+", "+", "+", "+",
                "-3", "r2", "+", "+", "+", "+", "+", "-5", "-1", "+", "r3",
            ];
            for step in script {
                let before = p.clone();
                let (removed, added) = match step.split_at(1) {
                    ("+", _) => (None, Some(fresh())),
                    ("-", i) => (Some(members.remove(i.parse().unwrap())), None),
                    (_, i) => (Some(members.remove(i.parse().unwrap())), Some(fresh())),
                };
                if let Some(a) = &added {
                    members.push(a.clone());
                }
                for pl in p.iter_mut() {
                    if pl.holder.is_some() && pl.holder == removed {
                        pl.holder = None;
                    }
                }
                let n = members.len();
                let moves = plan(&members, &p);
                let what = format!("M={m} step {step} (N={n})");
                match (&removed, &added) {
                    (None, Some(a)) => {
                        assert!(moves.len() as f64 <= 1.1 * m as f64 / n as f64, "{what}");
                        assert!(
                            moves
                                .iter()
                                .all(|mv| matches!(mv, Move::Drain { to, .. } if to == a)),
                            "{what}"
                        );
                    }
                    (Some(r), _) => {
                        let departed = before
                            .iter()
                            .filter(|b| b.holder.as_ref() == Some(r))
                            .count();
                        assert_eq!(moves.len(), departed, "{what}");
                        assert!(
                            moves.iter().all(|mv| matches!(mv, Move::Assign { .. })),
                            "{what}"
                        );
                    }
                    (None, None) => unreachable!(),
                }
                apply(&mut p, &moves);
                assert!(plan(&members, &p).is_empty(), "{what}: settled");
                assert_tight(&members, &p, &what);
                for (b, a) in before.iter().zip(&p) {
                    if b.holder.is_some() && b.holder != removed && b.holder != a.holder {
                        assert!(
                            matches!(&added, Some(x) if a.holder.as_ref() == Some(x)),
                            "{what}: {} moved between two old members",
                            b.key
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn an_over_full_member_sheds_the_checkers_it_prefers_least() {
        let members = names(3);
        let p: Vec<Placement> = keys(300)
            .into_iter()
            .map(|key| Placement {
                key,
                holder: Some(members[0].clone()),
            })
            .collect();
        let moves = plan(&members, &p);
        assert_eq!(moves.len(), 200);
        let shed: std::collections::HashSet<&str> = moves
            .iter()
            .map(|mv| match mv {
                Move::Drain { key, from, .. } => {
                    assert_eq!(*from, members[0]);
                    key.as_str()
                }
                Move::Assign { .. } => panic!("nothing is unassigned"),
            })
            .collect();
        let best_shed = shed.iter().map(|k| score(&members[0], k)).max().unwrap();
        let worst_kept = p
            .iter()
            .filter(|pl| !shed.contains(pl.key.as_str()))
            .map(|pl| score(&members[0], &pl.key))
            .min()
            .unwrap();
        assert!(best_shed < worst_kept);
    }

    #[test]
    fn the_extra_slots_go_to_the_fullest_members() {
        let m = ["a", "b", "c", "d"];
        let fixed = |target: Vec<usize>| Targets {
            flexible: vec![false; target.len()],
            target,
            extras: 0,
        };
        // 10 checkers on 4 members: 2 each, 2 members get 3.
        assert_eq!(targets(&m, &[0, 5, 5, 0], 10), fixed(vec![2, 3, 3, 2]));
        assert_eq!(targets(&m, &[4, 1, 4, 1], 10), fixed(vec![3, 2, 3, 2]));
        assert_eq!(targets(&m, &[1, 3, 3, 3], 10), fixed(vec![2, 3, 3, 2]));
        assert_eq!(targets(&m, &[3, 3, 3, 1], 10), fixed(vec![3, 3, 2, 2]));
        assert_eq!(targets(&m, &[2, 2, 3, 3], 10), fixed(vec![2, 2, 3, 3]));
        assert_eq!(targets(&m, &[2, 2, 2, 2], 8), fixed(vec![2, 2, 2, 2]));
        // Tied at or below floor(M/N): none sheds either way, the checkers
        // being placed choose.
        assert_eq!(
            targets(&m, &[0, 0, 0, 0], 10),
            Targets {
                target: vec![2; 4],
                flexible: vec![true; 4],
                extras: 2
            }
        );
        assert_eq!(
            targets(&m, &[3, 2, 2, 0], 10),
            Targets {
                target: vec![3, 2, 2, 2],
                flexible: vec![false, true, true, false],
                extras: 1
            }
        );
        assert_eq!(targets(&m, &[1, 1, 0, 1], 3), fixed(vec![1, 1, 0, 1]));
        assert_eq!(targets(&m, &[1, 1, 1, 0], 2), fixed(vec![1, 1, 0, 0]));
        assert_eq!(
            targets(&m, &[0, 0, 0, 0], 3),
            Targets {
                target: vec![0; 4],
                flexible: vec![true; 4],
                extras: 3
            }
        );
        assert_eq!(targets(&[], &[], 5), fixed(vec![]));
    }

    #[test]
    fn the_plan_does_not_depend_on_the_order_of_members() {
        let members = names(7);
        let mut p: Vec<Placement> = keys(1000)
            .into_iter()
            .map(|key| Placement { key, holder: None })
            .collect();
        settle(&members[..5], &mut p);
        let mut reversed = members.clone();
        reversed.reverse();
        assert_eq!(plan(&members, &p), plan(&reversed, &p));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]

        /// Balance (invariant 4) and movement (invariant 5) for N in 1..=20.
        #[test]
        fn balance_and_movement(n in 1usize..=20, m in 1000usize..=100_000, salt in 0u32..1000) {
            let members = names(n);
            let mut p: Vec<Placement> = (0..m)
                .map(|i| Placement { key: format!("ns{salt}/c{i}"), holder: None })
                .collect();
            settle(&members, &mut p);
            let largest = max_load(&p) as f64;
            prop_assert!(largest <= 1.10 * m as f64 / n as f64, "largest {largest} for M={m} N={n}");
            let grown = names(n + 1);
            let moved = settle(&grown, &mut p) as f64;
            prop_assert!(moved <= 1.1 * m as f64 / (n + 1) as f64, "moved {moved} for M={m} N={n}");
            prop_assert!(max_load(&p) as f64 <= 1.10 * m as f64 / (n + 1) as f64 + 1.0);
        }
    }
}
