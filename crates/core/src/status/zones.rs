//! Zone quorum in the status reducer (`spec.locations`): each zone's streak
//! of results, and the verdict over the zones.
//!
//! Every zone counts its own results like a checker of its own: Failed
//! after `failureThreshold` failures in a row, Succeeded after a success.
//! The owner's probe updates its zone at once; the verdict waits for the
//! other zones' answers to the same round (so a real outage does not show
//! as Degraded for the moment between the owner's probe and theirs).
//! Ready turns False when at least `quorum` zones of the round have Failed;
//! zones that did not answer count against that, never for it, so fewer
//! answers than the quorum keep Ready as it was. Degraded is True while
//! some zones have Failed but fewer than that, and names them.

use crate::ask::Place;
use crate::ask::zones::{ZoneAnswer, ZoneResult};
use webchecker_api::ZoneStatus;
use webchecker_plan::{Outcome, ZoneQuorum};

use super::{CheckerStatus, Context, DegradedReason, Effects, NO_QUORUM, Truth};
use crate::slo::Tally;

/// One zone's streak.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneEntry {
    pub zone: String,
    pub replica: String,
    /// Whether its last ask brought a probe result.
    pub known: bool,
    pub successes: u32,
    pub failures: u32,
    /// Its last probe's reason, or why no result came.
    pub reason: String,
    pub millis: Option<u64>,
}

/// The zones of one checker, in zone order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ZoneBook(Vec<ZoneEntry>);

/// One zone's result as the owner folds it in.
pub struct Heard<'a> {
    pub by: &'a Place,
    /// `None`: no probe result (why).
    pub probed: Result<(bool, &'a str, u64), &'a str>,
}

impl ZoneBook {
    pub fn entries(&self) -> &[ZoneEntry] {
        &self.0
    }

    fn record(&mut self, h: Heard<'_>) {
        let i = match self.0.binary_search_by(|e| e.zone.as_str().cmp(&h.by.zone)) {
            Ok(i) => i,
            Err(i) => {
                self.0.insert(
                    i,
                    ZoneEntry {
                        zone: h.by.zone.clone(),
                        replica: String::new(),
                        known: false,
                        successes: 0,
                        failures: 0,
                        reason: String::new(),
                        millis: None,
                    },
                );
                i
            }
        };
        let e = &mut self.0[i];
        e.replica = h.by.replica.clone();
        match h.probed {
            Ok((success, reason, millis)) => {
                e.known = true;
                if success {
                    e.successes += 1;
                    e.failures = 0;
                } else {
                    e.failures += 1;
                    e.successes = 0;
                }
                e.reason = reason.to_string();
                e.millis = Some(millis);
            }
            Err(why) => {
                e.known = false;
                e.reason = why.to_string();
            }
        }
    }

    /// Keeps the zones in `zones` only (the round's: a zone no longer asked
    /// leaves the status).
    fn keep(&mut self, zones: &[&str]) {
        self.0.retain(|e| zones.contains(&e.zone.as_str()));
    }

    fn failed(&self, threshold: u32) -> Vec<&ZoneEntry> {
        self.0
            .iter()
            .filter(|e| e.known && e.failures >= threshold)
            .collect()
    }

    /// As `status.zones` shows them.
    pub fn render(&self, failure_threshold: u32) -> Vec<ZoneStatus> {
        self.0
            .iter()
            .map(|e| ZoneStatus {
                zone: e.zone.clone(),
                replica: e.replica.clone(),
                result: result(e, failure_threshold).into(),
                reason: if e.known {
                    e.reason.clone()
                } else {
                    "NoAnswer".into()
                },
                latency_millis: e.millis.filter(|_| e.known).map(|m| m as i64),
            })
            .collect()
    }
}

fn result(e: &ZoneEntry, failure_threshold: u32) -> &'static str {
    if !e.known {
        "Unknown"
    } else if e.failures >= failure_threshold {
        "Failed"
    } else if e.failures > 0 {
        "Failing"
    } else {
        "Succeeded"
    }
}

/// "zone b (replica r1): ConnectError".
fn describe(e: &ZoneEntry) -> String {
    format!("zone {} (replica {}): {}", e.zone, e.replica, e.reason)
}

