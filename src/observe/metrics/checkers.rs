//! The per-checker families, written from a snapshot of [`CheckerSeries`]
//! into either format (exposition.rs). Labels of each series: `name`,
//! `namespace`, then the family's own, in the order the text format has
//! always had them.

use super::exposition::{Hist, Kind, Sink};
use super::{
    ALL_REASONS, CheckerSeries, HistogramOptions, PHASES, PROBE_BUCKETS, Snapshot, ZoneSeries,
    grpc, info,
};
use crate::probe::Reason;

fn render_gauge(
    out: &mut dyn Sink,
    checkers: &Snapshot,
    family: &'static str,
    help: &'static str,
    value: impl Fn(&CheckerSeries) -> Option<f64>,
) {
    out.family(family, Kind::Gauge, help);
    for (ns, name, c) in checkers {
        let Some(v) = value(c) else { continue };
        out.sample(&[("name", name), ("namespace", ns)], v);
    }
}

pub(super) fn render_checkers(out: &mut dyn Sink, checkers: &Snapshot, h: HistogramOptions) {
    if h.per_checker {
        render_duration_histogram(out, checkers, h);
    }
    render_probe_counts(out, checkers);
    render_gauge(
        out,
        checkers,
        "webchecker_up",
        "1 when the Ready condition is True",
        |c| Some(f64::from(u8::from(c.up))),
    );
    render_gauge(
        out,
        checkers,
        "webchecker_down_since_timestamp_seconds",
        "Unix time the Ready condition stopped being True, while it is not",
        |c| c.down_since.map(|t| t as f64),
    );
    render_gauge(
        out,
        checkers,
        "webchecker_dependency_down",
        "While Ready is not True: 1 when a dependency is down (spec.dependsOn), else 0",
        |c| c.down_since.map(|_| f64::from(u8::from(c.dependency_down))),
    );
    render_maintenance(out, checkers);
    render_gauge(
        out,
        checkers,
        "webchecker_last_probe_success",
        "1 when the last probe succeeded",
        |c| c.probed.then_some(f64::from(u8::from(c.last_success))),
    );
    render_gauge(
        out,
        checkers,
        "webchecker_last_status_code",
        "HTTP status code of the last probe, 0 when none",
        |c| c.probed.then_some(f64::from(c.last_code)),
    );
    render_gauge(
        out,
        checkers,
        "webchecker_last_success_timestamp_seconds",
        "Unix time of the last successful probe",
        |c| c.probed.then_some(c.last_success_ts),
    );
    render_gauge(
        out,
        checkers,
        "webchecker_certificate_expiry_timestamp_seconds",
        "Earliest notAfter of the server's certificate chain",
        |c| c.cert_expiry.map(|t| t as f64),
    );
    render_gauge(
        out,
        checkers,
        "webchecker_http_version",
        "HTTP version of the last probe's response (1, 1.1, 2), 0 when none",
        |c| c.probed.then_some(f64::from(c.http_version) / 10.0),
    );
    render_tls(out, checkers);
    grpc::render(out, checkers);
    info::render_info(out, checkers);
    render_phases(out, checkers);
    render_zones(out, checkers);
    super::slo::render(out, checkers);
}

