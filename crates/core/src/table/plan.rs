//! How a checker enters the table or changes in it: its spec planned (or
//! found invalid, over its namespace's budget, suspended), its first probe
//! scheduled (at start-up spread over an interval, on a handover at the old
//! owner's cadence, otherwise almost at once).

use std::sync::Arc;
use std::time::Instant;

use tracing::warn;

use super::effect::{Clock, Effect, Metric, ToWriter};
use super::{Entry, Table, context, standing, unix_ms};
use crate::arrival::{self, Arrival, first_due};
use crate::checker::Resolved;
use crate::checker::{Checker, Definition};
use crate::status::{CheckerStatus, NotProbed};
use webchecker_plan::{Compiled, PatternError, ProbePlan, Roots};

/// Why a checker has no plan: the Ready reason and message.
type Refusal = (NotProbed, String);

/// The plan of a definition with the given values and patterns.
fn plan_of(
    roots: &Roots,
    def: &Definition,
    values: &Resolved,
    patterns: &Compiled,
) -> Result<ProbePlan, Refusal> {
    if let Some(m) = values.quota_exceeded() {
        return Err((NotProbed::QuotaExceeded, m.to_string()));
    }
    let patterns = match patterns.as_ref() {
        Ok(p) => Ok(p.clone()),
        Err(PatternError::Invalid(m)) => Err(m.clone()),
        Err(PatternError::OverBudget(m)) => return Err((NotProbed::QuotaExceeded, m.clone())),
    };
    let resolve = |v: &webchecker_plan::ValueRef| values.get(v);
    webchecker_plan::plan_trusting(&def.spec, &resolve, &patterns, roots)
        .map_err(|m| (NotProbed::InvalidSpec, m))
}

/// Whether two definitions plan alike: same spec, same values (a malformed
/// object has neither; its patterns follow from its spec).
fn same(a: Option<&Definition>, b: Option<&Definition>) -> bool {
    let none = Resolved::default();
    a.map(|d| &d.spec) == b.map(|d| &d.spec)
        && a.map_or(&none, |d| &d.values) == b.map_or(&none, |d| &d.values)
}

