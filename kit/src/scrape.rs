//! Reading the operator's endpoints: a minimal HTTP GET and the Prometheus
//! text format.

use std::time::Duration;

/// Minimal HTTP/1.0 GET for the tests (no client library needed).
pub async fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    http_get_within(addr, path, Duration::from_secs(5)).await
}

/// `http_get` with its own deadline (for example Prometheus's scrape timeout).
pub async fn http_get_within(addr: &str, path: &str, limit: Duration) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fut = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        let text = String::from_utf8_lossy(&buf).to_string();
        let code: u16 = text.split_whitespace().nth(1)?.parse().ok()?;
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        Some((code, body))
    };
    tokio::time::timeout(limit, fut).await.ok().flatten()
}

/// Value of one sample in Prometheus text format: `name{labels}` with labels as given (subset match).
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut total = None;
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let (series, value) = match line.rsplit_once(' ') {
            Some(x) => x,
            None => continue,
        };
        let (n, l) = match series.split_once('{') {
            Some((n, l)) => (n, l.trim_end_matches('}')),
            None => (series, ""),
        };
        if n != name {
            continue;
        }
        if labels
            .iter()
            .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        {
            let v: f64 = value.parse().ok()?;
            total = Some(total.unwrap_or(0.0) + v);
        }
    }
    total
}

/// Cumulative buckets (le, count) of a histogram in Prometheus text format,
/// summed over its series, sorted by bound (`+Inf` last).
pub fn histogram_buckets(text: &str, name: &str) -> Vec<(f64, f64)> {
    let prefix = format!("{name}_bucket{{");
    let mut out: Vec<(f64, f64)> = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(&prefix) else {
            continue;
        };
        let Some(le) = rest.split("le=\"").nth(1).and_then(|s| s.split('"').next()) else {
            continue;
        };
        let le = if le == "+Inf" {
            f64::INFINITY
        } else {
            match le.parse() {
                Ok(v) => v,
                Err(_) => continue,
            }
        };
        let v: f64 = line
            .rsplit_once(' ')
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0.0);
        match out.iter_mut().find(|(l, _)| *l == le) {
            Some(b) => b.1 += v,
            None => out.push((le, v)),
        }
    }
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out
}

/// Upper bound of the bucket that holds quantile `q` (None: no observations).
pub fn bucket_upper(buckets: &[(f64, f64)], q: f64) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    buckets
        .iter()
        .find(|(_, c)| *c >= q * total)
        .map(|(le, _)| *le)
}

/// Quantile from a histogram's cumulative buckets (upper bound of the bucket holding it).
pub fn histogram_quantile(text: &str, name: &str, q: f64) -> Option<f64> {
    bucket_upper(&histogram_buckets(text, name), q)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# HELP x_total x\n\
        x_total{a=\"1\"} 2\n\
        x_total{a=\"2\"} 3\n\
        lag_bucket{le=\"0.01\"} 5\n\
        lag_bucket{le=\"0.1\"} 9\n\
        lag_bucket{le=\"+Inf\"} 10\n";

    #[test]
    fn samples_and_buckets() {
        assert_eq!(metric(TEXT, "x_total", &[]), Some(5.0));
        assert_eq!(metric(TEXT, "x_total", &[("a", "2")]), Some(3.0));
        assert_eq!(metric(TEXT, "y_total", &[]), None);
        let b = histogram_buckets(TEXT, "lag");
        assert_eq!(b, vec![(0.01, 5.0), (0.1, 9.0), (f64::INFINITY, 10.0)]);
        assert_eq!(bucket_upper(&b, 0.5), Some(0.01));
        assert_eq!(histogram_quantile(TEXT, "lag", 0.9), Some(0.1));
        assert_eq!(histogram_quantile(TEXT, "lag", 0.99), Some(f64::INFINITY));
        assert_eq!(histogram_quantile(TEXT, "none", 0.5), None);
    }
}
