use super::*;
use crate::observe::metrics::{HistogramOptions, Metrics};
use crate::probe::{Outcome, Reason};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// What Prometheus 3.16 sends with `scrape_native_histograms: true`
/// (scrape.acceptHeader over config.DefaultProtoFirstScrapeProtocols; these
/// two were captured from its scrapes).
const PROM3_NATIVE: &str = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.7,application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
/// And without it (config.DefaultScrapeProtocols).
const PROM3_CLASSIC: &str = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.7,application/openmetrics-text;version=0.0.1;q=0.6,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.5,text/plain;version=0.0.4;q=0.4,*/*;q=0.3";

#[test]
fn the_format_follows_accept() {
    let proto = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited";
    let cases: &[(&[&str], Format)] = &[
        (&[], Format::Text),
        (&[PROM3_NATIVE], Format::Protobuf),
        (&[PROM3_CLASSIC], Format::Text),
        (&["*/*"], Format::Text),
        (&[proto], Format::Protobuf),
        // Weights decide, not the order; equal weights: the earlier.
        (&[&format!("text/plain;q=0.9, {proto}")], Format::Protobuf),
        (&[&format!("text/plain;q=0.9, {proto};q=0.5")], Format::Text),
        (&[&format!("text/plain, {proto}")], Format::Text),
        (&[&format!("{proto}, text/plain")], Format::Protobuf),
        // Not acceptable at all.
        (&[&format!("{proto};q=0")], Format::Text),
        (&[&format!("{proto};q=zero")], Format::Text),
        // Other protobuf messages or encodings are not this format.
        (
            &[
                "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=text",
            ],
            Format::Text,
        ),
        (
            &["application/vnd.google.protobuf;proto=other.Message;encoding=delimited"],
            Format::Text,
        ),
        // Unknown types are passed over; case and spaces do not matter;
        // several Accept headers are one list.
        (
            &[
                "image/png;q=1, APPLICATION/VND.GOOGLE.PROTOBUF; proto=io.prometheus.client.MetricFamily; encoding=delimited; q=0.5",
            ],
            Format::Protobuf,
        ),
        (&["text/html", &format!("{proto};q=0.1")], Format::Protobuf),
        (
            &["text/plain;q=0.2", &format!("{proto};q=0.1")],
            Format::Text,
        ),
    ];
    for (headers, want) in cases {
        assert_eq!(negotiate(headers.iter().copied()), *want, "{headers:?}");
    }
}

/// A protobuf field as read back.
#[derive(Debug, Clone, Copy)]
enum Field<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
}

fn varint(buf: &mut &[u8]) -> u64 {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let (b, rest) = buf.split_first().expect("a varint's bytes");
        *buf = rest;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return v;
        }
    }
    panic!("varint too long")
}

fn fields(mut buf: &[u8]) -> Vec<(u64, Field<'_>)> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        let key = varint(&mut buf);
        let f = match key & 7 {
            0 => Field::Varint(varint(&mut buf)),
            1 => {
                let (v, rest) = buf.split_at(8);
                buf = rest;
                Field::Fixed64(u64::from_le_bytes(v.try_into().unwrap()))
            }
            2 => {
                let n = varint(&mut buf) as usize;
                let (v, rest) = buf.split_at(n);
                buf = rest;
                Field::Bytes(v)
            }
            w => panic!("wire type {w}"),
        };
        out.push((key >> 3, f));
    }
    out
}

fn bytes_of<'a>(fs: &[(u64, Field<'a>)], n: u64) -> Vec<&'a [u8]> {
    fs.iter()
        .filter_map(|(k, f)| match f {
            Field::Bytes(b) if *k == n => Some(*b),
            _ => None,
        })
        .collect()
}

