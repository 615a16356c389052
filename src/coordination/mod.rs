//! Coordination: how replicas share the checkers. This replica's own Lease
//! and its dispatch/write gates (`membership`), the pure assignment
//! (`ring`), and the view of the others' Leases, leader election and the
//! sharder (`shard`); `standalone`, the sharder alone for the bench's
//! simulation. Runs on a runtime of its own thread, never behind
//! probe work.

use k8s_openapi::api::coordination::v1::Lease;

pub(crate) mod look;
pub(crate) mod membership;
pub use webchecker_core::ring;
pub(crate) mod shard;
pub mod standalone;

/// The prefix of the Lease names when `--lease-prefix` is not given.
pub const DEFAULT_LEASE_PREFIX: &str = "webchecker";

/// The names of one install's coordination Leases (`--lease-prefix`), so
/// that two installs whose Leases share a namespace never read each
/// other's members or fight over one leader Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseNames {
    prefix: String,
}

impl Default for LeaseNames {
    fn default() -> Self {
        LeaseNames::new(DEFAULT_LEASE_PREFIX)
    }
}

impl LeaseNames {
    pub fn new(prefix: &str) -> Self {
        LeaseNames {
            prefix: prefix.to_string(),
        }
    }

    /// The leader's (the sharder's) Lease.
    pub fn leader(&self) -> String {
        format!("{}-leader", self.prefix)
    }

    /// The membership Lease of the replica `identity`.
    pub fn member(&self, identity: &str) -> String {
        format!("{}-member-{identity}", self.prefix)
    }

    /// Whether `lease` is a membership Lease of this install: its name is
    /// the one this install gives its holder.
    pub fn is_member(&self, lease: &Lease) -> bool {
        let holder = lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref());
        match (holder, lease.metadata.name.as_deref()) {
            (Some(h), Some(name)) => name == self.member(h),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use kube::api::ObjectMeta;

    fn lease(name: &str, holder: Option<&str>) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn an_install_reads_its_own_member_leases_only() {
        let ours = LeaseNames::default();
        assert_eq!(ours.leader(), "webchecker-leader");
        assert_eq!(ours.member("r1"), "webchecker-member-r1");
        assert!(ours.is_member(&lease("webchecker-member-r1", Some("r1"))));
        let other = LeaseNames::new("team-b");
        assert_eq!(other.leader(), "team-b-leader");
        assert!(!ours.is_member(&lease("team-b-member-r1", Some("r1"))));
        assert!(other.is_member(&lease("team-b-member-r1", Some("r1"))));
        // A prefix that extends ours is another install all the same.
        let longer = LeaseNames::new("webchecker-member-x");
        assert!(!ours.is_member(&lease(&longer.member("r1"), Some("r1"))));
        assert!(!ours.is_member(&lease("webchecker-member-r1", None)));
    }
}
