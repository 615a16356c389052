//! Maintenance windows: which of a namespace's checkers a window covers at
//! a time. Pure: the caller passes the time (Unix seconds).
//!
//! A window is one-off (`start` to `end`) or weekly (days, a local time of
//! day, a duration, an IANA time zone). A weekly window's opening follows
//! the zone's clock across daylight-saving changes: 02:30 on a day the
//! clocks jump from 02:00 to 03:00 opens at 03:30 (the time "compatible"
//! with the wall clock, as RFC 5545 and cron daemons do); on a day an hour
//! repeats, at its first occurrence. A window covers checkers of its own
//! namespace only: the calendar is keyed by namespace.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use jiff::civil::{Date, Time};
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use webchecker_api::MaintenanceSpec;

/// The longest a window may stay open: a weekly window may then reach into
/// the next week's, never further.
pub const MAX_DURATION: i64 = 7 * 86_400;

/// When a window is open.
#[derive(Clone, Debug)]
pub enum When {
    /// From `start` (included) to `end` (excluded), Unix seconds.
    Once { start: i64, end: i64 },
    /// On `days` (Monday first), from `at` local time for `duration`
    /// seconds, in `zone`.
    Weekly {
        days: [bool; 7],
        at: Time,
        duration: i64,
        zone: TimeZone,
    },
}

/// Why a window's spec cannot be used (the object's status says it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalid(pub String);

impl When {
    /// A weekly window from its spec's text: `at` "HH:MM", `duration` such
    /// as "2h", "90m" or "1h30m", `zone` an IANA name ("" is UTC).
    pub fn weekly(days: [bool; 7], at: &str, duration: &str, zone: &str) -> Result<When, Invalid> {
        let at = parse_at(at)?;
        let duration = parse_duration(duration)?;
        let zone = match zone {
            "" | "UTC" => TimeZone::UTC,
            name => TimeZone::get(name).map_err(|_| {
                Invalid(format!(
                    "time zone {name:?} is not one of the IANA time zone database's, for example Europe/Berlin or America/New_York"
                ))
            })?,
        };
        if !days.contains(&true) {
            return Err(Invalid("a weekly window needs at least one day".into()));
        }
        Ok(When::Weekly {
            days,
            at,
            duration,
            zone,
        })
    }

    /// The end of the opening that covers `now`, if one does.
    pub fn open_until(&self, now: i64) -> Option<i64> {
        match self {
            When::Once { start, end } => (*start <= now && now < *end).then_some(*end),
            When::Weekly {
                days,
                at,
                duration,
                zone,
            } => {
                let today = local_date(now, zone)?;
                // An opening up to MAX_DURATION ago may still be open.
                (0..=7i64).find_map(|back| {
                    let day = today.checked_sub(back.days()).ok()?;
                    let opens = opening(day, *at, zone, days)?;
                    (opens <= now && now < opens + duration).then_some(opens + duration)
                })
            }
        }
    }
}

impl When {
    /// When it opens next after `now`, if it does (a one-off window that
    /// has opened never opens again).
    pub fn next_start(&self, now: i64) -> Option<i64> {
        match self {
            When::Once { start, .. } => (*start > now).then_some(*start),
            When::Weekly { days, at, zone, .. } => {
                let today = local_date(now, zone)?;
                (0..=8i64).find_map(|ahead| {
                    let day = today.checked_add(ahead.days()).ok()?;
                    opening(day, *at, zone, days).filter(|t| *t > now)
                })
            }
        }
    }
}

/// The date in `zone` at `now` (Unix seconds).
fn local_date(now: i64, zone: &TimeZone) -> Option<Date> {
    let zoned = Timestamp::from_second(now).ok()?.to_zoned(zone.clone());
    Some(zoned.date())
}

/// When a weekly window opens on `day`, if it does.
fn opening(day: Date, at: Time, zone: &TimeZone, days: &[bool; 7]) -> Option<i64> {
    let weekday = day.weekday().to_monday_zero_offset() as usize;
    if !days[weekday] {
        return None;
    }
    let zoned = day.to_datetime(at).to_zoned(zone.clone()).ok()?;
    Some(zoned.timestamp().as_second())
}

