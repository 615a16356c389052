//! The series of gRPC health checks, as blackbox_exporter's grpc prober
//! names them (docs/metrics.md maps one onto the other):
//! `webchecker_grpc_status_code` (`probe_grpc_status_code`) and
//! `webchecker_grpc_healthcheck_response` (`probe_grpc_healthcheck_response`,
//! one series per serving status, 1 on the one answered).

use super::Snapshot;
use super::exposition::{Kind, Sink};
use crate::probe::Serving;

pub(super) fn render(out: &mut dyn Sink, checkers: &Snapshot) {
    out.family(
        "webchecker_grpc_status_code",
        Kind::Gauge,
        "gRPC status code of the last health check's answer (0 OK); absent when no answer came",
    );
    for (ns, name, c) in checkers {
        if let Some(g) = c.grpc {
            out.sample(&[("name", name), ("namespace", ns)], f64::from(g.status));
        }
    }
    out.family(
        "webchecker_grpc_healthcheck_response",
        Kind::Gauge,
        "1 on the serving status the last gRPC health check answered, 0 on the others",
    );
    for (ns, name, c) in checkers {
        let Some(answered) = c.grpc.and_then(|g| g.serving) else {
            continue;
        };
        for s in Serving::ALL {
            out.sample(
                &[
                    ("name", name),
                    ("namespace", ns),
                    ("serving_status", s.as_str()),
                ],
                f64::from(u8::from(s == answered)),
            );
        }
    }
}
