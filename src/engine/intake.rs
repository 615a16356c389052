//! How a checker enters the engine or changes in it: its spec planned (or
//! found invalid), its referenced values resolved, its first probe scheduled
//! (at start-up spread over an interval, on a handover at the old owner's
//! cadence, otherwise almost at once).

use super::*;
use arrival::{Arrival, first_due};

impl Engine {
    pub(super) fn upsert(&mut self, checker: Incoming, initial: bool, seen: Instant) {
        let (key, namespace, name, rv, generation) = match &checker {
            Incoming::Valid(wc, ..) => (
                crate::api::object_key(&wc.namespace().unwrap_or_default(), &wc.name_any()),
                wc.namespace().unwrap_or_default(),
                wc.name_any(),
                wc.resource_version().unwrap_or_default(),
                wc.metadata.generation,
            ),
            Incoming::Malformed {
                namespace,
                name,
                resource_version,
                generation,
                ..
            } => (
                crate::api::object_key(namespace, name),
                namespace.clone(),
                name.clone(),
                resource_version.clone(),
                *generation,
            ),
        };
        self.writer.observe_version(&key, &rv);
        let existing = self
            .entries
            .get(&key)
            .map(|e| ((e.spec.clone(), e.resolved.clone()), e.draining));
        if let Some((_, true)) = existing {
            // A drain was requested earlier and since withdrawn: resume, and
            // do not hand over after all.
            self.writer.withdraw_ack(&key);
            if let Some(e) = self.entries.get_mut(&key) {
                e.draining = false;
            }
        }
        let (spec, resolved, patterns) = match &checker {
            Incoming::Valid(wc, r, c) => (Some(wc.spec.clone()), r.clone(), c.clone()),
            Incoming::Malformed { .. } => (None, Resolved::default(), None),
        };
        // Labels change without a new spec: the info series follows them.
        if let (Incoming::Valid(wc, ..), Some(e)) = (&checker, self.entries.get_mut(&key)) {
            let info = self.metrics.checker_info(wc);
            if info != e.info {
                e.info = info;
                self.metrics.refresh_info(&e.namespace, &e.name, &e.info);
            }
        }
        let unchanged =
            matches!(&existing, Some(((old, old_r), false)) if *old == spec && *old_r == resolved);
        if unchanged {
            if let Some(e) = self.entries.get_mut(&key) {
                e.generation = generation;
            }
            return;
        }
        let plan = match &checker {
            Incoming::Valid(wc, r, c) => plan_of(&self.prober, &wc.spec, r, c.as_ref()),
            Incoming::Malformed { error, .. } => Err(invalid(format!(
                "the object does not match the WebChecker schema: {error}"
            ))),
        };
        let object_ref = match &checker {
            Incoming::Valid(wc, ..) => wc.object_ref(&()),
            Incoming::Malformed {
                namespace, name, ..
            } => k8s_openapi::api::core::v1::ObjectReference {
                api_version: Some(WebChecker::api_version(&()).to_string()),
                kind: Some("WebChecker".into()),
                namespace: Some(namespace.clone()),
                name: Some(name.clone()),
                ..Default::default()
            },
        };
        let new_entry = !self.entries.contains_key(&key);
        if new_entry {
            self.next_seq += 1;
            self.ready.add_checker(&namespace);
            let status = match &checker {
                Incoming::Valid(wc, ..) => CheckerStatus::from_existing(wc.status.as_ref()),
                Incoming::Malformed { .. } => CheckerStatus::from_existing(None),
            };
            self.entries.insert(
                key.clone(),
                Entry {
                    seq: self.next_seq,
                    namespace: namespace.clone(),
                    name: name.clone(),
                    generation,
                    spec: None,
                    resolved: Resolved::default(),
                    patterns: None,
                    plan: None,
                    object_ref: object_ref.clone(),
                    delay: None,
                    due: Instant::now(),
                    inflight: None,
                    draining: false,
                    status,
                    last_probe_wall: None,
                    first_probe_since: None,
                    info: match &checker {
                        Incoming::Valid(wc, ..) => self.metrics.checker_info(wc),
                        Incoming::Malformed { .. } => Default::default(),
                    },
                },
            );
        }
        let handover = match &checker {
            Incoming::Valid(wc, ..) => wc
                .annotations()
                .get(LAST_PROBE_ANNOTATION)
                .and_then(|v| v.parse::<i64>().ok()),
            Incoming::Malformed { .. } => None,
        };
        let e = self.entries.get_mut(&key).expect("inserted above");
        e.generation = generation;
        e.spec = spec;
        e.resolved = resolved;
        e.patterns = patterns;
        e.object_ref = object_ref;
        let arrival = self.arrivals.of(initial, seen);
        self.apply_plan(&key, plan, handover, arrival);
    }