impl Table {
    pub fn upsert(&mut self, c: Checker, initial: bool, seen: Instant, clock: Clock) {
        let key = c.key.clone();
        let uid = c.object_ref.uid.clone().unwrap_or_default();
        self.forget_if_recreated(&key, &uid);
        self.out.push(Effect::Writer(ToWriter::Observe {
            key: key.clone(),
            resource_version: c.resource_version.clone(),
            uid,
        }));
        let (definition, malformed) = match c.definition {
            Ok(def) => (Some(Box::new(def)), None),
            Err(error) => (None, Some(error)),
        };
        let labels = c.labels;
        let mut unchanged = false;
        if let Some(e) = self.entries.get_mut(&key) {
            // Labels change without a new spec: the windows that select it follow.
            if e.labels != labels {
                e.labels = labels.clone();
            }
            let was_draining = e.draining;
            if was_draining {
                // A drain was requested earlier and since withdrawn: resume, and
                // do not hand over after all.
                e.draining = false;
                e.handover = None;
                self.out
                    .push(Effect::Writer(ToWriter::Withdraw { key: key.clone() }));
            }
            // A route made again under the same name owns the checker anew
            // (a new UID): its Events follow without a new spec.
            e.source_ref = c.source_ref.clone().map(Box::new);
            // Labels change without a new spec: the info series follows them.
            if definition.is_some() && c.info != e.info {
                e.info = c.info.clone();
                self.out.push(Effect::Metric(Metric::Info {
                    namespace: e.namespace.clone(),
                    name: e.name.clone(),
                    info: e.info.clone(),
                }));
            }
            unchanged = !was_draining && same(e.definition.as_deref(), definition.as_deref());
            if unchanged {
                e.generation = c.generation;
            }
        }
        if unchanged {
            return;
        }
        let plan = match (&definition, malformed) {
            (Some(def), _) => plan_of(&self.settings.roots, def, &def.values, &def.patterns),
            (None, error) => Err((
                NotProbed::InvalidSpec,
                format!(
                    "the object does not match the WebChecker schema: {}",
                    error.unwrap_or_default()
                ),
            )),
        };
        let e = match self.entries.entry(key.clone()) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                self.next_seq += 1;
                self.ready.add_checker(&c.namespace);
                v.insert(Box::new(Entry {
                    seq: self.next_seq,
                    namespace: c.namespace.clone(),
                    name: c.name.clone(),
                    generation: c.generation,
                    definition: None,
                    plan: None,
                    object_ref: c.object_ref.clone(),
                    source_ref: None,
                    timer: false,
                    due: clock.now,
                    inflight: false,
                    zones_asked: false,
                    draining: false,
                    last_call: false,
                    handover: None,
                    status: CheckerStatus::from_existing(c.status.as_ref()),
                    last_probe_wall: None,
                    first_probe_since: None,
                    settling: false,
                    info: c.info.clone(),
                    labels,
                    diagnosing: None,
                }))
            }
        };
        let handover = definition.as_ref().and(c.last_probe);
        e.generation = c.generation;
        e.definition = definition;
        e.object_ref = c.object_ref;
        e.source_ref = c.source_ref.map(Box::new);
        let arrival = self.arrivals.of(initial, seen);
        self.apply_plan(&key, plan, handover, arrival, clock);
    }

    /// Re-plans a checker whose referenced values changed (same spec).
    pub fn refresh(&mut self, key: &str, values: Resolved, clock: Clock) {
        let Some(e) = self.entries.get_mut(key) else {
            return;
        };
        // A draining checker is re-resolved by the Upsert that resumes it.
        if e.draining {
            return;
        }
        let Some(def) = e.definition.as_mut() else {
            return;
        };
        if def.values == values {
            return;
        }
        let plan = plan_of(&self.settings.roots, def, &values, &def.patterns);
        def.values = values;
        self.apply_plan(key, plan, None, Arrival::Known, clock);
    }

    /// Re-plans a checker whose patterns changed (same spec): its
    /// namespace's budget made room for them or took it back.
    pub fn repattern(&mut self, key: &str, compiled: Compiled, clock: Clock) {
        let Some(e) = self.entries.get_mut(key) else {
            return;
        };
        let Some(def) = e.definition.as_mut() else {
            return;
        };
        let plan = plan_of(&self.settings.roots, def, &def.values, &compiled);
        def.patterns = compiled;
        if e.draining {
            return;
        }
        self.apply_plan(key, plan, None, Arrival::Known, clock);
    }

    /// Installs a new plan (or the Suspended, InvalidSpec or QuotaExceeded
    /// condition) and (re)schedules.
    fn apply_plan(
        &mut self,
        key: &str,
        plan: Result<ProbePlan, Refusal>,
        handover: Option<i64>,
        arrival: Arrival,
        clock: Clock,
    ) {
        let Some(e) = self.entries.get_mut(key) else {
            return;
        };
        let old_interval = e.plan.as_ref().map(|p| p.interval);
        let had_zones = e.plan.as_ref().is_some_and(|p| p.locations.is_some());
        if had_zones && !plan.as_ref().is_ok_and(|p| p.locations.is_some()) {
            // No longer probed from zones: its zone series go.
            self.out.push(Effect::Metric(Metric::Zones {
                namespace: e.namespace.clone(),
                name: e.name.clone(),
                asked: 0,
                results: Vec::new(),
            }));
        }
        let had_slo = e.plan.as_ref().is_some_and(|p| p.slo.is_some());
        if had_slo && plan.as_ref().is_ok_and(|p| p.slo.is_none()) {
            // No objective any more: its SLO series go.
            self.out.push(Effect::Metric(Metric::SloGone {
                namespace: e.namespace.clone(),
                name: e.name.clone(),
            }));
        }
        match plan {
            Ok(p) if p.suspend => {
                e.plan = None;
                self.cancel(key);
                let Some(e) = self.entries.get_mut(key) else {
                    return;
                };
                let ctx = context(&self.settings, e.generation, Some(&p), clock);
                let fx = e.status.set_condition(
                    NotProbed::Suspended,
                    "probing is suspended (spec.suspend)",
                    &ctx,
                );
                self.out.push(Effect::Metric(Metric::Forget {
                    namespace: e.namespace.clone(),
                    name: e.name.clone(),
                }));
                self.status_effects(key, fx);
            }
            Ok(p) => {
                let interval = p.interval;
                e.plan = Some(Arc::new(p));
                if !(e.timer || e.inflight) {
                    if let Arrival::New(seen) = arrival
                        && handover.is_none()
                    {
                        e.first_probe_since = Some(seen);
                        e.settling = true;
                    }
                    let since = handover.map(|ms| unix_ms(clock.wall) - ms);
                    let at = first_due(clock.now, interval, arrival, since, clock.draw);
                    self.schedule(key, at);
                } else if let Some(old) = old_interval.filter(|old| *old != interval) {
                    // Its probes settle into the phase of the new interval.
                    e.settling = true;
                    if interval < old && !e.inflight {
                        // A shorter interval takes effect now, not after the
                        // old one ran out: at the checker's slot, so that
                        // checkers edited together are not probed together.
                        let phase = arrival::phase(key, interval);
                        let slot =
                            arrival::next_slot(clock.now, unix_ms(clock.wall), interval, phase);
                        e.settling = e.due < slot;
                        let at = e.due.min(slot);
                        self.schedule(key, at);
                    }
                }
            }
            Err((reason, msg)) => {
                e.plan = None;
                self.cancel(key);
                warn!(checker = %key, reason = reason.as_str(), "{msg}");
                let Some(e) = self.entries.get_mut(key) else {
                    return;
                };
                let ctx = context(&self.settings, e.generation, None, clock);
                let fx = e.status.set_condition(reason, &msg, &ctx);
                self.out.push(Effect::Metric(Metric::Up {
                    namespace: e.namespace.clone(),
                    name: e.name.clone(),
                    info: e.info.clone(),
                    standing: standing(e, None),
                }));
                self.status_effects(key, fx);
            }
        }
        self.owned();
    }
}
