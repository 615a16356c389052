//! A URL the prober can request: scheme, host, port and origin-form target.

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub https: bool,
    pub host: String,
    pub port: u16,
    /// Origin-form request target: path and query.
    pub path_and_query: String,
}

impl Target {
    pub fn parse(u: &url::Url) -> Result<Self, String> {
        let https = match u.scheme() {
            "http" => false,
            "https" => true,
            other => return Err(format!("unsupported scheme {other:?}, use http or https")),
        };
        let host = match u.host() {
            Some(url::Host::Domain(d)) => d.to_string(),
            Some(url::Host::Ipv4(ip)) => ip.to_string(),
            Some(url::Host::Ipv6(ip)) => ip.to_string(),
            None => return Err("URL has no host".into()),
        };
        let port = u
            .port_or_known_default()
            .unwrap_or(if https { 443 } else { 80 });
        let mut path_and_query = u.path().to_string();
        if let Some(q) = u.query() {
            path_and_query.push('?');
            path_and_query.push_str(q);
        }
        Ok(Target {
            https,
            host,
            port,
            path_and_query,
        })
    }

    fn bracketed_host(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        }
    }

    /// The Host header: the port only when it is not the scheme's default.
    pub fn authority(&self) -> String {
        let default = if self.https { 443 } else { 80 };
        if self.port == default {
            self.bracketed_host()
        } else {
            format!("{}:{}", self.bracketed_host(), self.port)
        }
    }

    /// `host:port` with the port always present (CONNECT's request target).
    pub(super) fn host_port(&self) -> String {
        format!("{}:{}", self.bracketed_host(), self.port)
    }

    pub fn url(&self) -> String {
        format!(
            "{}://{}{}",
            if self.https { "https" } else { "http" },
            self.authority(),
            self.path_and_query
        )
    }

    pub(super) fn same_origin(&self, other: &Target) -> bool {
        self.https == other.https
            && self.host.eq_ignore_ascii_case(&other.host)
            && self.port == other.port
    }
}
