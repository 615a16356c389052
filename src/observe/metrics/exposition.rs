//! The two formats /metrics speaks, chosen by the scraper's `Accept` as
//! client_golang chooses (expfmt.Negotiate):
//!
//! - the text format (version 0.0.4), the default;
//! - length-delimited `io.prometheus.client.MetricFamily` protobufs, the one
//!   format that carries native histograms. Prometheus 3 asks for it first
//!   when a scrape config sets `scrape_native_histograms: true` (3.16 sends
//!   `application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.7,...`).
//!
//! The per-checker families are written through a [`Sink`], once for both
//! formats. The protobuf is written by hand (the fields of
//! prometheus/client_model's metrics.proto that we use): the prometheus
//! crate's generated types predate native histograms.

use std::fmt::Write as _;

use super::native::{NativeHistogram, ZERO_THRESHOLD};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    Protobuf,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
            Format::Protobuf => {
                "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited"
            }
        }
    }
}

/// The format for these `Accept` header values: the acceptable media range
/// (q above 0) of the highest weight, earlier first among equals, that is
/// either delimited MetricFamily protobuf or text/plain; text when none is
/// (`*/*`, OpenMetrics and unknown types are passed over: we serve neither
/// better than text).
pub fn negotiate<'a>(accept: impl IntoIterator<Item = &'a str>) -> Format {
    let mut best: Option<(f32, Format)> = None;
    for range in accept.into_iter().flat_map(|h| h.split(',')) {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let (mut q, mut proto, mut encoding) = (1.0f32, None, None);
        for p in parts {
            let Some((k, v)) = p.split_once('=') else {
                continue;
            };
            let v = v.trim().trim_matches('"');
            match k.trim().to_ascii_lowercase().as_str() {
                "q" => q = v.parse().unwrap_or(0.0),
                "proto" => proto = Some(v.to_string()),
                "encoding" => encoding = Some(v.to_ascii_lowercase()),
                _ => {}
            }
        }
        let format = match media.as_str() {
            "application/vnd.google.protobuf"
                if proto.as_deref() == Some("io.prometheus.client.MetricFamily")
                    && encoding.as_deref() == Some("delimited") =>
            {
                Format::Protobuf
            }
            "text/plain" => Format::Text,
            _ => continue,
        };
        if q > 0.0 && best.is_none_or(|(b, _)| q > b) {
            best = Some((q, format));
        }
    }
    best.map_or(Format::Text, |(_, f)| f)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// One series' histogram, classic buckets or native ones or both.
pub(super) struct Hist<'a> {
    pub count: u64,
    pub sum: f64,
    /// Upper bounds and the non-cumulative count of each (one more: +Inf).
    pub classic: Option<(&'a [f64], &'a [u64])>,
    pub native: Option<&'a NativeHistogram>,
}

/// Where per-checker families go. `family` starts one; its header is
/// written with its first series only, so a family without series is absent.
pub(super) trait Sink {
    fn family(&mut self, name: &'static str, kind: Kind, help: &'static str);
    fn sample(&mut self, labels: &[(&str, &str)], value: f64);
    fn histogram(&mut self, labels: &[(&str, &str)], h: &Hist<'_>);
}

pub(super) struct TextSink<'a> {
    out: &'a mut String,
    family: (&'static str, Kind, &'static str),
    header: bool,
}

impl<'a> TextSink<'a> {
    pub(super) fn new(out: &'a mut String) -> Self {
        TextSink {
            out,
            family: ("", Kind::Gauge, ""),
            header: true,
        }
    }

    fn start(&mut self, suffix: &str, labels: &[(&str, &str)]) {
        let (name, kind, help) = self.family;
        if !self.header {
            let kind = match kind {
                Kind::Counter => "counter",
                Kind::Gauge => "gauge",
                Kind::Histogram => "histogram",
            };
            let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            self.header = true;
        }
        self.out.push_str(name);
        self.out.push_str(suffix);
        for (i, (k, v)) in labels.iter().enumerate() {
            self.out.push(if i == 0 { '{' } else { ',' });
            self.out.push_str(k);
            self.out.push_str("=\"");
            push_escaped(self.out, v);
            self.out.push('"');
        }
    }

    /// Ends the series with its value; `extra` is one more label (`le`).
    fn end(&mut self, labels: &[(&str, &str)], extra: Option<(&str, &str)>, value: f64) {
        if let Some((k, v)) = extra {
            self.out.push(if labels.is_empty() { '{' } else { ',' });
            let _ = write!(self.out, "{k}=\"{v}\"");
        }
        if !labels.is_empty() || extra.is_some() {
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }
}

impl Sink for TextSink<'_> {
    fn family(&mut self, name: &'static str, kind: Kind, help: &'static str) {
        self.family = (name, kind, help);
        self.header = false;
    }

    fn sample(&mut self, labels: &[(&str, &str)], value: f64) {
        self.start("", labels);
        self.end(labels, None, value);
    }

    /// Classic buckets (only +Inf without them, as client_golang writes a
    /// native-only histogram), `_sum`, `_count`: native buckets have no text form.
    fn histogram(&mut self, labels: &[(&str, &str)], h: &Hist<'_>) {
        let mut cumulative = 0;
        if let Some((bounds, counts)) = h.classic {
            for (ub, n) in bounds.iter().zip(counts) {
                cumulative += n;
                self.start("_bucket", labels);
                self.end(labels, Some(("le", &ub.to_string())), cumulative as f64);
            }
        }
        self.start("_bucket", labels);
        self.end(labels, Some(("le", "+Inf")), h.count as f64);
        self.start("_sum", labels);
        self.end(labels, None, h.sum);
        self.start("_count", labels);
        self.end(labels, None, h.count as f64);
    }
}

