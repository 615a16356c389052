//! The status reducer: probe outcomes in, condition transitions and status
//! writes out. Pure logic, tested from small fixtures.
//!
//! Write policy (docs/invariants.md): write when something a reader acts on changes
//! (Ready status or reason, status code class, observedGeneration, owner), and
//! otherwise at most once per heartbeat. `lastTransitionTime` moves only when
//! the Ready status changes.

use std::time::{Duration, Instant};

use crate::ask::Verdict;
use webchecker_api::{Condition, WebCheckerStatus};
use webchecker_plan::{Outcome, Reason, version_name};

mod dependencies;
mod diagnosis;
mod slo;
mod zones;
pub use slo::{Counted, SLO_WRITE_EVERY};
use slo::{Judged, SloBook};
pub use zones::ZoneBook;

pub const READY: &str = "Ready";
/// Second condition, present when `tls.certificateExpiryWarningDays` is set:
/// True while the server certificate expires within that many days.
pub const CERTIFICATE_EXPIRING: &str = "CertificateExpiring";
/// Third condition, present once a failure of the owner could not be
/// confirmed (crate::confirm): True while the owner's probes fail where
/// another replica's succeed (its network is suspect, not the target), or
/// while no other replica could probe to confirm them.
pub const DEGRADED: &str = "Degraded";
/// Fourth condition, present once a maintenance window covered the checker
/// (crate::maintenance): True while one does, naming it.
pub const MAINTENANCE: &str = "Maintenance";
pub use crate::dependencies::DEPENDENCY_DOWN;
/// Ready before the first probe's verdict.
pub const PENDING: &str = "Pending";
/// Ready of a new checker with spec.locations before a quorum of zones spoke.
pub const NO_QUORUM: &str = "NoQuorum";

/// The reasons of [`DEGRADED`], with the status each goes with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DegradedReason {
    /// True: the owner's probe failed where a confirming replica's succeeded.
    UnconfirmedFailure,
    /// True: no other replica could probe to confirm a failure.
    Unconfirmed,
    /// True: some zones fail, fewer than the quorum.
    ZonesFailing,
    /// True: probed from fewer zones than spec.locations asks for.
    FewerZones,
    /// False: the owner's probes succeed again.
    ProbesSucceed,
    /// False: another replica saw the failure too.
    FailureConfirmed,
    /// False: a quorum of zones fails: Ready is False.
    QuorumFailed,
    /// False: every zone succeeds.
    AllZonesSucceed,
    /// False: no zone fails, some did not answer.
    NoZoneFails,
}

impl DegradedReason {
    pub const ALL: [DegradedReason; 9] = [
        DegradedReason::UnconfirmedFailure,
        DegradedReason::Unconfirmed,
        DegradedReason::ZonesFailing,
        DegradedReason::FewerZones,
        DegradedReason::ProbesSucceed,
        DegradedReason::FailureConfirmed,
        DegradedReason::QuorumFailed,
        DegradedReason::AllZonesSucceed,
        DegradedReason::NoZoneFails,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DegradedReason::UnconfirmedFailure => "UnconfirmedFailure",
            DegradedReason::Unconfirmed => "Unconfirmed",
            DegradedReason::ZonesFailing => "ZonesFailing",
            DegradedReason::FewerZones => "FewerZones",
            DegradedReason::ProbesSucceed => "ProbesSucceed",
            DegradedReason::FailureConfirmed => "FailureConfirmed",
            DegradedReason::QuorumFailed => "QuorumFailed",
            DegradedReason::AllZonesSucceed => "AllZonesSucceed",
            DegradedReason::NoZoneFails => "NoZoneFails",
        }
    }

    /// The condition's status with this reason.
    pub fn status(self) -> Truth {
        match self {
            DegradedReason::UnconfirmedFailure
            | DegradedReason::Unconfirmed
            | DegradedReason::ZonesFailing
            | DegradedReason::FewerZones => Truth::True,
            _ => Truth::False,
        }
    }
}

/// The reasons of [`CERTIFICATE_EXPIRING`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpiryReason {
    /// True: the certificate expired.
    CertificateExpired,
    /// True: it expires within the warning days.
    ExpiresSoon,
    /// False: it does not.
    CertificateValid,
}

impl ExpiryReason {
    pub const ALL: [ExpiryReason; 3] = [
        ExpiryReason::CertificateExpired,
        ExpiryReason::ExpiresSoon,
        ExpiryReason::CertificateValid,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ExpiryReason::CertificateExpired => "CertificateExpired",
            ExpiryReason::ExpiresSoon => "ExpiresSoon",
            ExpiryReason::CertificateValid => "CertificateValid",
        }
    }

    pub fn status(self) -> Truth {
        match self {
            ExpiryReason::CertificateValid => Truth::False,
            _ => Truth::True,
        }
    }
}

/// A condition's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Truth {
    True,
    False,
    Unknown,
}

impl Truth {
    pub fn as_str(self) -> &'static str {
        match self {
            Truth::True => "True",
            Truth::False => "False",
            Truth::Unknown => "Unknown",
        }
    }

    /// As the API writes it; anything else (the schema allows nothing else)
    /// reads as Unknown.
    pub fn parse(s: &str) -> Self {
        match s {
            "True" => Truth::True,
            "False" => Truth::False,
            _ => Truth::Unknown,
        }
    }
}

