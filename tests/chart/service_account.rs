//! Least privilege, live: three operator processes run with a token of the
//! chart's ServiceAccount and the Deployment's environment, nothing else,
//! and shard, probe and fail over; a replica started after a permission was
//! taken away exits at once, naming it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use webchecker::api::WebChecker;
use webchecker::assignment::OWNER_LABEL;

use super::install::{helm_release, live_env};
use super::rendered::POD_UID;
use super::*;
use support::release::{Replica, service_account};
use support::{
    FAST_LEASES, Witness, create_checkers, eventually, exclusivity_violation, failover_gap, metric,
};

const INTERVAL: u32 = 2;
/// Must match support::FAST_LEASES.
const LEASE: Duration = Duration::from_secs(3);

/// One replica as a pod of the Deployment would run it: the container's
/// environment `env`, the ServiceAccount's token, fast Leases.
fn pod(cluster: &Cluster, kubeconfig: &Path, env: &BTreeMap<String, String>, id: &str) -> Replica {
    Replica::spawn_pod(
        cluster,
        kubeconfig,
        env,
        (id, RELEASE_NS, POD_UID),
        FAST_LEASES,
    )
}

/// How the process ended (it must, within 30 s).
async fn exit_status(op: &mut Replica) -> ExitStatus {
    let what = format!("{} exits", op.0.identity);
    eventually(Duration::from_secs(30), &what, || {
        let st = op.0.exited();
        async move { st }
    })
    .await
}

/// `kubectl auth can-i` with the given kubeconfig.
async fn can_i(cluster: &Cluster, kubeconfig: &Path, args: &[&str]) -> bool {
    let mut a = vec!["auth", "can-i"];
    a.extend_from_slice(args);
    let out = kubectl_as(cluster, kubeconfig, &a).await;
    String::from_utf8_lossy(&out.stdout).trim() == "yes"
}

/// Edits the chart's ClusterRole as an administrator would (get, change, replace).
async fn edit_clusterrole(cluster: &Cluster, f: impl FnOnce(&mut Vec<serde_json::Value>)) {
    let mut cr = kubectl_json(cluster, &["get", "clusterrole", FULLNAME]).await;
    f(cr["rules"].as_array_mut().expect("rules"));
    let body = cr.to_string();
    let out = cluster.kubectl_stdin(&["replace", "-f", "-"], &body);
    ok(out, "kubectl replace clusterrole");
}