fn parse_at(text: &str) -> Result<Time, Invalid> {
    let bad = || {
        Invalid(format!(
            "{text:?} is not a time of day written HH:MM, for example 02:30"
        ))
    };
    let (h, m) = text.split_once(':').ok_or_else(bad)?;
    if h.len() != 2 || m.len() != 2 {
        return Err(bad());
    }
    let (h, m): (i8, i8) = (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
    Time::new(h, m, 0, 0).map_err(|_| bad())
}

/// "2h", "90m", "1h30m": seconds, from a minute to MAX_DURATION.
pub fn parse_duration(text: &str) -> Result<i64, Invalid> {
    let bad = || {
        Invalid(format!(
            "{text:?} is not a duration of whole hours and minutes from 1m to 168h, for example 2h, 90m or 1h30m"
        ))
    };
    let (hours, rest) = match text.split_once('h') {
        Some((h, rest)) => (h.parse::<i64>().map_err(|_| bad())?, rest),
        None => (0, text),
    };
    let minutes = match rest {
        "" => 0,
        m => m
            .strip_suffix('m')
            .ok_or_else(bad)?
            .parse::<i64>()
            .map_err(|_| bad())?,
    };
    let secs = hours
        .checked_mul(3600)
        .and_then(|h| h.checked_add(minutes.checked_mul(60)?))
        .ok_or_else(bad)?;
    if text.is_empty() || !(60..=MAX_DURATION).contains(&secs) || minutes < 0 || hours < 0 {
        return Err(bad());
    }
    Ok(secs)
}

/// A label selector (matchLabels and matchExpressions, as Kubernetes
/// reads them): every requirement must hold; none selects every checker.
#[derive(Clone, Debug, Default)]
pub struct Selector {
    pub labels: BTreeMap<String, String>,
    pub expressions: Vec<Requirement>,
}

#[derive(Clone, Debug)]
pub enum Requirement {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

impl Selector {
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.labels.iter().all(|(k, v)| labels.get(k) == Some(v))
            && self.expressions.iter().all(|r| match r {
                Requirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
                Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
                Requirement::Exists(k) => labels.contains_key(k),
                Requirement::DoesNotExist(k) => !labels.contains_key(k),
            })
    }
}

/// The most requirements (labels and expressions) of a window's selector,
/// values of one expression, and characters of a key or value: every probe
/// of the namespace's checkers may match it, on the engine's threads.
pub const MAX_REQUIREMENTS: usize = 16;
pub const MAX_VALUES: usize = 32;
pub const MAX_LABEL_TEXT: usize = 317;

impl Selector {
    /// A LabelSelector as the API holds it; an operator it does not know
    /// (the API server refuses them) or a selector past the limits above
    /// is an error.
    pub fn from_api(s: &LabelSelector) -> Result<Selector, Invalid> {
        let labels = s.match_labels.as_ref().map_or(0, |m| m.len());
        let exprs = s.match_expressions.as_ref().map_or(0, |e| e.len());
        if labels + exprs > MAX_REQUIREMENTS {
            return Err(Invalid(format!(
                "spec.selector has {} requirements: at most {MAX_REQUIREMENTS} (matchLabels and matchExpressions together)",
                labels + exprs
            )));
        }
        let texts = s
            .match_labels
            .iter()
            .flatten()
            .flat_map(|(k, v)| [k, v])
            .chain(
                s.match_expressions
                    .iter()
                    .flatten()
                    .flat_map(|e| std::iter::once(&e.key).chain(e.values.iter().flatten())),
            );
        if texts.into_iter().any(|t| t.len() > MAX_LABEL_TEXT) {
            return Err(Invalid(format!(
                "spec.selector has a key or value longer than {MAX_LABEL_TEXT} characters, which no label can have"
            )));
        }
        let mut expressions = Vec::new();
        for e in s.match_expressions.iter().flatten() {
            let values = e.values.clone().unwrap_or_default();
            if values.len() > MAX_VALUES {
                return Err(Invalid(format!(
                    "spec.selector: the expression on {:?} has {} values: at most {MAX_VALUES}",
                    e.key,
                    values.len()
                )));
            }
            let key = e.key.clone();
            expressions.push(match e.operator.as_str() {
                "In" => Requirement::In(key, values),
                "NotIn" => Requirement::NotIn(key, values),
                "Exists" => Requirement::Exists(key),
                "DoesNotExist" => Requirement::DoesNotExist(key),
                other => {
                    return Err(Invalid(format!(
                        "spec.selector: operator {other:?} is not one of In, NotIn, Exists, DoesNotExist"
                    )));
                }
            });
        }
        Ok(Selector {
            labels: s.match_labels.clone().unwrap_or_default(),
            expressions,
        })
    }
}

/// One WebCheckerMaintenance.
#[derive(Clone, Debug)]
pub struct Window {
    pub name: Arc<str>,
    pub selector: Selector,
    pub when: When,
}

impl Window {
    /// A WebCheckerMaintenance's spec, checked: what its status says when
    /// it cannot be used (an unknown time zone, an object stored before the
    /// schema's rules).
    pub fn from_spec(name: &str, spec: &MaintenanceSpec) -> Result<Window, Invalid> {
        let selector = Selector::from_api(&spec.selector)?;
        let when = match (&spec.start, &spec.end, &spec.schedule) {
            (Some(start), Some(end), None) => {
                let at = |field: &str, text: &str| {
                    text.parse::<Timestamp>()
                        .map(|t| t.as_second())
                        .map_err(|_| {
                            Invalid(format!("spec.{field} {text:?} is not an RFC 3339 time"))
                        })
                };
                let (start, end) = (at("start", start)?, at("end", end)?);
                if end <= start {
                    return Err(Invalid("spec.end must be after spec.start".into()));
                }
                When::Once { start, end }
            }
            (None, None, Some(s)) => {
                let mut days = [false; 7];
                for d in &s.days {
                    days[d.index()] = true;
                }
                When::weekly(
                    days,
                    &s.at,
                    &s.duration,
                    s.time_zone.as_deref().unwrap_or(""),
                )?
            }
            _ => {
                return Err(Invalid(
                    "a WebCheckerMaintenance needs either start and end or schedule".into(),
                ));
            }
        };
        Ok(Window {
            name: name.into(),
            selector,
            when,
        })
    }
}

/// The most windows of a namespace that count: the first by name. A
/// namespace's editors cannot make every probe of theirs walk an
/// unbounded list.
pub const MAX_PER_NAMESPACE: usize = 32;

/// The windows of every namespace.
#[derive(Clone, Debug, Default)]
pub struct Calendar {
    windows: HashMap<String, Vec<Window>>,
}

impl Calendar {
    pub fn set(&mut self, namespace: &str, window: Window) {
        let list = self.windows.entry(namespace.to_string()).or_default();
        list.retain(|w| w.name != window.name);
        list.push(window);
        list.sort_by(|a, b| a.name.cmp(&b.name));
    }

    pub fn remove(&mut self, namespace: &str, name: &str) {
        if let Some(list) = self.windows.get_mut(namespace) {
            list.retain(|w| &*w.name != name);
            if list.is_empty() {
                self.windows.remove(namespace);
            }
        }
    }

    /// The window of `namespace` that covers a checker with `labels` at
    /// `now`, and when it closes: the first by name when several do.
    pub fn covering(
        &self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
        now: i64,
    ) -> Option<(&Arc<str>, i64)> {
        let list = self.windows.get(namespace)?;
        list.iter().take(MAX_PER_NAMESPACE).find_map(|w| {
            let until = w.when.open_until(now)?;
            w.selector.matches(labels).then_some((&w.name, until))
        })
    }

    /// Whether the window is past the first [`MAX_PER_NAMESPACE`] of its
    /// namespace, by name (it covers nothing).
    pub fn ignored(&self, namespace: &str, name: &str) -> bool {
        self.windows.get(namespace).is_some_and(|list| {
            list.iter()
                .position(|w| &*w.name == name)
                .is_some_and(|i| i >= MAX_PER_NAMESPACE)
        })
    }
}

#[cfg(test)]
mod tests;
