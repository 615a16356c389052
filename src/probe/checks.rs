//! The checks of a final response: status, headers, body, JSON, latency.
//! Their messages never quote a body nor a header value.

use std::time::Duration;

use super::error::{HopError, Reason};
use super::exchange::Response;
use super::plan::{JsonCheckPlan, ProbePlan};

/// Checks a response that is not followed as a redirect.
pub(super) fn response(plan: &ProbePlan, resp: &Response) -> Result<(), HopError> {
    let code = resp.status.as_u16();
    if !plan.expected.contains(code) {
        return Err(HopError::new(
            Reason::UnexpectedStatus,
            format!("HTTP {code}, not an expected status"),
        )
        .with_status(code));
    }
    if let Some(why) = content(plan, resp) {
        return Err(HopError::new(Reason::BodyMismatch, why).with_status(code));
    }
    Ok(())
}

/// The outcome of a probe whose response passed every check, after `duration`.
pub(super) fn latency(plan: &ProbePlan, code: u16, duration: Duration) -> (Reason, String) {
    match plan.max_response_time {
        Some(max) if duration > max => (
            Reason::SlowResponse,
            format!(
                "answered in {} ms, slower than maxResponseTimeMillis {}",
                duration.as_millis(),
                max.as_millis()
            ),
        ),
        _ => (Reason::ProbeSucceeded, format!("HTTP {code}")),
    }
}

/// The response checks after the status: headerChecks, bodyMatch, jsonChecks.
/// Returns why the response fails them; never a body excerpt nor a header value.
fn content(plan: &ProbePlan, resp: &Response) -> Option<String> {
    for (name, re) in &plan.header_checks {
        let values: Vec<String> = resp
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
    if let Some((re, invert)) = &plan.body_match {
        let text = String::from_utf8_lossy(&resp.body);
        if re.is_match(&text) == *invert {
            return Some(if *invert {
                "response body matches bodyMatch.regex, which it must not".to_string()
            } else {
                "response body does not match bodyMatch.regex".to_string()
            });
        }
    }
    if !plan.json_checks.is_empty() {
        let doc: serde_json::Value = match serde_json::from_slice(&resp.body) {
            Ok(d) => d,
            Err(e) => {
                let cut = if resp.truncated {
                    format!(" (only the first {} bytes are read)", resp.body.len())
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
        for c in &plan.json_checks {
            if let Some(why) = c.failure(&doc) {
                return Some(why);
            }
        }
    }
    None
}

impl JsonCheckPlan {
    /// `None` when the check passes, else why not (never the value found).
    pub(super) fn failure(&self, doc: &serde_json::Value) -> Option<String> {
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
            .is_ok_and(|w| &w == found);
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
