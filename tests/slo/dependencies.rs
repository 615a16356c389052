//! spec.dependsOn end to end on two replicas, with Prometheus and the
//! shipped rules: a gateway checker and 20 route checkers that depend on
//! it, spread over both replicas (a dependency's state reaches a dependent's
//! owner only through the API server). The gateway's target goes down and
//! takes the routes with it: 1 Warning Event (the gateway's) and 1 firing
//! alert (its WebCheckerDown), the 20 routes Ready=False with reason
//! DependencyDown and Normal Events. The gateway recovers while one
//! route's backend stays down: that route pages (its Warning, its
//! WebCheckerDown), the other 19 recover. The witness's log shows no
//! overlap.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::ListParams;
use serde_json::json;

use super::support::fleet::*;
use super::support::prom::{Prometheus, rules_with_down_wait};
use super::support::*;
use webchecker::api::WebChecker;

const GATEWAY: &str = "gateway";
const ROUTES: usize = 20;
/// The route whose own backend stays down after the gateway recovers.
const BROKEN: &str = "route-07";
/// Seconds between probes.
const EVERY: u64 = 2;

fn routes() -> Vec<String> {
    (0..ROUTES).map(|i| format!("route-{i:02}")).collect()
}

/// A bound for `k` intervals, with room for a loaded machine.
fn intervals(k: u64) -> Duration {
    Duration::from_secs(EVERY * k + 30)
}

/// Checker name -> (type, reason) -> count, of the namespace's Events.
async fn events(api: &Api<Event>) -> HashMap<String, BTreeMap<(String, String), i32>> {
    let mut m: HashMap<String, BTreeMap<(String, String), i32>> = HashMap::new();
    for e in api.list(&ListParams::default()).await.unwrap() {
        let Some(name) = e.regarding.as_ref().and_then(|r| r.name.clone()) else {
            continue;
        };
        let n = e.series.as_ref().map(|s| s.count).unwrap_or(1);
        let key = (e.type_.unwrap_or_default(), e.reason.unwrap_or_default());
        *m.entry(name).or_default().entry(key).or_insert(0) += n;
    }
    m
}