impl CheckerStatus {
    /// The zone's streak, if it probes this checker.
    pub fn zone_entry(&self, zone: &str) -> Option<&ZoneEntry> {
        self.zones.entries().iter().find(|e| e.zone == zone)
    }

    /// Lets go of a probe held for the zones' answers (the checker was
    /// handed over or no longer has spec.locations).
    pub fn release_held(&mut self) {
        self.confirming = None;
    }

    /// The owner's own probe of a checker with `spec.locations`: its zone's
    /// streak moves; the verdict waits when the other zones were asked
    /// (`hold`) and is given now otherwise.
    pub fn observe_zone(
        &mut self,
        o: &Outcome,
        q: ZoneQuorum,
        hold: bool,
        ctx: &Context<'_>,
    ) -> Effects {
        if o.success() {
            self.consecutive_successes += 1;
            self.consecutive_failures = 0;
        } else {
            self.consecutive_failures += 1;
            self.consecutive_successes = 0;
        }
        let own = own_place(ctx);
        self.zones.record(Heard {
            by: &own,
            probed: Ok((
                o.success(),
                o.reason.as_str(),
                o.duration.as_millis() as u64,
            )),
        });
        let fx = Effects {
            certificate_expiring: self.observe_certificate(o, ctx),
            ..Default::default()
        };
        if hold {
            self.confirming = Some(Box::new(o.clone()));
            return fx;
        }
        self.zones.keep(&[own.zone.as_str()]);
        Effects {
            certificate_expiring: fx.certificate_expiring,
            ..self.zone_verdict(o, q, ctx)
        }
    }

    /// The other zones' answers to the round held back.
    pub fn zones_answered(
        &mut self,
        answers: &[ZoneAnswer],
        q: ZoneQuorum,
        ctx: &Context<'_>,
    ) -> Effects {
        let own = own_place(ctx);
        for a in answers {
            self.zones.record(Heard {
                by: &a.by,
                probed: match &a.result {
                    ZoneResult::Probed {
                        success,
                        reason,
                        millis,
                    } => Ok((*success, reason.as_str(), *millis)),
                    ZoneResult::NoAnswer => Err("NoAnswer"),
                },
            });
        }
        let zones: Vec<&str> = answers
            .iter()
            .map(|a| a.by.zone.as_str())
            .chain([own.zone.as_str()])
            .collect();
        self.zones.keep(&zones);
        match self.confirming.take() {
            Some(o) => self.zone_verdict(&o, q, ctx),
            None => Effects::default(),
        }
    }