fn uint_of(fs: &[(u64, Field<'_>)], n: u64) -> Option<u64> {
    fs.iter().find_map(|(k, f)| match f {
        Field::Varint(v) if *k == n => Some(*v),
        _ => None,
    })
}

fn double_of(fs: &[(u64, Field<'_>)], n: u64) -> Option<f64> {
    fs.iter().find_map(|(k, f)| match f {
        Field::Fixed64(v) if *k == n => Some(f64::from_bits(*v)),
        _ => None,
    })
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// A decoded Metric: its labels and its fields.
type Decoded<'a> = (Vec<(String, String)>, Vec<(u64, Field<'a>)>);

/// A decoded family: name, type, metrics.
struct Family<'a> {
    name: String,
    kind: u64,
    metrics: Vec<Decoded<'a>>,
}

fn decode(mut body: &[u8]) -> Vec<Family<'_>> {
    let mut out = Vec::new();
    while !body.is_empty() {
        let n = varint(&mut body) as usize;
        let (msg, rest) = body.split_at(n);
        body = rest;
        let fs = fields(msg);
        let name = String::from_utf8(bytes_of(&fs, 1)[0].to_vec()).unwrap();
        let metrics = bytes_of(&fs, 4)
            .into_iter()
            .map(|m| {
                let mf = fields(m);
                let labels = bytes_of(&mf, 1)
                    .into_iter()
                    .map(|l| {
                        let lf = fields(l);
                        let s = |i| String::from_utf8(bytes_of(&lf, i)[0].to_vec()).unwrap();
                        (s(1), s(2))
                    })
                    .collect();
                (labels, mf)
            })
            .collect();
        out.push(Family {
            name,
            kind: uint_of(&fs, 3).unwrap_or(0),
            metrics,
        });
    }
    out
}

fn probe(ms: u64) -> Outcome {
    Outcome {
        duration: Duration::from_millis(ms),
        ..crate::observe::metrics::tests::outcome(Reason::ProbeSucceeded)
    }
}

fn metrics(native: bool, keep_classic: bool) -> Metrics {
    let m = Metrics::with_histograms(
        "r0",
        HistogramOptions {
            per_checker: true,
            native,
            keep_classic,
        },
    );
    let info = Arc::new(crate::observe::metrics::CheckerInfo::default());
    for ms in [3, 40, 41, 45, 120, 120, 900] {
        m.record_probe("default", "web", &info, &probe(ms), true);
    }
    m.record_probe("other", "api\"x", &info, &probe(7), true);
    crate::observe::metrics::family::gauge(
        m.registry(),
        (
            "webchecker_owned_checkers",
            "Checkers this replica owns and probes",
        ),
    )
    .set(2);
    m
}

/// The native buckets of a Histogram message: (index, count) from spans
/// and deltas, with schema and zero bucket.
fn native_buckets(h: &[(u64, Field<'_>)]) -> (i64, f64, u64, Vec<(i64, i64)>) {
    let schema = unzigzag(uint_of(h, 5).expect("a schema"));
    let threshold = double_of(h, 6).expect("a zero threshold");
    let zero = uint_of(h, 7).unwrap_or(0);
    let mut deltas = Vec::new();
    for packed in bytes_of(h, 13) {
        let mut p = packed;
        while !p.is_empty() {
            deltas.push(unzigzag(varint(&mut p)));
        }
    }
    let mut buckets = Vec::new();
    let (mut index, mut count, mut d) = (0i64, 0i64, deltas.into_iter());
    for (i, span) in bytes_of(h, 12).into_iter().enumerate() {
        let sf = fields(span);
        let offset = unzigzag(uint_of(&sf, 1).unwrap_or(0));
        index = if i == 0 { offset } else { index + 1 + offset };
        for j in 0..uint_of(&sf, 2).unwrap_or(0) as i64 {
            count += d.next().expect("a delta per bucket");
            buckets.push((index + j, count));
        }
        index += uint_of(&sf, 2).unwrap_or(0) as i64 - 1;
    }
    (schema, threshold, zero, buckets)
}

#[test]
fn native_histograms_round_trip_through_protobuf() {
    let body = metrics(true, true).render_protobuf();
    let families = decode(&body);
    let names: Vec<&str> = families.iter().map(|f| f.name.as_str()).collect();
    assert!(
        names.contains(&"webchecker_owned_checkers"),
        "registry families too: {names:?}"
    );
    assert!(names.contains(&"webchecker_up"), "{names:?}");
    let f = families
        .iter()
        .find(|f| f.name == "webchecker_probe_duration_seconds")
        .expect("the histogram family");
    assert_eq!(f.kind, 4, "HISTOGRAM");
    let (labels, m) = f
        .metrics
        .iter()
        .find(|(l, _)| l.contains(&("name".into(), "web".into())))
        .expect("the checker's histogram");
    assert_eq!(
        labels,
        &[
            ("name".into(), "web".into()),
            ("namespace".into(), "default".into())
        ]
    );
    let h = fields(bytes_of(m, 7)[0]);
    assert_eq!(uint_of(&h, 1), Some(7));
    let sum = double_of(&h, 2).unwrap();
    assert!((sum - 1.269).abs() < 1e-9, "{sum}");
    let (schema, threshold, zero, buckets) = native_buckets(&h);
    assert_eq!((schema, threshold, zero), (3, 1.0 / 1_048_576.0, 0));
    assert_eq!(buckets.iter().map(|b| b.1).sum::<i64>(), 7);
    // Each duration is in the bucket (2^((k-1)/8), 2^(k/8)].
    for (ms, n) in [(3, 1), (40, 1), (41, 1), (45, 1), (120, 2), (900, 1)] {
        let v = ms as f64 / 1000.0;
        let k = (v.log2() * 8.0).ceil() as i64;
        assert!(buckets.contains(&(k, n)), "{v} in bucket {k}: {buckets:?}");
    }
    // Classic buckets kept beside (cumulative, +Inf left out as client_golang does).
    let classic: Vec<(u64, f64)> = bytes_of(&h, 3)
        .into_iter()
        .map(|b| {
            let bf = fields(b);
            (uint_of(&bf, 1).unwrap_or(0), double_of(&bf, 2).unwrap())
        })
        .collect();
    assert_eq!(classic.len(), 11);
    assert_eq!(classic[0], (1, 0.005));
    assert_eq!(classic[4], (4, 0.1));
    assert_eq!(classic[10], (7, 10.0));
}

#[test]
fn classic_buckets_can_be_dropped_beside_native_ones() {
    let m = metrics(true, false);
    let families_body = m.render_protobuf();
    let families = decode(&families_body);
    let f = families
        .iter()
        .find(|f| f.name == "webchecker_probe_duration_seconds")
        .unwrap();
    for (_, m) in &f.metrics {
        let h = fields(bytes_of(m, 7)[0]);
        assert!(bytes_of(&h, 3).is_empty(), "no classic buckets");
        assert!(!native_buckets(&h).3.is_empty());
    }
    // The text format has only +Inf, _sum and _count then (as client_golang).
    let text = m.render();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| {
            l.starts_with("webchecker_probe_duration_seconds") && l.contains("name=\"web\"")
        })
        .collect();
    // The sum as record_probe adds it up (1.269 give or take an ulp).
    let sum: f64 = [3, 40, 41, 45, 120, 120, 900]
        .iter()
        .map(|ms| Duration::from_millis(*ms).as_secs_f64())
        .sum();
    assert_eq!(
        lines,
        [
            "webchecker_probe_duration_seconds_bucket{name=\"web\",namespace=\"default\",le=\"+Inf\"} 7".to_string(),
            format!("webchecker_probe_duration_seconds_sum{{name=\"web\",namespace=\"default\"}} {sum}"),
            "webchecker_probe_duration_seconds_count{name=\"web\",namespace=\"default\"} 7".to_string(),
        ]
    );
}

#[test]
fn without_native_histograms_protobuf_carries_classic_only() {
    let body = metrics(false, true).render_protobuf();
    let families = decode(&body);
    let f = families
        .iter()
        .find(|f| f.name == "webchecker_probe_duration_seconds")
        .unwrap();
    let h = fields(bytes_of(&f.metrics[0].1, 7)[0]);
    assert_eq!(bytes_of(&h, 3).len(), 11);
    assert!(uint_of(&h, 5).is_none() && double_of(&h, 6).is_none() && bytes_of(&h, 12).is_empty());
}

/// Every sample of the protobuf exposition (histograms aside) is the text
/// exposition's sample of the same series, and the other way round.
#[test]
fn protobuf_and_text_hold_the_same_samples() {
    let m = metrics(true, true);
    let text = m.render();
    let body = m.render_protobuf();
    let mut from_text = BTreeMap::new();
    let mut histogram_names = Vec::new();
    for line in text.lines() {
        if let Some(h) = line
            .strip_prefix("# TYPE ")
            .and_then(|l| l.strip_suffix(" histogram"))
        {
            histogram_names.push(h.to_string());
        }
        if line.starts_with('#') || line.starts_with("process_") {
            continue;
        }
        let (series, v) = line.rsplit_once(' ').unwrap();
        if histogram_names
            .iter()
            .any(|h| series.starts_with(h.as_str()))
        {
            continue;
        }
        from_text.insert(series.to_string(), v.parse::<f64>().unwrap());
    }
    let mut from_proto = BTreeMap::new();
    for f in decode(&body) {
        if f.kind == 4 || f.name.starts_with("process_") {
            continue;
        }
        for (labels, mf) in &f.metrics {
            let mut key = f.name.clone();
            for (i, (k, v)) in labels.iter().enumerate() {
                key.push(if i == 0 { '{' } else { ',' });
                key.push_str(&format!("{k}=\""));
                push_escaped(&mut key, v);
                key.push('"');
            }
            if !labels.is_empty() {
                key.push('}');
            }
            let value = [2, 3]
                .iter()
                .find_map(|n| {
                    bytes_of(mf, *n)
                        .first()
                        .and_then(|b| double_of(&fields(b), 1))
                })
                .unwrap_or(0.0);
            from_proto.insert(key, value);
        }
    }
    assert!(from_text.len() > 20, "{}", from_text.len());
    assert_eq!(from_text, from_proto);
}

/// Bytes per checker of the whole per-checker exposition and of the
/// duration histogram alone, in each form, at 1,000 checkers (the figures
/// of docs/metrics.md; `cargo test --lib bytes_per_checker -- --nocapture`).
#[test]
fn bytes_per_checker() {
    const N: usize = 1000;
    let fleet = |per_checker: bool, native: bool, keep_classic: bool| {
        let m = Metrics::with_histograms(
            "r0",
            HistogramOptions {
                per_checker,
                native,
                keep_classic,
            },
        );
        let info = Arc::new(crate::observe::metrics::CheckerInfo::default());
        for i in 0..N {
            // A day of a 10 s checker is 8,640 probes; 60 here, spread from
            // 20 to 400 ms as a real endpoint's are (13 native buckets).
            for p in 0..60u64 {
                let ms = 20 + (p * p * 7 + i as u64) % 380;
                m.record_probe(
                    "team-a",
                    &format!("checker-{i:04}"),
                    &info,
                    &probe(ms),
                    true,
                );
            }
        }
        (m.render().len(), m.render_protobuf().len())
    };
    let (base_text, base_proto) = fleet(false, false, true);
    let rows = [
        ("classic", fleet(true, false, true)),
        ("classic + native", fleet(true, true, true)),
        ("native only", fleet(true, true, false)),
    ];
    println!(
        "whole exposition without the histogram: {} B text, {} B protobuf per checker",
        base_text / N,
        base_proto / N
    );
    let mut histogram = BTreeMap::new();
    for (what, (text, proto)) in rows {
        let (t, p) = ((text - base_text) / N, (proto - base_proto) / N);
        println!("duration histogram, {what}: {t} B text, {p} B protobuf per checker");
        histogram.insert(what, (t, p));
    }
    let (classic_text, classic_proto) = histogram["classic"];
    let (_, native_proto) = histogram["native only"];
    // The text of the 14 classic series is about 1.3 KiB with short names.
    assert!((1000..3000).contains(&classic_text), "{classic_text}");
    assert!(classic_proto < classic_text);
    assert!(native_proto * 3 < classic_text, "{native_proto}");
    assert!(histogram["classic + native"].1 > classic_proto);
}

/// For parsers outside this crate (Prometheus's own textparse, promtool):
/// with WEBCHECKER_METRICS_DUMP=<dir>, writes the exposition of
/// [`metrics`] in both formats there (metrics.pb, metrics.txt). A no-op
/// otherwise.
#[test]
fn dump_for_outside_parsers() {
    let Ok(dir) = std::env::var("WEBCHECKER_METRICS_DUMP") else {
        return;
    };
    let m = metrics(true, true);
    let dir = std::path::Path::new(&dir);
    std::fs::write(dir.join("metrics.pb"), m.render_protobuf()).unwrap();
    std::fs::write(dir.join("metrics.txt"), m.render()).unwrap();
}
