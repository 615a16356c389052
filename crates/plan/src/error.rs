//! Why a probe failed: the reasons it reports, the error a hop returns, and
//! short messages from I/O, rustls and hyper errors.

/// Why a probe ended the way it did. Also the `reason` of the Ready condition
/// and of the `webchecker_probes_total` metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    ProbeSucceeded,
    DnsError,
    ConnectError,
    TlsError,
    CertificateInvalid,
    Timeout,
    /// The response came, but its content checks did not finish in time.
    CheckTimeout,
    UnexpectedStatus,
    UnexpectedHttpVersion,
    BodyMismatch,
    SlowResponse,
    Forbidden,
    ProtocolError,
    InvalidSpec,
    /// A gRPC health check answered NOT_SERVING (or UNKNOWN).
    NotServing,
    /// The gRPC server does not know the service asked for.
    ServiceUnknown,
    /// A gRPC call ended with a status other than OK (no health answer).
    UnexpectedGrpcStatus,
    /// A tcp check's `expect` found no matching line.
    UnexpectedResponse,
}

impl Reason {
    /// Every reason, in the order of [`Reason::index`].
    pub const ALL: [Reason; 18] = [
        Reason::ProbeSucceeded,
        Reason::DnsError,
        Reason::ConnectError,
        Reason::TlsError,
        Reason::CertificateInvalid,
        Reason::Timeout,
        Reason::CheckTimeout,
        Reason::UnexpectedStatus,
        Reason::UnexpectedHttpVersion,
        Reason::BodyMismatch,
        Reason::SlowResponse,
        Reason::Forbidden,
        Reason::ProtocolError,
        Reason::InvalidSpec,
        Reason::NotServing,
        Reason::ServiceUnknown,
        Reason::UnexpectedGrpcStatus,
        Reason::UnexpectedResponse,
    ];

    /// Its place in [`Reason::ALL`] (the match makes a new reason impossible
    /// to leave out: it has no index until it is given one).
    pub const fn index(self) -> usize {
        match self {
            Reason::ProbeSucceeded => 0,
            Reason::DnsError => 1,
            Reason::ConnectError => 2,
            Reason::TlsError => 3,
            Reason::CertificateInvalid => 4,
            Reason::Timeout => 5,
            Reason::CheckTimeout => 6,
            Reason::UnexpectedStatus => 7,
            Reason::UnexpectedHttpVersion => 8,
            Reason::BodyMismatch => 9,
            Reason::SlowResponse => 10,
            Reason::Forbidden => 11,
            Reason::ProtocolError => 12,
            Reason::InvalidSpec => 13,
            Reason::NotServing => 14,
            Reason::ServiceUnknown => 15,
            Reason::UnexpectedGrpcStatus => 16,
            Reason::UnexpectedResponse => 17,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::ProbeSucceeded => "ProbeSucceeded",
            Reason::DnsError => "DNSError",
            Reason::ConnectError => "ConnectError",
            Reason::TlsError => "TLSError",
            Reason::CertificateInvalid => "CertificateInvalid",
            Reason::Timeout => "Timeout",
            Reason::CheckTimeout => "CheckTimeout",
            Reason::UnexpectedStatus => "UnexpectedStatus",
            Reason::UnexpectedHttpVersion => "UnexpectedHTTPVersion",
            Reason::BodyMismatch => "BodyMismatch",
            Reason::SlowResponse => "SlowResponse",
            Reason::Forbidden => "Forbidden",
            Reason::ProtocolError => "ProtocolError",
            Reason::InvalidSpec => "InvalidSpec",
            Reason::NotServing => "NotServing",
            Reason::ServiceUnknown => "ServiceUnknown",
            Reason::UnexpectedGrpcStatus => "UnexpectedGRPCStatus",
            Reason::UnexpectedResponse => "UnexpectedResponse",
        }
    }
}

/// A failed hop: the reason and message of the probe's outcome.
#[derive(Debug)]
pub struct HopError {
    pub reason: Reason,
    /// Short; never a response body nor a header value.
    pub message: String,
    /// Set when a response came but failed a check.
    pub status_code: Option<u16>,
}

impl HopError {
    pub fn new(reason: Reason, message: impl Into<String>) -> Self {
        HopError {
            reason,
            message: message.into(),
            status_code: None,
        }
    }

    /// The same failure, of a response with this status.
    pub fn with_status(self, code: u16) -> Self {
        HopError {
            status_code: Some(code),
            ..self
        }
    }
}

/// Why a probe stopped before it had checked a final response.
#[derive(Debug)]
pub enum Stop {
    Failed(HopError),
    /// The gate was closed when a request head was about to be written, so
    /// nothing was sent and the probe has no outcome.
    GateClosed,
}

impl From<HopError> for Stop {
    fn from(e: HopError) -> Self {
        Stop::Failed(e)
    }
}

/// The rustls error inside an I/O error, if any.
pub fn rustls_cause(e: &std::io::Error) -> Option<&rustls::Error> {
    e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>())
}

pub fn short_io(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "connection refused".into(),
        std::io::ErrorKind::ConnectionReset => "connection reset".into(),
        std::io::ErrorKind::UnexpectedEof => "connection closed".into(),
        _ => e.to_string().chars().take(160).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::Reason;

    #[test]
    fn every_reason_is_listed_once_at_its_index() {
        for (i, r) in Reason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i, "{r:?}");
        }
    }
}