    /// Ready and Degraded from the zones' streaks; the status to write.
    ///
    /// The quorum counts every zone of the round, answered or not: zones
    /// that did not answer never let fewer failures turn Ready False (a
    /// zone cut off from its peers would otherwise page on its own word).
    /// Only where fewer zones have a member than the quorum does the quorum
    /// shrink to the zones there are.
    fn zone_verdict(&mut self, o: &Outcome, q: ZoneQuorum, ctx: &Context<'_>) -> Effects {
        let entries = self.zones.entries();
        let asked = entries.len() as u32;
        let quorum = q.quorum.min(asked).max(1);
        let failed: Vec<ZoneEntry> = self
            .zones
            .failed(ctx.failure_threshold)
            .into_iter()
            .cloned()
            .collect();
        let failed_n = failed.len() as u32;
        let succeeding = entries
            .iter()
            .filter(|e| e.known && e.successes >= ctx.success_threshold)
            .count() as u32;
        let silent: Vec<String> = entries
            .iter()
            .filter(|e| !e.known)
            .map(|e| e.zone.clone())
            .collect();
        let first_reason = failed
            .iter()
            .find(|e| e.zone == ctx.place.zone)
            .or(failed.first())
            .map(|e| e.reason.clone());
        // A round counts once for spec.slo, as its quorum says (for neither
        // side in a maintenance window).
        self.sync_slo(ctx);
        let blamed = self.blames_dependency();
        let closed = self.sync_maintenance(ctx);
        let tally = if ctx.maintenance.is_some() {
            Tally::Excluded
        } else if failed_n >= quorum {
            Tally::Bad
        } else if succeeding > 0 {
            Tally::Good
        } else {
            Tally::Excluded
        };
        let mut fx = Effects {
            slo: self.slo.as_mut().map(|b| b.round(tally, ctx.now_unix)),
            quiet: ctx.maintenance.is_some(),
            ..Default::default()
        };
        if failed_n >= quorum {
            let list: Vec<String> = failed
                .iter()
                .map(|e| format!("{}: {}", e.zone, e.reason))
                .collect();
            let m = format!(
                "failing in {failed_n} of {asked} zones (quorum {}): {}",
                q.quorum,
                list.join(", ")
            );
            let reason = first_reason.unwrap_or_else(|| o.reason.as_str().to_string());
            fx.transition = self.settle(Truth::False, &reason, m, ctx);
            self.set_degraded(
                DegradedReason::QuorumFailed,
                format!("{failed_n} of {asked} zones fail: Ready is False"),
                ctx,
            );
        } else {
            if succeeding > 0 {
                let mut m = format!(
                    "{succeeding} of {asked} zones succeed (quorum {}); this zone: {}",
                    q.quorum,
                    if o.success() {
                        o.success_summary()
                    } else {
                        o.reason.as_str().to_string()
                    }
                );
                if !silent.is_empty() {
                    m.push_str(&format!("; no answer from zone {}", silent.join(", ")));
                }
                fx.transition = self.settle(Truth::True, "ProbeSucceeded", m, ctx);
            } else if self.ready == Truth::Unknown {
                let m = format!(
                    "no quorum yet: {failed_n} of {asked} zones fail, {} did not answer",
                    silent.len()
                );
                self.settle(Truth::Unknown, NO_QUORUM, m, ctx);
            }
            fx.degraded = self.degraded_zones(&failed, &silent, q, ctx);
        }
        self.after_window(closed, &mut fx);
        self.follow_dependencies(blamed, ctx, &mut fx);
        let mut status = self.render(ctx, Some(o));
        status.zones = self.zones.render(ctx.failure_threshold);
        fx.write = self.maybe_write(status, ctx);
        fx
    }

    /// Degraded below the quorum: the failing zones and those that did not
    /// answer are named; the Warning's message when it turned True.
    fn degraded_zones(
        &mut self,
        failed: &[ZoneEntry],
        silent: &[String],
        q: ZoneQuorum,
        ctx: &Context<'_>,
    ) -> Option<String> {
        let round = self.zones.entries().len() as u32;
        // Fewer zones have a replica than spec.locations asks for: the
        // checker is judged from fewer places than its author wanted.
        let fewer = (round < q.zones).then(|| {
            format!(
                "probed from {round} of {} zones: the operator's replicas run in fewer zones",
                q.zones
            )
        });
        if failed.is_empty() {
            if let Some(m) = fewer {
                return self.set_degraded(DegradedReason::FewerZones, m, ctx);
            }
            let (reason, m) = if silent.is_empty() {
                (DegradedReason::AllZonesSucceed, "no zone fails".to_string())
            } else {
                (
                    DegradedReason::NoZoneFails,
                    format!("no zone fails; no answer from zone {}", silent.join(", ")),
                )
            };
            return self.set_degraded(reason, m, ctx);
        }
        let list: Vec<String> = failed.iter().map(describe).collect();
        let mut m = format!(
            "failing in {} of {} zones, fewer than the quorum of {}: {}",
            failed.len(),
            self.zones.entries().len(),
            q.quorum,
            list.join("; ")
        );
        if !silent.is_empty() {
            m.push_str(&format!("; no answer from zone {}", silent.join(", ")));
        }
        if let Some(f) = fewer {
            m.push_str(&format!("; {f}"));
        }
        self.set_degraded(DegradedReason::ZonesFailing, m, ctx)
    }
}

fn own_place(ctx: &Context<'_>) -> Place {
    Place {
        replica: ctx.owner.to_string(),
        zone: ctx.place.zone.clone(),
    }
}

#[cfg(test)]
mod tests;
