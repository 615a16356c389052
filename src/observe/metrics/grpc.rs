//! The series of gRPC health checks, as blackbox_exporter's grpc prober
//! names them (docs/metrics.md maps one onto the other):
//! `webchecker_grpc_status_code` (`probe_grpc_status_code`) and
//! `webchecker_grpc_healthcheck_response` (`probe_grpc_healthcheck_response`,
//! one series per serving status, 1 on the one answered).

use std::fmt::Write as _;

use super::{Snapshot, push_header, push_series_start, render_gauge};
use crate::probe::Serving;

pub(super) fn render(out: &mut String, checkers: &Snapshot) {
    render_gauge(
        out,
        checkers,
        "webchecker_grpc_status_code",
        "gRPC status code of the last health check's answer (0 OK); absent when no answer came",
        |c| c.grpc.map(|g| f64::from(g.status)),
    );
    let family = "webchecker_grpc_healthcheck_response";
    let mut header = false;
    for (ns, name, c) in checkers {
        let Some(answered) = c.grpc.and_then(|g| g.serving) else {
            continue;
        };
        if !header {
            push_header(
                out,
                family,
                "gauge",
                "1 on the serving status the last gRPC health check answered, 0 on the others",
            );
            header = true;
        }
        for s in Serving::ALL {
            push_series_start(out, family, ns, name);
            let _ = writeln!(
                out,
                ",serving_status=\"{}\"}} {}",
                s.as_str(),
                u8::from(s == answered)
            );
        }
    }
}
