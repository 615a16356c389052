//! The campaign's state and what it asks of the replicas, proxies and logs.

use super::*;

impl Campaign {
    pub(super) fn absorb(&mut self) {
        let hits = self.witness.take_hits();
        self.probes.absorb(hits);
    }

    /// Polls `ok` every 100 ms (absorbing the witness's log) until it holds
    /// or `bound` passes; returns how long it took.
    pub(super) async fn wait_for(
        &mut self,
        bound: Duration,
        mut ok: impl FnMut(&Campaign) -> bool,
    ) -> Option<Duration> {
        let start = Instant::now();
        loop {
            self.absorb();
            if ok(self) {
                return Some(start.elapsed());
            }
            if start.elapsed() > bound {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub(super) fn running(&self) -> Vec<String> {
        self.ops
            .iter()
            .enumerate()
            .filter(|(i, o)| o.child.is_some() && !self.paused.contains(i))
            .map(|(_, o)| o.identity.clone())
            .collect()
    }

    pub(super) async fn leader(&self) -> Option<String> {
        let api: Api<Lease> = Api::namespaced(self.client.clone(), &self.ns);
        let l = tokio::time::timeout(
            Duration::from_secs(3),
            api.get_opt(webchecker::LEADER_LEASE),
        )
        .await
        .ok()?
        .ok()??;
        l.spec?.holder_identity
    }

    pub(super) fn resolve(&self, t: &Target, leader: &Option<String>) -> usize {
        let li = leader
            .as_ref()
            .and_then(|l| self.ops.iter().position(|o| &o.identity == l));
        match t {
            Target::Leader => li.unwrap_or(0),
            Target::Other(k) => {
                let others: Vec<usize> = (0..self.ops.len()).filter(|i| Some(*i) != li).collect();
                others[(*k as usize) % others.len()]
            }
        }
    }

    pub(super) fn resolve_all(&self, ts: &Targets, leader: &Option<String>) -> Vec<usize> {
        match ts {
            Targets::All => (0..self.ops.len()).collect(),
            Targets::One(t) => vec![self.resolve(t, leader)],
            Targets::AllBut(t) => {
                let x = self.resolve(t, leader);
                (0..self.ops.len()).filter(|i| *i != x).collect()
            }
        }
    }

    /// Checkers of `names` not validly owned by a running replica.
    pub(super) fn unowned(&self, names: &[String]) -> Vec<String> {
        let running = self.running();
        self.objs.with(|s| unowned_in(s, names, &running))
    }

    pub(super) fn all_names(&self) -> Vec<String> {
        self.checkers.iter().map(|(n, _)| n.clone()).collect()
    }

    /// Valid owners of the checkers: shard sizes, and whether they are within
    /// the balance bound.
    pub(super) fn balance(&self) -> (BTreeMap<String, usize>, usize, bool) {
        let running = self.running();
        let names = self.all_names();
        self.objs.with(|s| {
            let sizes = shard_sizes(
                names
                    .iter()
                    .filter_map(|n| s.current.get(n))
                    .filter(|o| s.validly_owned(o))
                    .filter_map(|o| o.owner.as_deref()),
            );
            let bound = balance_bound(names.len(), running.len());
            let ok = sizes.values().all(|n| *n <= bound);
            (sizes, bound, ok)
        })
    }

    /// Checkers whose status was not written by their current owner for
    /// their current generation (invariant 6).
    pub(super) fn stale_status(&self) -> Vec<String> {
        let names = self.all_names();
        self.objs.with(|s| {
            names
                .iter()
                .filter(|n| {
                    s.current.get(*n).is_none_or(|o| {
                        o.owner.is_none()
                            || o.status_owner != o.owner
                            || o.observed_generation != o.generation
                    })
                })
                .cloned()
                .collect()
        })
    }

    pub(super) fn describe_unowned(&self, names: &[String]) -> String {
        self.objs.with(|s| {
            let members = s.members();
            let mut out: Vec<String> = names
                .iter()
                .take(8)
                .map(|n| match s.current.get(n) {
                    None => format!("{n}: not seen"),
                    Some(o) => format!(
                        "{n}: owner {} epoch {} drain {}",
                        o.owner.as_deref().unwrap_or("-"),
                        o.epoch.as_deref().unwrap_or("-"),
                        o.drain.as_deref().unwrap_or("-")
                    ),
                })
                .collect();
            if names.len() > 8 {
                out.push(format!("... {} more", names.len() - 8));
            }
            format!(
                "{}; members (holder=Lease UID): {members:?}",
                out.join("; ")
            )
        })
    }

    pub(super) async fn create(&self, names: &[String]) -> Result<Vec<(String, Instant)>, String> {
        let api = checkers_api(&self.client, &self.ns);
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut out = Vec::new();
        for n in names {
            let obj = checker_object(
                n,
                &self.witness.url(),
                INTERVAL_S.into(),
                serde_json::json!({"timeoutSeconds": 1.0}),
            );
            loop {
                match tokio::time::timeout(
                    Duration::from_secs(5),
                    api.create(&PostParams::default(), &obj),
                )
                .await
                {
                    Ok(Ok(_)) => break,
                    // An earlier attempt landed without us hearing the answer.
                    Ok(Err(kube::Error::Api(s))) if s.code == 409 => break,
                    other => {
                        if Instant::now() > deadline {
                            return Err(format!("could not create {n} within 30s: {other:?}"));
                        }
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            }
            out.push((n.clone(), Instant::now()));
        }
        Ok(out)
    }

    /// What the running replicas say about themselves (for failure messages):
    /// leader flag, ring members, owned checkers, API reachability, watch
    /// restarts, self fences, moves. Best effort: series that do not exist are
    /// left out.
    pub(super) async fn diagnose(&self) -> String {
        const SERIES: &[&str] = &[
            "webchecker_leader",
            "webchecker_ring_members",
            "webchecker_owned_checkers",
            "webchecker_api_reachable",
            "webchecker_watch_restarts_total",
            "webchecker_self_fences_total",
            "webchecker_moves_total",
        ];
        let running = self.running();
        let mut out = Vec::new();
        for o in self.ops.iter().filter(|o| running.contains(&o.identity)) {
            let text = http_get_within(
                &format!("127.0.0.1:{}", o.port),
                "/metrics",
                Duration::from_secs(2),
            )
            .await
            .map(|(_, b)| b)
            .unwrap_or_default();
            let series: Vec<String> = text
                .lines()
                .filter(|l| {
                    !l.starts_with('#')
                        && SERIES.iter().any(|s| {
                            l.strip_prefix(s)
                                .is_some_and(|r| r.starts_with(' ') || r.starts_with('{'))
                        })
                })
                .map(|l| l.replace("webchecker_", "").replace(' ', "="))
                .collect();
            out.push(format!("{}: {}", o.identity, series.join(" ")));
        }
        format!("replicas say: {}", out.join(" | "))
    }

    /// Sight: every running replica answers /metrics (within 3 s).
    pub(super) async fn metrics_answer(&self) -> Vec<String> {
        let running = self.running();
        // A process just started may not listen yet.
        let young: Vec<&str> = self
            .started
            .iter()
            .filter(|(_, at)| at.elapsed() < Duration::from_secs(10))
            .map(|(i, _)| self.ops[*i].identity.as_str())
            .collect();
        let futs = self
            .ops
            .iter()
            .filter(|o| running.contains(&o.identity) && !young.contains(&o.identity.as_str()))
            .map(|o| async move {
                let r = http_get_within(
                    &format!("127.0.0.1:{}", o.port),
                    "/metrics",
                    Duration::from_secs(3),
                )
                .await;
                (o.identity.clone(), r.is_some_and(|(c, _)| c == 200))
            });
        futures::future::join_all(futs)
            .await
            .into_iter()
            .filter(|(_, ok)| !ok)
            .map(|(id, _)| id)
            .collect()
    }

    /// Restart every replica and wait for a settled system.
    pub(super) async fn heal(&mut self, rec: &mut WindowRecord) -> bool {
        rec.healed = true;
        for p in &self.proxies {
            p.set_mode(ProxyMode::Pass);
        }
        let _ = self.cp.thaw(Part::Etcd);
        let _ = self.cp.thaw(Part::ApiServer);
        self.paused.clear();
        for (i, op) in self.ops.iter_mut().enumerate() {
            restart(op);
            self.started.insert(i, Instant::now());
        }
        let names = self.all_names();
        let restarted = Instant::now();
        // Settled means owned, balanced and probed again: the next fault must
        // not find owners that have not yet heard of their checkers.
        let settled = self
            .wait_for(Duration::from_secs(90), |c| {
                let seen = c.probes.probed_since(restarted);
                c.unowned(&names).is_empty()
                    && c.balance().2
                    && names.iter().all(|n| seen.contains(n.as_str()))
            })
            .await;
        rec.notes.push(match settled {
            Some(d) => format!(
                "healed: every replica restarted, settled after {:.1}s",
                d.as_secs_f64()
            ),
            None => "heal failed: not settled 90s after restarting every replica".into(),
        });
        settled.is_some()
    }
}
