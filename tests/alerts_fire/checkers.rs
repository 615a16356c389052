//! The per-checker alerts, on the checkers `limited` probes (fleets.rs):
//! WebCheckerCertificateExpiring for the certificate that ends in 7 days and
//! not for the one that ends in 90, WebCheckerDown for the endpoint that
//! answers 503, WebCheckerSlow (p90_latency) for the one that answers after
//! 700 ms, both error-budget burns for the checker with an objective that
//! answers 503 (and neither for the one that answers 200). (tests/observability drives Down and Slow through a scale-out.)

use std::time::{Duration, Instant};

use crate::fleets::{FAR_DAYS, SOON_DAYS, Single};
use crate::watch::{Alerts, labels_of, unix_now};

const DAY: f64 = 86400.0;

pub async fn drive(s: &Single, alerts: &Alerts<'_>) {
    let ns = s.ns.clone();
    alerts.never(
        &format!("a certificate valid {FAR_DAYS} more days"),
        move |a| {
            a.name == "WebCheckerCertificateExpiring"
                && a.labels.get("namespace") == Some(&ns)
                && a.labels.get("name").map(String::as_str) == Some("cert-far")
        },
    );
    let checker = |name: &str, extra: &[(&str, &str)]| {
        let mut l = labels_of(&[
            ("namespace", &s.ns),
            ("name", name),
            ("severity", "warning"),
        ]);
        l.extend(labels_of(extra));
        l
    };
    // The checkers probe from the start: the waits count from now.
    let t = Instant::now();
    let soon = format!("a certificate ending in {SOON_DAYS} days");
    let (cert, down, _, _, _) = tokio::join!(
        alerts.wait_firing(
            &soon,
            "WebCheckerCertificateExpiring",
            checker("cert-soon", &[]),
            t,
            // The first TLS handshake.
            Duration::from_secs(5),
        ),
        alerts.wait_firing(
            "an endpoint answering 503",
            "WebCheckerDown",
            checker("down-0", &[]),
            t,
            // Not Ready after failureThreshold probes at 2 s.
            Duration::from_secs(8),
        ),
        alerts.wait_firing(
            "an endpoint answering after 700 ms",
            "WebCheckerSlow",
            checker("slow-0", &[("signal", "p90_latency")]),
            t,
            // Two probes at 3 s make a rate.
            Duration::from_secs(8),
        ),
        // Every probe of slo-0 fails: a thousand times its allowance, over
        // every window (the short ones confirm at once).
        alerts.wait_firing(
            "a checker with an objective failing every probe",
            "WebCheckerErrorBudgetBurn",
            checker("slo-0", &[("severity", "critical")]),
            t,
            // Two probes at 2 s counted make a rate.
            Duration::from_secs(8),
        ),
        alerts.wait_firing(
            "a checker with an objective failing every probe",
            "WebCheckerErrorBudgetBurnSlow",
            checker("slo-0", &[]),
            t,
            Duration::from_secs(8),
        ),
    );
    // The value is the time left: notAfter (midnight UTC, SOON_DAYS from
    // today) minus now.
    let left = cert.alert.value / DAY;
    assert!(
        left > (SOON_DAYS - 1) as f64 && left <= SOON_DAYS as f64,
        "time left {left:.2} days (now {})",
        unix_now()
    );
    let description = &down.alert.annotations["description"];
    assert!(
        description
            .contains("Most frequent failure reason over the last 10 minutes: UnexpectedStatus."),
        "{description}"
    );
}
