//! The Secret and ConfigMap keys a spec takes values from.

use std::fmt;

use webchecker_api::{BasicAuth, WebCheckerSpec};

/// A value the spec takes from the cluster: one key of a Secret or of a
/// ConfigMap in the checker's namespace.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ValueRef {
    Secret { name: String, key: String },
    ConfigMap { name: String, key: String },
}

impl ValueRef {
    pub fn secret(name: &str, key: &str) -> Self {
        ValueRef::Secret {
            name: name.to_string(),
            key: key.to_string(),
        }
    }

    pub fn config_map(name: &str, key: &str) -> Self {
        ValueRef::ConfigMap {
            name: name.to_string(),
            key: key.to_string(),
        }
    }

    /// `Secret` or `ConfigMap`.
    pub fn kind(&self) -> &'static str {
        match self {
            ValueRef::Secret { .. } => "Secret",
            ValueRef::ConfigMap { .. } => "ConfigMap",
        }
    }

    pub fn name(&self) -> &str {
        match self {
            ValueRef::Secret { name, .. } | ValueRef::ConfigMap { name, .. } => name,
        }
    }

    pub fn key(&self) -> &str {
        match self {
            ValueRef::Secret { key, .. } | ValueRef::ConfigMap { key, .. } => key,
        }
    }
}

impl fmt::Display for ValueRef {
    /// Names the object and key, never the value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:?} key {:?}", self.kind(), self.name(), self.key())
    }
}

/// The keys of a `clientCertificate` Secret (as in a kubernetes.io/tls Secret).
pub const CLIENT_CERT_KEY: &str = "tls.crt";
pub const CLIENT_KEY_KEY: &str = "tls.key";

/// The user name and password keys of `auth.basic`.
pub fn basic_keys(b: &BasicAuth) -> (&str, &str) {
    (
        b.username_key.as_deref().unwrap_or("username"),
        b.password_key.as_deref().unwrap_or("password"),
    )
}

/// Every Secret and ConfigMap key the spec references: exactly what the
/// caller must resolve before [`super::plan`] (in the checker's namespace).
/// The chart's admission policy (templates/admission-policy.yaml) checks that
/// the author may read each object named by these same fields: a new
/// reference field must be added there too (docs/security.md).
pub fn references(spec: &WebCheckerSpec) -> Vec<ValueRef> {
    let mut out = Vec::new();
    for h in spec.headers.iter().flatten() {
        if let Some(src) = &h.value_from {
            out.push(ValueRef::secret(
                &src.secret_key_ref.name,
                &src.secret_key_ref.key,
            ));
        }
    }
    if let Some(auth) = &spec.auth {
        if let Some(b) = &auth.basic {
            let (u, p) = basic_keys(b);
            out.push(ValueRef::secret(&b.secret_name, u));
            out.push(ValueRef::secret(&b.secret_name, p));
        }
        if let Some(b) = &auth.bearer {
            out.push(ValueRef::secret(
                &b.secret_key_ref.name,
                &b.secret_key_ref.key,
            ));
        }
    }
    if let Some(tls) = &spec.tls {
        if let Some(ca) = &tls.ca_bundle {
            if let Some(r) = &ca.secret_key_ref {
                out.push(ValueRef::secret(&r.name, &r.key));
            }
            if let Some(r) = &ca.config_map_key_ref {
                out.push(ValueRef::config_map(&r.name, &r.key));
            }
        }
        if let Some(c) = &tls.client_certificate {
            out.push(ValueRef::secret(&c.secret_name, CLIENT_CERT_KEY));
            out.push(ValueRef::secret(&c.secret_name, CLIENT_KEY_KEY));
        }
    }
    out.sort();
    out.dedup();
    out
}
