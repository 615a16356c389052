//! One fault window: inject, hold, end, then judge liveness and invariants.

use super::*;

impl WindowRecord {
    /// Records a violation of `inv`.
    fn violation(
        &mut self,
        inv: Inv,
        checker: Option<&str>,
        replicas: &[&str],
        at: Instant,
        detail: String,
    ) {
        self.violations
            .push(Violation::new(inv, checker, replicas, at, detail));
    }
}

/// The replicas whose checkers must move during the hold (by identity), and
/// the checkers they owned when the fault began.
struct Victims {
    ids: Vec<String>,
    checkers: Vec<String>,
}

/// The checkers created after a fault: their names, and whether they got
/// owners late (reported once, not again as unsettled).
struct NewCheckers {
    names: Vec<String>,
    late: bool,
}

/// The instants a window is judged by: the previous check (`from`), the
/// fault's start (`t0`) and end (`t1`), and this check (`t2`).
#[derive(Clone, Copy)]
struct Span {
    from: Instant,
    t0: Instant,
    t1: Instant,
    t2: Instant,
}

impl Campaign {
    pub(super) async fn run_window(&mut self, w: &Window) -> WindowRecord {
        let mut rec = WindowRecord {
            desc: w.describe(),
            kind: w.fault.kind(),
            alike: w.fault.alike(),
            ..Default::default()
        };
        self.absorb();
        let leader = self.leader().await;
        let t0 = Instant::now();
        rec.started = Some(t0);
        let owners_before = self.objs.with(|s| {
            s.current
                .values()
                .filter_map(|o| Some((o.name.clone(), o.owner.clone()?)))
                .collect::<HashMap<String, String>>()
        });
        let injected = self.inject(w, &leader, &mut rec, t0).await;
        let mut returning = injected.restarted.map(|i| self.returning(i));
        self.note_targets(&mut rec, &injected, &leader);
        let victims = self.victims(&injected, &owners_before);
        self.hold(w, &mut rec, t0, &victims).await;

        // End the fault.
        if let Some(i) = self.end_fault(&w.fault, injected.victim).await {
            returning = Some(self.returning(i));
        }
        let t1 = Instant::now();
        rec.ended = Some(t1);
        let unhearing = self.unhearing(&w.fault, &injected);
        if matches!(w.fault, Fault::Busy { .. }) {
            self.note_survivors_moved(&mut rec, (t0, t1), &victims.checkers);
        }
        if injected.judged && !victims.ids.is_empty() {
            self.judge_failover(&mut rec, w, t0, &victims);
        }
        let new = self.new_checkers(&mut rec, w, t1).await;
        let names = self.all_names();
        let unsettled = self.judge_settling(&mut rec, &names, &new, t1).await;
        if !unsettled {
            self.judge_fresh_status(&mut rec).await;
        }
        self.absorb();
        let t2 = Instant::now();
        rec.checked = Some(t2);

        if let Some((i, since, old)) = returning.take() {
            self.judge_return(&mut rec, i, since, &old);
        }
        self.cut_off_exceptions(&mut rec, &unhearing, (t0, t1));
        // Judge the whole stretch since the last check.
        let span = Span {
            from: self.prev_check,
            t0,
            t1,
            t2,
        };
        self.judge_coverage(&mut rec, w, &new.names, span);
        self.judge_probes_and_writes(&mut rec, w, &new.names, span);
        self.judge_movement(&mut rec, &names, span);
        self.judge_log_gaps(&mut rec, span);
        self.prev_check = t2;
        if unsettled {
            self.heal_unsettled(&mut rec, w).await;
        }
        rec
    }

    /// Notes who the fault hit: the victim of a process fault, the replicas
    /// whose proxy it switched.
    fn note_targets(&self, rec: &mut WindowRecord, x: &Injected, leader: &Option<String>) {
        if let Some(i) = x.victim {
            let was_leader = leader.as_deref() == Some(self.ops[i].identity.as_str());
            rec.notes.push(format!(
                "victim {}{}",
                self.ops[i].identity,
                if was_leader { " (the leader)" } else { "" }
            ));
        }
        if !x.proxied.is_empty() {
            let ids: Vec<&str> = x
                .proxied
                .iter()
                .map(|i| self.ops[*i].identity.as_str())
                .collect();
            rec.notes.push(format!(
                "proxied: {}{}",
                ids.join(","),
                if leader.as_ref().is_some_and(|l| ids.contains(&l.as_str())) {
                    " (leader among them)"
                } else {
                    ""
                }
            ));
        }
    }

