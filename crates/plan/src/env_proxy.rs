//! Which proxy a hop goes through: `proxy.url` (parsed here) or the
//! operator's environment (`proxy.fromEnvironment`). The CONNECT tunnel
//! through it is tunnel.rs.

use std::net::IpAddr;

use ipnet::IpNet;

use super::target::Target;

/// Parses an http:// proxy URL (a bare `host:port` counts as http://).
pub fn proxy_target(raw: &str) -> Result<Target, String> {
    let raw = raw.trim();
    let with_scheme = if raw.contains("://") {
        raw.to_string()
    } else {
        format!("http://{raw}")
    };
    let u = url::Url::parse(&with_scheme).map_err(|e| format!("not a URL: {e}"))?;
    if u.scheme() != "http" {
        return Err(format!(
            "scheme {:?} is not supported; the proxy must be an http:// URL",
            u.scheme()
        ));
    }
    if !u.username().is_empty() || u.password().is_some() {
        return Err("proxy credentials are not supported".into());
    }
    let mut t = Target::parse(&u)?;
    t.path_and_query = "/".into();
    Ok(t)
}

/// The proxy settings of the operator's environment (HTTP_PROXY, HTTPS_PROXY,
/// NO_PROXY, or their lower-case forms), used by `proxy.fromEnvironment`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EnvProxy {
    pub http: Option<Result<Target, String>>,
    pub https: Option<Result<Target, String>>,
    /// Lower-cased NO_PROXY entries.
    pub no_proxy: Vec<String>,
}

impl EnvProxy {
    pub fn from_env() -> Self {
        let get = |lower: &str, upper: &str| {
            std::env::var(lower)
                .ok()
                .or_else(|| std::env::var(upper).ok())
                .filter(|v| !v.trim().is_empty())
        };
        Self::parse(
            get("http_proxy", "HTTP_PROXY").as_deref(),
            get("https_proxy", "HTTPS_PROXY").as_deref(),
            get("no_proxy", "NO_PROXY").as_deref(),
        )
    }

    pub fn parse(http: Option<&str>, https: Option<&str>, no_proxy: Option<&str>) -> Self {
        EnvProxy {
            http: http.map(proxy_target),
            https: https.map(proxy_target),
            no_proxy: no_proxy
                .unwrap_or_default()
                .split(',')
                .map(|e| e.trim().to_ascii_lowercase())
                .filter(|e| !e.is_empty())
                .collect(),
        }
    }

    fn bypass(&self, target: &Target) -> bool {
        let host = target.host.to_ascii_lowercase();
        let ip = host.parse::<IpAddr>().ok();
        self.no_proxy.iter().any(|entry| {
            if entry == "*" {
                return true;
            }
            if let (Some(ip), Ok(net)) = (ip, entry.parse::<IpNet>()) {
                return net.contains(&ip);
            }
            // Drop a port (host:port) but not the colons of an IPv6 address.
            let e = match entry.rsplit_once(':') {
                Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) && !h.contains(':') => h,
                _ => entry.as_str(),
            };
            let e = e.trim_start_matches("*.").trim_start_matches('.');
            let e = e.trim_start_matches('[').trim_end_matches(']');
            host == e || host.ends_with(&format!(".{e}"))
        })
    }

    /// The proxy for this target, if any.
    pub fn for_target(&self, target: &Target) -> Option<Result<&Target, &String>> {
        if self.bypass(target) {
            return None;
        }
        let p = if target.https {
            self.https.as_ref()
        } else {
            self.http.as_ref()
        };
        p.map(|r| r.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_proxy_and_no_proxy() {
        let e = EnvProxy::parse(
            Some("proxy:3128"),
            Some("http://sproxy:8080"),
            Some("internal.example, .corp,10.0.0.0/8,localhost:8080"),
        );
        let t = |u: &str| Target::parse(&url::Url::parse(u).unwrap()).unwrap();
        let host = |r: Option<Result<&Target, &String>>| r.map(|r| r.unwrap().host.clone());
        assert_eq!(host(e.for_target(&t("http://a.b/"))), Some("proxy".into()));
        assert_eq!(
            host(e.for_target(&t("https://a.b/"))),
            Some("sproxy".into())
        );
        assert_eq!(e.for_target(&t("http://internal.example/")), None);
        assert_eq!(e.for_target(&t("http://x.internal.example/")), None);
        assert_eq!(e.for_target(&t("http://a.corp/")), None);
        assert_eq!(e.for_target(&t("http://10.1.2.3/")), None);
        assert_eq!(e.for_target(&t("http://localhost/")), None);
        assert!(e.for_target(&t("http://notinternal.example/")).is_some());
        let all = EnvProxy::parse(Some("p:1"), None, Some("*"));
        assert_eq!(all.for_target(&t("http://a.b/")), None);
        assert_eq!(
            EnvProxy::parse(None, None, None).for_target(&t("http://a/")),
            None
        );
        let bad = EnvProxy::parse(Some("socks5://p:1"), None, None);
        assert!(bad.for_target(&t("http://a/")).unwrap().is_err());
    }
}
