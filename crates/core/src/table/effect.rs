//! What goes into the checker table and what comes out: inputs with the
//! clock readings and the random draw a step may need, and effects that the
//! engine's shell (crate::engine) carries out in order.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::ObjectReference;

use crate::ask::zones::ZoneAnswer;
use crate::ask::{Ask, Verdict};
use crate::checker::Change;
use crate::checker::CheckerInfo;
use crate::checker::Op;
use crate::checker::ZoneSample;
use crate::maintenance::Calendar;
use crate::status::{Transition, Truth};
use webchecker_plan::{Outcome, ProbePlan};

/// The Warning Event's reason on the source when a checker turns Ready=False.
pub const CHECKER_DOWN: &str = "CheckerDown";
/// The Normal Event's reason on the source when it turns True again.
pub const CHECKER_UP: &str = "CheckerUp";

/// An Event's note with the cluster's word on the failure appended.
pub fn with_diagnosis(note: &str, diagnosis: &str) -> String {
    // A message is at most MAX_MESSAGE characters. The cause is what the
    // reader came for: the failure's own words are cut to make room for it.
    let said = format!("; the cluster says: {diagnosis}");
    let room = webchecker_api::MAX_MESSAGE.saturating_sub(said.chars().count());
    if note.chars().count() + said.chars().count() <= webchecker_api::MAX_MESSAGE {
        return format!("{note}{said}");
    }
    if room < MIN_NOTE {
        return webchecker_api::condition_message(&format!("{note}{said}"));
    }
    let cut: String = note.chars().take(room - 1).collect();
    format!("{cut}…{said}")
}

/// Characters of the failure's own words kept beside a diagnosis.
const MIN_NOTE: usize = 40;

/// The time of a step, and a draw in [0, 1] that places a first probe
/// within its spread.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    pub now: Instant,
    pub wall: SystemTime,
    pub draw: f64,
}

#[derive(Debug)]
pub enum Input {
    /// A change to the checkers of the shard, as the intake told it.
    Change(Change),
    /// Our Lease is gone: drop every checker.
    Fence,
    /// Graceful shutdown: stop dispatching; [`Effect::Stopped`] once no
    /// probe is in flight and no failure waits for a confirmation.
    Shutdown,
    /// A checker's timer fired.
    Due { key: String },
    /// `free` workers are free, counting the one the shell holds for the
    /// probe this step may start.
    Dispatch { free: usize },
    /// A probe ended. `outcome` is `None` when it was held back at the last
    /// moment (the membership gate closed). `finished`: wall time it ended.
    Done {
        key: String,
        seq: u64,
        outcome: Option<Outcome>,
        finished: SystemTime,
    },
    /// Another replica's word on the failure a [`Effect::Confirm`] asked about.
    Confirmed {
        key: String,
        seq: u64,
        verdict: Verdict,
    },
    /// The other zones' answers to an [`Effect::AskZones`].
    Zones {
        key: String,
        seq: u64,
        answers: Vec<ZoneAnswer>,
    },
    /// Another replica asked for a probe of a checker of `namespace`
    /// (crate::confirm::service): it waits for a worker with the
    /// namespace's own probes; it may hold one for up to `hold`.
    Foreign {
        key: String,
        namespace: String,
        hold: Duration,
    },
    /// That probe ended (or was given up).
    ForeignDone { key: String },
    /// The maintenance windows changed (crate::maintenance).
    Calendar(Arc<Calendar>),
    /// Each checker's dependencies now (spec.dependsOn).
    Dependencies(Arc<crate::dependencies::Dependencies>),
    /// The answer to an [`Effect::Diagnose`]: `None` when there is none
    /// (no reads to spare, nothing readable).
    Diagnosis {
        key: String,
        seq: u64,
        diagnosis: Option<webchecker_api::Diagnosis>,
    },
}

#[derive(Debug)]
pub enum Effect {
    /// Ask the cluster why the checker's target fails (its in-cluster
    /// objects, its host's Certificates); report
    /// the answer as [`Input::Diagnosis`] with `seq` (its fall's Events
    /// wait for it until the checker's next probe).
    Diagnose {
        key: String,
        seq: u64,
        namespace: String,
        subject: crate::diagnosis::Subject,
    },
    /// Start a probe of `key` under `plan` on the worker the shell holds;
    /// report its end as [`Input::Done`] with `seq`.
    Probe {
        key: String,
        seq: u64,
        namespace: String,
        plan: Arc<ProbePlan>,
    },
    /// (Re)arm the checker's timer: [`Input::Due`] at `at`.
    Schedule {
        key: String,
        at: Instant,
    },
    /// Disarm the checker's timer.
    Cancel {
        key: String,
    },
    /// Abort the checker's probe in flight: its `Done` is not wanted.
    Abort {
        key: String,
    },
    /// Start the probe asked for as [`Input::Foreign`] on the worker the
    /// shell holds; report its end as [`Input::ForeignDone`].
    ProbeForeign {
        key: String,
    },
    /// That probe will not run (fence, shutdown): tell whoever waits.
    DropForeign {
        key: String,
    },
    /// Ask another replica to confirm the checker's failure, within
    /// `limit`; report the answer as [`Input::Confirmed`] with `seq`.
    Confirm {
        key: String,
        seq: u64,
        ask: Ask,
        limit: Duration,
    },
    /// Ask one replica in each of up to `others` other zones to probe the
    /// checker now (spec.locations), within `limit`; report the answers as
    /// [`Input::Zones`] with `seq`.
    AskZones {
        key: String,
        seq: u64,
        ask: Ask,
        others: usize,
        limit: Duration,
    },
    Writer(ToWriter),
    Event(Notice),
    Metric(Metric),
    /// The table gave memory back after the shard shrank: the timers may too.
    Compact,
    /// Shut down and no probe in flight: the engine may end.
    Stopped,
}

