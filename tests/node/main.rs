//! The Helm install for real: the chart's pods run from the image built here
//! (`make image`) on a real node (hack/node.sh: kubelet, containerd, CNI,
//! kube-proxy, controller-manager and scheduler of the pinned release).
//!
//! The chart is installed with values a user would set (image tag and pull
//! policy, the watched namespace) and the witness, listening on the node's
//! address, logs every probe with the `X-Webchecker-Replica` header, which is
//! the pod name. It is the oracle: no two pods probe one checker at once, no
//! pod probes after it is gone, only pods of the release probe, and the
//! largest probe gap of each step stays within DESIGN's bound; within the
//! interval + 1 s for a planned move (a pod deleted, a rollout, an upgrade,
//! a scale-in: each replica hands its checkers over on SIGTERM).
//!
//! - `smoke` (in `make test`): install, 3 pods Running and Ready, every
//!   checker probed by them, one pod's path to the targets cut inside its
//!   network namespace for 30 s (nothing turns Ready=False: its failures are
//!   refuted by the other pods), one pod deleted and replaced, an
//!   Ingress's and a Service's generated checkers deleted with them (route
//!   discovery with the chart's permissions; the node's garbage
//!   collector), pods in CrashLoopBackOff and ImagePullBackOff diagnosed
//!   (tests/node/diagnosis.rs), uninstall.
//! - `install_from_registry` (in `make test`): the README's Install section
//!   word for word, images and chart from a registry on the node's address
//!   (tests/node/install_from_registry.rs);
//! - `lifecycle` (ignored; `make node-test`): delete a pod, kill a container,
//!   rollout restart, helm upgrade to a new tag, scale 3 -> 5 -> 2, evictions
//!   against the PodDisruptionBudget, helm test, helm uninstall; prints the
//!   largest gap per step.

mod diagnosis;
mod install_from_registry;
use webchecker_kit as support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use support::dns::Dns;
use support::node::{CHART, Node, PodNames, must, release_pods, run, wait_ready_pods};
use support::{
    Witness, create_checkers, eventually, exclusivity_violation, largest_gap, owners, rand_suffix,
};
use webchecker::api::{MEMBER_LABEL, WebChecker};

const CHECKERS: usize = 30;
const INTERVAL: u32 = 2;
/// DESIGN's coverage bound, interval + failover bound, with the chart's
/// default Lease timings: 2 s + leaseDuration 10 s + retryPeriod 2 s.
const GAP_BOUND: Duration = Duration::from_secs(14);
/// A planned move (SIGTERM: the replica hands each checker over while it
/// still probes it) costs no probe: the interval + 1 s.
const PLANNED_BOUND: Duration = Duration::from_secs(INTERVAL as u64 + 1);
const WAIT: Duration = Duration::from_secs(240);

struct Row {
    step: &'static str,
    took: Duration,
    gap: Duration,
    checker: String,
    bound: Duration,
}

struct Suite {
    node: &'static Node,
    client: Client,
    /// Release namespace and the namespace of the checkers (the one watched).
    ns: String,
    checks: String,
    /// Release name (each test its own: the chart's cluster-wide objects are named after it).
    release: String,
    witness: Witness,
    names: Vec<String>,
    seen: PodNames,
    pods: Vec<String>,
    rows: Vec<Row>,
}

