//! Secret and ConfigMap values that checkers reference (header values, `auth`,
//! `tls.caBundle`, `tls.clientCertificate`).
//!
//! The checker feeder (feed.rs) resolves them before a checker reaches the
//! engine (the engine's commands are attach.rs's business: this module deals
//! in values only), in the checker's own namespace and only the keys
//! the spec names ([`crate::probe::references`]), through a small cache with a
//! TTL. It re-resolves the checkers it tracks every [`REFRESH`], so a rotated
//! Secret is in use within `TTL + REFRESH`; a missing object or key is read
//! again after 10 s, so a Secret created after its checker is picked up within
//! about 25 s.
//!
//! Values are never logged, and [`Resolved`]'s Debug prints only their length.
//! Secrets of a type meant never to leave the cluster (ServiceAccount and
//! bootstrap tokens) are refused, whoever wrote the checker.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, Client};
use tracing::debug;

use crate::probe::ValueRef;

/// How long a value read from the API server is used before it is read again.
pub const TTL: Duration = Duration::from_secs(60);
/// How often the feeder re-resolves the checkers that reference values.
pub const REFRESH: Duration = Duration::from_secs(15);
/// One read of the API server at most (the feeder waits for it).
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// A transient read error is retried after this long.
const RETRY: Duration = Duration::from_secs(10);

/// Secret types whose values are never meant to leave the cluster: refused
/// whoever wrote the checker and whatever the admission policy allowed
/// (docs/security.md, "Secrets a checker can use"), with why.
const REFUSED_TYPES: &[(&str, &str)] = &[
    (
        "kubernetes.io/service-account-token",
        "a ServiceAccount token grants access to the API server",
    ),
    (
        "bootstrap.kubernetes.io/token",
        "a bootstrap token lets a node join the cluster",
    ),
];

/// The InvalidSpec message for a Secret of a refused type, if it is one.
fn refused_type(namespace: &str, name: &str, type_: Option<&str>) -> Option<String> {
    let t = type_?;
    let (_, why) = REFUSED_TYPES.iter().find(|(r, _)| *r == t)?;
    Some(format!(
        "Secret {name:?} in namespace {namespace:?} is of type {t}, which the operator never \
         uses ({why}): put a credential made for the target in a Secret of type Opaque \
         (for the cluster's CA certificate, use the ConfigMap kube-root-ca.crt)"
    ))
}

/// The resolved values of one checker's references: the value, or why it
/// could not be read (a message naming the object and key, never a value).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Resolved(BTreeMap<ValueRef, Result<Vec<u8>, String>>);

impl Resolved {
    /// The value of `r`, or the InvalidSpec message.
    pub fn get(&self, r: &ValueRef) -> Result<Vec<u8>, String> {
        match self.0.get(r) {
            Some(Ok(v)) => Ok(v.clone()),
            Some(Err(e)) => Err(e.clone()),
            None => Err(format!("{r} was not read")),
        }
    }
}

impl FromIterator<(ValueRef, Result<Vec<u8>, String>)> for Resolved {
    fn from_iter<I: IntoIterator<Item = (ValueRef, Result<Vec<u8>, String>)>>(iter: I) -> Self {
        Resolved(iter.into_iter().collect())
    }
}

impl fmt::Debug for Resolved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut m = f.debug_map();
        for (k, v) in &self.0 {
            match v {
                Ok(bytes) => m.entry(&k.to_string(), &format_args!("<{} bytes>", bytes.len())),
                Err(e) => m.entry(&k.to_string(), e),
            };
        }
        m.finish()
    }
}

struct Cached {
    /// When the entry must be read again.
    expires: Instant,
    value: Result<Vec<u8>, String>,
    /// A transient error replaced by the last good value.
    stale: bool,
}

struct Tracked {
    namespace: String,
    refs: Vec<ValueRef>,
    last: Resolved,
}

/// Reads referenced values through a TTL cache and tracks which checkers use
/// them. Owned by the feeder task.
pub struct SecretResolver {
    client: Client,
    ttl: Duration,
    cache: HashMap<(String, ValueRef), Cached>,
    tracked: HashMap<String, Tracked>,
}

fn kind_resource(kind: &str) -> &'static str {
    if kind == "Secret" {
        "secrets"
    } else {
        "configmaps"
    }
}

impl SecretResolver {
    pub fn new(client: Client, ttl: Duration) -> Self {
        SecretResolver {
            client,
            ttl,
            cache: HashMap::new(),
            tracked: HashMap::new(),
        }
    }

    /// Resolves the values `refs` names for checker `key` in `namespace`, and
    /// tracks them for [`SecretResolver::changed`]; a checker that references
    /// nothing is forgotten.
    pub async fn track(&mut self, key: String, namespace: String, refs: Vec<ValueRef>) -> Resolved {
        if refs.is_empty() {
            self.tracked.remove(&key);
            return Resolved::default();
        }
        let r = self.resolve(&namespace, &refs).await;
        self.tracked.insert(
            key,
            Tracked {
                namespace,
                refs,
                last: r.clone(),
            },
        );
        r
    }

    /// Stops tracking a checker.
    pub fn forget(&mut self, key: &str) {
        self.tracked.remove(key);
    }

    /// Stops tracking every checker not in `present`.
    pub fn retain(&mut self, present: &HashSet<String>) {
        self.tracked.retain(|k, _| present.contains(k));
    }

