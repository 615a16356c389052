//! The engine's Kubernetes Events: Ready transitions and expiring
//! certificates, queued without waiting (crate::observe::events).

use super::*;

impl Engine {
    pub(super) fn emit(&self, key: &str, t: &Transition) {
        let (ready, reason, message) = (t.ready.as_str(), &t.reason, &t.message);
        let type_ = if t.ready == Truth::True {
            EventType::Normal
        } else {
            EventType::Warning
        };
        let ev = KubeEvent {
            type_,
            reason: reason.to_string(),
            note: Some(
                format!("Ready={ready}: {message}")
                    .chars()
                    .take(1000)
                    .collect(),
            ),
            action: "Probe".into(),
            secondary: None,
        };
        self.send_event(key, ev);
        info!(checker = %key, ready, reason, "Ready changed");
    }

    /// Warning event: CertificateExpiring turned True.
    pub(super) fn emit_certificate(&self, key: &str, message: &str) {
        let ev = KubeEvent {
            type_: EventType::Warning,
            reason: crate::engine::status::CERTIFICATE_EXPIRING.to_string(),
            note: Some(message.chars().take(1000).collect()),
            action: "Probe".into(),
            secondary: None,
        };
        self.send_event(key, ev);
        info!(checker = %key, "{message}");
    }

    /// Queues an Event without waiting: when the API server is slower than the
    /// transitions (an overload, a flood of new checkers), Events are the first
    /// thing to give up, and the namespace with the most waiting gives them
    /// up first. Drops are counted; the log names the namespace that lost one
    /// once per 1,000.
    fn send_event(&self, key: &str, ev: KubeEvent) {
        let Some(e) = self.entries.get(key) else {
            return;
        };
        if let Some(loser) = self.events.push(&e.namespace, (e.object_ref.clone(), ev)) {
            self.metrics.events_dropped.inc();
            let dropped = self.metrics.events_dropped.get();
            if dropped % 1000 == 1 {
                warn!(namespace = %loser, dropped, "event queue full; the namespace with the most Events waiting lost one (webchecker_events_dropped_total)");
            }
        }
    }
}
