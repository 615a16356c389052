//! A URL the prober can request: scheme, host, port and origin-form target.

/// A domain as a request names it (no trailing dot) and whether it was
/// written absolute (`example.com.`: one trailing dot).
pub fn absolute_name(d: &str) -> (String, bool) {
    match d.strip_suffix('.') {
        Some(bare) if !bare.is_empty() && !bare.ends_with('.') => (bare.to_string(), true),
        _ => (d.to_string(), false),
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub https: bool,
    /// As the request names it (Host, `:authority`, SNI): without the
    /// trailing dot of an absolute name.
    pub host: String,
    /// Written with a trailing dot (`web.shop.svc.cluster.local.`): looked
    /// up as it is, never through the resolver's search list.
    pub absolute: bool,
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
        let (host, absolute) = match u.host() {
            Some(url::Host::Domain(d)) => absolute_name(d),
            Some(url::Host::Ipv4(ip)) => (ip.to_string(), false),
            Some(url::Host::Ipv6(ip)) => (ip.to_string(), false),
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
            absolute,
            port,
            path_and_query,
        })
    }

    /// The name looked up: the host, with its trailing dot when absolute.
    pub fn lookup_name(&self) -> String {
        if self.absolute {
            format!("{}.", self.host)
        } else {
            self.host.clone()
        }
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
    pub fn host_port(&self) -> String {
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

    pub fn same_origin(&self, other: &Target) -> bool {
        self.https == other.https
            && self.host.eq_ignore_ascii_case(&other.host)
            && self.port == other.port
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(u: &str) -> Target {
        Target::parse(&url::Url::parse(u).unwrap()).unwrap()
    }

    #[test]
    fn an_absolute_name_is_looked_up_absolute_and_sent_without_its_dot() {
        let t = parse("http://web.shop.svc.cluster.local.:8080/healthz");
        assert_eq!(t.host, "web.shop.svc.cluster.local");
        assert!(t.absolute);
        assert_eq!(t.lookup_name(), "web.shop.svc.cluster.local.");
        assert_eq!(t.authority(), "web.shop.svc.cluster.local:8080");
        let r = parse("https://example.com/");
        assert!(!r.absolute);
        assert_eq!(r.lookup_name(), "example.com");
        assert_eq!(absolute_name("a.."), ("a..".to_string(), false));
        assert_eq!(absolute_name("."), (".".to_string(), false));
    }
}
