//! Native (sparse, exponential) buckets of the per-checker probe duration
//! histogram (`--native-histograms`), recorded the way client_golang records
//! them, so Prometheus reads them as it reads any Go exporter's.
//!
//! - Schema 3 to start: each power of two is cut into 2^3 = 8 buckets, a
//!   bucket's upper bound is 2^(1/8) ≈ 1.09 times its lower one (client_golang's
//!   usual bucket factor 1.1 picks the same schema). Upper bounds are
//!   inclusive: bucket `k` holds (2^((k-1)/8), 2^(k/8)].
//! - Zero threshold 2^-20 s (about 1 µs): no probe finishes that fast; it
//!   catches the 0 s of probes that never started (an invalid spec).
//! - At most [`MAX_BUCKETS`] populated buckets per checker. A checker whose
//!   durations spread wider (from a millisecond to a 10 s timeout is 110
//!   buckets at schema 3) has its schema lowered by one, merging neighbour
//!   pairs (as client_golang's `NativeHistogramMaxBucketNumber` does), until
//!   they fit: resolution is given up, memory never grows past the bound.
//!   Prometheus handles a series whose schema falls (rate and quantiles
//!   work at the coarser one).
//!
//! Memory per checker: 16 bytes per populated bucket, so at most
//! 16 × 40 = 640 bytes plus the vector's 24; a checker with steady latency
//! fills 5 to 20 buckets.

/// The schema recording starts at.
pub(crate) const START_SCHEMA: i8 = 3;
/// The lowest schema Prometheus reads (a bucket spans 2^16).
const MIN_SCHEMA: i8 = -4;
/// Durations at or below this go to the zero bucket.
pub(crate) const ZERO_THRESHOLD: f64 = 1.0 / 1_048_576.0;
/// Populated buckets per checker at most (see the module's notes).
pub(crate) const MAX_BUCKETS: usize = 40;

/// The bucket boundaries of schema 3 within one power of two, as fractions
/// of [0.5, 1) (client_golang's `nativeHistogramBounds[3]`, copied rather
/// than computed so boundary values fall into the same bucket there and here).
const BOUNDS3: [f64; 8] = [
    0.5,
    0.545_253_866_332_628_8,
    0.594_603_557_501_360_5,
    0.648_419_777_325_504_8,
    0.707_106_781_186_547_5,
    0.771_105_412_703_970_4,
    0.840_896_415_253_714_4,
    0.917_004_043_204_671_1,
];

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct NativeHistogram {
    schema: i8,
    zero_count: u64,
    /// Populated buckets at `schema`, sorted by index: (index, count).
    buckets: Vec<(i32, u64)>,
}

impl Default for NativeHistogram {
    fn default() -> Self {
        NativeHistogram {
            schema: START_SCHEMA,
            zero_count: 0,
            buckets: Vec::new(),
        }
    }
}

impl NativeHistogram {
    pub(crate) fn observe(&mut self, v: f64) {
        if v.is_nan() {
            return;
        }
        if v <= ZERO_THRESHOLD {
            self.zero_count += 1;
            return;
        }
        let key = coarser(key3(v), START_SCHEMA - self.schema);
        match self.buckets.binary_search_by_key(&key, |b| b.0) {
            Ok(i) => self.buckets[i].1 += 1,
            Err(i) => {
                self.buckets.insert(i, (key, 1));
                while self.buckets.len() > MAX_BUCKETS && self.schema > MIN_SCHEMA {
                    self.halve_resolution();
                }
            }
        }
    }

    /// One schema down: bucket k' of the new schema holds the old 2k'-1 and 2k'.
    fn halve_resolution(&mut self) {
        let mut merged: Vec<(i32, u64)> = Vec::with_capacity(self.buckets.len() / 2 + 1);
        for &(k, n) in &self.buckets {
            let k = coarser(k, 1);
            match merged.last_mut() {
                Some(last) if last.0 == k => last.1 += n,
                _ => merged.push((k, n)),
            }
        }
        self.buckets = merged;
        self.schema -= 1;
    }

    pub(crate) fn schema(&self) -> i8 {
        self.schema
    }

    pub(crate) fn zero_count(&self) -> u64 {
        self.zero_count
    }

    #[cfg(test)]
    pub(crate) fn populated(&self) -> usize {
        self.buckets.len()
    }

