//! Secret and ConfigMap values that checkers reference (header values, `auth`,
//! `tls.caBundle`, `tls.clientCertificate`): what a resolved value is, how one
//! object is read, and the cache of what was read.
//!
//! The reads happen off the checker feed, in the resolver task
//! (resolver.rs), a few at a time per namespace with the namespaces taken in
//! turn ([`queue`]): a namespace whose checkers name many missing or slow
//! objects waits behind its own reads, and a checker that references nothing
//! never waits for a read. Values are read in the checker's own namespace, and
//! only the keys its spec names ([`crate::probe::references`]) are kept. A
//! value is used for [`TTL`]; every [`REFRESH`] the resolver queues a read of
//! each value past it, so a rotated Secret is in use within `TTL + REFRESH`
//! (plus its namespace's queue); a missing object or key is read again after
//! [`RETRY`], so a Secret created after its checker is picked up within about
//! 25 s; a transient error keeps the last good value. Every read has a
//! deadline ([`FETCH_TIMEOUT`]).
//!
//! Values are never logged, and [`Resolved`]'s Debug prints only their length.
//! Secrets of a type meant never to leave the cluster (ServiceAccount and
//! bootstrap tokens) are refused, whoever wrote the checker.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, Client};
use tracing::debug;

use crate::probe::ValueRef;

pub mod queue;

/// How long a value read from the API server is used before it is read again.
pub const TTL: Duration = Duration::from_secs(60);
/// How often the resolver looks for values past their TTL.
pub const REFRESH: Duration = Duration::from_secs(15);
/// One read of the API server at most (the checker that waits for it waits
/// no longer; the others do not wait for it at all).
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// A missing object or key, or a transient read error, is read again after
/// this long.
pub const RETRY: Duration = Duration::from_secs(10);

/// Secret types whose values are never meant to leave the cluster: refused
/// whoever wrote the checker and whatever the admission policy allowed
/// (docs/security.md, "Secrets a checker can use"), with why.
const REFUSED_TYPES: &[(&str, &str)] = &[
    (
        "kubernetes.io/service-account-token",
        "it grants access to the API server",
    ),
    (
        "bootstrap.kubernetes.io/token",
        "it lets a node join the cluster",
    ),
];

/// The InvalidSpec message for a Secret of a refused type, if it is one.
fn refused_type(name: &str, type_: Option<&str>) -> Option<String> {
    let t = type_?;
    let (_, why) = REFUSED_TYPES.iter().find(|(r, _)| *r == t)?;
    Some(format!(
        "Secret {name:?} is of type {t}, which the operator never uses ({why}): use one of \
         type Opaque (CA: ConfigMap kube-root-ca.crt)"
    ))
}

pub use crate::checker::Resolved;

/// One Secret or ConfigMap that checkers reference: the unit of a read.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectId {
    pub namespace: String,
    /// `Secret` or `ConfigMap`.
    pub kind: &'static str,
    pub name: String,
}

impl ObjectId {
    /// The object that holds `r`, in the checker's namespace.
    pub fn of(namespace: &str, r: &ValueRef) -> Self {
        ObjectId {
            namespace: namespace.to_string(),
            kind: r.kind(),
            name: r.name().to_string(),
        }
    }

    /// Whether `r` is a key of this object.
    pub fn holds(&self, r: &ValueRef) -> bool {
        r.kind() == self.kind && r.name() == self.name
    }
}

/// Why an object could not be read.
#[derive(Clone, Debug)]
pub enum Fetch {
    /// Not found, forbidden, refused type: the answer until read again.
    Final(String),
    /// The API server did not answer properly: the last good value stays.
    Transient(String),
}

/// What one read gave: every key of the object (the cache keeps only the
/// ones a spec names), or why not.
pub type Read = Result<HashMap<String, Vec<u8>>, Fetch>;

/// Reads one object; the API server in production, a script in tests.
pub type Reader = Arc<dyn Fn(ObjectId) -> BoxFuture<'static, Read> + Send + Sync>;

/// Reads from the API server with `client`.
pub fn reader(client: Client) -> Reader {
    Arc::new(move |obj| Box::pin(read(client.clone(), obj)))
}

fn kind_resource(kind: &str) -> &'static str {
    if kind == "Secret" {
        "secrets"
    } else {
        "configmaps"
    }
}

/// Reads one Secret or ConfigMap, within [`FETCH_TIMEOUT`].
pub async fn read(client: Client, obj: ObjectId) -> Read {
    let ObjectId {
        namespace,
        kind,
        name,
    } = &obj;
    debug!(namespace, kind, name, "reading referenced object");
    let classify = |e: kube::Error| match &e {
        kube::Error::Api(s) if s.code == 403 => Fetch::Final(format!(
            "the operator may not read {kind} {name:?} in namespace {namespace:?} (it needs get on {})",
            kind_resource(kind)
        )),
        kube::Error::Api(s) => Fetch::Transient(format!(
            "cannot read {kind} {name:?} in namespace {namespace:?}: HTTP {} {}",
            s.code, s.reason
        )),
        _ => Fetch::Transient(format!(
            "cannot read {kind} {name:?} in namespace {namespace:?}: the API server did not answer"
        )),
    };
    let timeout = || {
        Fetch::Transient(format!(
            "cannot read {kind} {name:?} in namespace {namespace:?}: timed out"
        ))
    };
    let missing = || {
        Fetch::Final(format!(
            "{kind} {name:?} not found in namespace {namespace:?}"
        ))
    };
    if *kind == "Secret" {
        let api: Api<Secret> = Api::namespaced(client, namespace);
        let obj = tokio::time::timeout(FETCH_TIMEOUT, api.get_opt(name))
            .await
            .map_err(|_| timeout())?
            .map_err(classify)?
            .ok_or_else(missing)?;
        if let Some(msg) = refused_type(name, obj.type_.as_deref()) {
            return Err(Fetch::Final(msg));
        }
        Ok(obj
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect())
    } else {
        let api: Api<ConfigMap> = Api::namespaced(client, namespace);
        let obj = tokio::time::timeout(FETCH_TIMEOUT, api.get_opt(name))
            .await
            .map_err(|_| timeout())?
            .map_err(classify)?
            .ok_or_else(missing)?;
        let mut out: HashMap<String, Vec<u8>> = obj
            .binary_data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect();
        out.extend(
            obj.data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.into_bytes())),
        );
        Ok(out)
    }
}