/// Who has Warning Events, and how many.
fn warned(all: &HashMap<String, BTreeMap<(String, String), i32>>) -> BTreeMap<String, i32> {
    all.iter()
        .map(|(name, e)| {
            let n = e
                .iter()
                .filter(|((t, _), _)| t == "Warning")
                .map(|(_, n)| n)
                .sum();
            (name.clone(), n)
        })
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// Ready's (status, reason, message) of every checker of the namespace.
async fn readiness(api: &Api<WebChecker>) -> BTreeMap<String, (String, String, String)> {
    let list = api.list(&ListParams::default()).await.unwrap();
    list.into_iter()
        .filter_map(|wc| {
            let name = wc.metadata.name.clone()?;
            let c = wc
                .status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Ready")?;
            Some((name, (c.status, c.reason, c.message)))
        })
        .collect()
}

/// The checkers of `ns` whose WebCheckerDown fires in Prometheus.
async fn firing(prom: &Prometheus, ns: &str) -> Option<BTreeSet<String>> {
    let q = format!(
        "ALERTS{{alertname=\"WebCheckerDown\", alertstate=\"firing\", namespace=\"{ns}\"}}"
    );
    let samples = prom.query(&q).await?;
    Some(
        samples
            .into_iter()
            .map(|(l, _)| l["name"].clone())
            .collect(),
    )
}

struct World {
    fleet: Fleet,
    api: Api<WebChecker>,
    events: Api<Event>,
    prom: Prometheus,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_cause_pages_once_and_a_dependent_still_down_pages_when_it_recovers() {
    let w = twenty_routes_behind_a_gateway().await;
    the_gateway_falls(&w).await;
    the_gateway_recovers_without_one_route(&w).await;
}

/// Two replicas, Prometheus with the shipped rules (WebCheckerDown's wait
/// at 0: its 2 minutes would only lengthen the test), the checkers Ready
/// and spread over both replicas.
async fn twenty_routes_behind_a_gateway() -> World {
    let cluster = Cluster::shared("slo");
    let ns = cluster.namespace("slo-deps");
    let ops: Vec<Operator> = (0..2)
        .map(|i| Operator::spawn(cluster, &format!("deps-r{i}"), &ns, FAST_LEASES))
        .collect();
    let targets: Vec<(String, u16)> = ops.iter().map(|o| (o.identity.clone(), o.port)).collect();
    let prom = Prometheus::start(&targets, &[rules_with_down_wait(0)]);
    let witness = Witness::start().await;
    let fleet = Fleet::start_with_witness(cluster, ns.clone(), ops, witness, 0, 1).await;
    prom.wait_ready().await;
    prom.wait_targets_up(&targets).await;
    let url = fleet.witness.url();
    let mut objects = vec![checker_object(GATEWAY, &url, EVERY, json!({}))];
    let depends = json!({"dependsOn": {"names": [GATEWAY]}});
    for r in routes() {
        objects.push(checker_object(&r, &url, EVERY, depends.clone()));
    }
    create_all(&fleet.client, &ns, objects, 4).await;
    let api: Api<WebChecker> = Api::namespaced(fleet.client.clone(), &ns);
    let events: Api<Event> = Api::namespaced(fleet.client.clone(), &ns);
    let owners = eventually(intervals(10), "21 checkers Ready", || async {
        let list = api.list(&ListParams::default()).await.ok()?;
        let ready = list.iter().filter(|wc| {
            let s = wc.status.as_ref();
            s.and_then(|s| s.condition("Ready"))
                .is_some_and(|c| c.status == "True")
        });
        let owners: BTreeSet<String> = ready
            .filter_map(|wc| wc.status.as_ref()?.owner.clone())
            .collect();
        let all = list.iter().all(|wc| {
            wc.status
                .as_ref()
                .and_then(|s| s.condition("Ready"))
                .is_some_and(|c| c.status == "True")
        });
        (all && list.items.len() == ROUTES + 1).then_some(owners)
    })
    .await;
    assert_eq!(owners.len(), 2, "both replicas own some: {owners:?}");
    World {
        fleet,
        api,
        events,
        prom,
    }
}

/// The gateway's target goes down and every route with it.
async fn the_gateway_falls(w: &World) {
    let ns = &w.fleet.ns;
    for name in std::iter::once(GATEWAY.to_string()).chain(routes()) {
        w.fleet.witness.set_mode(&name, Mode::Status(503));
    }
    let fell = Instant::now();
    let states = eventually(intervals(15), "the routes DependencyDown", || async {
        let r = readiness(&w.api).await;
        let all = routes().iter().all(|n| {
            r.get(n)
                .is_some_and(|(s, why, _)| s == "False" && why == "DependencyDown")
        });
        (all && r[GATEWAY].0 == "False").then_some(r)
    })
    .await;
    println!(
        "20 routes DependencyDown {:?} after the fall",
        fell.elapsed()
    );
    assert_eq!(states[GATEWAY].1, "UnexpectedStatus");
    let (_, _, message) = &states["route-00"];
    assert!(
        message.starts_with("depends on gateway, which is down (UnexpectedStatus)"),
        "{message}"
    );
    // The gateway's alert; no route's, at any look until then.
    let alerts = eventually(
        Duration::from_secs(180),
        "WebCheckerDown for the gateway",
        || async {
            let f = firing(&w.prom, ns).await?;
            assert!(f.iter().all(|n| n == GATEWAY), "a route paged: {f:?}");
            f.contains(GATEWAY).then_some(f)
        },
    )
    .await;
    assert_eq!(alerts, BTreeSet::from([GATEWAY.to_string()]));
    // A few more evaluations (every second) change nothing.
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        let f = firing(&w.prom, ns).await.unwrap_or_default();
        assert!(f.iter().all(|n| n == GATEWAY), "a route paged: {f:?}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let all = events(&w.events).await;
    assert_eq!(
        warned(&all),
        BTreeMap::from([(GATEWAY.to_string(), 1)]),
        "{all:?}"
    );
    for r in routes() {
        assert!(
            all.get(&r)
                .is_some_and(|e| e.contains_key(&("Normal".into(), "DependencyDown".into()))),
            "{r}: {:?}",
            all.get(&r)
        );
    }
    let dependency_down = w
        .prom
        .query(&format!(
            "sum(webchecker_dependency_down{{namespace=\"{ns}\"}})"
        ))
        .await
        .unwrap_or_default();
    println!("webchecker_dependency_down summed: {dependency_down:?}");
}

/// The gateway and 19 routes recover; route-07's backend stays down.
async fn the_gateway_recovers_without_one_route(w: &World) {
    let ns = &w.fleet.ns;
    for name in std::iter::once(GATEWAY.to_string()).chain(routes()) {
        if name != BROKEN {
            w.fleet.witness.set_mode(&name, Mode::Ok);
        }
    }
    let back = Instant::now();
    let paged = eventually(intervals(15), "route-07's own Warning", || async {
        let all = events(&w.events).await;
        (warned(&all).get(BROKEN) == Some(&1)).then_some(all)
    })
    .await;
    println!(
        "route-07 paged {:?} after the gateway recovered",
        back.elapsed()
    );
    let expected = BTreeMap::from([(GATEWAY.to_string(), 1), (BROKEN.to_string(), 1)]);
    assert_eq!(warned(&paged), expected, "{paged:?}");
    eventually(
        Duration::from_secs(90),
        "WebCheckerDown for route-07",
        || async {
            let f = firing(&w.prom, ns).await?;
            (f == BTreeSet::from([BROKEN.to_string()])).then_some(())
        },
    )
    .await;
    println!(
        "route-07's WebCheckerDown fired {:?} after the gateway recovered",
        back.elapsed()
    );
    // The alert can fire before every other route's next probe: wait for
    // those, then route-07 must still be down for its own reason.
    let r = eventually(intervals(15), "the other 19 Ready", || async {
        let r = readiness(&w.api).await;
        let up = r
            .iter()
            .all(|(name, (status, _, _))| name == BROKEN || status == "True");
        (up && r.len() == ROUTES + 1).then_some(r)
    })
    .await;
    assert_eq!(r[BROKEN].0, "False", "{:?}", r[BROKEN]);
    assert_eq!(r[BROKEN].1, "UnexpectedStatus", "{:?}", r[BROKEN]);
    assert_eq!(exclusivity_violation(&w.fleet.witness.hits()), None);
}
