//! The per-checker alerts, on the checkers `limited` probes (fleets.rs):
//! WebCheckerCertificateExpiring for the certificate that ends in 7 days and
//! not for the one that ends in 90, WebCheckerDown for the endpoint that
//! answers 503, WebCheckerSlow (p90_latency) for the one that answers after
//! 700 ms, both error-budget burns for the checker with an objective that
//! answers 503 (and neither for the one that answers 200). A checker whose
//! target fails inside a maintenance window gets none of them while the
//! window is open, and WebCheckerDown as soon as it closes (its wait
//! passed long before). (tests/observability drives Down and Slow through
//! a scale-out.)

use std::time::{Duration, Instant};

use crate::fleets::{FAR_DAYS, PLANNED, PLANNED_WINDOW, SOON_DAYS, Single};
use crate::rules::for_of;
use crate::watch::{Alerts, labels_of, unix_now};

const DAY: f64 = 86400.0;

/// When the window closes (Unix seconds), set by [`window_manifest`].
static CLOSES: std::sync::OnceLock<i64> = std::sync::OnceLock::new();

/// The window over the checkers labelled window=planned: open since a
/// minute ago, for `open` more.
pub fn window_manifest(open: Duration) -> String {
    let now = chrono::Utc::now();
    let at = |offset: i64| {
        (now + chrono::Duration::seconds(offset))
            .format("%Y-%m-%dT%H:%M:%SZ")
            .to_string()
    };
    CLOSES
        .set(now.timestamp() + open.as_secs() as i64)
        .expect("one window");
    format!(
        "apiVersion: test.network.io/v1alpha1\nkind: WebCheckerMaintenance\nmetadata: {{name: planned}}\n\
         spec: {{selector: {{matchLabels: {{window: planned}}}}, start: '{}', end: '{}'}}\n",
        at(-60),
        at(open.as_secs() as i64)
    )
}

/// When the window closes, as an instant of this process.
fn window_end() -> Instant {
    let end = *CLOSES.get().expect("the window was made");
    let left = end as f64 - unix_now();
    Instant::now() + Duration::from_secs_f64(left.max(0.0))
}

/// No alert for the planned checker while its window is open; then
/// WebCheckerDown at once (its wait passed long before the close).
async fn planned(s: &Single, alerts: &Alerts<'_>) {
    let closes = window_end();
    let ns = s.ns.clone();
    alerts.never("a checker in its maintenance window", move |a| {
        a.labels.get("namespace") == Some(&ns)
            && a.labels.get("name").map(String::as_str) == Some(PLANNED)
            && Instant::now() < closes
    });
    let labels = labels_of(&[
        ("namespace", &s.ns),
        ("name", PLANNED),
        ("severity", "warning"),
    ]);
    // The window's end is the fault this alert waits for.
    tokio::time::sleep_until(closes.into()).await;
    let fired = alerts
        .wait_firing(
            "a checker still down when its window closes",
            "WebCheckerDown",
            labels,
            closes - PLANNED_WINDOW,
            PLANNED_WINDOW,
        )
        .await;
    let late = fired.after.saturating_sub(PLANNED_WINDOW);
    assert!(
        late < for_of("WebCheckerDown"),
        "WebCheckerDown {late:?} after the window closed: its wait restarted"
    );
}

pub async fn drive(s: &Single, alerts: &Alerts<'_>) {
    tokio::join!(planned(s, alerts), others(s, alerts));
}

async fn others(s: &Single, alerts: &Alerts<'_>) {
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
