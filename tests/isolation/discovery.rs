//! Route discovery cannot be turned against other namespaces
//! (docs/security.md, "Checkers generated from routes"), with replicas that
//! watch every namespace and discover routes:
//! - memory: an account that may only create Ingresses creates 400 of them
//!   with 250 KiB of annotations each (the API server allows 256 KiB) and
//!   no opt-in. Kept whole, they were 100 MB of the leader's memory, and
//!   the next leader lists them all: the chart's 256 MiB limit killed one
//!   leader after another. Every replica, the leader and the one that takes
//!   over (and lists them), grows by less than 32 MiB, none exits, and
//!   another namespace's checkers keep their interval (+ 1 s);
//! - turns: a namespace with thousands of checkers to make does not hold
//!   up another namespace's one route, and beyond its cap of generated
//!   checkers its newest routes get none and a `TooManyCheckers` Warning;
//! - Gateways: a tenant's HTTPRoute that names another namespace's Gateway
//!   whose listener does not admit it is never probed through it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::networking::v1::Ingress;
use webchecker::api::WebChecker;
use webchecker::discovery::annotations::{CHECK, INTERVAL_SECONDS, PATH, VIA};
use webchecker::discovery::names;
use webchecker::discovery::{SOURCE_LABEL, SOURCE_NAME_LABEL};

use crate::support::*;
use crate::{DeleteCheckers, INTERVAL};

/// Bytes of the one annotation of each flooding Ingress (the API server's
/// bound on all of an object's annotations is 256 KiB).
const BLOB: usize = 250 * 1024;
const FLOOD: usize = 400;
/// What a replica's peak resident memory may grow by.
const GROWTH_LIMIT_KIB: u64 = 32 * 1024;

/// Deletes the Ingresses, HTTPRoutes and Gateways of these namespaces when
/// the test ends: the next test's replicas must not inherit them.
struct DeleteRoutes<'a>(&'a Cluster, Vec<String>);

impl Drop for DeleteRoutes<'_> {
    fn drop(&mut self) {
        for ns in &self.1 {
            for kind in ["ingresses", "httproutes", "gateways"] {
                let _ = self
                    .0
                    .kubectl(&["delete", kind, "--all", "-n", ns, "--wait=false"]);
            }
        }
    }
}

/// Replicas that watch every namespace and discover routes, ready.
async fn discovering(c: &'static Cluster, leases: &str, n: usize, extra: &[&str]) -> Vec<Operator> {
    let mut flags: Vec<&str> = FAST_LEASES.to_vec();
    flags.push("--discover-routes");
    flags.extend_from_slice(extra);
    let ops: Vec<Operator> = (0..n)
        .map(|i| {
            Operator::spawn_all_namespaces_with(c, &format!("disc-{i}-{leases}"), leases, &flags)
        })
        .collect();
    for op in &ops {
        op.wait_ready(Duration::from_secs(60)).await;
    }
    ops
}

/// A control plane for one test: discovery watches every namespace, so
/// the discovering replicas of two tests sharing one would both act on
/// each other's routes (and caps).
async fn own_cluster(name: &'static str) -> &'static Cluster {
    tokio::task::spawn_blocking(move || &*Box::leak(Box::new(Cluster::start(name))))
        .await
        .unwrap()
}

/// The index of the replica that leads with discovery's watches listed.
async fn discovery_leader(ops: &[Operator], within: Duration) -> usize {
    eventually(within, "a replica leading discovery", || async {
        for (i, op) in ops.iter().enumerate() {
            if !op.live() {
                continue;
            }
            let Some(m) = op.metrics().await else {
                continue;
            };
            if metric(&m, "webchecker_discovery_active", &[]) == Some(1.0) {
                return Some(i);
            }
        }
        None
    })
    .await
}

/// An Ingress `name` with these annotations and one rule per host.
fn ingress(name: &str, annotations: serde_json::Value, hosts: &[String]) -> Ingress {
    let rules: Vec<serde_json::Value> = hosts
        .iter()
        .map(|h| serde_json::json!({"host": h}))
        .collect();
    serde_json::from_value(serde_json::json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"defaultBackend": {"service": {"name": "web", "port": {"number": 80}}}, "rules": rules},
    }))
    .expect("an Ingress")
}