    fn victims(&self, x: &Injected, owners_before: &HashMap<String, String>) -> Victims {
        let ids: Vec<String> = x
            .victims
            .iter()
            .map(|i| self.ops[*i].identity.clone())
            .collect();
        let checkers = owners_before
            .iter()
            .filter(|(_, o)| ids.contains(o))
            .map(|(k, _)| k.clone())
            .collect();
        Victims { ids, checkers }
    }

    /// Holds the fault; watches failover and sight meanwhile.
    async fn hold(&mut self, w: &Window, rec: &mut WindowRecord, t0: Instant, victims: &Victims) {
        let clk = self.clk;
        // Held from the moment the fault is in place (stopping kube-apiserver
        // gracefully, for one, takes a while).
        let hold_until = Instant::now() + w.hold;
        let mut next_sight = Instant::now();
        while Instant::now() < hold_until {
            self.absorb();
            if !victims.ids.is_empty() && rec.failover.is_none() {
                let moved = self.objs.with(|s| {
                    victims.checkers.iter().all(|n| {
                        s.current.get(n).is_some_and(|o| {
                            o.owner.as_ref().is_some_and(|ow| !victims.ids.contains(ow))
                                && s.validly_owned(o)
                        })
                    })
                });
                if moved {
                    rec.failover = Some(t0.elapsed());
                }
            }
            if Instant::now() >= next_sight {
                next_sight = Instant::now() + INTERVAL;
                let at = Instant::now();
                for id in self.metrics_answer().await {
                    rec.violation(
                        Inv::Sight,
                        None,
                        &[&id],
                        at,
                        format!("{id}: /metrics did not answer within 3s at {}", clk.t(at)),
                    );
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Replicas that may not hear at once that their Lease is gone: the
    /// cut-off exception, judged once the log holds the deletions.
    fn unhearing(&self, fault: &Fault, x: &Injected) -> Vec<(String, Option<Duration>)> {
        match fault {
            Fault::Proxy { mode, .. } if mode.isolates() && x.proxied.len() < self.ops.len() => x
                .proxied
                .iter()
                .map(|i| (self.ops[*i].identity.clone(), hear_bound(mode)))
                .collect(),
            // The lost replica is no exception: a killed one is gone, a
            // stopped one holds its probes after a pause until a renewal
            // answers (its own gate); the survivors may be judged gone.
            Fault::Busy { mode, .. } if mode.isolates() => x
                .proxied
                .iter()
                .filter(|i| Some(**i) != x.victim)
                .map(|i| (self.ops[*i].identity.clone(), hear_bound(mode)))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Liveness: the victims' checkers moved to live replicas within the
    /// fault's failover bound.
    fn judge_failover(&self, rec: &mut WindowRecord, w: &Window, t0: Instant, victims: &Victims) {
        let bound = w.fault.failover_bound();
        let ids: Vec<&str> = victims.ids.iter().map(String::as_str).collect();
        match rec.failover {
            Some(d) if d <= bound => {}
            Some(d) => rec.violation(
                Inv::Liveness,
                None,
                &ids,
                t0,
                format!(
                    "the checkers of {} moved only {:.1}s after the fault began (bound {:.1}s)",
                    victims.ids.join(","),
                    d.as_secs_f64(),
                    bound.as_secs_f64()
                ),
            ),
            None => {
                let left: Vec<String> = self.objs.with(|s| {
                    victims
                        .checkers
                        .iter()
                        .filter(|n| {
                            s.current.get(*n).is_none_or(|o| {
                                o.owner.as_ref().is_none_or(|ow| victims.ids.contains(ow))
                                    || !s.validly_owned(o)
                            })
                        })
                        .cloned()
                        .collect()
                });
                let detail = self.describe_unowned(&left);
                rec.violation(
                    Inv::Liveness,
                    left.first().map(String::as_str),
                    &ids,
                    t0,
                    format!(
                        "{} of the {} checkers of {} not moved to a live replica by the end of the fault ({:.1}s, bound {:.1}s): {detail}",
                        left.len(),
                        victims.checkers.len(),
                        victims.ids.join(","),
                        w.hold.as_secs_f64(),
                        bound.as_secs_f64()
                    ),
                );
            }
        }
    }

    /// Liveness: new checkers get owners.
    async fn new_checkers(
        &mut self,
        rec: &mut WindowRecord,
        w: &Window,
        t1: Instant,
    ) -> NewCheckers {
        let clk = self.clk;
        let new_names: Vec<String> = (0..NEW_PER_WINDOW)
            .map(|k| format!("n{}-{}", w.index, k))
            .collect();
        let created = match self.create(&new_names).await {
            Ok(c) => c,
            Err(e) => {
                rec.violation(
                    Inv::Liveness,
                    None,
                    &[],
                    Instant::now(),
                    format!("the API server does not take new checkers after the fault: {e}"),
                );
                Vec::new()
            }
        };
        let created_at = created.iter().map(|(_, t)| *t).max().unwrap_or(t1);
        let got = self
            .wait_for(settle_bound(), |c| c.unowned(&new_names).is_empty())
            .await;
        rec.new_assigned = got.map(|_| Instant::now() - t1);
        let assigned_after_creation = got.map(|_| Instant::now() - created_at);
        let new_late = assigned_after_creation.is_none_or(|d| d > new_assign_bound());
        if new_late {
            let left = self.unowned(&new_names);
            let detail = format!(
                "{}; {}",
                self.describe_unowned(&left),
                self.diagnose().await
            );
            rec.violation(
                Inv::Liveness,
                new_names.first().map(String::as_str),
                &[],
                created_at,
                format!(
                    "new checkers created at {} (fault ended {}) not all validly owned within {:.1}s: {}; now: {detail}",
                    clk.t(created_at),
                    clk.t(t1),
                    new_assign_bound().as_secs_f64(),
                    match assigned_after_creation {
                        Some(d) => format!("took {:.1}s", d.as_secs_f64()),
                        None => format!("still unowned after {:.1}s", settle_bound().as_secs_f64()),
                    }
                ),
            );
        }
        self.checkers.extend(created.iter().cloned());
        NewCheckers {
            names: new_names,
            late: new_late,
        }
    }

    /// Settle: every checker validly owned, balanced, probed since the end.
    /// Returns whether the system is left unsettled.
    async fn judge_settling(
        &mut self,
        rec: &mut WindowRecord,
        names: &[String],
        new: &NewCheckers,
        t1: Instant,
    ) -> bool {
        let settled = self
            .wait_for(settle_bound().saturating_sub(t1.elapsed()), |c| {
                c.unowned(names).is_empty() && c.balance().2
            })
            .await;
        let probed = self
            .wait_for(settle_bound().saturating_sub(t1.elapsed()), |c| {
                let seen = c.probes.probed_since(t1);
                names.iter().all(|n| seen.contains(n.as_str()))
            })
            .await;
        rec.all_probed = probed.map(|_| Instant::now() - t1);
        let mut unsettled = false;
        let left = self.unowned(names);
        if settled.is_none() {
            unsettled = !left.is_empty();
            self.report_unsettled(rec, names, &left, new).await;
        }
        if probed.is_none() {
            // Owned but not probed: the fleet is not healthy either.
            unsettled = true;
            self.report_unprobed(rec, names, &left, t1);
        }
        unsettled
    }

    /// Not settled within the bound: the checkers still not validly owned
    /// (`left`; the new ones already reported late are left out), and the
    /// balance.
    async fn report_unsettled(
        &self,
        rec: &mut WindowRecord,
        names: &[String],
        left: &[String],
        new: &NewCheckers,
    ) {
        let (sizes, bound, balanced) = self.balance();
        // New checkers left unowned were reported above.
        let old_left: Vec<String> = left
            .iter()
            .filter(|n| !(new.late && new.names.contains(n)))
            .cloned()
            .collect();
        if !old_left.is_empty() {
            let left = old_left;
            let detail = format!(
                "{}; {}",
                self.describe_unowned(&left),
                self.diagnose().await
            );
            rec.violation(
                Inv::Liveness,
                left.first().map(String::as_str),
                &[],
                Instant::now(),
                format!(
                    "{} checkers not validly owned by a running replica {:.1}s after the fault ended: {detail}",
                    left.len(),
                    settle_bound().as_secs_f64()
                ),
            );
        }
        if !balanced {
            rec.violation(
                Inv::Balance,
                None,
                &[],
                Instant::now(),
                format!(
                    "shard sizes {sizes:?} over the bound {bound} ({} checkers, {} replicas) {:.1}s after the fault ended",
                    names.len(),
                    self.running().len(),
                    settle_bound().as_secs_f64()
                ),
            );
        }
    }

    /// Not every checker probed since the fault ended: those owned but not
    /// probed (the unowned ones, `left`, were reported as such).
    fn report_unprobed(
        &self,
        rec: &mut WindowRecord,
        names: &[String],
        left: &[String],
        t1: Instant,
    ) {
        let seen = self.probes.probed_since(t1);
        // Unowned checkers were reported above.
        let missing: Vec<&String> = names
            .iter()
            .filter(|n| !seen.contains(n.as_str()) && !left.contains(n))
            .collect();
        if !missing.is_empty() {
            rec.violation(
                Inv::Coverage,
                missing.first().map(|s| s.as_str()),
                &[],
                Instant::now(),
                format!(
                    "{} checkers not probed at all in the {:.1}s after the fault ended: {:?}",
                    missing.len(),
                    settle_bound().as_secs_f64(),
                    missing.iter().take(10).collect::<Vec<_>>()
                ),
            );
        }
    }

    /// Invariant 6: a status from the current owner.
    async fn judge_fresh_status(&mut self, rec: &mut WindowRecord) {
        let fresh = self
            .wait_for(INTERVAL * 2 + Duration::from_secs(2), |c| {
                c.stale_status().is_empty()
            })
            .await;
        if fresh.is_some() {
            return;
        }
        let stale = self.stale_status();
        let first = stale.first().cloned();
        let detail = self.objs.with(|s| {
            stale
                .iter()
                .take(5)
                .filter_map(|n| s.current.get(n))
                .map(|o| {
                    format!(
                        "{}: owner {:?}, status by {:?}, generation {:?} observed {:?}",
                        o.name, o.owner, o.status_owner, o.generation, o.observed_generation
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        });
        rec.violation(
            Inv::Fresh,
            first.as_deref(),
            &[],
            Instant::now(),
            format!(
                "{} checkers without a status from their current owner 2 intervals after settling: {detail}",
                stale.len()
            ),
        );
    }

    /// Invariant 1 over the stretch for the checkers older than the window,
    /// and invariant 7 while a fault hit every replica alike.
    fn judge_coverage(&self, rec: &mut WindowRecord, w: &Window, new_names: &[String], span: Span) {
        let clk = self.clk;
        let Span { from, t0, t1, t2 } = span;
        let old: Vec<(String, Instant)> = self
            .checkers
            .iter()
            .filter(|(n, _)| !new_names.contains(n))
            .cloned()
            .collect();
        let (gaps, largest) =
            coverage(&self.probes, &old, from, t2, w.fault.coverage_bound(), &clk);
        rec.largest_gap = largest;
        rec.violations.extend(gaps);
        if w.fault.alike() && t1 > t0 + INTERVAL {
            let (gaps, largest) = coverage(
                &self.probes,
                &old,
                t0 + INTERVAL,
                t1,
                outage_gap_bound(),
                &clk,
            );
            rec.gap_during_fault = largest;
            rec.violations.extend(gaps.into_iter().map(|mut g| {
                g.inv = Inv::Sight;
                g.detail = format!("while every replica's API access was down: {}", g.detail);
                g
            }));
        }
    }

    /// Invariants 2 and 3 and the proof rule over the stretch, and 7's
    /// "nothing moves" when the fault hit every replica alike.
    fn judge_probes_and_writes(
        &self,
        rec: &mut WindowRecord,
        w: &Window,
        new_names: &[String],
        span: Span,
    ) {
        let clk = self.clk;
        let Span { from, t2, .. } = span;
        let isolations = self.isolations.clone();
        let exempt = move |r: &str, at: Instant| {
            isolations
                .iter()
                .any(|(id, a, b)| id == r && at >= *a && at <= *b)
        };
        let graceful_list = self.graceful.clone();
        let graceful = move |r: &str, at: Instant| {
            graceful_list
                .iter()
                .any(|(id, a, b)| id == r && at >= *a && at <= *b)
        };
        let by = self.probes.by_checker(from, t2);
        rec.violations
            .extend(overlaps(&self.probes, &by, &exempt, &clk));
        let blind = self.objs.with(|s| s.blind_periods(t2));
        let (fence, moved, seq) = self.objs.with(|s| {
            let fence = fencing(&s.objs, &s.leases, from, t2, &graceful, &clk);
            let moved = if w.fault.alike() {
                alike_moves(s, new_names, span, &clk)
            } else {
                Vec::new()
            };
            (fence, moved, ownership(&s.objs, from, t2))
        });
        rec.violations.extend(stale_probes(
            &self.probes,
            &by,
            &seq,
            &exempt,
            WATCH_SLACK,
            &blind,
            &clk,
        ));
        rec.violations.extend(fence);
        rec.violations.extend(moved);
    }

    /// Invariant 5: what the end of the fault set moving stays within one
    /// step's bound.
    fn judge_movement(&self, rec: &mut WindowRecord, names: &[String], span: Span) {
        let clk = self.clk;
        let Span { t1, t2, .. } = span;
        let (a, b) = self
            .objs
            .with(|s| (owners_at(&s.objs, t1), owners_at(&s.objs, t2)));
        rec.moved_after = moved_between(&a, &b);
        // Invariant 5 bounds one N -> N+1 step: judge the rejoin only when the
        // end of the fault brought exactly one replica (back) into the ring.
        let holders = |m: &HashMap<String, Option<String>>| {
            m.values()
                .flatten()
                .collect::<std::collections::BTreeSet<_>>()
                .len()
        };
        let (n1, n2) = (holders(&a), holders(&b));
        if n2 != n1 + 1 {
            return;
        }
        let bound = movement_bound(names.len(), n2);
        rec.notes.push(format!(
            "{n1} -> {n2} replicas after the fault: {} moved (bound {bound})",
            rec.moved_after
        ));
        if rec.moved_after > bound {
            let d = format!(
                "{} checkers moved between the end of the fault ({}) and the settled state ({}) as the ring went from {n1} to {n2} replicas, over the bound {bound} for {} checkers",
                rec.moved_after,
                clk.t(t1),
                clk.t(t2),
                names.len()
            );
            rec.violation(Inv::Movement, None, &[], t2, d);
        }
    }

    /// The object log reads etcd's own history: a gap (revisions compacted
    /// before it read them, or a value it could not read) is history the
    /// oracle never judged.
    fn judge_log_gaps(&self, rec: &mut WindowRecord, span: Span) {
        let clk = self.clk;
        let gaps: Vec<(Instant, String)> = self.objs.with(|s| {
            gaps_in(&s.gaps, span.from, span.t2)
                .iter()
                .map(|g| {
                    let d = format!(
                        "the oracle was blind: the object log lost etcd's history of the {} after revision {} up to {} (seen {}); the writes and moves in between went unjudged",
                        g.what,
                        g.after_rv,
                        g.list_rv,
                        clk.t(g.at)
                    );
                    (g.at, d)
                })
                .collect()
        });
        for (at, d) in gaps {
            rec.violation(Inv::Fencing, None, &[], at, d);
        }
    }

    /// The window left the system unsettled: every replica restarted, so
    /// that later windows can still find other bugs.
    async fn heal_unsettled(&mut self, rec: &mut WindowRecord, w: &Window) {
        if !self.heal(rec).await {
            self.aborted = Some(format!(
                "window {}: the system did not settle even after restarting every replica",
                w.index
            ));
        }
        self.absorb();
        self.prev_check = Instant::now();
        // Coverage starts afresh after a heal (every process restarted).
        let healed_at = self.prev_check;
        for (_, since) in self.checkers.iter_mut() {
            *since = (*since).max(healed_at);
        }
    }
}

/// Invariant 7 while a fault hit every replica alike: nothing moved (but
/// the checkers created after it). One violation per window: who was judged
/// gone, and a sample.
fn alike_moves(s: &LogState, new_names: &[String], span: Span, clk: &Clock) -> Vec<Violation> {
    let Span { t0, t2, .. } = span;
    let all: Vec<Violation> = moves(&s.objs, t0, t2, clk)
        .into_iter()
        .filter(|m| m.checker.as_ref().is_none_or(|c| !new_names.contains(c)))
        .collect();
    if all.is_empty() {
        return Vec::new();
    }
    let deleted: Vec<String> = s
        .leases
        .iter()
        .filter(|l| l.kind == RecKind::Deleted && l.at >= t0 && l.at <= t2)
        .map(|l| {
            format!(
                "{} (Lease {}, rv {}, seen {})",
                l.holder.as_deref().unwrap_or("?"),
                l.uid,
                l.rv,
                clk.t(l.at)
            )
        })
        .collect();
    let sample: Vec<&str> = all.iter().take(3).map(|m| m.detail.as_str()).collect();
    let replicas: Vec<&str> = all
        .iter()
        .flat_map(|m| m.replicas.iter().map(String::as_str))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    vec![Violation::new(
        Inv::Sight,
        all[0].checker.as_deref(),
        &replicas,
        all[0].at,
        format!(
            "{} checkers moved because of an outage that hit every replica alike; member Leases deleted meanwhile: {}; for example: {}",
            all.len(),
            if deleted.is_empty() {
                "none".to_string()
            } else {
                deleted.join(", ")
            },
            sample.join("; ")
        ),
    )]
}

/// What a fault put in place.
#[derive(Default)]
struct Injected {
    /// Replicas whose checkers move away during the hold (failover measured).
    victims: Vec<usize>,
    /// The hold is long enough for them to have to (failover judged).
    judged: bool,
    /// Replicas whose proxy the fault switched.
    proxied: Vec<usize>,
    /// The replica a process fault hit.
    victim: Option<usize>,
    /// A replica started again by the fault itself (restart).
    restarted: Option<usize>,
}

impl Campaign {
    /// Puts the fault of `w` in place.
    async fn inject(
        &mut self,
        w: &Window,
        leader: &Option<String>,
        rec: &mut WindowRecord,
        t0: Instant,
    ) -> Injected {
        let mut x = Injected::default();
        match &w.fault {
            Fault::Proxy { mode, targets } => {
                x.proxied = self.resolve_all(targets, leader);
                for i in &x.proxied {
                    self.proxies[*i].set_mode(mode.clone());
                }
                if mode.cuts_off() && x.proxied.len() < self.ops.len() {
                    x.victims = x.proxied.clone();
                    x.judged = w.hold >= failover_bound() + RETRY;
                }
            }
            Fault::Blip(targets) => {
                x.proxied = self.resolve_all(targets, leader);
                for i in &x.proxied {
                    self.proxies[*i].reset_connections();
                }
            }
            Fault::Kill(_) | Fault::Stop(_) => {
                let i = self.lose(&w.fault, leader);
                x.victim = Some(i);
                x.victims = vec![i];
                x.judged = matches!(w.fault, Fault::Kill(_)) || w.hold >= failover_bound() + RETRY;
            }
            Fault::Busy { mode, lost } => {
                // The API server is busy first, then a replica is lost.
                x.proxied = (0..self.ops.len()).collect();
                for p in &self.proxies {
                    p.set_mode(mode.clone());
                }
                let i = self.lose(lost, leader);
                x.victim = Some(i);
                x.victims = vec![i];
                x.judged =
                    matches!(**lost, Fault::Kill(_)) || w.hold >= w.fault.failover_bound() + RETRY;
            }
            Fault::Term(t) => {
                let i = self.resolve(t, leader);
                self.terminate(i, rec, t0).await;
                x.victims = vec![i];
                x.judged = true;
                x.victim = Some(i);
            }
            Fault::Restart(t) => {
                let i = self.resolve(t, leader);
                restart(&mut self.ops[i]);
                self.started.insert(i, Instant::now());
                x.victim = Some(i);
                x.restarted = Some(i);
            }
            Fault::EtcdFreeze => self.cp.freeze(Part::Etcd).expect("freeze etcd"),
            Fault::ApiFreeze => self
                .cp
                .freeze(Part::ApiServer)
                .expect("freeze kube-apiserver"),
            Fault::EtcdRestart => {
                if let Err(e) = self.cp.restart_etcd().await {
                    rec.notes.push(e);
                }
            }
            Fault::ApiDown => {
                if let Err(e) = self.cp.stop_apiserver().await {
                    rec.notes.push(e);
                }
            }
            Fault::Compaction => {
                if let Err(e) = self.cp.compact().await {
                    rec.notes.push(e);
                }
            }
        }
        x
    }

    /// SIGKILL or SIGSTOP one replica (`lost`: `Kill` or `Stop`); its index.
    fn lose(&mut self, lost: &Fault, leader: &Option<String>) -> usize {
        match lost {
            Fault::Kill(t) => {
                let i = self.resolve(t, leader);
                sigkill(&mut self.ops[i]);
                i
            }
            Fault::Stop(t) => {
                let i = self.resolve(t, leader);
                pause(&self.ops[i]);
                self.paused.insert(i);
                i
            }
            other => panic!("{other:?} is not a lost replica"),
        }
    }

    /// SIGTERM replica `i`: it must exit cleanly, and may flush its status
    /// writes for a moment after releasing its Lease.
    async fn terminate(&mut self, i: usize, rec: &mut WindowRecord, t0: Instant) {
        let id = self.ops[i].identity.clone();
        match sigterm(&mut self.ops[i], Duration::from_secs(25)).await {
            Ok((st, took)) => {
                rec.notes.push(format!(
                    "{id} exited {st} {:.1}s after SIGTERM",
                    took.as_secs_f64()
                ));
                if !st.success() {
                    rec.violations.push(Violation::new(
                        Inv::Liveness,
                        None,
                        &[&id],
                        t0,
                        format!("{id} exited with {st} after SIGTERM"),
                    ));
                }
            }
            Err(e) => rec
                .violations
                .push(Violation::new(Inv::Liveness, None, &[&id], t0, e)),
        }
        self.graceful
            .push((id, t0, Instant::now() + Duration::from_secs(2)));
    }

    /// Ends `fault`; returns the replica it started again, if any.
    async fn end_fault(&mut self, fault: &Fault, victim: Option<usize>) -> Option<usize> {
        match fault {
            Fault::Proxy { .. } | Fault::Blip(_) => {
                for p in &self.proxies {
                    p.set_mode(ProxyMode::Pass);
                }
            }
            Fault::Busy { lost, .. } => {
                for p in &self.proxies {
                    p.set_mode(ProxyMode::Pass);
                }
                return Box::pin(self.end_fault(lost, victim)).await;
            }
            Fault::Kill(_) | Fault::Term(_) => {
                let i = victim.expect("victim");
                self.ops[i].start();
                self.started.insert(i, Instant::now());
                return Some(i);
            }
            Fault::Stop(_) => {
                let i = victim.expect("victim");
                resume(&self.ops[i]);
                self.paused.remove(&i);
            }
            Fault::EtcdFreeze => self.cp.thaw(Part::Etcd).expect("thaw etcd"),
            Fault::ApiFreeze => self.cp.thaw(Part::ApiServer).expect("thaw kube-apiserver"),
            Fault::ApiDown => {
                if let Err(e) = self.cp.start_apiserver().await {
                    panic!("seed {}: kube-apiserver does not come back: {e}", self.seed);
                }
            }
            Fault::Restart(_) | Fault::EtcdRestart | Fault::Compaction => {}
        }
        None
    }

    /// A busy API server may make a live replica's renewals fail for a
    /// whole lease, and it is then proven gone: noted, no invariant says
    /// otherwise for a share of errors (7 covers an outage).
    fn note_survivors_moved(
        &self,
        rec: &mut WindowRecord,
        (t0, t1): (Instant, Instant),
        victim_checkers: &[String],
    ) {
        let clk = self.clk;
        let (moved, deleted) = self.objs.with(|s| {
            let moved = moves(&s.objs, t0, t1, &clk)
                .into_iter()
                .filter_map(|m| m.checker)
                .filter(|c| !victim_checkers.contains(c))
                .count();
            let deleted: BTreeSet<String> = s
                .leases
                .iter()
                .filter(|l| l.kind == RecKind::Deleted && l.at >= t0 && l.at <= t1)
                .filter_map(|l| l.holder.clone())
                .collect();
            (moved, deleted)
        });
        if moved > 0 {
            rec.notes.push(format!(
                "{moved} checkers of live replicas moved during the fault (Leases deleted: {})",
                deleted.into_iter().collect::<Vec<_>>().join(",")
            ));
        }
    }

    /// Replica `i` was (re)started just now: what to judge its return by.
    fn returning(&self, i: usize) -> (usize, Instant, HashSet<String>) {
        let old = self
            .objs
            .with(|s| judge::lease_uids(&s.leases, &self.ops[i].identity));
        (i, Instant::now(), old)
    }

    /// Liveness: replica `i`, (re)started at `since`, is back within
    /// [`rejoin_bound`]: a new membership Lease, checkers assigned to it, a
    /// probe of its own. A restart that leaves it out is a violation.
    fn judge_return(
        &self,
        rec: &mut WindowRecord,
        i: usize,
        since: Instant,
        old: &HashSet<String>,
    ) {
        let id = &self.ops[i].identity;
        let clk = self.clk;
        let r = self
            .objs
            .with(|s| judge::rejoin(s, &self.probes, id, since, old));
        let at = |t: Option<Instant>| {
            t.map(|t| format!("+{:.1}s", (t - since).as_secs_f64()))
                .unwrap_or_else(|| "-".into())
        };
        let seen = format!(
            "new Lease {}, first checker {}, first probe {}",
            at(r.lease),
            at(r.assigned),
            at(r.probed)
        );
        let took = r.back().map(|b| b - since);
        rec.rejoined = took;
        rec.notes
            .push(format!("{id} (re)started at {}: {seen}", clk.t(since)));
        let late = match took {
            Some(d) if d <= rejoin_bound() => return,
            Some(d) => format!("back only {:.1}s after", d.as_secs_f64()),
            None => format!(
                "not back {:.1}s after ({})",
                since.elapsed().as_secs_f64(),
                r.missing()
            ),
        };
        rec.violations.push(Violation::new(
            Inv::Liveness,
            None,
            &[id],
            since,
            format!(
                "{id} {late} its (re)start at {} (bound {:.1}s): {seen}",
                clk.t(since),
                rejoin_bound().as_secs_f64()
            ),
        ));
    }

    /// The cut-off exception of the fault held `t0..t1`: replicas whose path
    /// answered nothing are exempt for the whole fault and `cutoff_grace`
    /// after it; replicas whose path answered part of their calls, from the
    /// deletion of their Lease until they could hear of it
    /// ([`hear_bound`], [`judge::unheard`]).
    fn cut_off_exceptions(
        &mut self,
        rec: &mut WindowRecord,
        unhearing: &[(String, Option<Duration>)],
        (t0, t1): (Instant, Instant),
    ) {
        let clk = self.clk;
        for (id, hear) in unhearing {
            let spans = match hear {
                None => vec![(t0, t1 + cutoff_grace())],
                Some(h) => self
                    .objs
                    .with(|s| judge::unheard(&s.leases, id, (t0, t1), *h)),
            };
            if hear.is_some() && !spans.is_empty() {
                let list: Vec<String> = spans
                    .iter()
                    .map(|(a, b)| format!("{} .. {}", clk.t(*a), clk.t(*b)))
                    .collect();
                rec.notes
                    .push(format!("{id} exempt (cut off) {}", list.join(", ")));
            }
            self.isolations
                .extend(spans.into_iter().map(|(a, b)| (id.clone(), a, b)));
        }
    }
}
