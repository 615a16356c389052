//! The checks of a final response: status, headers, body, JSON, latency.
//! Their messages never quote a body nor a header value. The content checks
//! (headers, body, JSON) are CPU work of their own ([`Content`]), run on the
//! matching pool (matcher.rs), never on the async runtime.

use std::time::Duration;

use super::error::{HopError, Reason};
use super::message::Response;
use super::outcome::version_name;
use super::plan::{JsonCheckPlan, Pattern, ProbePlan};

/// Checks the head of a response that is not followed as a redirect: status,
/// HTTP version, content coding. Its content checks follow ([`Content`]).
pub fn head(plan: &ProbePlan, resp: &Response) -> Result<(), HopError> {
    let code = resp.status.as_u16();
    if !plan.expected.contains(code) {
        return Err(HopError::new(
            Reason::UnexpectedStatus,
            format!("HTTP {code}, not an expected status"),
        )
        .with_status(code));
    }
    if !plan.http_versions.is_empty() && !plan.http_versions.contains(&resp.version) {
        let wanted: Vec<&str> = plan
            .http_versions
            .iter()
            .map(|v| version_name(*v))
            .collect();
        return Err(HopError::new(
            Reason::UnexpectedHttpVersion,
            format!(
                "the response is {}, not one of httpVersions ({})",
                version_name(resp.version),
                wanted.join(", ")
            ),
        )
        .with_status(code));
    }
    if resp.undecodable {
        // The value is the server's: not quoted.
        return Err(HopError::new(
            Reason::ProtocolError,
            format!(
                "HTTP {code}: the response has a Content-Encoding the probe does not decode (it decodes gzip, deflate, br and zstd, one at a time)"
            ),
        )
        .with_status(code));
    }
    Ok(())
}

/// The outcome of a probe whose response passed every check, after `duration`.
pub fn latency(plan: &ProbePlan, said: String, duration: Duration) -> (Reason, String) {
    match plan.max_response_time {
        Some(max) if duration > max => (
            Reason::SlowResponse,
            format!(
                "answered in {} ms, slower than maxResponseTimeMillis {}",
                duration.as_millis(),
                max.as_millis()
            ),
        ),
        _ => (Reason::ProbeSucceeded, said),
    }
}

/// The content checks of a response (headerChecks, bodyMatch, jsonChecks)
/// with what they read, owned, so they can run on another thread.
pub struct Content {
    header_checks: Vec<(http::HeaderName, Option<Pattern>)>,
    body_match: Option<(Pattern, bool)>,
    json_checks: Vec<JsonCheckPlan>,
    headers: http::HeaderMap,
    body: Vec<u8>,
    truncated: bool,
}

impl Content {
    /// The content checks of `plan` on `resp`; `None` when it has none.
    pub fn of(plan: &ProbePlan, resp: Response) -> Option<Content> {
        if plan.header_checks.is_empty() && plan.body_match.is_none() && plan.json_checks.is_empty()
        {
            return None;
        }
        Some(Content {
            header_checks: plan.header_checks.clone(),
            body_match: plan.body_match.clone(),
            json_checks: plan.json_checks.clone(),
            headers: resp.headers,
            body: resp.body,
            truncated: resp.truncated,
        })
    }

    /// Why the response fails its content checks (reason `BodyMismatch`),
    /// never a body excerpt nor a header value; `None` when it passes.
    pub fn failure(&self) -> Option<String> {
        content(self)
    }
}