struct Cached {
    /// When the entry must be read again.
    expires: Instant,
    value: Result<Vec<u8>, String>,
    /// A transient error replaced by the last good value.
    stale: bool,
}

/// The values read, per namespace and key, with when each must be read again.
pub struct ValueCache {
    ttl: Duration,
    entries: HashMap<(String, ValueRef), Cached>,
}

impl ValueCache {
    pub fn new(ttl: Duration) -> Self {
        ValueCache {
            ttl,
            entries: HashMap::new(),
        }
    }

    /// The value of `r` in `namespace`, unless it must be read again.
    pub fn fresh(
        &self,
        namespace: &str,
        r: &ValueRef,
        now: Instant,
    ) -> Option<Result<Vec<u8>, String>> {
        self.entries
            .get(&(namespace.to_string(), r.clone()))
            .filter(|c| c.expires > now)
            .map(|c| c.value.clone())
    }

    /// The last value read of `r` in `namespace`, fresh or not.
    pub fn last(&self, namespace: &str, r: &ValueRef) -> Result<Vec<u8>, String> {
        self.entries
            .get(&(namespace.to_string(), r.clone()))
            .map(|c| c.value.clone())
            .unwrap_or_else(|| Err(format!("{r} was not read")))
    }

    /// Keeps what one read of `obj` gave for `keys` (the keys some spec
    /// names; the object's other keys are dropped here).
    pub fn store(&mut self, obj: &ObjectId, read: &Read, keys: &BTreeSet<String>, now: Instant) {
        let ObjectId {
            namespace,
            kind,
            name,
        } = obj;
        for k in keys {
            let r = if *kind == "Secret" {
                ValueRef::secret(name, k)
            } else {
                ValueRef::config_map(name, k)
            };
            let slot = (namespace.clone(), r);
            let entry = match read {
                Ok(data) => match data.get(k) {
                    Some(v) => Cached {
                        expires: now + self.ttl,
                        value: Ok(v.clone()),
                        stale: false,
                    },
                    // Read again soon: the key may be added any time.
                    None => Cached {
                        expires: now + RETRY,
                        value: Err(format!(
                            "{kind} {name:?} in namespace {namespace:?} has no key {k:?}"
                        )),
                        stale: false,
                    },
                },
                // Read again soon: the object may be created any time.
                Err(Fetch::Final(msg)) => Cached {
                    expires: now + RETRY,
                    value: Err(msg.clone()),
                    stale: false,
                },
                Err(Fetch::Transient(msg)) => match self.entries.get(&slot) {
                    // Keep what worked until the API server answers again.
                    Some(old) if old.value.is_ok() || old.stale => Cached {
                        expires: now + RETRY,
                        value: old.value.clone(),
                        stale: true,
                    },
                    _ => Cached {
                        expires: now + RETRY,
                        value: Err(msg.clone()),
                        stale: false,
                    },
                },
            };
            self.entries.insert(slot, entry);
        }
    }

    /// Forgets the entries a whole TTL past their time (nobody asked again).
    pub fn purge(&mut self, now: Instant) {
        let ttl = self.ttl;
        self.entries.retain(|_, c| c.expires + ttl > now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_secrets_are_refused_with_an_actionable_message() {
        for t in [
            "kubernetes.io/service-account-token",
            "bootstrap.kubernetes.io/token",
        ] {
            let msg = refused_type("tok", Some(t)).expect(t);
            assert!(msg.starts_with("Secret \"tok\" "), "{msg}");
            assert!(msg.chars().count() <= crate::api::MAX_MESSAGE, "{msg}");
            assert!(msg.contains(t) && msg.contains("Opaque"), "{msg}");
        }
        for t in [
            None,
            Some("Opaque"),
            Some("kubernetes.io/basic-auth"),
            Some("kubernetes.io/tls"),
            Some("kubernetes.io/dockerconfigjson"),
        ] {
            assert_eq!(refused_type("s", t), None, "{t:?}");
        }
    }

    #[test]
    fn debug_never_prints_values() {
        let r: Resolved = [
            (ValueRef::secret("s", "k"), Ok(b"hunter2-s3cr3t".to_vec())),
            (
                ValueRef::config_map("c", "ca"),
                Err("ConfigMap \"c\" not found".into()),
            ),
        ]
        .into_iter()
        .collect();
        let d = format!("{r:?}");
        assert!(!d.contains("s3cr3t"), "{d}");
        assert!(d.contains("<14 bytes>"), "{d}");
        assert_eq!(
            r.get(&ValueRef::secret("s", "k")).unwrap(),
            b"hunter2-s3cr3t"
        );
        assert!(
            r.get(&ValueRef::secret("s", "other"))
                .unwrap_err()
                .contains("\"other\"")
        );
    }
}