impl Suite {
    async fn install(prefix: &str) -> Suite {
        let node = Node::shared();
        let client = node.cluster.client().await;
        let suffix = rand_suffix();
        let (ns, checks) = (
            format!("{prefix}-{suffix}"),
            format!("{prefix}-checks-{suffix}"),
        );
        must(
            node.kubectl(&["create", "namespace", &checks]),
            "create namespace",
        )
        .await;
        let t0 = Instant::now();
        let tag = format!("image.tag={}", node.tag);
        let watch = format!("operator.watchNamespace={checks}");
        let args = [
            "install",
            prefix,
            CHART,
            "-n",
            &ns,
            "--create-namespace",
            // The images loaded into the node (`make image`), as kind and
            // k3d users install them.
            "--set",
            "image.repository=webchecker-operator",
            "--set",
            &tag,
            "--set",
            "image.pullPolicy=Never",
            "--set",
            "tests.image.pullPolicy=Never",
            "--set",
            &watch,
            "--set",
            "discovery.enabled=true",
            "--wait",
            "--timeout",
            "5m",
        ];
        must(node.helm(&args), "helm install").await;
        let pods = wait_ready_pods(&client, &ns, prefix, 3, &[], WAIT).await;
        println!(
            "helm install: 3 pods Running and Ready after {:.1?}",
            t0.elapsed()
        );
        let wide = must(
            node.kubectl(&["get", "pods", "-o", "wide", "-n", &ns]),
            "get pods",
        )
        .await;
        println!("$ kubectl get pods -o wide -n {ns}\n{wide}");
        // The user's checkers, once the chart has installed the CRD.
        let witness = Witness::start_on(&node.ip).await;
        witness.set_hold(support::HOLD.0, support::HOLD.1);
        let names: Vec<String> = (0..CHECKERS).map(|i| format!("c{i:02}")).collect();
        let t0 = Instant::now();
        create_checkers(&client, &checks, &witness.url(), &names, INTERVAL).await;
        let seen = PodNames::watch(client.clone(), ns.clone(), prefix.to_string());
        let s = Suite {
            node,
            client,
            ns,
            checks,
            release: prefix.to_string(),
            witness,
            names,
            seen,
            pods,
            rows: Vec::new(),
        };
        s.settle(t0).await;
        s.check_invariants();
        s
    }