/// Why a checker is not probed: its Ready reason (Ready is Unknown while
/// suspended, False otherwise).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotProbed {
    /// `spec.suspend`.
    Suspended,
    /// The spec cannot be probed (found at run time).
    InvalidSpec,
    /// Over its namespace's budget (crate::namespace_budget).
    QuotaExceeded,
}

impl NotProbed {
    pub const ALL: [NotProbed; 3] = [
        NotProbed::Suspended,
        NotProbed::InvalidSpec,
        NotProbed::QuotaExceeded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            NotProbed::Suspended => "Suspended",
            NotProbed::InvalidSpec => "InvalidSpec",
            NotProbed::QuotaExceeded => "QuotaExceeded",
        }
    }

    pub fn ready(self) -> Truth {
        match self {
            NotProbed::Suspended => Truth::Unknown,
            NotProbed::InvalidSpec | NotProbed::QuotaExceeded => Truth::False,
        }
    }
}

/// Ready changed status: the Event's content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    /// Ready's status before.
    pub from: Truth,
    pub ready: Truth,
    pub reason: String,
    pub message: String,
}

/// What a reader acts on; a difference here forces a write.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Summary {
    status: Truth,
    reason: String,
    code_class: Option<i32>,
    generation: Option<i64>,
    owner: Option<String>,
    certificate: Option<Truth>,
    degraded: Option<(Truth, String)>,
    /// Each zone's result (spec.locations).
    zones: Vec<(String, String)>,
    /// spec.slo's objective and window.
    slo: Option<(String, String)>,
    maintenance: Option<Truth>,
    diagnosis: Option<webchecker_api::Diagnosis>,
}

fn summarize(s: &WebCheckerStatus) -> Summary {
    let c = s.condition(READY);
    Summary {
        status: c.map_or(Truth::Unknown, |c| Truth::parse(&c.status)),
        reason: c.map(|c| c.reason.clone()).unwrap_or_default(),
        code_class: s.last_status_code.map(|c| c / 100),
        generation: s.observed_generation,
        owner: s.owner.clone(),
        certificate: s
            .condition(CERTIFICATE_EXPIRING)
            .map(|c| Truth::parse(&c.status)),
        degraded: s
            .condition(DEGRADED)
            .map(|c| (Truth::parse(&c.status), c.reason.clone())),
        zones: s
            .zones
            .iter()
            .map(|z| (z.zone.clone(), z.result.clone()))
            .collect(),
        slo: slo::summary(s.slo.as_ref()),
        maintenance: s.condition(MAINTENANCE).map(|c| Truth::parse(&c.status)),
        diagnosis: s.diagnosis.clone(),
    }
}

/// A condition beside Ready (CertificateExpiring, Degraded) as the reducer keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct SideCondition {
    pub status: Truth,
    pub reason: String,
    pub message: String,
    pub last_transition_time: Option<String>,
}

impl SideCondition {
    /// The condition of this type on the object's status, if any.
    fn found(status: Option<&WebCheckerStatus>, type_: &str) -> Option<Box<Self>> {
        status.and_then(|s| s.condition(type_)).map(|c| {
            Box::new(SideCondition {
                status: Truth::parse(&c.status),
                reason: c.reason.clone(),
                message: c.message.clone(),
                last_transition_time: c.last_transition_time.clone(),
            })
        })
    }

    /// Sets `slot` (its transition time moves only when its status does);
    /// the message, when it turned True (the Warning Event's).
    fn set(
        slot: &mut Option<Box<Self>>,
        status: Truth,
        reason: &str,
        message: String,
        ctx: &Context<'_>,
    ) -> Option<String> {
        let was = slot.as_ref().map(|c| c.status);
        let changed = was != Some(status);
        let last_transition_time = if changed {
            Some(ctx.now_wall.clone())
        } else {
            slot.as_ref().and_then(|c| c.last_transition_time.clone())
        };
        *slot = Some(Box::new(SideCondition {
            status,
            reason: reason.into(),
            message: message.clone(),
            last_transition_time,
        }));
        (changed && status == Truth::True).then_some(message)
    }

    fn render(&self, type_: &str, ctx: &Context<'_>) -> Condition {
        Condition {
            type_: type_.into(),
            status: self.status.as_str().into(),
            reason: self.reason.clone(),
            message: webchecker_api::condition_message(&self.message),
            last_transition_time: self
                .last_transition_time
                .clone()
                .or_else(|| Some(ctx.now_wall.clone())),
            observed_generation: ctx.generation,
        }
    }
}

