//! Every alert of alerts/webchecker.rules.yaml fires for real, on Prometheus
//! 3.x and on Debian's 2.42: both scrape real operator replicas
//! each second and evaluate the shipped rules each second, and the test
//! drives the replicas into each alert's condition with real faults, then
//! waits for Prometheus' /api/v1/alerts to show the alert `firing` with
//! exactly the expected labels. `promtool test rules` checks the rules on
//! series written by hand; here a metric name or label mistyped in a rule
//! (and in its promtool test alike) leaves an alert that never fires.
//!
//! The rules are the shipped file with one change: the waits are seconds
//! instead of minutes (rules.rs rewrites only the `for:` lines and the
//! number of the `# threshold: forSeconds` line of an alert that measures
//! its wait in its expression, and asserts that every expression is
//! otherwise byte-identical to the shipped one). The
//! range windows of the expressions ([10m], [15m]) are unchanged: Prometheus
//! is fresh, so they hold only what this test produced.
//!
//! Six installations run side by side, each its own scrape job (fleets.rs):
//! `shards` (shards.rs: ShardImbalance, Orphaned, ReplicaMissing),
//! `leaderless`, `lag`, `writes`, `limited` (replica.rs: SelfFencing,
//! NoLeader, LeaseRenewFailing, ScheduleLagHigh, StatusWritesFailing,
//! AddressDiscoveryFailing, ConfirmCredentialsMissing; checkers.rs:
//! CertificateExpiring, Down, Slow),
//! `confirming` (confirm.rs: ProberImpaired, ZonesShort).
//! The faults: a replica SIGKILLed, one SIGSTOPped, a fault proxy that resets
//! every connection or answers one kind of API call (status writes, the
//! sharder's assignment writes) with 500, one worker for too much probing, a
//! ServiceAccount without permission on Nodes or to request tokens, a
//! certificate that ends soon,
//! a target that stops answering one replica of two in time.
//!
//! Alerts that must not fire are checked at every look at the alerts: no
//! WebCheckerDown for a healthy checker, no NoLeader for an installation that
//! has one, no Orphaned outside `shards`, no StatusWritesFailing outside
//! `writes` and `leaderless` (cut off, its writes may fail), no
//! CertificateExpiring for a certificate valid 90 more days, no
//! AddressDiscoveryFailing for a source the replica may read.

mod checkers;
mod confirm;
mod fleets;
use webchecker_kit::platform;
use webchecker_kit::prom;
mod replica;
mod rules;
mod shards;
use webchecker_kit as support;
mod watch;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use fleets::{Jobs, Singles};
use prom::{Prometheus, by_label};
use shards::Shards;
use support::*;
use watch::Alerts;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_alert_fires_on_a_real_fleet() {
    let started = Instant::now();
    let dir = platform::scratch("alerts-fire-");
    let rules = rules::shortened(dir.path());
    let cluster = Cluster::shared("alerts-fire");
    let client = cluster.client().await;
    let singles = Singles::start(cluster, dir.path()).await;
    let mut shards = Shards::start(cluster).await;
    let confirming = confirm::Confirming::start(cluster).await;
    let mut all = singles.jobs();
    all.push((shards::JOB.to_string(), shards.targets()));
    all.push(confirming.scrape_job());
    let prom = Prometheus::start_jobs(&all, std::slice::from_ref(&rules));
    let other = Prometheus::start_jobs_with(prom.version.other(), &all, &[rules]);
    for p in [&prom, &other] {
        p.wait_ready().await;
        p.wait_jobs_up(&all).await;
    }
    let job_names: Vec<String> = all.iter().map(|(j, _)| j.clone()).collect();
    let jobs = Jobs::new([&prom, &other], all);
    let healthy: BTreeSet<(String, String)> = singles
        .healthy()
        .into_iter()
        .chain(shards.healthy())
        .chain(confirming.healthy())
        .collect();
    for p in [&prom, &other] {
        baseline(p, &job_names, &healthy).await;
    }
    println!(
        "six installations up and seen by both Prometheus versions after {:?}",
        started.elapsed()
    );

    let alerts = Alerts::new([&prom, &other]);
    never_fire(&alerts, &singles, healthy);
    tokio::join!(
        shards.drive(&alerts, &jobs),
        replica::leaderless(&singles.leaderless, &alerts, &client),
        replica::lag(&singles.lag, &alerts),
        replica::writes(&singles.writes, &alerts),
        replica::limited(&singles.limited, &alerts),
        checkers::drive(&singles.limited, &alerts),
        confirming.drive(&alerts),
    );
    alerts.now().await;

    // Each alert of the shipped file fired at least once.
    let fired: BTreeSet<String> = alerts.fired().into_iter().map(|f| f.alert.name).collect();
    let every: BTreeSet<String> = rules::FOR.iter().map(|(a, _)| a.to_string()).collect();
    assert_eq!(fired, every, "alerts seen firing");
    println!("every alert fired; the test took {:?}", started.elapsed());
}

/// Before any fault: Prometheus sees one leader in every installation and
/// every healthy checker Ready.
async fn baseline(prom: &Prometheus, jobs: &[String], healthy: &BTreeSet<(String, String)>) {
    eventually(
        Duration::from_secs(60),
        "one leader per job in Prometheus",
        || async {
            let leaders = by_label(prom.query("sum by (job) (webchecker_leader)").await?, "job");
            jobs.iter()
                .all(|j| leaders.get(j) == Some(&1.0))
                .then_some(())
        },
    )
    .await;
    eventually(
        Duration::from_secs(60),
        "every healthy checker Ready in Prometheus",
        || async {
            let up = prom
                .query("max by (namespace, name) (webchecker_up) == 1")
                .await?;
            let ready: BTreeSet<(String, String)> = up
                .into_iter()
                .map(|(l, _)| (l["namespace"].clone(), l["name"].clone()))
                .collect();
            healthy.is_subset(&ready).then_some(())
        },
    )
    .await;
}

/// The alerts that must not fire from here on.
fn never_fire(alerts: &Alerts<'_>, singles: &Singles, healthy: BTreeSet<(String, String)>) {
    alerts.never("healthy checkers are up and keep their budget", move |a| {
        matches!(
            a.name.as_str(),
            "WebCheckerDown" | "WebCheckerErrorBudgetBurn" | "WebCheckerErrorBudgetBurnSlow"
        ) && healthy.contains(&(
            a.labels.get("namespace").cloned().unwrap_or_default(),
            a.labels.get("name").cloned().unwrap_or_default(),
        ))
    });
    let leaderless = singles.leaderless.job.clone();
    alerts.never("every other installation has a leader", move |a| {
        a.name == "WebCheckerNoLeader" && a.labels.get("job").is_some_and(|j| *j != leaderless)
    });
    // The other replicas have no --memory-limit: their cgroup's, if any, is
    // the machine's.
    let lag = singles.lag.job.clone();
    alerts.never("memory is short in `lag` only", move |a| {
        a.name == "WebCheckerReplicaMemoryHigh" && a.labels.get("job") != Some(&lag)
    });
    alerts.never("checkers are orphaned in `shards` only", |a| {
        a.name == "WebCheckerOrphaned"
            && a.labels.get("job").map(String::as_str) != Some(shards::JOB)
    });
    let (writes, leaderless) = (singles.writes.job.clone(), singles.leaderless.job.clone());
    alerts.never("status writes fail in `writes` only", move |a| {
        a.name == "WebCheckerStatusWritesFailing"
            && a.labels
                .get("job")
                .is_some_and(|j| *j != writes && *j != leaderless)
    });
}