/// For the status writer (crate::engine::writer::StatusWriter).
#[derive(Debug)]
pub enum ToWriter {
    /// The resourceVersion the watch delivered: what writes are fenced with.
    Observe {
        key: String,
        resource_version: String,
        uid: String,
    },
    Submit {
        key: String,
        namespace: String,
        name: String,
        op: Op,
    },
    /// A drain was withdrawn before its acknowledgement was written.
    Withdraw {
        key: String,
    },
    /// No longer ours: drop what is queued and the version.
    Forget {
        key: String,
    },
    ForgetAll,
}

/// A Kubernetes Event about a checker, queued without waiting
/// (crate::observe::events).
#[derive(Clone, Debug, PartialEq)]
pub struct Notice {
    pub namespace: String,
    pub object_ref: ObjectReference,
    pub warning: bool,
    pub reason: String,
    /// At most [`webchecker_api::MAX_MESSAGE`] characters.
    pub note: String,
}

/// A checker's gauges beside its probe's: whether it is Ready, since when
/// it is not (Unix seconds, the condition's lastTransitionTime), and the
/// maintenance window that covers it with the time that window closes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Standing {
    pub ready: bool,
    pub down_since: Option<i64>,
    pub window: Option<(Arc<str>, i64)>,
    /// Ready=False because a dependency is down (spec.dependsOn).
    pub dependency_down: bool,
}

impl From<bool> for Standing {
    /// Ready or not, no more said.
    fn from(ready: bool) -> Standing {
        Standing {
            ready,
            ..Default::default()
        }
    }
}

#[derive(Debug)]
pub enum Metric {
    /// A probe's result (`record_probe`).
    Probe {
        namespace: String,
        name: String,
        info: Arc<CheckerInfo>,
        outcome: Outcome,
        standing: Standing,
    },
    /// `webchecker_up` without a probe (the checker cannot be probed).
    Up {
        namespace: String,
        name: String,
        info: Arc<CheckerInfo>,
        standing: Standing,
    },
    /// Its labels or URL changed.
    Info {
        namespace: String,
        name: String,
        info: Arc<CheckerInfo>,
    },
    /// What another replica said of a failure (its result counted; Up follows Ready).
    Verdict {
        namespace: String,
        name: String,
        info: Arc<CheckerInfo>,
        verdict: Verdict,
        standing: Standing,
    },
    /// Each zone's result of a round (spec.locations): the owner exports
    /// every zone's series of its checkers.
    Zones {
        namespace: String,
        name: String,
        /// `spec.locations.zones`: the zones asked for.
        asked: u32,
        results: Vec<ZoneSample>,
    },
    /// What a step counted against spec.slo (its series exist from the
    /// first probe on, zero or not).
    Slo {
        namespace: String,
        name: String,
        target: webchecker_plan::SloTarget,
        counted: crate::status::Counted,
    },
    /// spec.slo was removed: drop its SLO series.
    SloGone { namespace: String, name: String },
    /// Drop its series.
    Forget { namespace: String, name: String },
    /// Checkers owned and not being handed over (`probing`), and all the
    /// checkers held, those being handed over included.
    Owned { probing: i64, held: usize },
    /// How late a probe started after it was due.
    ScheduleLag(Duration),
    /// From the watch delivering a new checker to its first probe.
    FirstProbeDelay(Duration),
    /// Whole intervals skipped.
    Missed(u64),
}

/// The Event of a Ready transition: Normal when it turned True.
pub fn transition_notice(namespace: &str, object_ref: &ObjectReference, t: &Transition) -> Notice {
    Notice {
        namespace: namespace.to_string(),
        object_ref: object_ref.clone(),
        warning: t.ready != Truth::True,
        reason: t.reason.clone(),
        note: webchecker_api::condition_message(&format!(
            "Ready={}: {}",
            t.ready.as_str(),
            t.message
        )),
    }
}

/// The Event on the route (or Service) a checker was generated from, when
/// the checker turns Ready=False (Warning `CheckerDown`, also from Unknown:
/// a new route that is down from its first probe) or True again after
/// False (Normal `CheckerUp`; a new checker turning True is no news). It
/// names the checker; the reason and message are the checker's.
pub fn source_notice(
    namespace: &str,
    source: &ObjectReference,
    checker: &str,
    t: &Transition,
) -> Option<Notice> {
    let (warning, reason) = match (t.from, t.ready) {
        (Truth::True | Truth::Unknown, Truth::False) => (true, CHECKER_DOWN),
        (Truth::False, Truth::True) => (false, CHECKER_UP),
        _ => return None,
    };
    let note = format!(
        "checker {checker}: Ready={} ({}): {}",
        t.ready.as_str(),
        t.reason,
        t.message
    );
    Some(Notice {
        namespace: namespace.to_string(),
        object_ref: source.clone(),
        warning,
        reason: reason.to_string(),
        note: webchecker_api::condition_message(&note),
    })
}

/// The Warning Event of a condition beside Ready turning True
/// (CertificateExpiring, or Degraded with reason UnconfirmedFailure).
pub fn warning_notice(
    namespace: &str,
    object_ref: &ObjectReference,
    reason: &str,
    message: &str,
) -> Notice {
    Notice {
        namespace: namespace.to_string(),
        object_ref: object_ref.clone(),
        warning: true,
        reason: reason.to_string(),
        note: webchecker_api::condition_message(message),
    }
}