/// Per-checker reducer state, owned by the engine.
#[derive(Clone, Debug)]
pub struct CheckerStatus {
    pub ready: Truth,
    pub reason: String,
    pub message: String,
    pub last_transition_time: Option<String>,
    pub consecutive_successes: u32,
    pub consecutive_failures: u32,
    /// CertificateExpiring; None when the checker has no expiry warning.
    pub certificate: Option<Box<SideCondition>>,
    /// Degraded; None until a failure first went unconfirmed.
    pub degraded: Option<Box<SideCondition>>,
    /// Maintenance; None until a window first covered the checker.
    pub maintenance: Option<Box<SideCondition>>,
    /// A failure that would turn Ready False, held while another replica is
    /// asked to confirm it (crate::confirm); with spec.locations, the
    /// owner's probe held while the other zones probe.
    confirming: Option<Box<Outcome>>,
    /// With spec.locations: each zone's streak.
    zones: ZoneBook,
    /// What the object's status said when we last wrote (or first saw) it.
    written: Option<Summary>,
    last_write: Option<Instant>,
    /// `lastProbeTime` found on the object when this replica took it over.
    inherited_probe_time: Option<String>,
    /// With spec.slo: the probes counted against it.
    /// Boxed, as are the other parts few checkers use: every checker's
    /// status is held (docs/benchmarks.md, part 8).
    slo: Option<Box<SloBook>>,
    /// status.slo found on the object: the book resumes its ledger once it
    /// knows the objective, and until then it is written back as it was
    /// (a checker that cannot be probed keeps its counts).
    inherited_slo: Option<Box<webchecker_api::SloStatus>>,
    /// With spec.dependsOn: the transition to False whose Warning waits
    /// until then for a dependency to fall first.
    held: Option<Box<(Instant, Transition)>>,
    /// While Ready is False: what the cluster said of the target.
    diagnosis: Option<webchecker_api::Diagnosis>,
}

/// What one step of the reducer asks for.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Effects {
    pub write: Option<WebCheckerStatus>,
    /// When Ready changed status.
    pub transition: Option<Transition>,
    /// The message of a Warning event: CertificateExpiring turned True.
    pub certificate_expiring: Option<String>,
    /// Ask another replica to confirm the failure just held back.
    pub confirm: bool,
    /// The message of a Warning event: Degraded turned True.
    pub degraded: Option<String>,
    /// With spec.slo: what this step counted.
    pub slo: Option<Counted>,
    /// A maintenance window covers the checker: its Events are Normal.
    pub quiet: bool,
    /// The message of a Warning event: a window closed on a checker still
    /// Ready=False (its transition's Event was Normal).
    pub still_down: Option<String>,
}

/// Inputs that describe the checker at the time of a step.
pub struct Context<'a> {
    pub generation: Option<i64>,
    pub owner: &'a str,
    pub now_wall: String,
    pub now: Instant,
    pub heartbeat: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
    /// `tls.certificateExpiryWarningDays`; None: no CertificateExpiring condition.
    pub certificate_warning_days: Option<u32>,
    /// Whether a failure that would turn Ready False is confirmed first.
    pub confirm: bool,
    /// Where the owner runs (named in Degraded's message).
    pub place: &'a crate::ask::Place,
    /// Unix seconds of `now_wall` (the SLO ledger's buckets).
    pub now_unix: u64,
    /// spec.slo.
    pub slo: Option<webchecker_plan::SloTarget>,
    /// The maintenance window that covers the checker now, if any.
    pub maintenance: Option<&'a str>,
    /// With spec.dependsOn: what its dependencies say now.
    pub dependency: Option<&'a crate::dependencies::Edge>,
}

