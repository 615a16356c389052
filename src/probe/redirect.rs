//! Following redirects (`followRedirects`, `maxRedirects`), and what a hop
//! sends depending on where a redirect led.
//!
//! Only the checker's own origin (scheme, host and port of `spec.host`) gets
//! its credentials: header values from Secrets and `auth`, and literal
//! `Authorization`, `Proxy-Authorization` and `Cookie` headers (the TLS side,
//! `caBundle`, `serverName`, `insecureSkipVerify` and the client certificate,
//! is in `tls.rs`). A hop's error messages never quote the `Location` it came
//! from (`hop.rs`).

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, header};

use super::error::{HopError, Reason};
use super::exchange::Response;
use super::hop::Hop;
use super::plan::ProbePlan;
use super::target::Target;

/// The redirect codes followed (RFC 9110 15.4); 300, 304 and 305 are answers.
const FOLLOWED: [u16; 5] = [301, 302, 303, 307, 308];

/// Headers sent only to the checker's own origin even when their value is
/// written in the spec: a redirect must not hand them to another server.
const CREDENTIALS: [HeaderName; 3] = [
    header::AUTHORIZATION,
    header::PROXY_AUTHORIZATION,
    header::COOKIE,
];

/// Headers that describe a request body, dropped with the body when a
/// redirect turns the request into a GET.
const CONTENT: [HeaderName; 6] = [
    header::CONTENT_LENGTH,
    header::CONTENT_TYPE,
    header::CONTENT_ENCODING,
    header::CONTENT_LANGUAGE,
    header::CONTENT_LOCATION,
    header::TRANSFER_ENCODING,
];

/// The hop a redirect leads to, or `None` when `resp` is final: not a
/// followed redirect, or the plan does not follow redirects.
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

/// The plan's headers that `hop` sends: credentials only to the checker's own
/// origin, and no body headers once a redirect dropped the body.
pub(super) fn hop_headers<'a>(
    headers: &'a [(HeaderName, HeaderValue)],
    hop: &Hop,
) -> impl Iterator<Item = &'a (HeaderName, HeaderValue)> {
    let (own_origin, body_dropped) = (hop.own_origin, hop.body_dropped);
    headers.iter().filter(move |(name, value)| {
        let credential = value.is_sensitive() || CREDENTIALS.contains(name);
        (own_origin || !credential) && !(body_dropped && CONTENT.contains(name))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hop(own_origin: bool, body_dropped: bool) -> Hop {
        Hop {
            target: Target::parse(&url::Url::parse("http://x/").unwrap()).unwrap(),
            method: Method::GET,
            body: Bytes::new(),
            via: Some(302),
            own_origin,
            body_dropped,
        }
    }

    fn sent(hop: &Hop) -> Vec<String> {
        let mut secret = HeaderValue::from_static("from-a-secret");
        secret.set_sensitive(true);
        let headers = vec![
            (
                HeaderName::from_static("x-plain"),
                HeaderValue::from_static("p"),
            ),
            (HeaderName::from_static("x-api-key"), secret),
            (
                header::AUTHORIZATION,
                HeaderValue::from_static("Basic literal"),
            ),
            (
                header::PROXY_AUTHORIZATION,
                HeaderValue::from_static("Basic p"),
            ),
            (header::COOKIE, HeaderValue::from_static("session=1")),
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
            (header::CONTENT_LENGTH, HeaderValue::from_static("2")),
            (header::ACCEPT, HeaderValue::from_static("*/*")),
        ];
        hop_headers(&headers, hop)
            .map(|(n, _)| n.as_str().to_string())
            .collect()
    }

    #[test]
    fn credentials_stay_with_their_origin() {
        let all = [
            "x-plain",
            "x-api-key",
            "authorization",
            "proxy-authorization",
            "cookie",
            "content-type",
            "content-length",
            "accept",
        ];
        assert_eq!(sent(&hop(true, false)), all);
        assert_eq!(
            sent(&hop(false, false)),
            ["x-plain", "content-type", "content-length", "accept"]
        );
    }

    #[test]
    fn body_headers_go_with_the_body() {
        assert_eq!(
            sent(&hop(true, true)),
            [
                "x-plain",
                "x-api-key",
                "authorization",
                "proxy-authorization",
                "cookie",
                "accept"
            ]
        );
        assert_eq!(sent(&hop(false, true)), ["x-plain", "accept"]);
    }

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