/// The checkers generated in `ns` (from any source), by name.
async fn generated(client: &kube::Client, ns: &str, source: Option<&str>) -> Vec<String> {
    let sel = match source {
        Some(s) => format!("{SOURCE_LABEL}={},{SOURCE_NAME_LABEL}={s}", "ingress"),
        None => SOURCE_LABEL.to_string(),
    };
    let api: kube::Api<WebChecker> = kube::Api::namespaced(client.clone(), ns);
    let lp = kube::api::ListParams::default().labels(&sel);
    let mut names: Vec<String> = api
        .list_metadata(&lp)
        .await
        .map(|l| {
            l.items
                .into_iter()
                .filter_map(|o| o.metadata.name)
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// An account of `ns` that may create Ingresses there and do nothing else;
/// a client with its token.
async fn ingress_author(c: &Cluster, ns: &str) -> kube::Client {
    let rbac = "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: ingress-author}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: ingress-author}\nrules:\n- {apiGroups: [networking.k8s.io], resources: [ingresses], verbs: [create]}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: ingress-author}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: ingress-author}\nsubjects: [{kind: ServiceAccount, name: ingress-author}]\n";
    let out = c.apply(ns, rbac).await;
    assert!(out.status.success(), "{}", release::text(&out.stderr));
    release::service_account(c, ns, "ingress-author").await.1
}

/// Creates Ingress `name` (opted in itself) as `author` and waits for its
/// checker: the leader has then taken every Ingress event before it (one
/// watch, in order).
async fn marker(author: &kube::Client, admin: &kube::Client, ns: &str, name: &str) -> Duration {
    let api: kube::Api<Ingress> = kube::Api::namespaced(author.clone(), ns);
    let host = format!("{name}.{ns}.test");
    let ann = serde_json::json!({CHECK: "true", INTERVAL_SECONDS: "3600"});
    let t = Instant::now();
    api.create(&Default::default(), &ingress(name, ann, &[host]))
        .await
        .expect("the author creates an Ingress");
    eventually(
        Duration::from_secs(120),
        &format!("the checker of {name}"),
        || async { (!generated(admin, ns, Some(name)).await.is_empty()).then_some(()) },
    )
    .await;
    t.elapsed()
}

/// Peak resident memory growth of `op` since `base` (KiB, resident at the
/// reset of its peak).
fn growth(op: &Operator, base: u64) -> u64 {
    proc_memory_kib(op.pid(), "VmHWM").saturating_sub(base)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingresses_with_huge_annotations_cannot_exhaust_the_discovery_leaders_memory() {
    let c = own_cluster("iso-disc-memory").await;
    let client = c.client().await;
    let leases = c.namespace("iso-disc-leases");
    let (a_ns, b_ns) = (c.namespace("iso-disc-a"), c.namespace("iso-disc-b"));
    let _checkers = DeleteCheckers(c, vec![a_ns.clone(), b_ns.clone()]);
    let _routes = DeleteRoutes(c, vec![a_ns.clone()]);
    let author = ingress_author(c, &a_ns).await;
    let witness = Witness::start().await;
    let healthy: Vec<String> = (0..10).map(|i| format!("h{i}")).collect();
    create_checkers(&client, &b_ns, &witness.url(), &healthy, INTERVAL as u32).await;
    let mut ops = discovering(c, &leases, 2, &[]).await;
    let leader = discovery_leader(&ops, Duration::from_secs(60)).await;
    let since = Instant::now();
    eventually(Duration::from_secs(60), "B's checkers probed", || async {
        let hits = witness.hits_since(since);
        healthy
            .iter()
            .all(|h| hits.iter().any(|x| &x.checker == h))
            .then_some(())
    })
    .await;
    let base: Vec<u64> = ops.iter().map(|o| reset_peak_memory(o.pid())).collect();

    let from = Instant::now();
    let blob = "x".repeat(BLOB);
    let api: kube::Api<Ingress> = kube::Api::namespaced(author.clone(), &a_ns);
    let created = futures::stream::iter(0..FLOOD)
        .map(|i| {
            let (api, blob) = (api.clone(), blob.clone());
            async move {
                let ann = serde_json::json!({"example.com/blob": blob});
                let host = format!("big{i}.example.com");
                api.create(
                    &Default::default(),
                    &ingress(&format!("big{i:03}"), ann, &[host]),
                )
                .await
                .map(|_| ())
            }
        })
        .buffer_unordered(8)
        .collect::<Vec<_>>()
        .await;
    assert!(
        created.iter().all(Result::is_ok),
        "{:?}",
        created.iter().find(|r| r.is_err())
    );
    let took = from.elapsed();
    let seen = marker(&author, &client, &a_ns, "after-flood").await;
    let to = Instant::now();
    let grown: Vec<u64> = ops.iter().zip(&base).map(|(o, b)| growth(o, *b)).collect();
    println!(
        "{FLOOD} Ingresses of {} KiB of annotations, no opt-in, created by an account that may only create Ingresses in {took:.1?}; the leader's checker of the next one after {seen:.1?}; peak growth per replica {grown:?} KiB (leader: replica {leader}), resident before {base:?} KiB",
        BLOB / 1024,
    );
    let (gap, who) = largest_gap(&witness.hits(), &healthy, from, to);
    println!("B's largest gap meanwhile: {gap:.2?} ({who})");
    let next = the_next_leader_lists_them(
        &mut ops, leader, &author, &client, &a_ns, &witness, &healthy,
    )
    .await;
    for (i, g) in grown.iter().enumerate() {
        assert!(*g < GROWTH_LIMIT_KIB, "replica {i} grew by {g} KiB");
    }
    assert!(gap <= Duration::from_secs(INTERVAL + 1), "{who}: {gap:?}");
    let (grown, gap, who) = next;
    assert!(
        grown < GROWTH_LIMIT_KIB,
        "the next leader grew by {grown} KiB"
    );
    assert!(ops[1 - leader].exited().is_none(), "the next leader exited");
    assert!(gap <= Duration::from_secs(INTERVAL + 1), "{who}: {gap:?}");
}

/// The leader is killed: the other replica leads and lists the 400
/// Ingresses, in pages, each trimmed as it comes. Its peak growth, and the
/// largest gap of B's checkers it probes meanwhile.
async fn the_next_leader_lists_them(
    ops: &mut [Operator],
    leader: usize,
    author: &kube::Client,
    client: &kube::Client,
    a_ns: &str,
    witness: &Witness,
    healthy: &[String],
) -> (u64, Duration, String) {
    let next = 1 - leader;
    assert!(ops[leader].exited().is_none(), "the leader exited");
    assert!(ops[next].exited().is_none(), "replica {next} exited");
    let theirs: Vec<String> = {
        let hits = witness.hits();
        healthy
            .iter()
            .filter(|h| {
                hits.iter()
                    .rev()
                    .find(|x| &x.checker == *h)
                    .is_some_and(|x| x.replica == ops[next].identity)
            })
            .cloned()
            .collect()
    };
    let base = reset_peak_memory(ops[next].pid());
    let from = Instant::now();
    ops[leader].kill();
    let led = discovery_leader(ops, Duration::from_secs(60)).await;
    assert_eq!(led, next);
    let seen = marker(author, client, a_ns, "after-failover").await;
    let to = Instant::now();
    let grown = growth(&ops[next], base);
    println!(
        "the leader killed: replica {next} leads and has listed them, the next Ingress's checker after {seen:.1?}; its peak growth {grown} KiB (resident before {base} KiB)"
    );
    let (gap, who) = largest_gap(&witness.hits(), &theirs, from, to);
    println!(
        "its own checkers of B ({}) meanwhile: largest gap {gap:.2?} ({who})",
        theirs.len()
    );
    (grown, gap, who)
}

/// Hosts `h0.<route>.<ns>.test` ... of one route: names nobody answers (the
/// checkers come back NXDOMAIN at once, probed once an hour).
fn hosts(route: &str, ns: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("h{i}.{route}.{ns}.test")).collect()
}

/// Routes of 64 hosts in the flooding namespace, and the cap on it.
const FLOOD_ROUTES: usize = 60;
const CAP: usize = 640;
/// The quiet namespace's checker comes within this, however long the
/// flood's work: a namespace holds at most 8 of the 10 writers, so the
/// quiet route is written at once (a read and an apply, on an API server
/// busy with the flood), with room for a loaded machine.
const QUIET_WITHIN: Duration = Duration::from_secs(8);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_namespaces_routes_do_not_hold_up_anothers_and_its_cap_holds() {
    let c = own_cluster("iso-disc-turns").await;
    let client = c.client().await;
    let leases = c.namespace("iso-turns-leases");
    let (flood, quiet) = (
        c.namespace("iso-turns-flood"),
        c.namespace("iso-turns-quiet"),
    );
    let _checkers = DeleteCheckers(c, vec![flood.clone(), quiet.clone()]);
    let _routes = DeleteRoutes(c, vec![flood.clone(), quiet.clone()]);
    let cap = format!("--discovery-max-checkers-per-namespace={CAP}");
    let ops = discovering(c, &leases, 1, &[&cap]).await;
    discovery_leader(&ops, Duration::from_secs(60)).await;
    let ann = serde_json::json!({CHECK: "true", INTERVAL_SECONDS: "3600"});
    let manifests: Vec<String> = (0..FLOOD_ROUTES)
        .map(|i| {
            let name = format!("r{i:02}");
            serde_json::to_string(&ingress(&name, ann.clone(), &hosts(&name, &flood, 64))).unwrap()
        })
        .collect();
    let t0 = Instant::now();
    let out = c
        .kubectl_stdin_async(&["apply", "-n", &flood, "-f", "-"], &manifests.join("\n"))
        .await;
    assert!(out.status.success(), "{}", release::text(&out.stderr));
    eventually(
        Duration::from_secs(60),
        "the flood's first checker",
        || async { (!generated(&client, &flood, None).await.is_empty()).then_some(()) },
    )
    .await;
    let t1 = Instant::now();
    let one = ingress("web", ann.clone(), &hosts("web", &quiet, 1));
    let out = c
        .kubectl_stdin_async(
            &["apply", "-n", &quiet, "-f", "-"],
            &serde_json::to_string(&one).unwrap(),
        )
        .await;
    assert!(out.status.success(), "{}", release::text(&out.stderr));
    eventually(
        Duration::from_secs(120),
        "the quiet namespace's checker",
        || async { (!generated(&client, &quiet, Some("web")).await.is_empty()).then_some(()) },
    )
    .await;
    let quiet_took = t1.elapsed();
    let so_far = generated(&client, &flood, None).await.len();
    println!(
        "{FLOOD_ROUTES} routes of 64 hosts in one namespace (cap {CAP}); another namespace's route got its checker {quiet_took:.2?} after it was made, while the flood had {so_far} of its {CAP}"
    );
    assert!(quiet_took < QUIET_WITHIN, "{quiet_took:?}");
    the_cap_holds_oldest_first(&client, &flood, t0).await;
    drop(ops);
}

/// The first ten routes (the oldest: made in order, by one apply) have
/// their 64 checkers each; every later one none, and a `TooManyCheckers`
/// Warning that names the cap.
async fn the_cap_holds_oldest_first(client: &kube::Client, ns: &str, t0: Instant) {
    use k8s_openapi::api::events::v1::Event;
    let fit = CAP / 64;
    let events: kube::Api<Event> = kube::Api::namespaced(client.clone(), ns);
    let warned = eventually(
        Duration::from_secs(120),
        "TooManyCheckers on every late route",
        || async {
            let list = events.list(&Default::default()).await.ok()?;
            let notes: Vec<(String, String)> = list
                .items
                .into_iter()
                .filter(|e| e.reason.as_deref() == Some("TooManyCheckers"))
                .filter_map(|e| Some((e.regarding?.name?, e.note.unwrap_or_default())))
                .collect();
            let all =
                (fit..FLOOD_ROUTES).all(|i| notes.iter().any(|(n, _)| *n == format!("r{i:02}")));
            all.then_some(notes)
        },
    )
    .await;
    // The first ten may still be being written: all of theirs, and no more.
    let made = eventually(
        Duration::from_secs(120),
        "the cap's checkers made",
        || async {
            let made = generated(client, ns, None).await;
            (made.len() >= CAP).then_some(made)
        },
    )
    .await;
    println!(
        "the cap: {} checkers made in {:.1?}; {} routes warned, e.g. {:?}",
        made.len(),
        t0.elapsed(),
        warned.len(),
        warned.first().map(|(_, n)| n)
    );
    assert_eq!(made.len(), CAP);
    for i in 0..fit {
        assert_eq!(
            generated(client, ns, Some(&format!("r{i:02}"))).await.len(),
            64,
            "r{i:02}"
        );
    }
    assert!(
        warned.iter().all(|(n, _)| n.as_str() >= "r10"),
        "{warned:?}"
    );
    assert!(warned[0].1.contains(&CAP.to_string()), "{}", warned[0].1);
}

/// A listener on `ip` (a port of its own) that counts the connections it
/// gets, and nothing else.
async fn counting(ip: &str) -> (u16, Arc<AtomicUsize>) {
    let l = tokio::net::TcpListener::bind(format!("{ip}:0"))
        .await
        .unwrap();
    let port = l.local_addr().unwrap().port();
    let n = Arc::new(AtomicUsize::new(0));
    let count = n.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            drop(s);
        }
    });
    (port, n)
}