    /// Waits until every checker was probed after `since` by a pod that is
    /// Ready now, and every such pod probes at least one checker.
    async fn settle(&self, since: Instant) {
        let deadline = Instant::now() + WAIT;
        loop {
            let hits = self.witness.hits();
            let fresh: Vec<_> = hits.iter().filter(|h| h.start >= since).collect();
            let probed: BTreeSet<&str> = fresh
                .iter()
                .filter(|h| self.pods.contains(&h.replica))
                .map(|h| h.checker.as_str())
                .collect();
            let probing: BTreeSet<&str> = fresh.iter().map(|h| h.replica.as_str()).collect();
            if probed.len() == self.names.len()
                && self.pods.iter().all(|p| probing.contains(p.as_str()))
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "not settled after {WAIT:?}: {} of {} checkers probed by {:?}; probing: {probing:?}",
                probed.len(),
                self.names.len(),
                self.pods
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Invariants over the whole witness log so far.
    fn check_invariants(&self) {
        let hits = self.witness.all_hits();
        if let Some(v) = exclusivity_violation(&hits) {
            panic!("exclusivity: {v}");
        }
        let strangers: BTreeSet<&str> = hits
            .iter()
            .map(|h| h.replica.as_str())
            .filter(|r| !self.seen.contains(r) && !self.pods.iter().any(|p| p == r))
            .collect();
        // A pod not listed for 2 s is gone; it was listed at most 0.5 s
        // before it went (the watcher's period).
        let late: Vec<String> = hits
            .iter()
            .filter_map(|h| {
                let last = self.seen.gone_since(&h.replica, Duration::from_secs(2))?;
                (h.start > last + Duration::from_secs(1))
                    .then(|| format!("{} {}", h.replica, h.checker))
            })
            .collect();
        assert!(late.is_empty(), "probes from pods that were gone: {late:?}");
        assert!(
            strangers.is_empty(),
            "probes from replicas that are no pod of the release: {strangers:?}"
        );
    }

    /// Ends a step that began at `from`: waits for coverage by the current
    /// pods, two more intervals, then records the largest gap, at most
    /// `bound`.
    async fn step_done(&mut self, step: &'static str, from: Instant, bound: Duration) {
        self.settle(from).await;
        tokio::time::sleep(Duration::from_secs(2 * INTERVAL as u64)).await;
        let now = Instant::now();
        let (gap, checker) = largest_gap(&self.witness.hits(), &self.names, from, now);
        println!(
            "{step}: took {:.1?}, largest probe gap {gap:.2?} ({checker})",
            now - from
        );
        self.check_invariants();
        if gap > PLANNED_BOUND {
            self.print_probes_around(&checker, from, now);
        }
        assert!(
            gap <= bound,
            "{step}: largest probe gap {gap:?} ({checker}) above the bound {bound:?}"
        );
        self.rows.push(Row {
            step,
            took: now - from,
            gap,
            checker,
            bound,
        });
    }

    /// Who probed `checker` when, from an interval before `from` to `to`, and
    /// the host's listen-queue drops. A gap of interval + 1 s + 2 s is a
    /// connection whose first two SYNs were lost; the counters say whether
    /// the witness's accept queue dropped them or the path did.
    fn print_probes_around(&self, checker: &str, from: Instant, to: Instant) {
        let since = from - Duration::from_secs(INTERVAL as u64);
        for h in self.witness.hits_for(checker) {
            if h.start >= since && h.start <= to {
                let at = h.start.saturating_duration_since(since).as_secs_f64();
                println!("  {checker}: probe by {} at {at:.3} s", h.replica);
            }
        }
        let netstat = std::fs::read_to_string("/proc/net/netstat").unwrap_or_default();
        let lines: Vec<&str> = netstat
            .lines()
            .filter(|l| l.starts_with("TcpExt:"))
            .collect();
        if let [names, values] = lines[..] {
            for (n, v) in names.split_whitespace().zip(values.split_whitespace()) {
                if n.starts_with("Listen") {
                    println!("  host TcpExt {n}: {v}");
                }
            }
        }
    }

    /// Applies `manifest` in the checkers' namespace; the node's name
    /// server then resolves `<service>.<namespace>.svc.cluster.local` to the
    /// Service's ClusterIP, as a cluster's DNS does.
    async fn apply_service(&self, manifest: &str, service: &str) -> std::net::IpAddr {
        let out = self
            .node
            .cluster
            .kubectl_stdin_async(&["apply", "-n", &self.checks, "-f", "-"], manifest)
            .await;
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let ip = must(
            self.node.kubectl(&[
                "get",
                "service",
                service,
                "-n",
                &self.checks,
                "-o",
                "jsonpath={.spec.clusterIP}",
            ]),
            "get service",
        )
        .await;
        let ip: std::net::IpAddr = ip.trim().parse().expect("a ClusterIP");
        let name = format!("{service}.{}.svc.cluster.local", self.checks);
        node_dns(self.node).add(&name, &[ip]);
        ip
    }

    /// No probe from `pod` starts after the instant its pod object was gone.
    async fn wait_gone_and_silent(&self, pod: &str) {
        let deadline = Instant::now() + WAIT;
        while release_pods(&self.client, &self.ns, &self.release)
            .await
            .iter()
            .any(|p| p.name_any() == pod)
        {
            assert!(
                Instant::now() < deadline,
                "pod {pod} not gone after {WAIT:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let gone = Instant::now();
        tokio::time::sleep(Duration::from_secs(2 * INTERVAL as u64)).await;
        let late: Vec<_> = self
            .witness
            .all_hits()
            .into_iter()
            .filter(|h| h.replica == pod && h.start > gone)
            .collect();
        assert!(
            late.is_empty(),
            "{pod} probed after its pod was gone: {late:?}"
        );
    }

    async fn delete_pod(&mut self) {
        let victim = self.pods[0].clone();
        // Whether the victim leads: a leader's handover also moves the sharder.
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), &self.ns);
        let leader = leases
            .get_opt(webchecker::LEADER_LEASE)
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec?.holder_identity);
        println!("delete a pod: {victim} (the leader: {leader:?})");
        let t = Instant::now();
        must(
            self.node
                .kubectl(&["delete", "pod", &victim, "-n", &self.ns, "--wait=false"]),
            "delete pod",
        )
        .await;
        self.pods = wait_ready_pods(
            &self.client,
            &self.ns,
            &self.release,
            3,
            std::slice::from_ref(&victim),
            WAIT,
        )
        .await;
        self.wait_gone_and_silent(&victim).await;
        self.step_done("delete a pod", t, PLANNED_BOUND).await;
    }

    async fn uninstall(&mut self) {
        let t = Instant::now();
        must(
            self.node.helm(&[
                "uninstall",
                &self.release,
                "-n",
                &self.ns,
                "--wait",
                "--timeout",
                "5m",
            ]),
            "helm uninstall",
        )
        .await;
        let deadline = Instant::now() + WAIT;
        while !release_pods(&self.client, &self.ns, &self.release)
            .await
            .is_empty()
        {
            assert!(Instant::now() < deadline, "pods left after helm uninstall");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let gone = Instant::now();
        tokio::time::sleep(Duration::from_secs(2 * INTERVAL as u64)).await;
        let late = self
            .witness
            .all_hits()
            .into_iter()
            .filter(|h| h.start > gone)
            .count();
        assert_eq!(late, 0, "probes after every pod of the release was gone");
        // `helm uninstall` deletes the Role that lets the pods delete their
        // Leases while they are still shutting down; each membership Lease
        // names its pod as owner, so the garbage collector removes it.
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), &self.ns);
        let lp = ListParams::default().labels(MEMBER_LABEL);
        eventually(
            Duration::from_secs(60),
            "membership Leases deleted with their pods",
            || async {
                leases
                    .list(&lp)
                    .await
                    .ok()
                    .filter(|l| l.items.is_empty())
                    .map(|_| ())
            },
        )
        .await;
        println!(
            "helm uninstall: membership Leases gone {:.1?} after the pods",
            gone.elapsed()
        );
        // The checkers stay (the CRD is not the release's to delete).
        let wcs = must(
            self.node
                .kubectl(&["get", "wc", "-n", &self.checks, "-o", "name"]),
            "get wc",
        )
        .await;
        assert_eq!(wcs.lines().count(), CHECKERS);
        println!(
            "helm uninstall: pods gone after {:.1?}, no probe since",
            gone - t
        );
    }

