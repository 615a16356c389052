//! A hyper error as a probe's failure: the one part of classifying errors
//! that needs the HTTP client's types.

use webchecker_plan::error::{HopError, Reason, rustls_cause};

/// Classifies a hyper error: a TLS alert or error inside becomes TLSError
/// (for example a client certificate refused after a TLS 1.3 handshake), the
/// rest ProtocolError.
pub fn hyper_failure(context: &str, e: &hyper::Error) -> HopError {
    let mut src = std::error::Error::source(e);
    while let Some(inner) = src {
        if let Some(io) = inner.downcast_ref::<std::io::Error>()
            && let Some(t) = rustls_cause(io)
        {
            return HopError::new(Reason::TlsError, format!("{context}: TLS: {t}"));
        }
        src = inner.source();
    }
    HopError::new(
        Reason::ProtocolError,
        format!("{context}: {}", hyper_cause(e)),
    )
}

fn hyper_cause(e: &hyper::Error) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(inner) = src {
        s = format!("{s}: {inner}");
        src = inner.source();
    }
    s.chars().take(160).collect()
}
