//! Kubernetes Events of the engine: Ready transitions and expiring
//! certificates, queued without waiting and published by one task.

use super::*;

impl Engine {
    pub(super) fn emit(&self, key: &str, ready: &str, reason: &str, message: &str) {
        let Some(e) = self.entries.get(key) else {
            return;
        };
        let type_ = if ready == "True" {
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
        let label = if ready == "True" { "Normal" } else { "Warning" };
        self.send_event(key, e.object_ref.clone(), ev, label, reason);
        info!(checker = %key, ready, reason, "Ready changed");
    }

    /// Warning event: CertificateExpiring turned True.
    pub(super) fn emit_certificate(&self, key: &str, message: &str) {
        let Some(e) = self.entries.get(key) else {
            return;
        };
        let reason = crate::status::CERTIFICATE_EXPIRING;
        let ev = KubeEvent {
            type_: EventType::Warning,
            reason: reason.to_string(),
            note: Some(message.chars().take(1000).collect()),
            action: "Probe".into(),
            secondary: None,
        };
        self.send_event(key, e.object_ref.clone(), ev, "Warning", reason);
        info!(checker = %key, "{message}");
    }

    /// Queues an Event without waiting: when the API server is slower than the
    /// transitions (an overload, a flood of new checkers), Events are the first
    /// thing to give up. Drops are counted; the log says so once per 1,000.
    fn send_event(
        &self,
        key: &str,
        object_ref: k8s_openapi::api::core::v1::ObjectReference,
        ev: KubeEvent,
        type_: &str,
        reason: &str,
    ) {
        match self.events.try_send((object_ref, ev)) {
            Ok(()) => self
                .metrics
                .events
                .with_label_values(&[type_, reason])
                .inc(),
            Err(_) => {
                self.metrics.events_dropped.inc();
                let dropped = self.metrics.events_dropped.get();
                if dropped % 1000 == 1 {
                    warn!(checker = %key, dropped, "event queue full; Events dropped (webchecker_events_dropped_total)");
                }
            }
        }
    }
}

/// Publishes Kubernetes Events from a bounded queue.
pub async fn run_events(
    recorder: Recorder,
    mut rx: mpsc::Receiver<(k8s_openapi::api::core::v1::ObjectReference, KubeEvent)>,
) {
    while let Some((reference, ev)) = rx.recv().await {
        if let Err(e) = recorder.publish(&ev, &reference).await {
            debug!(error = %e, "event not published");
        }
    }
}