    /// Re-resolves every tracked checker; returns the new values of each whose
    /// values changed (a rotation, a Secret created or deleted).
    pub async fn changed(&mut self) -> Vec<(String, Resolved)> {
        let now = Instant::now();
        self.cache.retain(|_, c| c.expires + self.ttl > now);
        let keys: Vec<String> = self.tracked.keys().cloned().collect();
        let mut out = Vec::new();
        for key in keys {
            let Some(t) = self.tracked.get(&key) else {
                continue;
            };
            let (ns, refs) = (t.namespace.clone(), t.refs.clone());
            let r = self.resolve(&ns, &refs).await;
            if let Some(t) = self.tracked.get_mut(&key)
                && t.last != r
            {
                t.last = r.clone();
                debug!(checker = %key, "referenced Secret/ConfigMap values changed");
                out.push((key, r));
            }
        }
        out
    }

    /// Resolves `refs` in `namespace`: from the cache while fresh, else one
    /// read per object.
    pub async fn resolve(&mut self, namespace: &str, refs: &[ValueRef]) -> Resolved {
        let now = Instant::now();
        let mut wanted: BTreeMap<(&'static str, String), BTreeSet<String>> = BTreeMap::new();
        for r in refs {
            let fresh = self
                .cache
                .get(&(namespace.to_string(), r.clone()))
                .is_some_and(|c| c.expires > now);
            if !fresh {
                wanted
                    .entry((r.kind(), r.name().to_string()))
                    .or_default()
                    .insert(r.key().to_string());
            }
        }
        for ((kind, name), keys) in wanted {
            let fetched = self.fetch(namespace, kind, &name, &keys).await;
            for k in keys {
                let r = if kind == "Secret" {
                    ValueRef::secret(&name, &k)
                } else {
                    ValueRef::config_map(&name, &k)
                };
                let slot = (namespace.to_string(), r.clone());
                let entry = match &fetched {
                    Ok(data) => Cached {
                        expires: now + self.ttl,
                        value: data.get(&k).cloned().ok_or_else(|| {
                            format!("{kind} {name:?} in namespace {namespace:?} has no key {k:?}")
                        }),
                        stale: false,
                    },
                    // Read again soon: the object may be created any time.
                    Err(Fetch::Final(msg)) => Cached {
                        expires: now + RETRY,
                        value: Err(msg.clone()),
                        stale: false,
                    },
                    Err(Fetch::Transient(msg)) => match self.cache.get(&slot) {
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
                self.cache.insert(slot, entry);
            }
        }
        refs.iter()
            .map(|r| {
                let v = self
                    .cache
                    .get(&(namespace.to_string(), r.clone()))
                    .map(|c| c.value.clone())
                    .unwrap_or_else(|| Err(format!("{r} was not read")));
                (r.clone(), v)
            })
            .collect()
    }

    /// Reads one Secret or ConfigMap and keeps only `keys`.
    async fn fetch(
        &self,
        namespace: &str,
        kind: &'static str,
        name: &str,
        keys: &BTreeSet<String>,
    ) -> Result<HashMap<String, Vec<u8>>, Fetch> {
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
        let wanted: HashSet<&str> = keys.iter().map(String::as_str).collect();
        if kind == "Secret" {
            let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
            let obj = tokio::time::timeout(FETCH_TIMEOUT, api.get_opt(name))
                .await
                .map_err(|_| timeout())?
                .map_err(classify)?
                .ok_or_else(missing)?;
            if let Some(msg) = refused_type(namespace, name, obj.type_.as_deref()) {
                return Err(Fetch::Final(msg));
            }
            Ok(obj
                .data
                .unwrap_or_default()
                .into_iter()
                .filter(|(k, _)| wanted.contains(k.as_str()))
                .map(|(k, v)| (k, v.0))
                .collect())
        } else {
            let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
            let obj = tokio::time::timeout(FETCH_TIMEOUT, api.get_opt(name))
                .await
                .map_err(|_| timeout())?
                .map_err(classify)?
                .ok_or_else(missing)?;
            let mut out: HashMap<String, Vec<u8>> = obj
                .binary_data
                .unwrap_or_default()
                .into_iter()
                .filter(|(k, _)| wanted.contains(k.as_str()))
                .map(|(k, v)| (k, v.0))
                .collect();
            out.extend(
                obj.data
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|(k, _)| wanted.contains(k.as_str()))
                    .map(|(k, v)| (k, v.into_bytes())),
            );
            Ok(out)
        }
    }
}

enum Fetch {
    /// Not found, forbidden: the answer until the TTL runs out.
    Final(String),
    /// The API server did not answer properly: retried soon.
    Transient(String),
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
            let msg = refused_type("shop", "tok", Some(t)).expect(t);
            assert!(
                msg.contains("Secret \"tok\" in namespace \"shop\""),
                "{msg}"
            );
            assert!(msg.contains(t) && msg.contains("Opaque"), "{msg}");
        }
        for t in [
            None,
            Some("Opaque"),
            Some("kubernetes.io/basic-auth"),
            Some("kubernetes.io/tls"),
            Some("kubernetes.io/dockerconfigjson"),
        ] {
            assert_eq!(refused_type("shop", "s", t), None, "{t:?}");
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