pub(super) fn push_escaped(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Writes delimited MetricFamily messages: each family's metrics are
/// gathered, then the family goes out behind its length.
pub(super) struct ProtoSink {
    out: Vec<u8>,
    family: Option<(&'static str, Kind, &'static str)>,
    metrics: Vec<u8>,
    /// Scratch buffers, reused from series to series.
    metric: Vec<u8>,
    inner: Vec<u8>,
}

impl ProtoSink {
    pub(super) fn new(out: Vec<u8>) -> Self {
        ProtoSink {
            out,
            family: None,
            metrics: Vec::new(),
            metric: Vec::new(),
            inner: Vec::new(),
        }
    }

    fn flush(&mut self) {
        let Some((name, kind, help)) = self.family else {
            return;
        };
        if self.metrics.is_empty() {
            return;
        }
        let mut fam = Vec::with_capacity(self.metrics.len() + name.len() + help.len() + 8);
        put_bytes(&mut fam, 1, name.as_bytes());
        put_bytes(&mut fam, 2, help.as_bytes());
        // MetricType: COUNTER 0, GAUGE 1, HISTOGRAM 4.
        let t = match kind {
            Kind::Counter => 0,
            Kind::Gauge => 1,
            Kind::Histogram => 4,
        };
        put_uint(&mut fam, 3, t);
        fam.extend_from_slice(&self.metrics);
        put_varint(&mut self.out, fam.len() as u64);
        self.out.extend_from_slice(&fam);
        self.metrics.clear();
    }

    pub(super) fn finish(mut self) -> Vec<u8> {
        self.flush();
        self.out
    }

    /// Starts a Metric with its labels in `self.metric`.
    fn start(&mut self, labels: &[(&str, &str)]) {
        self.metric.clear();
        for (k, v) in labels {
            self.inner.clear();
            put_bytes(&mut self.inner, 1, k.as_bytes());
            put_bytes(&mut self.inner, 2, v.as_bytes());
            put_bytes(&mut self.metric, 1, &self.inner);
        }
    }

    fn end(&mut self) {
        put_bytes(&mut self.metrics, 4, &self.metric);
    }
}

impl Sink for ProtoSink {
    fn family(&mut self, name: &'static str, kind: Kind, help: &'static str) {
        self.flush();
        self.family = Some((name, kind, help));
    }

    fn sample(&mut self, labels: &[(&str, &str)], value: f64) {
        self.start(labels);
        self.inner.clear();
        put_double(&mut self.inner, 1, value);
        // Metric.gauge is field 2, Metric.counter field 3.
        let field = match self.family {
            Some((_, Kind::Counter, _)) => 3,
            _ => 2,
        };
        put_bytes(&mut self.metric, field, &self.inner);
        self.end();
    }

    fn histogram(&mut self, labels: &[(&str, &str)], h: &Hist<'_>) {
        self.start(labels);
        self.inner.clear();
        encode_histogram(&mut self.inner, h);
        put_bytes(&mut self.metric, 7, &self.inner);
        self.end();
    }
}

/// io.prometheus.client.Histogram: sample_count 1, sample_sum 2, bucket 3
/// (classic, without +Inf, as client_golang writes it), schema 5,
/// zero_threshold 6, zero_count 7, positive_span 12, positive_delta 13.
fn encode_histogram(out: &mut Vec<u8>, h: &Hist<'_>) {
    put_uint(out, 1, h.count);
    put_double(out, 2, h.sum);
    if let Some((bounds, counts)) = h.classic {
        let mut cumulative = 0;
        let mut bucket = Vec::with_capacity(16);
        for (ub, n) in bounds.iter().zip(counts) {
            cumulative += n;
            bucket.clear();
            put_uint(&mut bucket, 1, cumulative);
            put_double(&mut bucket, 2, *ub);
            put_bytes(out, 3, &bucket);
        }
    }
    if let Some(n) = h.native {
        put_key(out, 5, 0);
        put_varint(out, zigzag(i64::from(n.schema())));
        put_double(out, 6, ZERO_THRESHOLD);
        put_uint(out, 7, n.zero_count());
        let (spans, deltas) = n.spans_and_deltas();
        let mut span = Vec::with_capacity(8);
        for (offset, length) in spans {
            span.clear();
            put_key(&mut span, 1, 0);
            put_varint(&mut span, zigzag(i64::from(offset)));
            put_uint(&mut span, 2, u64::from(length));
            put_bytes(out, 12, &span);
        }
        if !deltas.is_empty() {
            let mut packed = Vec::with_capacity(deltas.len() * 2);
            for d in deltas {
                put_varint(&mut packed, zigzag(d));
            }
            put_bytes(out, 13, &packed);
        }
    }
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_key(out: &mut Vec<u8>, field: u32, wire: u8) {
    put_varint(out, (u64::from(field) << 3) | u64::from(wire));
}

fn put_uint(out: &mut Vec<u8>, field: u32, v: u64) {
    put_key(out, field, 0);
    put_varint(out, v);
}

fn put_double(out: &mut Vec<u8>, field: u32, v: f64) {
    put_key(out, field, 1);
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, field: u32, v: &[u8]) {
    put_key(out, field, 2);
    put_varint(out, v.len() as u64);
    out.extend_from_slice(v);
}

#[cfg(test)]
#[path = "exposition_tests.rs"]
mod tests;
