//! Prometheus' alerts as the test sees them (/api/v1/alerts of both
//! versions, 2.42 and 3.x, evaluating the same rules over the same
//! replicas): waiting for one to fire on both with exactly the expected
//! labels, and the alerts that must never fire, checked at every look.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::prom::{Prometheus, labels, num};
use crate::rules::{for_of, waits_in_expression};

pub type Labels = BTreeMap<String, String>;

/// Labels from pairs.
pub fn labels_of(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Scrapes and evaluations run each second; this covers a few of each, and a
/// loaded machine.
const SLACK: Duration = Duration::from_secs(10);

/// One alert as Prometheus lists it.
#[derive(Clone, Debug)]
pub struct Alert {
    pub name: String,
    /// Without `alertname`.
    pub labels: Labels,
    pub state: String,
    pub value: f64,
    pub annotations: Labels,
    /// Unix seconds at which it went pending.
    pub active_at: f64,
}

/// An alert seen firing, for the report.
#[derive(Clone, Debug)]
pub struct Fired {
    pub alert: Alert,
    /// From the fault to the first look that saw it firing.
    pub after: Duration,
}

type Matcher = Box<dyn Fn(&Alert) -> bool + Send + Sync>;

pub struct Alerts<'a> {
    /// The Prometheus of WEBCHECKER_PROMETHEUS (queries go there).
    pub prom: &'a Prometheus,
    /// Both: an alert counts as fired once it fires on each.
    proms: [&'a Prometheus; 2],
    never: Mutex<Vec<(String, Matcher)>>,
    fired: Mutex<Vec<Fired>>,
}

impl<'a> Alerts<'a> {
    pub fn new(proms: [&'a Prometheus; 2]) -> Self {
        Alerts {
            prom: proms[0],
            proms,
            never: Mutex::new(Vec::new()),
            fired: Mutex::new(Vec::new()),
        }
    }

    /// From now on, no firing alert may match `m`; `what` names the rule in
    /// the failure.
    pub fn never(&self, what: &str, m: impl Fn(&Alert) -> bool + Send + Sync + 'static) {
        self.never
            .lock()
            .unwrap()
            .push((what.to_string(), Box::new(m)));
    }

    /// Every alert now on both. Panics when one that must never fire is
    /// firing on either.
    pub async fn now(&self) -> Vec<Alert> {
        let mut all = Vec::new();
        for prom in self.proms {
            all.extend(self.now_on(prom).await);
        }
        all
    }

    /// Every alert now on `prom`; panics as [`Alerts::now`].
    async fn now_on(&self, prom: &Prometheus) -> Vec<Alert> {
        let v = prom.api("/api/v1/alerts").await;
        assert_eq!(v["status"], "success", "{}: {v}", prom.version.name());
        let alerts: Vec<Alert> = v["data"]["alerts"]
            .as_array()
            .expect("alerts")
            .iter()
            .map(alert)
            .collect();
        for (what, m) in self.never.lock().unwrap().iter() {
            if let Some(a) = alerts.iter().find(|a| a.state == "firing" && m(a)) {
                panic!("{what}: {} fired on {}: {a:?}", a.name, prom.version.name());
            }
        }
        alerts
    }

    /// Waits until `name` fires with exactly `want` (besides `alertname`) on
    /// both Prometheus versions, on each at most `cause` (how long the fault
    /// made at `fault` takes to show in the metrics) plus the alert's `for`
    /// plus a few scrape and evaluation intervals after `fault`; checks that
    /// it was pending for its whole `for` first (an alert whose wait is in
    /// its expression: that the wait passed since `fault`) and that its
    /// annotations rendered. `what` names the case. Returns the later of the two.
    pub async fn wait_firing(
        &self,
        what: &str,
        name: &str,
        want: Labels,
        fault: Instant,
        cause: Duration,
    ) -> Fired {
        let mut last = None;
        for prom in self.proms {
            last = Some(
                self.wait_firing_on(prom, what, name, &want, fault, cause)
                    .await,
            );
        }
        let fired = last.expect("two Prometheus");
        self.fired.lock().unwrap().push(fired.clone());
        fired
    }

    async fn wait_firing_on(
        &self,
        prom: &Prometheus,
        what: &str,
        name: &str,
        want: &Labels,
        fault: Instant,
        cause: Duration,
    ) -> Fired {
        let on = prom.version.name();
        let hold = for_of(name);
        let bound = cause + hold + SLACK;
        let mut last = Vec::new();
        let deadline = tokio::time::Instant::from_std(fault + bound);
        let found = tokio::time::timeout_at(deadline, async {
            loop {
                let all = self.now_on(prom).await;
                if let Some(a) = all
                    .iter()
                    .find(|a| a.name == name && a.state == "firing" && a.labels == *want)
                {
                    return a.clone();
                }
                last = all.into_iter().filter(|a| a.name == name).collect();
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
        .await;
        let alert = found.unwrap_or_else(|_| {
            panic!(
                "{what}: {name} {want:?} not firing on {on} within {bound:?} (cause {cause:?} + for \
                 {hold:?} + {SLACK:?}); its alerts at the end: {last:?}"
            )
        });
        if waits_in_expression(name) {
            // No `for`, so never pending: its wait, at least, has passed
            // since Ready stopped being True, as the owner says.
            let q = format!(
                "max(webchecker_down_since_timestamp_seconds{{namespace=\"{}\", name=\"{}\"}})",
                want["namespace"], want["name"]
            );
            let since = prom.samples(&q).await;
            let down_for = unix_now() - crate::prom::single(&since, &q);
            assert!(
                down_for + 1.0 >= hold.as_secs_f64(),
                "{what}: {name} fired on {on} {down_for:.1}s after Ready stopped being True, before its wait of {hold:?}"
            );
        } else {
            let pending_for = unix_now() - alert.active_at;
            assert!(
                pending_for + 0.5 >= hold.as_secs_f64(),
                "{what}: {name} fired on {on} {pending_for:.1}s after it went pending, before its `for` of {hold:?}"
            );
        }
        check_annotations(what, &alert);
        let fired = Fired {
            alert,
            after: fault.elapsed(),
        };
        println!(
            "{what}: {name} firing on {on} {:.1?} after the fault (for {hold:?}), value {}, labels {:?}",
            fired.after, fired.alert.value, fired.alert.labels
        );
        fired
    }

    pub fn fired(&self) -> Vec<Fired> {
        self.fired.lock().unwrap().clone()
    }
}

fn alert(v: &Value) -> Alert {
    let mut labels = labels(&v["labels"]);
    let name = labels.remove("alertname").unwrap_or_default();
    let active_at = v["activeAt"]
        .as_str()
        .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.timestamp_millis() as f64 / 1000.0)
        .unwrap_or(f64::NAN);
    Alert {
        name,
        labels,
        state: v["state"].as_str().unwrap_or_default().to_string(),
        value: num(&v["value"]),
        annotations: crate::prom::labels(&v["annotations"]),
        active_at,
    }
}

/// The annotations rendered with the alert's real labels and value: a
/// summary naming what the alert is about, a description, the runbook's
/// section of this alert, and no template error.
fn check_annotations(what: &str, a: &Alert) {
    let get = |k: &str| a.annotations.get(k).map(String::as_str).unwrap_or_default();
    let (summary, description) = (get("summary"), get("description"));
    for (k, text) in &a.annotations {
        assert!(
            !text.contains("error expanding") && !text.contains("<no value>"),
            "{what}: {} annotation {k}: {text}",
            a.name
        );
    }
    assert!(
        !description.is_empty(),
        "{what}: {} has no description",
        a.name
    );
    // What the alert is about is in its summary (a replica by its instance).
    for label in ["instance", "job", "name", "reason", "source"] {
        if let Some(v) = a.labels.get(label)
            && !(label == "job" && a.labels.contains_key("instance"))
        {
            assert!(
                summary.contains(v.as_str()),
                "{what}: {} summary {summary:?} lacks {label} {v}",
                a.name
            );
        }
    }
    let section = format!("#{}", a.name.to_lowercase());
    assert!(
        get("runbook_url").ends_with(&section),
        "{what}: {} runbook_url {:?}",
        a.name,
        get("runbook_url")
    );
}

pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}
