//! Following redirects (`followRedirects`, `maxRedirects`): the hop a
//! redirect leads to, with its method and body. What that hop sends depends
//! on where it leads (credentials stay with the checker's own origin:
//! message.rs), and its error messages never quote the `Location` it came
//! from (`Hop::host_name`).

use bytes::Bytes;
use http::Method;

use super::error::{HopError, Reason};
use super::message::{Hop, Response};
use super::plan::ProbePlan;
use super::target::Target;

/// The redirect codes followed (RFC 9110 15.4); 300, 304 and 305 are answers.
const FOLLOWED: [u16; 5] = [301, 302, 303, 307, 308];

/// The hop a redirect leads to, or `None` when `resp` is final: not a
/// followed redirect, or the plan does not follow redirects.
pub fn next_hop(
    plan: &ProbePlan,
    hop: &Hop,
    resp: &Response,
    redirects: u32,
) -> Result<Option<Hop>, HopError> {
    let code = resp.status.as_u16();
    let Some(location) = resp.location.as_deref() else {
        return Ok(None);
    };
    if !plan.follow_redirects || !FOLLOWED.contains(&code) {
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
    // The messages never quote the Location: it is a header value.
    let next = base.join(location).map_err(|_| {
        fail(
            Reason::ProtocolError,
            format!("HTTP {code}: invalid Location header"),
        )
    })?;
    let target = Target::parse(&next).map_err(|_| {
        fail(
            Reason::ProtocolError,
            format!("HTTP {code}: the Location is not an http:// or https:// URL with a host"),
        )
    })?;
    let (method, drop_body) = method_after(code, &hop.method);
    let body = if drop_body {
        Bytes::new()
    } else {
        hop.body.clone()
    };
    Ok(Some(Hop {
        own_origin: target.same_origin(&plan.target),
        target,
        method,
        body,
        via: Some(code),
        body_dropped: hop.body_dropped || drop_body,
    }))
}

/// The method after a redirect with `code`, and whether the body is dropped.
/// RFC 9110 15.4: 303 asks for a retrieval without body, a GET (a HEAD
/// stays a HEAD); 301 and 302 turn a POST into a GET by custom; 307 and 308
/// keep method and body.
fn method_after(code: u16, method: &Method) -> (Method, bool) {
    match code {
        303 if *method == Method::HEAD => (Method::HEAD, true),
        303 => (Method::GET, true),
        301 | 302 if *method == Method::POST => (Method::GET, true),
        _ => (method.clone(), false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_after_redirects() {
        let cases = [
            (303, Method::POST, Method::GET, true),
            (303, Method::PUT, Method::GET, true),
            (303, Method::DELETE, Method::GET, true),
            (303, Method::GET, Method::GET, true),
            (303, Method::HEAD, Method::HEAD, true),
            (301, Method::POST, Method::GET, true),
            (302, Method::POST, Method::GET, true),
            (301, Method::PUT, Method::PUT, false),
            (302, Method::HEAD, Method::HEAD, false),
            (307, Method::POST, Method::POST, false),
            (308, Method::POST, Method::POST, false),
        ];
        for (code, from, to, drop_body) in cases {
            assert_eq!(method_after(code, &from), (to, drop_body), "{code} {from}");
        }
    }
}
