//! Following redirects (`followRedirects`, `maxRedirects`).

use bytes::Bytes;
use http::Method;

use super::error::{HopError, Reason};
use super::exchange::Response;
use super::hop::Hop;
use super::plan::ProbePlan;
use super::target::Target;

/// The hop a redirect leads to, or `None` when `resp` is final: not a
/// redirect, or the plan does not follow redirects.
pub(super) fn next_hop(
    plan: &ProbePlan,
    hop: &Hop,
    resp: &Response,
    redirects: u32,
) -> Result<Option<Hop>, HopError> {
    let code = resp.status.as_u16();
    let Some(location) = resp.location.as_deref() else {
        return Ok(None);
    };
    if !plan.follow_redirects || !resp.status.is_redirection() {
        return Ok(None);
    }
    let fail = |reason, message: String| HopError::new(reason, message).with_status(code);
    if redirects >= plan.max_redirects {
        return Err(fail(
            Reason::UnexpectedStatus,
            format!(
                "HTTP {code}: more than {} redirects (maxRedirects)",
                plan.max_redirects
            ),
        ));
    }
    let base = url::Url::parse(&hop.target.url())
        .map_err(|_| fail(Reason::ProtocolError, "bad redirect base".into()))?;
    let next = base.join(location).map_err(|_| {
        fail(
            Reason::ProtocolError,
            format!("HTTP {code}: invalid Location header"),
        )
    })?;
    let target =
        Target::parse(&next).map_err(|e| fail(Reason::ProtocolError, format!("redirect: {e}")))?;
    // RFC 9110 15.4: 303 always, and 301/302 after a POST by custom, turn into a GET.
    let (method, body) =
        if code == 303 || ((code == 301 || code == 302) && hop.method == Method::POST) {
            (Method::GET, Bytes::new())
        } else {
            (hop.method.clone(), hop.body.clone())
        };
    Ok(Some(Hop {
        target,
        method,
        body,
    }))
}
