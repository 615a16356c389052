//! Figures from samples: quantiles, ranges, histogram buckets, and how the
//! report prints numbers.

pub fn median(v: &[f64]) -> f64 {
    quantile(v, 0.5)
}

/// Quantile by linear interpolation between order statistics.
pub fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let pos = q * (s.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    s[lo] + (s[hi] - s[lo]) * (pos - lo as f64)
}

pub fn minmax(v: &[f64]) -> (f64, f64) {
    v.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
            (a.min(x), b.max(x))
        })
}

pub fn fmt_int(x: f64) -> String {
    let n = x.round() as i64;
    let s = n.abs().to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}

pub fn yes(b: bool) -> &'static str {
    if b { "**met**" } else { "**not met**" }
}

/// Prometheus-style histogram_quantile over cumulative buckets.
pub fn bucket_quantile(b: &[(f64, f64)], q: f64) -> f64 {
    let Some(total) = b.last().map(|x| x.1) else {
        return f64::NAN;
    };
    if total <= 0.0 {
        return f64::NAN;
    }
    let rank = q * total;
    let mut prev = (0.0, 0.0);
    for &(le, c) in b {
        if c >= rank {
            if le.is_infinite() {
                return prev.0;
            }
            let span = c - prev.1;
            let frac = if span > 0.0 {
                (rank - prev.1) / span
            } else {
                1.0
            };
            return prev.0 + (le - prev.0) * frac;
        }
        prev = (le, c);
    }
    prev.0
}

/// Share of observations at or below `x` (x must be a bucket bound).
pub fn bucket_share_le(b: &[(f64, f64)], x: f64) -> f64 {
    let total = b.last().map(|x| x.1).unwrap_or(0.0);
    if total <= 0.0 {
        return f64::NAN;
    }
    b.iter()
        .find(|(le, _)| (*le - x).abs() < 1e-9)
        .map(|(_, c)| c / total)
        .unwrap_or(f64::NAN)
}

pub fn sub_buckets(a: &[(f64, f64)], b: &[(f64, f64)]) -> Vec<(f64, f64)> {
    b.iter()
        .map(|&(le, c)| {
            let before = a
                .iter()
                .find(|(l, _)| *l == le || (l.is_infinite() && le.is_infinite()))
                .map(|x| x.1)
                .unwrap_or(0.0);
            (le, c - before)
        })
        .collect()
}

pub fn add_buckets(acc: &mut Vec<(f64, f64)>, b: &[(f64, f64)]) {
    if acc.is_empty() {
        *acc = b.to_vec();
        return;
    }
    for (i, &(_, c)) in b.iter().enumerate() {
        if let Some(x) = acc.get_mut(i) {
            x.1 += c;
        }
    }
}

pub fn ms(x: f64) -> String {
    if x.is_infinite() {
        "> 10 s".into()
    } else {
        format!("{:.0} ms", x * 1000.0)
    }
}

pub fn human_s(s: f64) -> String {
    if s >= 3600.0 && s % 3600.0 == 0.0 {
        format!("{} h", s / 3600.0)
    } else if s >= 60.0 && s % 60.0 == 0.0 {
        format!("{} min", s / 60.0)
    } else {
        format!("{s} s")
    }
}