    /// The protobuf form of the positive buckets: spans (offset from the
    /// previous span's end, or the first index; length) and the counts as
    /// deltas from the previous bucket's.
    pub(crate) fn spans_and_deltas(&self) -> (Vec<(i32, u32)>, Vec<i64>) {
        let mut spans: Vec<(i32, u32)> = Vec::new();
        let mut deltas = Vec::with_capacity(self.buckets.len());
        let mut next = None; // the index right after the last bucket
        let mut previous = 0i64;
        for &(k, n) in &self.buckets {
            match (next, spans.last_mut()) {
                (Some(e), Some(span)) if e == k => span.1 += 1,
                (Some(e), _) => spans.push((k - e, 1)),
                (None, _) => spans.push((k, 1)),
            }
            next = Some(k + 1);
            let n = i64::try_from(n).unwrap_or(i64::MAX);
            deltas.push(n - previous);
            previous = n;
        }
        (spans, deltas)
    }
}

/// The schema-3 bucket of a positive, normal duration: v = frac × 2^exp with
/// frac in [0.5, 1) (frexp, read from the bits), then the first boundary at
/// or above frac.
fn key3(v: f64) -> i32 {
    let v = v.min(f64::MAX); // +Inf (never a duration) into the last bucket
    let bits = v.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i32 - 1022;
    let frac = f64::from_bits((bits & ((1u64 << 52) - 1)) | (1022u64 << 52));
    let idx = BOUNDS3.partition_point(|b| *b < frac) as i32;
    idx + (exp - 1) * 8
}

/// The index `by` schemas lower: ceil(k / 2^by) (the shift rounds down, also
/// for negative indexes).
fn coarser(k: i32, by: i8) -> i32 {
    if by <= 0 {
        return k;
    }
    let d = i32::from(by);
    (k + (1 << d) - 1) >> d
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The upper bound of bucket k at a schema, as Prometheus computes it.
    fn upper(k: i32, schema: i8) -> f64 {
        (f64::from(k) * (-f64::from(schema)).exp2()).exp2()
    }

    #[test]
    fn every_value_lands_in_the_bucket_whose_bounds_hold_it() {
        for v in [
            1e-6, 1e-4, 0.000_731, 0.0123, 0.05, 0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 3.7, 9.99,
        ] {
            let k = key3(v);
            assert!(
                upper(k - 1, 3) < v && v <= upper(k, 3) * (1.0 + 1e-12),
                "{v}: {k}"
            );
        }
        // Powers of two are upper bounds (inclusive), at every schema.
        assert_eq!(key3(1.0), 0);
        assert_eq!(key3(0.5), -8);
        assert_eq!(key3(2.0), 8);
        assert_eq!(coarser(key3(2.0), 3), 1);
        assert_eq!(coarser(key3(0.25), 4), -1); // schema -1: (1/16, 1/4] is -1
        assert_eq!(coarser(key3(0.26), 4), 0);
    }

    #[test]
    fn zero_bucket_and_nan() {
        let mut h = NativeHistogram::default();
        h.observe(0.0);
        h.observe(ZERO_THRESHOLD);
        h.observe(f64::NAN);
        assert_eq!((h.zero_count(), h.populated()), (2, 0));
        h.observe(ZERO_THRESHOLD * 1.5);
        assert_eq!((h.zero_count(), h.populated()), (2, 1));
    }

    #[test]
    fn spans_and_deltas_encode_gaps_and_counts() {
        let mut h = NativeHistogram::default();
        for v in [1.0, 1.0, 1.05, 2.0, 2.0, 2.0] {
            h.observe(v);
        }
        // Buckets 0 (2), 1 (1), 8 (3): spans (0, 2) and (6, 1).
        let (spans, deltas) = h.spans_and_deltas();
        assert_eq!(spans, vec![(0, 2), (6, 1)]);
        assert_eq!(deltas, vec![2, -1, 2]);
    }

    #[test]
    fn bucket_count_stays_bounded_by_lowering_the_schema() {
        let mut h = NativeHistogram::default();
        // From 100 µs to 60 s, log-uniform: about 154 buckets at schema 3.
        let mut total = 0;
        for i in 0..=2000 {
            let v = 1e-4 * (6e5f64).powf(f64::from(i) / 2000.0);
            h.observe(v);
            total += 1;
            assert!(h.populated() <= MAX_BUCKETS, "{i}: {}", h.populated());
        }
        assert!(h.schema() < START_SCHEMA, "the schema fell: {}", h.schema());
        assert_eq!(h.schema(), 1, "154 buckets fit in 40 at schema 1 (39)");
        let counted: u64 = h.buckets.iter().map(|b| b.1).sum();
        assert_eq!(counted, total, "merging keeps every observation");
        // Every observation is still in the bucket that holds it at the new schema.
        let mut again = NativeHistogram {
            schema: h.schema(),
            ..Default::default()
        };
        for i in 0..=2000 {
            again.observe(1e-4 * (6e5f64).powf(f64::from(i) / 2000.0));
        }
        assert_eq!(again, h);
    }
}