/// The zone series of checkers with spec.locations, exported by the owner
/// only (it holds every zone's answer), so sums never count a probe twice.
fn render_zones(out: &mut dyn Sink, checkers: &Snapshot) {
    render_gauge(
        out,
        checkers,
        "webchecker_zones_asked",
        "spec.locations.zones: the zones asked to probe this checker every interval",
        |c| c.zones_asked.map(f64::from),
    );
    type Value = fn(&ZoneSeries) -> Vec<(&'static str, f64)>;
    let families: [(&str, Kind, &str, Value); 3] = [
        (
            "webchecker_zone_probe_success",
            Kind::Gauge,
            "1 when the last probe from this zone succeeded (spec.locations); absent while its replica gives no result",
            |z| {
                z.last
                    .map(|(ok, _)| ("", f64::from(u8::from(ok))))
                    .into_iter()
                    .collect()
            },
        ),
        (
            "webchecker_zone_probe_duration_seconds",
            Kind::Gauge,
            "Duration of the last probe from this zone (spec.locations)",
            |z| z.last.map(|(_, s)| ("", s)).into_iter().collect(),
        ),
        (
            "webchecker_zone_probes_total",
            Kind::Counter,
            "Probes from this zone (spec.locations), by result",
            |z| {
                vec![
                    ("success", z.successes as f64),
                    ("failure", z.failures as f64),
                ]
            },
        ),
    ];
    for (family, kind, help, value) in families {
        out.family(family, kind, help);
        for (ns, name, c) in checkers {
            for z in &c.zones {
                for (result, v) in value(z) {
                    if result.is_empty() {
                        out.sample(&[("name", name), ("namespace", ns), ("zone", &z.zone)], v);
                    } else {
                        out.sample(
                            &[
                                ("name", name),
                                ("namespace", ns),
                                ("result", result),
                                ("zone", &z.zone),
                            ],
                            v,
                        );
                    }
                }
            }
        }
    }
}

/// `webchecker_probe_duration_seconds` (`--per-checker-histogram`): classic
/// buckets unless `--classic-histograms=false` dropped them beside native ones.
fn render_duration_histogram(out: &mut dyn Sink, checkers: &Snapshot, h: HistogramOptions) {
    out.family(
        "webchecker_probe_duration_seconds",
        Kind::Histogram,
        "Whole probe duration",
    );
    for (ns, name, c) in checkers.iter().filter(|(_, _, c)| c.probed) {
        let count = c.buckets.iter().sum();
        let hist = Hist {
            count,
            sum: c.duration_sum,
            classic: h
                .classic()
                .then_some((PROBE_BUCKETS, &c.buckets[..PROBE_BUCKETS.len()])),
            native: h.native.then_some(&c.native),
        };
        out.histogram(&[("name", name), ("namespace", ns)], &hist);
    }
}

/// `webchecker_probes_total`, by result and reason.
fn render_probe_counts(out: &mut dyn Sink, checkers: &Snapshot) {
    out.family(
        "webchecker_probes_total",
        Kind::Counter,
        "Probes done, by result and reason",
    );
    for (ns, name, c) in checkers {
        for (i, n) in c.probes.iter().enumerate().filter(|(_, n)| **n > 0) {
            let reason = ALL_REASONS[i];
            let result = if reason == Reason::ProbeSucceeded {
                "success"
            } else {
                "failure"
            };
            out.sample(
                &[
                    ("name", name),
                    ("namespace", ns),
                    ("reason", reason.as_str()),
                    ("result", result),
                ],
                *n as f64,
            );
        }
    }
}

/// `webchecker_probe_phase_duration_seconds` of the last probe.
fn render_phases(out: &mut dyn Sink, checkers: &Snapshot) {
    out.family(
        "webchecker_probe_phase_duration_seconds",
        Kind::Gauge,
        "Phase durations of the last probe",
    );
    for (ns, name, c) in checkers.iter().filter(|(_, _, c)| c.probed) {
        for (phase, v) in PHASES.iter().zip(c.phases) {
            out.sample(&[("name", name), ("namespace", ns), ("phase", phase)], v);
        }
    }
}

/// `webchecker_tls_info` and `webchecker_certificate_info`: at most
/// 1 + [`crate::probe::MAX_CHAIN_INFO`] series per checker, replaced (not
/// added to) when the server's certificates change.
fn render_tls(out: &mut dyn Sink, checkers: &Snapshot) {
    out.family(
        "webchecker_tls_info",
        Kind::Gauge,
        "TLS version and cipher suite of the last handshake; always 1",
    );
    for (ns, name, c) in checkers {
        let Some(t) = &c.tls else { continue };
        out.sample(
            &[
                ("name", name),
                ("namespace", ns),
                ("version", t.version),
                ("cipher", t.cipher),
            ],
            1.0,
        );
    }
    out.family(
        "webchecker_certificate_info",
        Kind::Gauge,
        "Certificates of the server's chain (position 0 is the leaf) at the last handshake; always 1",
    );
    for (ns, name, c) in checkers {
        let Some(chain) = c.tls.as_ref().and_then(|t| t.chain.as_ref()) else {
            continue;
        };
        for (i, cert) in chain.certificates.iter().enumerate() {
            let not_after = chrono::DateTime::from_timestamp(cert.not_after, 0)
                .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
                .unwrap_or_default();
            let position = i.to_string();
            out.sample(
                &[
                    ("name", name),
                    ("namespace", ns),
                    ("position", &position),
                    ("subject", &cert.subject),
                    ("issuer", &cert.issuer),
                    ("serial", &cert.serial),
                    ("fingerprint_sha256", &cert.fingerprint_sha256),
                    ("not_after", &not_after),
                ],
                1.0,
            );
        }
    }
}

/// `webchecker_maintenance`: while a window covers the checker, the time
/// it closes (the shipped alerts stay silent until then).
fn render_maintenance(out: &mut dyn Sink, checkers: &Snapshot) {
    out.family(
        "webchecker_maintenance",
        Kind::Gauge,
        "Unix time the maintenance window that covers the checker closes, while one does",
    );
    for (ns, name, c) in checkers {
        let Some((window, until)) = &c.window else {
            continue;
        };
        out.sample(
            &[("name", name), ("namespace", ns), ("window", window)],
            *until as f64,
        );
    }
}