    /// Re-plans a checker whose referenced values changed (same spec).
    pub(super) fn refresh(&mut self, key: &str, resolved: Resolved) {
        let Some(e) = self.entries.get_mut(key) else {
            return;
        };
        // A draining checker is re-resolved by the Upsert that resumes it.
        if e.resolved == resolved || e.draining {
            return;
        }
        let Some(spec) = e.spec.clone() else {
            return;
        };
        let plan = plan_of(&self.prober, &spec, &resolved, e.patterns.as_ref());
        e.resolved = resolved;
        self.apply_plan(key, plan, None, Arrival::Known);
    }

    /// Re-plans a checker whose patterns changed (same spec): its
    /// namespace's budget made room for them or took it back.
    pub(super) fn repattern(&mut self, key: &str, compiled: Compiled) {
        let Some(e) = self.entries.get_mut(key) else {
            return;
        };
        let Some(spec) = e.spec.clone() else {
            return;
        };
        let plan = plan_of(&self.prober, &spec, &e.resolved, Some(&compiled));
        e.patterns = Some(compiled);
        if e.draining {
            return;
        }
        self.apply_plan(key, plan, None, Arrival::Known);
    }

    /// Installs a new plan (or the InvalidSpec or QuotaExceeded condition)
    /// and (re)schedules.
    fn apply_plan(
        &mut self,
        key: &str,
        plan: Result<ProbePlan, Refusal>,
        handover: Option<i64>,
        arrival: Arrival,
    ) {
        let key = key.to_string();
        let Some(e) = self.entries.get_mut(&key) else {
            return;
        };
        let (namespace, name, generation) = (e.namespace.clone(), e.name.clone(), e.generation);
        let old_interval = e.plan.as_ref().map(|p| p.interval);
        match plan {
            Ok(p) if p.suspend => {
                e.plan = None;
                if let Some(k) = e.delay.take() {
                    self.queue.remove(&k);
                }
                let ctx = make_ctx(&self.settings, generation, Some(&p));
                let fx = e.status.set_condition(
                    NotProbed::Suspended,
                    "probing is suspended (spec.suspend)",
                    &ctx,
                );
                self.metrics.forget_checker(&namespace, &name);
                self.apply_effects(&key, fx);
            }
            Ok(p) => {
                let interval = p.interval;
                e.plan = Some(Arc::new(p));
                let scheduled = e.delay.is_some() || e.inflight.is_some();
                let now = Instant::now();
                if !scheduled {
                    if let Arrival::New(seen) = arrival
                        && handover.is_none()
                    {
                        e.first_probe_since = Some(seen);
                    }
                    let since = handover.map(|ms| unix_ms(SystemTime::now()) - ms);
                    let at = first_due(now, interval, arrival, since, rand::rng().random());
                    self.schedule(&key, at);
                } else if old_interval.is_some_and(|old| interval < old) && e.inflight.is_none() {
                    // A shorter interval takes effect now, not after the old one ran out.
                    let at = (e.due).min(now + interval);
                    self.schedule(&key, at);
                }
            }
            Err((reason, msg)) => {
                e.plan = None;
                if let Some(k) = e.delay.take() {
                    self.queue.remove(&k);
                }
                warn!(checker = %key, reason = reason.as_str(), "{msg}");
                let ctx = make_ctx(&self.settings, generation, None);
                let fx = e.status.set_condition(reason, &msg, &ctx);
                self.metrics.set_up(&namespace, &name, &e.info, false);
                self.apply_effects(&key, fx);
            }
        }
        self.update_owned();
    }
}
