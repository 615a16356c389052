//! What one hop sends and receives: its request ([`Hop`]: the checker's
//! own, or one a redirect led to), the headers it sends ([`hop_headers`]),
//! and the [`Response`] it brings back.
//!
//! Only the checker's own origin (scheme, host and port of `spec.host`) gets
//! its credentials: header values from Secrets and `auth`, and literal
//! `Authorization`, `Proxy-Authorization` and `Cookie` headers (the TLS side,
//! `caBundle`, `serverName`, `insecureSkipVerify` and the client certificate,
//! is in handshake.rs).

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};

use super::error::HopError;
use super::plan::ProbePlan;
use super::target::Target;

/// The request of one hop: the checker's own, or one a redirect led to.
pub struct Hop {
    pub target: Target,
    pub method: Method,
    pub body: Bytes,
    /// The redirect status that led here; `None` for the checker's own request.
    pub via: Option<u16>,
    /// On the origin (scheme, host, port) of `spec.host`: only such a hop
    /// gets the spec's credentials and TLS settings, and only its host may
    /// be named in a message (another one comes from a `Location` header).
    pub own_origin: bool,
    /// A redirect dropped the body (a 303; a 301 or 302 after a POST).
    pub body_dropped: bool,
}

impl Hop {
    pub fn first(plan: &ProbePlan) -> Self {
        Hop {
            target: plan.target.clone(),
            method: plan.method.clone(),
            body: plan.body.clone(),
            via: None,
            own_origin: true,
            body_dropped: false,
        }
    }

    /// How messages name the host of this hop.
    pub fn host_name(&self) -> String {
        if self.own_origin {
            self.target.host.clone()
        } else {
            "the new host".into()
        }
    }

    /// A failure of this hop, said so when a redirect led to it.
    pub fn failure(&self, e: HopError) -> HopError {
        let Some(code) = self.via else { return e };
        let whither = if self.own_origin {
            ""
        } else {
            " to another origin"
        };
        HopError {
            message: format!("after a redirect (HTTP {code}){whither}: {}", e.message),
            ..e
        }
    }
}

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

/// The plan's headers that `hop` sends: credentials only to the checker's own
/// origin, and no body headers once a redirect dropped the body.
pub fn hop_headers<'a>(
    headers: &'a [(HeaderName, HeaderValue)],
    hop: &Hop,
) -> impl Iterator<Item = &'a (HeaderName, HeaderValue)> {
    let (own_origin, body_dropped) = (hop.own_origin, hop.body_dropped);
    headers.iter().filter(move |(name, value)| {
        let credential = value.is_sensitive() || CREDENTIALS.contains(name);
        (own_origin || !credential) && !(body_dropped && CONTENT.contains(name))
    })
}

/// What one hop brought back.
pub struct Response {
    pub status: StatusCode,
    pub version: http::Version,
    pub location: Option<String>,
    pub headers: HeaderMap,
    /// Kept only when a check reads it, and at most `max_body_bytes`.
    pub body: Vec<u8>,
    /// The body was longer than `max_body_bytes`.
    pub truncated: bool,
    /// In a content coding the probe does not decode (and a check would
    /// read it, or a coding was asked for).
    pub undecodable: bool,
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
}