    /// Cuts one pod's path to the targets for `length` (an nftables drop
    /// inside its network namespace: its API server and peers stay
    /// reachable): no checker turns Ready=False, its checkers show
    /// Degraded naming it, and all are Ready and none Degraded after.
    async fn cut_one_pod(&self, length: Duration) {
        let pod = self.pods[0].clone();
        let api: Api<WebChecker> = Api::namespaced(self.client.clone(), &self.checks);
        let (id, _) = container_id(&self.client, &self.ns, &pod).await;
        let tasks = must(self.node.ctr(&["task", "ls"]), "ctr task ls").await;
        let pid: i32 = tasks
            .lines()
            .find(|l| l.starts_with(&id))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no task of {pod} ({id}) in\n{tasks}"));
        let rules = std::env::temp_dir().join(format!("{pod}-cut.nft"));
        std::fs::write(
            &rules,
            format!(
                "table inet webchecker_cut {{\n chain out {{\n  type filter hook output priority 0; policy accept;\n  ip daddr {} tcp dport {} drop\n }}\n}}\n",
                self.node.ip,
                self.witness.addr.port()
            ),
        )
        .unwrap();
        let in_pod = |args: &[&str]| {
            let mut c = std::process::Command::new("nsenter");
            c.args(["-t", &pid.to_string(), "-n"]).args(args);
            c
        };
        let owned: BTreeSet<String> = owners(&self.client, &self.checks)
            .await
            .unwrap()
            .into_iter()
            .filter(|(_, o)| o.as_deref() == Some(pod.as_str()))
            .map(|(n, _)| n)
            .collect();
        assert!(!owned.is_empty(), "{pod} owns checkers");
        must(
            in_pod(&["nft", "-f", rules.to_str().unwrap()]),
            "nft in the pod",
        )
        .await;
        let at = Instant::now();
        let (mut paged, mut degraded_max) = (0, 0);
        while at.elapsed() < length {
            let list = api.list(&ListParams::default()).await.unwrap();
            let cond = |wc: &WebChecker, t: &str| {
                wc.status
                    .as_ref()
                    .and_then(|s| s.condition(t))
                    .map(|c| (c.status.clone(), c.message.clone()))
            };
            paged = paged.max(
                list.items
                    .iter()
                    .filter(|wc| cond(wc, "Ready").is_some_and(|(s, _)| s == "False"))
                    .count(),
            );
            degraded_max = degraded_max.max(
                list.items
                    .iter()
                    .filter(|wc| {
                        cond(wc, "Degraded")
                            .is_some_and(|(s, m)| s == "True" && m.contains(pod.as_str()))
                    })
                    .count(),
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        must(
            in_pod(&["nft", "delete", "table", "inet", "webchecker_cut"]),
            "nft in the pod",
        )
        .await;
        println!(
            "{length:?} cut of {pod}'s path to the targets: {paged} of {CHECKERS} checkers Ready=False, \
             at most {degraded_max} of its {} Degraded naming it",
            owned.len()
        );
        assert_eq!(paged, 0, "a pod's broken path paged");
        assert_eq!(degraded_max, owned.len(), "its checkers showed Degraded");
        eventually(
            Duration::from_secs(30),
            "every checker Ready and none Degraded after the heal",
            || async {
                let list = api.list(&ListParams::default()).await.ok()?;
                list.items
                    .iter()
                    .all(|wc| {
                        let s = wc.status.as_ref();
                        s.and_then(|s| s.condition("Ready"))
                            .is_some_and(|c| c.status == "True")
                            && s.and_then(|s| s.condition("Degraded"))
                                .is_none_or(|c| c.status == "False")
                    })
                    .then_some(())
            },
        )
        .await;
    }

    fn table(&self) -> String {
        let mut out =
            String::from("| step | took | largest probe gap | bound |\n|---|---|---|---|\n");
        for r in &self.rows {
            out += &format!(
                "| {} | {:.0} s | {:.2} s ({}) | {} s |\n",
                r.step,
                r.took.as_secs_f64(),
                r.gap.as_secs_f64(),
                r.checker,
                r.bound.as_secs()
            );
        }
        out
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn smoke_install_probe_from_pods_and_replace_one() {
    let mut s = Suite::install("smoke").await;
    // The witness saw the pods' names, all three of them.
    let probing: BTreeSet<String> = s.witness.hits().into_iter().map(|h| h.replica).collect();
    for p in &s.pods {
        assert!(probing.contains(p), "{p} probes nothing: {probing:?}");
    }
    s.cut_one_pod(Duration::from_secs(30)).await;
    s.delete_pod().await;
    ingress_checkers_go_with_their_ingress(&s).await;
    diagnosis::failing_pods_are_diagnosed(&s).await;
    println!("{}", s.table());
    s.uninstall().await;
}

/// Route discovery (`discovery.enabled`) with the chart's permissions: the
/// leader pod generates a checker for an Ingress that opts in, and deleting
/// the Ingress deletes it: the node's kube-controller-manager (its garbage
/// collector) follows the checker's ownerReference, which the test control
/// plane of tests/probe/discovery.rs cannot show (it runs no
/// controller-manager).
async fn ingress_checkers_go_with_their_ingress(s: &Suite) {
    let host = "gc.routes.test";
    let manifest = format!(
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: route\n  annotations:\n    webchecker.test.network.io/check: \"true\"\nspec:\n  rules:\n  - host: {host}\n    http:\n      paths:\n      - path: /\n        pathType: Prefix\n        backend:\n          service: {{name: web, port: {{number: 80}}}}\n"
    );
    let out = s
        .node
        .cluster
        .kubectl_stdin_async(&["apply", "-n", &s.checks, "-f", "-"], &manifest)
        .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let api: Api<WebChecker> = Api::namespaced(s.client.clone(), &s.checks);
    let name = webchecker::discovery::names::generated("ingress", "route", host, None, None);
    let t = Instant::now();
    eventually(Duration::from_secs(30), "the Ingress's checker", || async {
        api.get_opt(&name).await.ok().flatten()
    })
    .await;
    println!(
        "route discovery from a pod: the Ingress's WebChecker after {:.1?}",
        t.elapsed()
    );
    must(
        s.node
            .kubectl(&["delete", "ingress", "route", "-n", &s.checks]),
        "delete ingress",
    )
    .await;
    let t = Instant::now();
    eventually(
        Duration::from_secs(60),
        "the checker deleted with its Ingress",
        || async { matches!(api.get_opt(&name).await, Ok(None)).then_some(()) },
    )
    .await;
    println!(
        "Ingress deleted: its WebChecker deleted by the garbage collector after {:.1?}",
        t.elapsed()
    );

    service_checkers_probe_through_kube_proxy_and_go_with_their_service(s, &api).await;
}

/// A Service that opts in itself, its endpoints the witness on the node's
/// address: its checker probes the Service's cluster name, which the kit's
/// name server answers with the ClusterIP (on the node's address, port 53,
/// where the pods' resolv.conf points: the node has no cluster DNS), through
/// kube-proxy's rules to the witness; deleting the Service deletes it
/// (the garbage collector).
async fn service_checkers_probe_through_kube_proxy_and_go_with_their_service(
    s: &Suite,
    api: &Api<WebChecker>,
) {
    let port = s.witness.addr.port();
    let checker = webchecker::discovery::names::generated("service", "web", "svc", None, None);
    let checker = checker.as_str();
    let service = format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  annotations:\n    webchecker.test.network.io/check: \"true\"\n    webchecker.test.network.io/path: /c/{checker}\n    webchecker.test.network.io/interval-seconds: \"2\"\nspec:\n  ports:\n  - {{name: http, port: 80, targetPort: {port}}}\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: web-witness\n  labels: {{kubernetes.io/service-name: web}}\naddressType: IPv4\nendpoints:\n- addresses: [\"{}\"]\nports:\n- {{name: http, port: {port}, protocol: TCP}}\n",
        s.node.ip
    );
    let ip = s.apply_service(&service, "web").await;
    let t = Instant::now();
    let wc = eventually(Duration::from_secs(30), "the Service's checker", || async {
        api.get_opt(checker).await.ok().flatten()
    })
    .await;
    assert_eq!(
        wc.spec.host,
        format!("http://web.{}.svc.cluster.local.:80", s.checks)
    );
    let hit = eventually(
        Duration::from_secs(60),
        "the witness probed through the Service by a pod of the release",
        || async {
            s.witness
                .hits()
                .into_iter()
                .find(|h| h.checker == checker && s.seen.contains(&h.replica))
        },
    )
    .await;
    eventually(
        Duration::from_secs(30),
        "the Service's checker Ready",
        || async {
            let wc = api.get_opt(checker).await.ok().flatten()?;
            let ready = wc.status?.condition("Ready")?.status == "True";
            ready.then_some(())
        },
    )
    .await;
    println!(
        "a Service opted in: probed through {ip}:80 (kube-proxy) by {} and Ready after {:.1?}",
        hit.replica,
        t.elapsed()
    );
    must(
        s.node
            .kubectl(&["delete", "service", "web", "-n", &s.checks]),
        "delete service",
    )
    .await;
    let t = Instant::now();
    eventually(
        Duration::from_secs(60),
        "the checker deleted with its Service",
        || async { matches!(api.get_opt(checker).await, Ok(None)).then_some(()) },
    )
    .await;
    println!(
        "Service deleted: its WebChecker deleted by the garbage collector after {:.1?}",
        t.elapsed()
    );
}

/// The name server on the node's address, port 53, where the pods'
/// resolv.conf points (the node has no cluster DNS): one per process, its
/// socket held until the process exits.
fn node_dns(node: &Node) -> &'static Dns {
    static DNS: std::sync::OnceLock<Dns> = std::sync::OnceLock::new();
    DNS.get_or_init(|| {
        Dns::start_on(std::net::SocketAddr::new(
            node.ip.parse().expect("the node's address"),
            53,
        ))
    })
}

/// POST pods/<pod>/eviction; Err(stderr) when refused.
async fn evict(s: &Suite, pod: &str) -> Result<(), String> {
    use std::io::Write;
    let path = format!("/api/v1/namespaces/{}/pods/{pod}/eviction", s.ns);
    let body = format!(
        r#"{{"apiVersion":"policy/v1","kind":"Eviction","metadata":{{"name":"{pod}","namespace":"{}"}}}}"#,
        s.ns
    );
    let mut cmd = s.node.kubectl(&["create", "--raw", &path, "-f", "-"]);
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let out = tokio::task::spawn_blocking(move || {
        let mut child = cmd.spawn().expect("run kubectl");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(body.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).to_string())
    }
}

async fn container_id(client: &Client, ns: &str, pod: &str) -> (String, i32) {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let p = api.get(pod).await.unwrap();
    let cs = &p.status.unwrap().container_statuses.unwrap()[0];
    let id = cs.container_id.clone().unwrap_or_default();
    (
        id.trim_start_matches("containerd://").to_string(),
        cs.restart_count,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "minutes on a real node: make node-test"]
async fn lifecycle_of_the_release_on_a_real_node() {
    let mut s = Suite::install("life").await;
    let fullname = format!("{}-webchecker-operator", s.release);
    s.delete_pod().await;
    kill_a_container(&mut s).await;
    rollout_restart(&mut s, &fullname).await;
    upgrade_to_a_new_image_tag(&mut s).await;
    scale_out_and_in(&mut s).await;
    evict_two_pods(&mut s, &fullname).await;
    helm_test(&mut s).await;
    report_and_uninstall(s).await;
}

/// A container killed: the kubelet restarts it in the same pod, so the
/// replica comes back under the same identity.
async fn kill_a_container(s: &mut Suite) {
    let victim = s.pods[0].clone();
    let (id, restarts) = container_id(&s.client, &s.ns, &victim).await;
    let t = Instant::now();
    must(
        s.node.ctr(&["tasks", "kill", "--signal", "SIGKILL", &id]),
        "ctr tasks kill",
    )
    .await;
    let deadline = Instant::now() + WAIT;
    loop {
        let (_, now) = container_id(&s.client, &s.ns, &victim).await;
        let ready = release_pods(&s.client, &s.ns, &s.release)
            .await
            .iter()
            .any(|p| p.name_any() == victim && support::node::is_ready(p));
        if now > restarts && ready {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{victim} not restarted and Ready"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    s.step_done("kill a container (SIGKILL)", t, GAP_BOUND)
        .await;
}

async fn rollout_restart(s: &mut Suite, fullname: &str) {
    let old = s.pods.clone();
    let t = Instant::now();
    let dep = format!("deployment/{fullname}");
    must(
        s.node.kubectl(&["rollout", "restart", &dep, "-n", &s.ns]),
        "rollout restart",
    )
    .await;
    must(
        s.node
            .kubectl(&["rollout", "status", &dep, "-n", &s.ns, "--timeout=5m"]),
        "rollout status",
    )
    .await;
    s.pods = wait_ready_pods(&s.client, &s.ns, &s.release, 3, &old, WAIT).await;
    s.step_done("kubectl rollout restart", t, PLANNED_BOUND)
        .await;
}

/// `helm upgrade --reuse-values --set <set> --wait` of the release.
async fn helm_upgrade_set(s: &Suite, set: &str, what: &str) {
    let up = [
        "upgrade",
        &s.release,
        CHART,
        "-n",
        &s.ns,
        "--reuse-values",
        "--set",
        set,
        "--wait",
        "--timeout",
        "5m",
    ];
    must(s.node.helm(&up), what).await;
}

async fn upgrade_to_a_new_image_tag(s: &mut Suite) {
    let next = format!("{}-next", s.node.tag);
    s.node.tag_image("webchecker-operator", &next).await;
    s.node
        .tag_image("webchecker-operator-chart-test", &next)
        .await;
    let old = s.pods.clone();
    let t = Instant::now();
    helm_upgrade_set(s, &format!("image.tag={next}"), "helm upgrade").await;
    s.pods = wait_ready_pods(&s.client, &s.ns, &s.release, 3, &old, WAIT).await;
    for p in release_pods(&s.client, &s.ns, &s.release).await {
        let image = p.spec.as_ref().unwrap().containers[0]
            .image
            .clone()
            .unwrap_or_default();
        assert!(
            image.ends_with(&format!(":{next}")),
            "{} runs {image}",
            p.name_any()
        );
    }
    s.step_done("helm upgrade to a new image tag", t, PLANNED_BOUND)
        .await;
}

async fn scale_out_and_in(s: &mut Suite) {
    // Out: the sharder drains checkers to the new pods; in: the leaving
    // pods hand theirs over.
    for (n, step, bound) in [
        (5, "scale 3 -> 5", GAP_BOUND),
        (2, "scale 5 -> 2", PLANNED_BOUND),
    ] {
        let t = Instant::now();
        let set = format!("replicaCount={n}");
        helm_upgrade_set(s, &set, "helm upgrade replicaCount").await;
        s.pods = wait_ready_pods(&s.client, &s.ns, &s.release, n, &[], WAIT).await;
        s.step_done(step, t, bound).await;
    }
}

/// Evictions against the PodDisruptionBudget (maxUnavailable 1): the
/// second one is refused while the first pod's replacement is not Ready.
/// (kubectl: kube's client would retry the 429 until the budget allows it.)
async fn evict_two_pods(s: &mut Suite, fullname: &str) {
    let (a, b) = (s.pods[0].clone(), s.pods[1].clone());
    let t = Instant::now();
    wait_budget_settled(s, fullname).await;
    evict(s, &a).await.expect("first eviction");
    match evict(s, &b).await {
        Err(e) if e.contains("TooManyRequests") || e.contains("disruption budget") => {
            println!("eviction of {b} refused by the PodDisruptionBudget while {a} is replaced")
        }
        other => panic!("second eviction while {a} is replaced: want 429, got {other:?}"),
    }
    s.pods = wait_ready_pods(
        &s.client,
        &s.ns,
        &s.release,
        2,
        std::slice::from_ref(&a),
        WAIT,
    )
    .await;
    let deadline = Instant::now() + WAIT;
    while let Err(e) = evict(s, &b).await {
        assert!(
            Instant::now() < deadline,
            "eviction of {b} still refused: {e}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    s.pods = wait_ready_pods(&s.client, &s.ns, &s.release, 2, &[a, b], WAIT).await;
    // Planned too, but with 2 replicas one pod's handover can meet the
    // other's replacement still joining: the failover bound here.
    s.step_done("evict two pods (PDB maxUnavailable 1)", t, GAP_BOUND)
        .await;
}

/// The budget as the disruption controller sees the 2 pods now (its status
/// lags a scale-down; the eviction API decides by that status).
async fn wait_budget_settled(s: &Suite, fullname: &str) {
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(s.client.clone(), &s.ns);
    let deadline = Instant::now() + WAIT;
    loop {
        let st = pdbs.get(fullname).await.unwrap().status.unwrap_or_default();
        if (st.expected_pods, st.current_healthy, st.disruptions_allowed)
            == (Some(2), Some(2), Some(1))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "PodDisruptionBudget status not settled: {st:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn helm_test(s: &mut Suite) {
    let t = Instant::now();
    let out = must(
        s.node
            .helm(&["test", &s.release, "-n", &s.ns, "--logs", "--timeout", "5m"]),
        "helm test",
    )
    .await;
    println!("{out}");
    assert!(out.contains("PASS"), "helm test printed no PASS:\n{out}");
    s.step_done("helm test", t, PLANNED_BOUND).await;
}

/// Uninstalls; the table of the steps, printed and written to
/// target/node-report.md.
async fn report_and_uninstall(mut s: Suite) {
    let table = s.table();
    s.uninstall().await;
    println!("\n{table}");
    let report = support::oci::target_dir().join("node-report.md");
    std::fs::write(&report, &table).unwrap();
    println!("(also in {})", report.display());
    let _ = run(s
        .node
        .kubectl(&["delete", "namespace", &s.checks, "--wait=false"]))
    .await;
}