/// The gap of `orphans` across the kill of `victim` at `at`, counting only
/// the other replicas' probes after it (one the victim began as it was
/// killed takes nothing over).
fn taken_over(
    witness: &Witness,
    orphans: &[String],
    at: Instant,
    victim: &str,
) -> (Duration, String) {
    let hits: Vec<_> = witness
        .hits()
        .into_iter()
        .filter(|h| h.start <= at || h.replica != victim)
        .collect();
    failover_gap(&hits, orphans, at)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_account_of_the_chart_is_enough_and_each_permission_is_needed() {
    // A control plane of its own: without --watch-namespace the replicas see
    // every WebChecker of the cluster, and no other test's may interfere.
    // Without the CRD: helm installs it from the chart's crds/.
    let cluster: &'static Cluster = Box::leak(Box::new(Cluster::start_bare("chart-rbac", "")));
    let t0 = Instant::now();
    install_with_the_crd(cluster).await;
    println!("helm install (with the CRD): {:?}", t0.elapsed());

    // A token of the chart's ServiceAccount (TokenRequest API), as a pod gets one.
    let (sa_kc, _) = service_account(cluster, RELEASE_NS, FULLNAME).await;
    the_service_account_may_only_what_it_needs(cluster, &sa_kc).await;

    // Three replicas with the Deployment's environment and the token.
    let env = pod_env(cluster).await;
    let ids: Vec<String> = ["x2b7k", "q9m4t", "h6v8p"]
        .iter()
        .map(|s| format!("{FULLNAME}-5c9f7d8b6-{s}"))
        .collect();
    let witness = Witness::start().await;
    witness.set_hold(support::HOLD.0, support::HOLD.1);
    let mut ops: Vec<Replica> = ids
        .iter()
        .map(|id| pod(cluster, &sa_kc, &env, id))
        .collect();
    for o in &mut ops {
        o.wait_ready().await;
    }
    println!("3 replicas ready: {:?}", t0.elapsed());
    every_source_of_the_guard_is_up(&ops).await;

    // 60 checkers in a namespace of their own.
    let probes_ns = cluster.namespace("probes");
    let client = cluster.client().await;
    let names: Vec<String> = (0..60).map(|i| format!("c{i}")).collect();
    let created = Instant::now();
    create_checkers(&client, &probes_ns, &witness.url(), &names, INTERVAL).await;
    let shard = Sharded {
        api: Api::namespaced(client.clone(), &probes_ns),
        client,
        ns: probes_ns,
        names,
        ids,
        witness,
    };
    let assigned = eventually(
        Duration::from_secs(60),
        "every checker assigned to a replica",
        || shard.owners(&shard.ids),
    )
    .await;
    println!("60 checkers assigned: {:?}", created.elapsed());
    shard.every_checker_ready_with_its_owners_status().await;
    println!("60 checkers Ready=True: {:?}", created.elapsed());
    shard.an_event_about_every_checker().await;
    let owners_now = shard.each_probed_by_its_owner_only(&ops).await;
    let mut shards: BTreeMap<&str, usize> = BTreeMap::new();
    for o in owners_now.values() {
        *shards.entry(o.as_str()).or_default() += 1;
    }
    println!("shards: {shards:?} (first assignment {:?})", assigned.len());
    shard
        .a_killed_replica_is_taken_over(&mut ops, &owners_now, &shards)
        .await;
    ops.clear();

    each_permission_is_needed(cluster, &sa_kc, &env).await;

    // Uninstall: the release goes, the CRD helm installed and the checkers stay.
    uninstall(cluster, &shard.api).await;
    println!("whole test: {:?}", t0.elapsed());
}

/// `helm install` without reading Secrets, loopback targets allowed; the
/// CRD from the chart's crds/, established.
async fn install_with_the_crd(cluster: &'static Cluster) {
    helm_install(
        cluster,
        RELEASE,
        RELEASE_NS,
        &[
            "--set",
            "rbac.readSecrets=false",
            // The test's targets listen on loopback.
            "--set",
            "operator.allowLoopback=true",
        ],
    )
    .await;
    tokio::task::spawn_blocking(|| cluster.wait_established(CRD))
        .await
        .unwrap();
}

/// `helm uninstall`: the release goes, the CRD and the 60 checkers stay.
async fn uninstall(cluster: &Cluster, api: &Api<WebChecker>) {
    ok(
        cluster_helm(cluster, &["uninstall", RELEASE, "-n", RELEASE_NS]).await,
        "helm uninstall",
    );
    assert!(helm_release(cluster).await.is_empty());
    assert_eq!(
        api.list(&ListParams::default()).await.unwrap().items.len(),
        60
    );
}

/// A few things the ServiceAccount must not do.
const DENIED: &[&[&str]] = &[
    &["get", "secrets", "-A"],
    &["update", "webcheckers.test.network.io", "-A"],
    &["delete", "webcheckers.test.network.io", "-A"],
    &["create", "webcheckers.test.network.io", "-A"],
    &["create", "leases.coordination.k8s.io", "-n", "default"],
    // The diagnosis reads (rbac.diagnose) and the forgery guard's watches,
    // nothing more of the same objects.
    &["watch", "pods", "-A"],
    &["delete", "pods", "-A"],
    &["get", "pods", "--subresource=log", "-A"],
    &["create", "events", "-A"],
    &["watch", "services", "-A"],
    &["update", "services", "-n", "default"],
    &["watch", "endpointslices.discovery.k8s.io", "-A"],
    &["list", "gateways.gateway.networking.k8s.io", "-A"],
];

/// Tokens of ServiceAccounts other than its own.
const DENIED_TOKENS: &[&[&str]] = &[
    &[
        "create",
        "serviceaccounts/default",
        "--subresource=token",
        "-n",
        RELEASE_NS,
    ],
    &[
        "create",
        "serviceaccounts",
        "--subresource=token",
        "-n",
        "default",
    ],
];

/// The token of `sa_kc` is the chart's ServiceAccount's; it may not do
/// what it does not need, and may do what confirmation needs.
async fn the_service_account_may_only_what_it_needs(cluster: &Cluster, sa_kc: &Path) {
    let who = ok(
        kubectl_as(
            cluster,
            sa_kc,
            &[
                "auth",
                "whoami",
                "-o",
                "jsonpath={.status.userInfo.username}",
            ],
        )
        .await,
        "kubectl auth whoami",
    );
    assert_eq!(
        who.trim(),
        format!("system:serviceaccount:{RELEASE_NS}:{FULLNAME}")
    );
    for denied in DENIED {
        assert!(
            !can_i(cluster, sa_kc, denied).await,
            "the ServiceAccount may {denied:?}"
        );
    }
    // Confirmation: it reviews the asker's token, and makes tokens of its own
    // ServiceAccount only.
    let own_token = format!("serviceaccounts/{FULLNAME}");
    for allowed in [
        &["create", "tokenreviews.authentication.k8s.io"][..],
        &[
            "create",
            &own_token,
            "--subresource=token",
            "-n",
            RELEASE_NS,
        ],
    ] {
        assert!(
            can_i(cluster, sa_kc, allowed).await,
            "the ServiceAccount may not {allowed:?}"
        );
    }
    for denied in DENIED_TOKENS {
        assert!(
            !can_i(cluster, sa_kc, denied).await,
            "the ServiceAccount may {denied:?}"
        );
    }
}

/// The environment of the Deployment's container, as a pod of it gets it.
async fn pod_env(cluster: &Cluster) -> BTreeMap<String, String> {
    let dep = kubectl_json(cluster, &["get", "deployment", FULLNAME, "-n", RELEASE_NS]).await;
    let mut env = live_env(&dep);
    assert!(!env.contains_key("WEBCHECKER_WATCH_NAMESPACE"));
    // The downward API's values that a pod would get and `pod` does not stand
    // in for: the pod's ServiceAccount, and its Node (there is none here: the
    // zone stays unknown).
    let pod_sa = dep["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .expect("serviceAccountName")
        .to_string();
    assert_eq!(pod_sa, FULLNAME);
    for v in env.values_mut() {
        match v.as_str() {
            "spec.serviceAccountName" => *v = pod_sa.clone(),
            "spec.nodeName" => *v = "node-a".to_string(),
            _ => {}
        }
    }
    env
}

/// The chart's permissions are enough for every source of the forgery guard.
async fn every_source_of_the_guard_is_up(ops: &[Replica]) {
    for o in ops {
        let m = o.0.metrics().await.expect("metrics");
        for source in ["service", "endpointslices", "nodes", "namespaces"] {
            assert_eq!(
                metric(&m, "webchecker_address_discovery_up", &[("source", source)]),
                Some(1.0),
                "{}: {source}",
                o.0.identity
            );
        }
    }
}

/// The 60 checkers of the test, their namespace, the replicas' identities
/// and the witness they probe.
struct Sharded {
    client: kube::Client,
    ns: String,
    api: Api<WebChecker>,
    names: Vec<String>,
    ids: Vec<String>,
    witness: Witness,
}

impl Sharded {
    /// Every checker's owner, once each is owned by one of `live`.
    async fn owners(&self, live: &[String]) -> Option<HashMap<String, String>> {
        let m: HashMap<String, String> = support::owners(&self.client, &self.ns)
            .await
            .ok()?
            .into_iter()
            .filter_map(|(c, o)| Some((c, o?)))
            .collect();
        (m.len() == self.names.len() && m.values().all(|o| live.contains(o))).then_some(m)
    }

    /// Ready=True, status written by the owner.
    async fn every_checker_ready_with_its_owners_status(&self) {
        eventually(
            Duration::from_secs(60),
            "every checker Ready=True with its status written by its owner",
            || async {
                let list = self.api.list(&ListParams::default()).await.ok()?;
                let all = list.items.len() == self.names.len()
                    && list.items.iter().all(|o| {
                        let owner = o.labels().get(OWNER_LABEL);
                        o.status.as_ref().is_some_and(|s| {
                            s.conditions
                                .iter()
                                .any(|c| c.type_ == "Ready" && c.status == "True")
                                && s.last_status_code == Some(200)
                                && s.last_probe_time.is_some()
                                && s.owner.as_ref() == owner
                        })
                    });
                all.then_some(())
            },
        )
        .await;
    }

    /// Events, reported by the replicas.
    async fn an_event_about_every_checker(&self) {
        let events: Api<K8sEvent> = Api::namespaced(self.client.clone(), &self.ns);
        eventually(
            Duration::from_secs(30),
            "an Event about every checker",
            || async {
                let list = events.list(&ListParams::default()).await.ok()?;
                let mut about = HashSet::new();
                for e in &list.items {
                    let r = e.regarding.as_ref()?;
                    if r.kind.as_deref() != Some("WebChecker")
                        || e.reporting_controller.as_deref() != Some("webchecker-operator")
                    {
                        continue;
                    }
                    let by = e.reporting_instance.clone().unwrap_or_default();
                    assert!(self.ids.contains(&by), "event reported by {by:?}");
                    about.insert(r.name.clone().unwrap_or_default());
                }
                self.names.iter().all(|n| about.contains(n)).then_some(())
            },
        )
        .await;
    }

    /// Each checker probed by its owner only (two more intervals, owners
    /// stable); the owners.
    async fn each_probed_by_its_owner_only(&self, ops: &[Replica]) -> HashMap<String, String> {
        let (witness, names) = (&self.witness, &self.names);
        let owners_now =
            eventually(Duration::from_secs(30), "owners", || self.owners(&self.ids)).await;
        let since = Instant::now();
        eventually(
            Duration::from_secs(30),
            "every checker probed twice more",
            || async {
                let hits = witness.hits();
                let mut n: HashMap<&str, usize> = HashMap::new();
                for h in hits.iter().filter(|h| h.start >= since) {
                    *n.entry(h.checker.as_str()).or_default() += 1;
                }
                names
                    .iter()
                    .all(|c| n.get(c.as_str()).copied().unwrap_or(0) >= 2)
                    .then_some(())
            },
        )
        .await;
        let owners_after =
            eventually(Duration::from_secs(30), "owners", || self.owners(&self.ids)).await;
        assert_eq!(owners_now, owners_after, "checkers moved in a steady state");
        for h in witness.hits().iter().filter(|h| h.start >= since) {
            assert_eq!(
                h.replica, owners_now[&h.checker],
                "{} probed by a replica that does not own it",
                h.checker
            );
        }
        assert_eq!(exclusivity_violation(&witness.hits()), None);
        let mut owned = 0.0;
        for o in ops {
            let m = o.0.metrics().await.expect("metrics");
            owned += metric(&m, "webchecker_owned_checkers", &[]).unwrap_or(0.0);
        }
        assert_eq!(
            owned, 60.0,
            "webchecker_owned_checkers summed over the replicas"
        );
        owners_now
    }

    /// SIGKILL a replica that is not the leader: the others take its
    /// checkers over within a lease, and then own every checker.
    async fn a_killed_replica_is_taken_over(
        &self,
        ops: &mut [Replica],
        owners_now: &HashMap<String, String>,
        shards: &BTreeMap<&str, usize>,
    ) {
        let witness = &self.witness;
        let leader = eventually(Duration::from_secs(10), "a leader", || async {
            for o in ops.iter() {
                if let Some(m) = o.0.metrics().await
                    && metric(&m, "webchecker_leader", &[]) == Some(1.0)
                {
                    return Some(o.0.identity.clone());
                }
            }
            None
        })
        .await;
        let victim = ops.iter().position(|o| o.0.identity != leader).unwrap();
        let victim_id = ops[victim].0.identity.clone();
        let orphans: Vec<String> = owners_now
            .iter()
            .filter(|(_, o)| **o == victim_id)
            .map(|(c, _)| c.clone())
            .collect();
        assert!(!orphans.is_empty(), "the victim owns nothing: {shards:?}");
        let at = Instant::now();
        ops[victim].0.kill();
        let bound = LEASE + Duration::from_secs(2) + Duration::from_secs(INTERVAL as u64);
        eventually(
            bound + Duration::from_secs(10),
            "the killed replica's checkers probed again by the others",
            || async {
                (taken_over(witness, &orphans, at, &victim_id).0 != Duration::MAX).then_some(())
            },
        )
        .await;
        let (gap, who) = taken_over(witness, &orphans, at, &victim_id);
        println!(
            "SIGKILL {victim_id}: {} checkers moved, largest gap {gap:?} ({who}), bound {bound:?}",
            orphans.len()
        );
        assert!(gap <= bound, "{who}: gap {gap:?} over {bound:?}");
        let survivors: Vec<String> = ops
            .iter()
            .filter(|o| o.0.live())
            .map(|o| o.0.identity.clone())
            .collect();
        eventually(
            Duration::from_secs(20),
            "every checker owned by a survivor",
            || self.owners(&survivors),
        )
        .await;
        assert_eq!(exclusivity_violation(&witness.hits()), None);
    }
}

/// Takes permissions away from the chart's ClusterRole, one after the
/// other: a new replica refuses to start, naming each missing one.
async fn each_permission_is_needed(
    cluster: &Cluster,
    sa_kc: &Path,
    env: &BTreeMap<String, String>,
) {
    // Take `patch webcheckers/status` away: a new replica refuses to start.
    edit_clusterrole(cluster, |rules| {
        for r in rules.iter_mut() {
            if r["resources"]
                .as_array()
                .is_some_and(|x| x.iter().any(|v| v == "webcheckers/status"))
            {
                r["verbs"].as_array_mut().unwrap().retain(|v| v != "patch");
            }
        }
        rules.retain(|r| r["verbs"].as_array().is_some_and(|v| !v.is_empty()));
    })
    .await;
    let status_patch = [
        "patch",
        "webcheckers.test.network.io",
        "--subresource=status",
        "-A",
    ];
    let refused = RefusedStart {
        cluster,
        sa_kc,
        env,
    };
    let log = refused
        .start(
            &status_patch,
            "z3n5w",
            "without patch on webcheckers/status",
        )
        .await;
    assert!(
        log.contains(
            "missing permission: patch test.network.io webcheckers/status in all namespaces"
        ),
        "the output must name the missing permission:\n{log}"
    );

    // Remove the events rule as well: both are named.
    edit_clusterrole(cluster, |rules| {
        rules.retain(|r| {
            !r["apiGroups"]
                .as_array()
                .is_some_and(|g| g.iter().any(|v| v == "events.k8s.io"))
        })
    })
    .await;
    let event_create = ["create", "events.events.k8s.io", "-A"];
    let log = refused
        .start(&event_create, "k7r2d", "without events too")
        .await;
    for want in [
        "patch test.network.io webcheckers/status in all namespaces",
        "create events.k8s.io events in all namespaces",
    ] {
        assert!(log.contains(want), "the output must name {want:?}:\n{log}");
    }
}

/// A replica started after a permission was taken away.
struct RefusedStart<'a> {
    cluster: &'a Cluster,
    sa_kc: &'a Path,
    env: &'a BTreeMap<String, String>,
}

impl RefusedStart<'_> {
    /// Once the authorizer no longer allows `gone` (`kubectl auth can-i`
    /// arguments), starts replica `<FULLNAME>-5c9f7d8b6-<suffix>`, which
    /// must fail within 15 s; its log.
    async fn start(&self, gone: &[&str], suffix: &str, what: &str) -> String {
        let (cluster, sa_kc) = (self.cluster, self.sa_kc);
        eventually(
            Duration::from_secs(10),
            "the authorizer sees the edited ClusterRole",
            || async { (!can_i(cluster, sa_kc, gone).await).then_some(()) },
        )
        .await;
        let fresh = format!("{FULLNAME}-5c9f7d8b6-{suffix}");
        let started = Instant::now();
        let mut op = pod(cluster, sa_kc, self.env, &fresh);
        let st = exit_status(&mut op).await;
        let took = started.elapsed();
        let log = op.log_text();
        println!("{what}: exit {st} after {took:?}");
        assert!(!st.success(), "the operator must fail:\n{log}");
        assert!(took < Duration::from_secs(15), "exit after {took:?}");
        drop(op);
        log
    }
}