/// A Gateway `name` with one HTTP listener on `port` (admitting `from`
/// when set: All, Same, ...), its status the address `ip`.
async fn gateway(c: &Cluster, ns: &str, name: &str, port: u16, from: Option<&str>, ip: &str) {
    let allowed = from.map_or(String::new(), |f| {
        format!(", allowedRoutes: {{namespaces: {{from: {f}}}}}")
    });
    let yaml = format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: {name}}}\nspec:\n  gatewayClassName: test\n  listeners:\n  - {{name: web, port: {port}, protocol: HTTP{allowed}}}\n"
    );
    let out = c.apply(ns, &yaml).await;
    assert!(out.status.success(), "{}", release::text(&out.stderr));
    let status = format!(r#"{{"status":{{"addresses":[{{"type":"IPAddress","value":"{ip}"}}]}}}}"#);
    let out = c
        .kubectl_async(&[
            "-n",
            ns,
            "patch",
            "gateway",
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            &status,
        ])
        .await;
    assert!(out.status.success(), "{}", release::text(&out.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_route_is_never_probed_through_a_gateway_that_does_not_admit_it() {
    let c = own_cluster("iso-disc-gateway").await;
    tokio::task::spawn_blocking(|| c.install_gateway_api())
        .await
        .unwrap();
    let client = c.client().await;
    let leases = c.namespace("iso-gw-leases");
    let (infra, tenant) = (c.namespace("iso-gw-infra"), c.namespace("iso-gw-tenant"));
    let _checkers = DeleteCheckers(c, vec![tenant.clone()]);
    let _routes = DeleteRoutes(c, vec![infra.clone(), tenant.clone()]);
    // `private` admits the routes of its own namespace only (the default);
    // `shared` admits every namespace's: the witness stands behind it.
    let r: u32 = rand::random();
    let private_ip = format!(
        "127.{}.{}.{}",
        100 + r % 100,
        (r >> 8) % 256,
        2 + (r >> 16) % 250
    );
    let (private_port, dialled) = counting(&private_ip).await;
    let witness = Witness::start().await;
    gateway(c, &infra, "private", private_port, None, &private_ip).await;
    gateway(
        c,
        &infra,
        "shared",
        witness.addr.port(),
        Some("All"),
        "127.0.0.1",
    )
    .await;
    let ops = discovering(c, &leases, 1, &[]).await;
    discovery_leader(&ops, Duration::from_secs(60)).await;
    let host = format!("www.{tenant}.test");
    let through = |gw: &str| {
        let key = format!("{infra}/{gw}");
        names::generated(
            "httproute",
            "shop",
            &host,
            Some((&key, &format!("{infra}.{gw}"))),
            None,
        )
    };
    let (shared, private) = (through("shared"), through("private"));
    let route = format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata:\n  name: shop\n  annotations:\n    {CHECK}: \"true\"\n    {VIA}: gateway\n    {INTERVAL_SECONDS}: \"1\"\n    {PATH}: /c/{shared}\nspec:\n  parentRefs: [{{name: private, namespace: {infra}}}, {{name: shared, namespace: {infra}}}]\n  hostnames: [\"{host}\"]\n"
    );
    let out = c.apply(&tenant, &route).await;
    assert!(out.status.success(), "{}", release::text(&out.stderr));
    eventually(
        Duration::from_secs(30),
        "probes through the shared Gateway",
        || async { (witness.count_for(&shared) >= 3).then_some(()) },
    )
    .await;
    let api: kube::Api<WebChecker> = kube::Api::namespaced(client.clone(), &tenant);
    let all = api.list(&Default::default()).await.unwrap().items;
    let made: Vec<(String, Option<String>)> = all
        .iter()
        .map(|w| {
            (
                w.metadata.name.clone().unwrap_or_default(),
                w.spec.connect_to.clone(),
            )
        })
        .collect();
    println!(
        "a tenant's route naming two Gateways of {infra}: checkers {made:?}; {} probes through the one that admits it, {} connections to the one that does not",
        witness.count_for(&shared),
        dialled.load(Ordering::SeqCst)
    );
    assert_eq!(made.len(), 1, "{made:?}");
    assert_eq!(made[0].0, shared);
    assert!(
        !made
            .iter()
            .any(|(n, to)| *n == private || to.as_deref() == Some(private_ip.as_str()))
    );
    assert_eq!(
        dialled.load(Ordering::SeqCst),
        0,
        "probed through a Gateway that does not admit the route"
    );
    drop(ops);
}