fn content(c: &Content) -> Option<String> {
    for (name, re) in &c.header_checks {
        let values: Vec<String> = c
            .headers
            .get_all(name)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect();
        if values.is_empty() {
            return Some(format!("headerChecks: the response has no {name} header"));
        }
        if let Some(re) = re
            && !values.iter().any(|v| re.is_match(v))
        {
            return Some(format!(
                "headerChecks: the {name} header does not match {:?}",
                re.as_str()
            ));
        }
    }
    if let Some((re, invert)) = &c.body_match {
        let text = String::from_utf8_lossy(&c.body);
        if re.is_match(&text) == *invert {
            return Some(if *invert {
                "response body matches bodyMatch.regex, which it must not".to_string()
            } else {
                "response body does not match bodyMatch.regex".to_string()
            });
        }
    }
    if !c.json_checks.is_empty() {
        let doc: serde_json::Value = match serde_json::from_slice(&c.body) {
            Ok(d) => d,
            Err(e) => {
                let cut = if c.truncated {
                    format!(" (only the first {} bytes are read)", c.body.len())
                } else {
                    String::new()
                };
                return Some(format!(
                    "jsonChecks: the response body is not JSON{cut}: {} at line {} column {}",
                    match e.classify() {
                        serde_json::error::Category::Eof => "unexpected end",
                        serde_json::error::Category::Syntax => "syntax error",
                        serde_json::error::Category::Data => "invalid data",
                        serde_json::error::Category::Io => "read error",
                    },
                    e.line(),
                    e.column()
                ));
            }
        };
        for check in &c.json_checks {
            if let Some(why) = check.failure(&doc) {
                return Some(why);
            }
        }
    }
    None
}

impl JsonCheckPlan {
    /// `None` when the check passes, else why not (never the value found).
    pub fn failure(&self, doc: &serde_json::Value) -> Option<String> {
        let Some(found) = doc.pointer(&self.pointer) else {
            return Some(format!(
                "jsonChecks: the body has no value at {:?}",
                self.pointer
            ));
        };
        let want = self.equals.as_ref()?;
        let matches = match found {
            serde_json::Value::String(s) => s == want,
            _ => false,
        } || serde_json::from_str::<serde_json::Value>(want)
            .is_ok_and(|w| same_value(&w, found));
        if matches {
            None
        } else {
            Some(format!(
                "jsonChecks: the value at {:?} does not equal {:?}",
                self.pointer, want
            ))
        }
    }
}

/// JSON equality with numbers compared by value, so that `1`, `1.0` and
/// `1e0` are equal (serde_json tells integers from floats). Two integers
/// compare exactly; otherwise as f64.
fn same_value(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value as V;
    match (a, b) {
        (V::Number(x), V::Number(y)) => match (x.as_i64(), y.as_i64(), x.as_u64(), y.as_u64()) {
            (Some(x), Some(y), _, _) => x == y,
            (_, _, Some(x), Some(y)) => x == y,
            _ => x.as_f64() == y.as_f64(),
        },
        (V::Array(x), V::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_value(x, y))
        }
        (V::Object(x), V::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_value(v, w)))
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(equals: &str, doc: &str) -> bool {
        let c = JsonCheckPlan {
            pointer: "/v".into(),
            equals: Some(equals.into()),
        };
        c.failure(&serde_json::from_str(doc).unwrap()).is_none()
    }

    #[test]
    fn numbers_compare_by_value() {
        for (equals, doc, same) in [
            ("1", r#"{"v": 1.0}"#, true),
            ("1.0", r#"{"v": 1}"#, true),
            ("1e0", r#"{"v": 1}"#, true),
            ("-0", r#"{"v": 0}"#, true),
            ("1", r#"{"v": 1.5}"#, false),
            ("1", r#"{"v": "1"}"#, true),
            ("1.0", r#"{"v": "1"}"#, false),
            ("9007199254740993", r#"{"v": 9007199254740992}"#, false),
            (
                "18446744073709551615",
                r#"{"v": 18446744073709551615}"#,
                true,
            ),
            (r#"{"a": [1, 2.0]}"#, r#"{"v": {"a": [1.0, 2]}}"#, true),
            (r#"{"a": 1}"#, r#"{"v": {"a": 1, "b": 2}}"#, false),
            ("true", r#"{"v": true}"#, true),
            ("null", r#"{"v": null}"#, true),
        ] {
            assert_eq!(check(equals, doc), same, "equals {equals} against {doc}");
        }
    }
}