impl<'a> Context<'a> {
    /// The same, with the maintenance window that covers the checker (its
    /// name, and when it closes), if one does.
    pub fn in_window(self, window: Option<&'a (std::sync::Arc<str>, i64)>) -> Context<'a> {
        Context {
            maintenance: window.map(|w| &*w.0),
            ..self
        }
    }

    /// The same, with the checker's dependencies (spec.dependsOn), if any.
    pub fn with_dependency(self, edge: Option<&'a crate::dependencies::Edge>) -> Context<'a> {
        Context {
            dependency: edge,
            ..self
        }
    }
}

impl CheckerStatus {
    /// Starts from the status already on the object, so a checker that moves
    /// between replicas keeps its condition and transition time.
    pub fn from_existing(status: Option<&WebCheckerStatus>) -> Self {
        let cond = status.and_then(|s| s.condition(READY));
        CheckerStatus {
            ready: cond.map_or(Truth::Unknown, |c| Truth::parse(&c.status)),
            reason: cond.map(|c| c.reason.clone()).unwrap_or_default(),
            message: cond.map(|c| c.message.clone()).unwrap_or_default(),
            last_transition_time: cond.and_then(|c| c.last_transition_time.clone()),
            consecutive_successes: 0,
            consecutive_failures: 0,
            certificate: SideCondition::found(status, CERTIFICATE_EXPIRING),
            degraded: SideCondition::found(status, DEGRADED),
            maintenance: SideCondition::found(status, MAINTENANCE),
            confirming: None,
            zones: ZoneBook::default(),
            written: status.filter(|s| !s.conditions.is_empty()).map(summarize),
            last_write: None,
            inherited_probe_time: status.and_then(|s| s.last_probe_time.clone()),
            slo: None,
            inherited_slo: status.and_then(|s| s.slo.clone()).map(Box::new),
            held: None,
            diagnosis: status.and_then(|s| s.diagnosis.clone()),
        }
    }

    /// The SLO book follows spec.slo: made (resuming an inherited ledger),
    /// kept, re-targeted or dropped.
    fn sync_slo(&mut self, ctx: &Context<'_>) {
        let Some(t) = ctx.slo else {
            self.slo = None;
            self.inherited_slo = None;
            return;
        };
        self.slo = Some(Box::new(SloBook::reconcile(
            self.slo.take().map(|b| *b),
            slo::inherited(self.inherited_slo.take().map(|b| *b)),
            t,
            ctx.confirm,
            ctx.now_unix,
        )));
    }

    /// Maintenance follows the window that covers the checker now
    /// (created only when one first does). Whether a window just closed.
    fn sync_maintenance(&mut self, ctx: &Context<'_>) -> bool {
        let was_open = self
            .maintenance
            .as_ref()
            .is_some_and(|c| c.status == Truth::True);
        let (status, reason, message) = match ctx.maintenance {
            Some(w) => (
                Truth::True,
                "InWindow",
                format!(
                    "maintenance window {w} is open: probes go on, their failures count for no objective and page nobody"
                ),
            ),
            None if self.maintenance.is_some() => (
                Truth::False,
                "NoWindow",
                "no maintenance window covers it".to_string(),
            ),
            None => return false,
        };
        SideCondition::set(&mut self.maintenance, status, reason, message, ctx);
        was_open && status == Truth::False
    }

    /// A window closed on a checker still Ready=False: the Warning that its
    /// planned transition did not send.
    fn after_window(&self, closed: bool, fx: &mut Effects) {
        if closed && self.ready == Truth::False && fx.transition.is_none() {
            fx.still_down = Some(format!(
                "Ready=False after the maintenance window closed: {}",
                self.message
            ));
        }
    }

    /// The held failures' fate, counted.
    fn judge_slo(&mut self, how: Judged, ctx: &Context<'_>, fx: &mut Effects) {
        if let Some(b) = self.slo.as_mut() {
            let c = fx.slo.get_or_insert_with(Counted::default);
            b.judge(how, ctx.now_unix, c);
        }
    }

    pub fn is_ready(&self) -> bool {
        self.ready == Truth::True
    }

    /// When Ready stopped being True (Unix seconds), while it is not: the
    /// condition's lastTransitionTime, which a move keeps.
    pub fn down_since(&self) -> Option<i64> {
        if self.ready == Truth::True {
            return None;
        }
        let t = self.last_transition_time.as_deref()?;
        chrono::DateTime::parse_from_rfc3339(t)
            .ok()
            .map(|t| t.timestamp())
    }

    /// Whether a failure is held for another replica's word.
    pub fn is_confirming(&self) -> bool {
        self.confirming.is_some()
    }

    /// Folds one probe outcome in.
    pub fn observe(&mut self, o: &Outcome, ctx: &Context<'_>) -> Effects {
        self.sync_slo(ctx);
        // A refusal of the operator's own (the forgery guard, a spec that
        // cannot be probed) is the same from every replica: no network
        // verdict to confirm, and nothing said of the target.
        let network = !matches!(o.reason, Reason::Forbidden | Reason::InvalidSpec);
        let was_false = self.ready == Truth::False;
        let blamed = self.blames_dependency();
        let closed = self.sync_maintenance(ctx);
        let planned = ctx.maintenance.is_some();
        let counted = self.slo.as_mut().map(|b| {
            let mut c = b.probe(o.success(), !network || planned, was_false, ctx.now_unix);
            if planned {
                // Failures held from before the window count for neither side.
                b.judge(Judged::Unknown, ctx.now_unix, &mut c);
            }
            c
        });
        let (target, reason) = if o.success() {
            self.consecutive_successes += 1;
            self.consecutive_failures = 0;
            (Truth::True, Reason::ProbeSucceeded)
        } else {
            self.consecutive_failures += 1;
            self.consecutive_successes = 0;
            (Truth::False, o.reason)
        };
        let message = if o.success() {
            o.success_summary()
        } else {
            o.message.clone()
        };
        let crossed = if o.success() {
            self.consecutive_successes >= ctx.success_threshold
        } else {
            self.consecutive_failures >= ctx.failure_threshold
        };
        let mut fx = Effects {
            slo: counted,
            quiet: planned,
            ..Default::default()
        };
        if o.success() {
            // An answer still to come for an earlier failure is moot now.
            self.confirming = None;
            self.set_degraded(
                DegradedReason::ProbesSucceed,
                "this replica's probes succeed again".into(),
                ctx,
            );
        }
        if crossed && target == Truth::False && self.ready != Truth::False && ctx.confirm && network
        {
            // Held until another replica has probed too (Self::confirmed).
            fx.confirm = self.confirming.is_none();
            self.confirming = Some(Box::new(o.clone()));
        } else if crossed {
            fx.transition = self.settle(target, reason.as_str(), message, ctx);
            if target == Truth::False {
                self.judge_slo(Judged::Bad, ctx, &mut fx);
            }
        }
        fx.certificate_expiring = self.observe_certificate(o, ctx);
        self.after_window(closed && self.confirming.is_none(), &mut fx);
        if self.confirming.is_none() {
            self.follow_dependencies(blamed, ctx, &mut fx);
            // A held failure is written with the verdict, not before.
            let status = self.render(ctx, Some(o));
            fx.write = self.maybe_write(status, ctx);
        }
        fx
    }

    /// Ready takes `target` with its reason and message; the transition, if
    /// its status changed.
    fn settle(
        &mut self,
        target: Truth,
        reason: &str,
        message: String,
        ctx: &Context<'_>,
    ) -> Option<Transition> {
        let mut transition = None;
        if self.ready != target {
            self.diagnosis = None;
            let from = std::mem::replace(&mut self.ready, target);
            self.last_transition_time = Some(ctx.now_wall.clone());
            transition = Some(Transition {
                from,
                ready: target,
                reason: reason.to_string(),
                message: message.clone(),
            });
        }
        self.reason = reason.to_string();
        self.message = message;
        transition
    }

    /// Folds in what another replica said of the failure held back; nothing
    /// when none is held (a success came first).
    pub fn confirmed(&mut self, verdict: &Verdict, ctx: &Context<'_>) -> Effects {
        let Some(o) = self.confirming.take() else {
            return Effects::default();
        };
        self.sync_slo(ctx);
        let blamed = self.blames_dependency();
        // A window that closed while the failure was held: its transition,
        // if any, is a Warning again.
        self.sync_maintenance(ctx);
        let (reason, message) = (o.reason.as_str(), o.message.as_str());
        let mut fx = Effects {
            quiet: ctx.maintenance.is_some(),
            ..Default::default()
        };
        let judged = match verdict {
            _ if fx.quiet => Judged::Unknown,
            Verdict::Confirmed { .. } | Verdict::Alone => Judged::Bad,
            Verdict::Refuted { .. } => Judged::Refuted,
            Verdict::Unanswered { .. } => Judged::Unknown,
        };
        self.judge_slo(judged, ctx, &mut fx);
        match verdict {
            Verdict::Confirmed { by } => {
                let m = format!("{message} (confirmed by {})", by.describe());
                fx.transition = self.settle(Truth::False, reason, m, ctx);
                self.set_degraded(
                    DegradedReason::FailureConfirmed,
                    format!("{} sees the failure too", by.describe()),
                    ctx,
                );
            }
            Verdict::Unanswered { .. } => {
                // One replica's word never turns a checker False: Ready keeps
                // its verdict (Unknown says why while it has none) and the
                // next failure asks again. Why nobody answered is in this
                // replica's log and metrics, for the operator's admin.
                if self.ready == Truth::Unknown {
                    let m = format!("{message}; waiting for another replica to confirm it");
                    self.settle(Truth::Unknown, "Unconfirmed", m, ctx);
                }
                let m = format!(
                    "probes from {} fail ({reason}) and no other replica could confirm it yet",
                    ctx.place.describe()
                );
                fx.degraded = self.set_degraded(DegradedReason::Unconfirmed, m, ctx);
            }
            Verdict::Alone => {
                fx.transition = self.settle(Truth::False, reason, message.to_string(), ctx);
            }
            Verdict::Refuted { by, millis } => {
                let m = format!(
                    "probes from {} fail ({reason}) while {} reached the target in {millis} ms",
                    ctx.place.describe(),
                    by.describe()
                );
                fx.degraded = self.set_degraded(DegradedReason::UnconfirmedFailure, m, ctx);
            }
        }
        self.follow_dependencies(blamed, ctx, &mut fx);
        let status = self.render(ctx, Some(&o));
        fx.write = self.maybe_write(status, ctx);
        fx
    }

    /// Sets Degraded (created only when it turns True); the message of its
    /// Warning event when it turned True.
    fn set_degraded(
        &mut self,
        reason: DegradedReason,
        message: String,
        ctx: &Context<'_>,
    ) -> Option<String> {
        let status = reason.status();
        if self.degraded.is_none() && status != Truth::True {
            return None;
        }
        SideCondition::set(&mut self.degraded, status, reason.as_str(), message, ctx)
    }

    /// Updates CertificateExpiring from the certificate chain a probe saw
    /// (its earliest notAfter; a probe that saw none leaves it as it was).
    /// Returns the Warning event's message when the condition turns True.
    fn observe_certificate(&mut self, o: &Outcome, ctx: &Context<'_>) -> Option<String> {
        let Some(days) = ctx.certificate_warning_days else {
            self.certificate = None;
            return None;
        };
        let not_after = o.cert_not_after?;
        // Which certificate of the chain expires first (by position only: a
        // subject is the server's text).
        let which = match o.tls.as_ref().and_then(|t| t.chain.as_ref()) {
            Some(c) if c.earliest > 0 => format!(
                "certificate {} of the server's chain (an intermediate)",
                c.earliest + 1
            ),
            _ => "the server certificate".to_string(),
        };
        let now = chrono::DateTime::parse_from_rfc3339(&ctx.now_wall)
            .map(|t| t.timestamp())
            .unwrap_or_else(|_| chrono::Utc::now().timestamp());
        let left = not_after - now;
        let expiry = chrono::DateTime::from_timestamp(not_after, 0)
            .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
            .unwrap_or_else(|| not_after.to_string());
        let expiring = left < i64::from(days) * 86_400;
        let (reason, message) = if left <= 0 {
            (
                ExpiryReason::CertificateExpired,
                format!("{which} expired at {expiry}"),
            )
        } else if expiring {
            (
                ExpiryReason::ExpiresSoon,
                format!(
                    "{which} expires at {expiry}, in {} days (warning at {days} days)",
                    left / 86_400
                ),
            )
        } else {
            (
                ExpiryReason::CertificateValid,
                format!("{which} expires at {expiry}, in {} days", left / 86_400),
            )
        };
        SideCondition::set(
            &mut self.certificate,
            reason.status(),
            reason.as_str(),
            message,
            ctx,
        )
    }

    /// A checker that cannot be probed (spec invalid at run time, suspended).
    pub fn set_condition(&mut self, why: NotProbed, message: &str, ctx: &Context<'_>) -> Effects {
        // The SLO book stays as it is: no probe, nothing to count (and an
        // invalid spec's objective is unknown).
        let ready = why.ready();
        let reason = why.as_str();
        let mut transition = None;
        if self.ready != ready {
            let from = std::mem::replace(&mut self.ready, ready);
            self.last_transition_time = Some(ctx.now_wall.clone());
            transition = Some(Transition {
                from,
                ready,
                reason: reason.to_string(),
                message: message.to_string(),
            });
        }
        self.reason = reason.to_string();
        self.message = message.to_string();
        self.consecutive_successes = 0;
        self.consecutive_failures = 0;
        self.confirming = None;
        if ctx.certificate_warning_days.is_none() {
            self.certificate = None;
        }
        let status = self.render(ctx, None);
        Effects {
            write: self.maybe_write(status, ctx),
            transition,
            ..Default::default()
        }
    }

    fn render(&self, ctx: &Context<'_>, o: Option<&Outcome>) -> WebCheckerStatus {
        let mut conditions = vec![Condition {
            type_: READY.into(),
            status: self.ready.as_str().into(),
            reason: if self.reason.is_empty() {
                PENDING.into()
            } else {
                self.reason.clone()
            },
            message: webchecker_api::condition_message(&self.message),
            last_transition_time: self
                .last_transition_time
                .clone()
                .or_else(|| Some(ctx.now_wall.clone())),
            observed_generation: ctx.generation,
        }];
        for (type_, c) in [
            (CERTIFICATE_EXPIRING, &self.certificate),
            (DEGRADED, &self.degraded),
            (MAINTENANCE, &self.maintenance),
        ] {
            if let Some(c) = c {
                conditions.push(c.render(type_, ctx));
            }
        }
        WebCheckerStatus {
            conditions,
            observed_generation: ctx.generation,
            last_probe_time: o.map(|_| ctx.now_wall.clone()),
            last_status_code: o.and_then(|o| o.status_code).map(i32::from),
            last_latency_millis: o.map(|o| o.duration.as_millis() as i64),
            last_http_version: o
                .and_then(|o| o.http_version)
                .map(|v| version_name(v).to_string()),
            owner: Some(ctx.owner.to_string()),
            zones: Vec::new(),
            // Rendered when written (maybe_write), not at every probe.
            slo: None,
            diagnosis: self
                .diagnosis
                .clone()
                .filter(|_| self.ready == Truth::False),
        }
    }

    /// status.slo as it is to be written.
    fn status_slo(&self, now: u64) -> Option<webchecker_api::SloStatus> {
        match &self.slo {
            Some(b) => Some(b.render(now)),
            None => self.inherited_slo.as_deref().cloned(),
        }
    }

    fn maybe_write(
        &mut self,
        mut status: WebCheckerStatus,
        ctx: &Context<'_>,
    ) -> Option<WebCheckerStatus> {
        let mut summary = summarize(&status);
        summary.slo = match &self.slo {
            Some(b) => Some(b.summary()),
            None => slo::summary(self.inherited_slo.as_deref()),
        };
        let due = match self.last_write {
            Some(t) => ctx.now.duration_since(t) >= ctx.heartbeat,
            // First time this replica handles the checker: a write is due if the
            // status it inherited is older than a heartbeat (or shows something
            // else: summary check below).
            None => match (
                self.inherited_probe_time
                    .as_deref()
                    .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok()),
                chrono::DateTime::parse_from_rfc3339(&ctx.now_wall).ok(),
            ) {
                (Some(then), Some(now)) => {
                    (now - then).to_std().is_ok_and(|age| age >= ctx.heartbeat)
                }
                _ => false,
            },
        };
        let counted = self.slo.as_deref().is_some_and(SloBook::unsaved_due);
        if self.written.as_ref() != Some(&summary) || due || counted {
            self.written = Some(summary);
            self.last_write = Some(ctx.now);
            if let Some(b) = self.slo.as_mut() {
                b.saved();
            }
            status.slo = self.status_slo(ctx.now_unix);
            Some(status)
        } else {
            None
        }
    }

    /// Called when a write was rejected or failed, so the next step retries.
    pub fn write_lost(&mut self) {
        self.written = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use webchecker_plan::Phases;

    /// Outcomes the reducer's tests fold in (also status/slo's).
    pub(super) fn ok(code: u16) -> Outcome {
        Outcome {
            reason: Reason::ProbeSucceeded,
            message: format!("HTTP {code}"),
            status_code: Some(code),
            duration: Duration::from_millis(7),
            phases: Phases::default(),
            cert_not_after: None,
            tls: None,
            http_version: None,
            redirects: 0,
            grpc: None,
        }
    }

    pub(super) fn bad(reason: Reason) -> Outcome {
        Outcome {
            reason,
            message: "cannot connect to x:80: connection refused".into(),
            status_code: None,
            duration: Duration::from_millis(1),
            phases: Phases::default(),
            cert_not_after: None,
            tls: None,
            http_version: None,
            redirects: 0,
            grpc: None,
        }
    }

    struct Clock {
        start: Instant,
        secs: u64,
    }

    impl Clock {
        fn ctx(&mut self, ft: u32) -> Context<'static> {
            self.secs += 1;
            Context {
                generation: Some(1),
                owner: "r0",
                now_wall: format!("2026-01-01T00:00:{:02}Z", self.secs % 60),
                now: self.start + Duration::from_secs(self.secs),
                heartbeat: Duration::from_secs(300),
                success_threshold: 1,
                failure_threshold: ft,
                certificate_warning_days: None,
                confirm: false,
                place: &HERE,
                now_unix: 1_767_225_600 + self.secs,
                slo: None,
                maintenance: None,
                dependency: None,
            }
        }
    }

    static HERE: crate::ask::Place = crate::ask::Place {
        replica: String::new(),
        zone: String::new(),
    };

    fn clock() -> Clock {
        Clock {
            start: Instant::now(),
            secs: 0,
        }
    }

    #[test]
    fn steady_success_writes_once_then_only_per_heartbeat() {
        let mut c = clock();
        let mut s = CheckerStatus::from_existing(None);
        let first = s.observe(&ok(200), &c.ctx(1));
        assert!(first.write.is_some());
        assert_eq!(first.transition.unwrap().ready, Truth::True);
        let mut writes = 0;
        for _ in 0..200 {
            if s.observe(&ok(200), &c.ctx(1)).write.is_some() {
                writes += 1;
            }
        }
        assert_eq!(
            writes, 0,
            "within one heartbeat nothing a reader acts on changed"
        );
        c.secs += 300;
        assert!(
            s.observe(&ok(200), &c.ctx(1)).write.is_some(),
            "heartbeat write"
        );
    }

    #[test]
    fn transition_time_moves_only_on_transitions() {
        let mut c = clock();
        let mut s = CheckerStatus::from_existing(None);
        let w1 = s.observe(&ok(200), &c.ctx(1)).write.unwrap();
        let t1 = w1.conditions[0].last_transition_time.clone();
        let w2 = s
            .observe(&bad(Reason::ConnectError), &c.ctx(1))
            .write
            .unwrap();
        let t2 = w2.conditions[0].last_transition_time.clone();
        assert_ne!(t1, t2);
        assert_eq!(w2.conditions[0].reason, "ConnectError");
        // Still failing, with another reason: a write (reason changed), same transition time.
        let e3 = s.observe(&bad(Reason::Timeout), &c.ctx(1));
        let w3 = e3.write.unwrap();
        assert!(e3.transition.is_none());
        assert_eq!(w3.conditions[0].last_transition_time, t2);
        assert_eq!(w3.conditions[0].reason, "Timeout");
    }

    #[test]
    fn status_code_class_change_is_written() {
        let mut c = clock();
        let mut s = CheckerStatus::from_existing(None);
        s.observe(&ok(200), &c.ctx(1));
        assert!(s.observe(&ok(204), &c.ctx(1)).write.is_none());
        assert!(s.observe(&ok(301), &c.ctx(1)).write.is_some());
    }

    #[test]
    fn failure_threshold_ignores_a_flapping_target() {
        let mut c = clock();
        let mut s = CheckerStatus::from_existing(None);
        s.observe(&ok(200), &c.ctx(3));
        for i in 0..50 {
            let o = if i % 2 == 0 {
                bad(Reason::ConnectError)
            } else {
                ok(200)
            };
            let e = s.observe(&o, &c.ctx(3));
            assert!(e.transition.is_none(), "flipped at probe {i}");
        }
        assert!(s.is_ready());
        for _ in 0..2 {
            assert!(
                s.observe(&bad(Reason::ConnectError), &c.ctx(3))
                    .transition
                    .is_none()
            );
        }
        assert_eq!(
            s.observe(&bad(Reason::ConnectError), &c.ctx(3))
                .transition
                .unwrap()
                .ready,
            Truth::False
        );
    }

    #[test]
    fn a_moved_checker_keeps_its_condition_and_writes_once_for_the_owner() {
        let existing: WebCheckerStatus = serde_yaml::from_str(
            r#"
conditions:
- type: Ready
  status: "True"
  reason: ProbeSucceeded
  message: HTTP 200 in 3ms
  lastTransitionTime: "2025-02-04T12:33:02Z"
  observedGeneration: 1
observedGeneration: 1
lastStatusCode: 200
owner: r9
"#,
        )
        .unwrap();
        let mut c = clock();
        let mut s = CheckerStatus::from_existing(Some(&existing));
        let e = s.observe(&ok(200), &c.ctx(1));
        assert!(e.transition.is_none(), "no transition on a move");
        let w = e.write.expect("owner changed");
        assert_eq!(
            w.conditions[0].last_transition_time.as_deref(),
            Some("2025-02-04T12:33:02Z")
        );
        assert_eq!(w.owner.as_deref(), Some("r0"));
        assert!(s.observe(&ok(200), &c.ctx(1)).write.is_none());
    }

    #[test]
    fn success_threshold_needs_consecutive_successes() {
        let mut c = clock();
        let mut s = CheckerStatus::from_existing(None);
        let ctx = |c: &mut Clock| Context {
            success_threshold: 3,
            ..c.ctx(1)
        };
        assert_eq!(
            s.observe(&bad(Reason::ConnectError), &ctx(&mut c))
                .transition
                .unwrap()
                .ready,
            Truth::False
        );
        for _ in 0..2 {
            assert!(s.observe(&ok(200), &ctx(&mut c)).transition.is_none());
        }
        // A failure in between starts the count again.
        assert!(
            s.observe(&bad(Reason::ConnectError), &ctx(&mut c))
                .transition
                .is_none()
        );
        for _ in 0..2 {
            assert!(s.observe(&ok(200), &ctx(&mut c)).transition.is_none());
        }
        assert!(!s.is_ready());
        let e = s.observe(&ok(200), &ctx(&mut c));
        assert_eq!(e.transition.unwrap().ready, Truth::True);
    }

    #[test]
    fn certificate_expiring_is_a_second_condition_with_one_warning() {
        let mut c = clock();
        let mut s = CheckerStatus::from_existing(None);
        let now = chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .timestamp();
        let with_cert = |days: i64| Outcome {
            cert_not_after: Some(now + days * 86_400),
            ..ok(200)
        };
        let ctx = |c: &mut Clock| Context {
            certificate_warning_days: Some(30),
            ..c.ctx(1)
        };
        // Far from expiry: the condition is False, no event.
        let e = s.observe(&with_cert(90), &ctx(&mut c));
        let w = e.write.unwrap();
        assert_eq!(w.conditions[0].type_, READY);
        let cert = w.condition(CERTIFICATE_EXPIRING).unwrap();
        assert_eq!(
            (cert.status.as_str(), cert.reason.as_str()),
            ("False", "CertificateValid")
        );
        assert!(e.certificate_expiring.is_none());
        // Renewed less often than needed: within 30 days it turns True, once.
        let e = s.observe(&with_cert(10), &ctx(&mut c));
        let w = e.write.expect("the condition changed: written at once");
        let cert = w.condition(CERTIFICATE_EXPIRING).unwrap();
        assert_eq!(
            (cert.status.as_str(), cert.reason.as_str()),
            ("True", "ExpiresSoon")
        );
        assert!(e.certificate_expiring.unwrap().contains("in 9 days"));
        assert!(e.transition.is_none(), "Ready did not change");
        let e = s.observe(&with_cert(10), &ctx(&mut c));
        assert!(e.certificate_expiring.is_none() && e.write.is_none());
        // A probe without a certificate (connection refused) leaves it alone.
        let e = s.observe(&bad(Reason::ConnectError), &ctx(&mut c));
        let w = e.write.unwrap();
        assert_eq!(w.condition(CERTIFICATE_EXPIRING).unwrap().status, "True");
        // Without certificateExpiryWarningDays the condition goes away.
        let w = s.observe(&with_cert(10), &c.ctx(1)).write.unwrap();
        assert!(w.condition(CERTIFICATE_EXPIRING).is_none());
        assert_eq!(w.conditions.len(), 1);
    }

    #[test]
    fn a_stale_inherited_status_is_refreshed_on_the_first_probe() {
        let existing: WebCheckerStatus = serde_yaml::from_str(
            r#"
conditions:
- type: Ready
  status: "True"
  reason: ProbeSucceeded
  lastTransitionTime: "2026-01-01T00:00:00Z"
  observedGeneration: 1
observedGeneration: 1
lastStatusCode: 200
lastProbeTime: "2025-12-31T23:00:00Z"
owner: r0
"#,
        )
        .unwrap();
        let mut c = clock();
        let mut fresh = CheckerStatus::from_existing(Some(&existing));
        // Same summary (owner r0 again, after a restart), but an hour old: write.
        assert!(fresh.observe(&ok(200), &c.ctx(1)).write.is_some());
        assert!(fresh.observe(&ok(200), &c.ctx(1)).write.is_none());
    }

    #[test]
    fn seed_shaped_status_round_trips() {
        let seed = r#"
conditions:
- lastTransitionTime: "2025-02-04T12:33:07Z"
  message: 'Get "http://badnews.me/": dial tcp: lookup badnews.me: no such host'
  reason: WebResourceReady
  status: "False"
  type: Ready
"#;
        let st: WebCheckerStatus = serde_yaml::from_str(seed).unwrap();
        let s = CheckerStatus::from_existing(Some(&st));
        assert_eq!(s.ready, Truth::False);
        assert_eq!(
            s.last_transition_time.as_deref(),
            Some("2025-02-04T12:33:07Z")
        );
    }
}
