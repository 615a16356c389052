//! (c) The alerts of the failing checkers, and none for the healthy ones: a
//! move neither resolves an alert nor restarts its `for` timer.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::scenario::Run;

pub async fn failing_checkers_alert_and_healthy_ones_do_not(run: &Run) {
    let alerts = run.prom.api("/api/v1/alerts").await;
    let alerts = alerts["data"]["alerts"].as_array().unwrap().clone();
    let of = |alertname: &str, name: &str| -> Vec<Value> {
        alerts
            .iter()
            .filter(|a| {
                a["labels"]["alertname"] == alertname
                    && a["labels"]["namespace"] == run.ns.as_str()
                    && a["labels"]["name"] == name
            })
            .cloned()
            .collect()
    };
    let active_at = |a: &Value| -> f64 {
        let s = a["activeAt"].as_str().unwrap();
        chrono::DateTime::parse_from_rfc3339(s)
            .unwrap()
            .timestamp_millis() as f64
            / 1000.0
    };
    let mut down_alerts = BTreeMap::new();
    for n in run.group("down").iter().chain(run.group("sla").iter()) {
        let a = of("WebCheckerDown", n);
        assert_eq!(a.len(), 1, "one WebCheckerDown alert for {n}: {a:?}");
        let state = a[0]["state"].as_str().unwrap().to_string();
        assert!(state == "pending" || state == "firing", "{n}: {state}");
        let reason = if n.starts_with("down-") {
            "UnexpectedStatus"
        } else {
            "SlowResponse"
        };
        let desc = a[0]["annotations"]["description"].as_str().unwrap();
        assert!(
            desc.contains(&format!(
                "Most frequent failure reason over the last 10 minutes: {reason}."
            )),
            "{n}: {desc}"
        );
        down_alerts.insert(n.clone(), state);
        // A move neither resolves the alert nor restarts its `for` timer.
        if run.moved.contains(n) {
            assert!(
                active_at(&a[0]) < run.move_at,
                "{n} moved and its WebCheckerDown alert restarted: {}",
                a[0]
            );
        }
    }
    let moved_down: Vec<&String> = run
        .moved
        .iter()
        .filter(|n| n.starts_with("down-") || n.starts_with("sla-"))
        .collect();
    println!("WebCheckerDown: {down_alerts:?}; kept across the move: {moved_down:?}");
    for n in run.group("ok").iter().chain(run.group("slow").iter()) {
        assert!(of("WebCheckerDown", n).is_empty(), "{n} is healthy");
    }
    for n in run.group("slow") {
        let a = of("WebCheckerSlow", &n);
        assert!(
            a.iter().any(|a| a["labels"]["signal"] == "p90_latency"),
            "WebCheckerSlow p90_latency for {n}: {a:?}"
        );
    }
    for n in run.group("sla") {
        let a = of("WebCheckerSlow", &n);
        assert!(
            a.iter().any(|a| a["labels"]["signal"] == "slow_response"),
            "WebCheckerSlow slow_response for {n}: {a:?}"
        );
    }
    for n in run.group("ok").iter().chain(run.group("down").iter()) {
        assert!(of("WebCheckerSlow", n).is_empty(), "{n} answers fast");
    }
}
