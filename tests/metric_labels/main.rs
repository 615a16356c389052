//! Labels to route by and blackbox_exporter's names
//! (item 6), against a real Prometheus scraping a real operator replica:
//!
//! - `webchecker_checker_info` carries the URL (without its query), the host
//!   and the checker labels named by `--metric-labels-allowlist`, as
//!   `label_<key>`; no other series carries them, and a join on
//!   (namespace, name) routes `webchecker_up` by team;
//! - relabelling a checker replaces its info series;
//! - WebCheckerDown takes its severity from a checker's `severity` label, and
//!   is `warning` without one (the pending alerts of the real rule file);
//! - the recording rules of alerts/blackbox.rules.yaml give the same
//!   `probe_success` as the operator's own `webchecker_last_probe_success`.
//!
//! And native histograms with Prometheus 3 (native_histograms.rs).

mod native_histograms;
use webchecker_kit as support;
use webchecker_kit::platform;
use webchecker_kit::prom;

use std::collections::BTreeMap;
use std::time::Duration;

use prom::Prometheus;
use support::*;

fn checker(name: &str, labels: &[(&str, &str)], host: &str, path: &str) -> String {
    let labels: String = labels
        .iter()
        .map(|(k, v)| format!("    {k}: \"{v}\"\n"))
        .collect();
    let labels = if labels.is_empty() {
        String::new()
    } else {
        format!("  labels:\n{labels}")
    };
    format!(
        "apiVersion: test.network.io/v1alpha1\nkind: WebChecker\nmetadata:\n  name: {name}\n{labels}spec:\n  host: {host}\n  path: \"{path}\"\n  intervalSeconds: 1\n---\n"
    )
}

fn by_name(
    samples: &[(BTreeMap<String, String>, f64)],
) -> BTreeMap<String, (BTreeMap<String, String>, f64)> {
    samples
        .iter()
        .map(|(l, v)| (l["name"].clone(), (l.clone(), *v)))
        .collect()
}

/// One replica with the allowlist, the four checkers on a witness (two of
/// them failing), a Prometheus with both rule files scraping it.
struct Setup {
    cluster: &'static Cluster,
    ns: String,
    /// The witness's URL, the checkers' host.
    host: String,
    prom: Prometheus,
    _op: Operator,
    _witness: Witness,
}

async fn setup() -> Setup {
    let cluster = Cluster::shared("metric-labels");
    let ns = cluster.namespace("labels");
    let witness = Witness::start().await;
    witness.set_mode("down", Mode::Status(503));
    witness.set_mode("paging", Mode::Status(503));
    let mut flags: Vec<&str> = FAST_LEASES.to_vec();
    flags.push("--metric-labels-allowlist=team,app.kubernetes.io/part-of,severity");
    let op = Operator::spawn(cluster, "labels-r0", &ns, &flags);
    let host = witness.url();
    let yaml = [
        checker(
            "pay",
            &[
                ("team", "payments"),
                ("app.kubernetes.io/part-of", "shop"),
                ("severity", "critical"),
                ("not-copied", "x"),
            ],
            &host,
            "/c/pay",
        ),
        checker("down", &[("team", "web")], &host, "/c/down"),
        checker(
            "paging",
            &[("team", "web"), ("severity", "critical")],
            &host,
            "/c/paging",
        ),
        checker("plain", &[], &host, "/c/plain?token=s3cret"),
    ]
    .concat();
    let out = cluster.kubectl_stdin(&["apply", "-n", &ns, "-f", "-"], &yaml);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    op.wait_ready(Duration::from_secs(60)).await;
    let prom = Prometheus::start(
        &[(op.identity.clone(), op.port)],
        &[
            // WebCheckerDown at once: its two minutes are not what is tested.
            webchecker_kit::prom::rules_with_down_wait(0),
            repo().join("alerts/blackbox.rules.yaml"),
        ],
    );
    prom.wait_ready().await;
    Setup {
        cluster,
        ns,
        host,
        prom,
        _op: op,
        _witness: witness,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowlisted_labels_reach_prometheus_and_the_blackbox_names_agree() {
    let s = setup().await;
    info_series_carry_the_allowlisted_labels_only(&s).await;
    up_routes_by_team_and_only_the_info_series_carries_labels(&s).await;
    webchecker_down_takes_the_checkers_severity(&s).await;
    relabelling_replaces_the_info_series(&s).await;
    blackbox_probe_success_is_ours(&s).await;
}

/// The info series, one per checker, with the allowlisted labels only.
async fn info_series_carry_the_allowlisted_labels_only(s: &Setup) {
    let (prom, ns, host) = (&s.prom, &s.ns, &s.host);
    let info_query = format!("webchecker_checker_info{{namespace=\"{ns}\"}}");
    let info = eventually(
        Duration::from_secs(60),
        "four info series in Prometheus",
        || async {
            let v = prom.query(&info_query).await?;
            (v.len() == 4).then(|| by_name(&v))
        },
    )
    .await;
    let (pay, _) = &info["pay"];
    assert_eq!(
        pay.get("label_team").map(String::as_str),
        Some("payments"),
        "{pay:?}"
    );
    assert_eq!(
        pay.get("label_app_kubernetes_io_part_of")
            .map(String::as_str),
        Some("shop")
    );
    assert_eq!(
        pay.get("label_severity").map(String::as_str),
        Some("critical")
    );
    assert!(!pay.keys().any(|k| k.contains("not_copied")), "{pay:?}");
    assert_eq!(pay["url"], format!("{host}/c/pay"));
    assert_eq!(pay["host"], "127.0.0.1");
    let (plain, _) = &info["plain"];
    assert_eq!(
        plain["url"],
        format!("{host}/c/plain"),
        "no query: {plain:?}"
    );
    assert!(!plain.keys().any(|k| k.starts_with("label_")), "{plain:?}");
}

/// Routing by team: the join, and no other series carries the labels.
async fn up_routes_by_team_and_only_the_info_series_carries_labels(s: &Setup) {
    let (prom, ns) = (&s.prom, &s.ns);
    let join = format!(
        "webchecker_up{{namespace=\"{ns}\"}} * on (namespace, name) group_left (label_team) webchecker_checker_info"
    );
    eventually(
        Duration::from_secs(60),
        "up joined with label_team",
        || async {
            let v = by_name(&prom.query(&join).await?);
            let team = |n: &str| {
                v.get(n)
                    .and_then(|(l, x)| Some((l.get("label_team")?.clone(), *x)))
            };
            (team("pay") == Some((String::from("payments"), 1.0))
                && team("down") == Some((String::from("web"), 0.0)))
            .then_some(())
        },
    )
    .await;
    let carriers = prom
        .query(&format!(
            "count by (__name__) ({{namespace=\"{ns}\", label_team=~\".+\"}})"
        ))
        .await
        .expect("query");
    let names: Vec<&str> = carriers
        .iter()
        .map(|(l, _)| l["__name__"].as_str())
        .collect();
    assert_eq!(names, ["webchecker_checker_info"], "only the info series");
}

/// WebCheckerDown carries the severity the checker's label chose,
/// `warning` without one.
async fn webchecker_down_takes_the_checkers_severity(s: &Setup) {
    let (prom, ns) = (&s.prom, &s.ns);
    let alerts_query = format!("ALERTS{{alertname=\"WebCheckerDown\", namespace=\"{ns}\"}}");
    let alerts = eventually(
        Duration::from_secs(60),
        "WebCheckerDown for both",
        || async {
            let v = by_name(&prom.query(&alerts_query).await?);
            (v.len() == 2).then_some(v)
        },
    )
    .await;
    assert_eq!(alerts["down"].0["severity"], "warning", "{alerts:?}");
    assert_eq!(alerts["paging"].0["severity"], "critical", "{alerts:?}");
    assert!(!alerts.contains_key("pay"));
}

/// A new label value replaces the series (the old one goes stale).
async fn relabelling_replaces_the_info_series(s: &Setup) {
    let (prom, ns) = (&s.prom, &s.ns);
    let out = s.cluster.kubectl(&[
        "label",
        "wc",
        "pay",
        "-n",
        ns,
        "team=platform",
        "--overwrite",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pay_query = format!("webchecker_checker_info{{namespace=\"{ns}\", name=\"pay\"}}");
    eventually(
        Duration::from_secs(30),
        "the relabelled info series",
        || async {
            let v = prom.query(&pay_query).await?;
            (v.len() == 1 && v[0].0.get("label_team").map(String::as_str) == Some("platform"))
                .then_some(())
        },
    )
    .await;
}

/// blackbox_exporter's probe_success, from the recording rules, is the
/// operator's own last-probe result for every checker (and names the URL).
async fn blackbox_probe_success_is_ours(s: &Setup) {
    let (prom, ns) = (&s.prom, &s.ns);
    let ours_query =
        format!("max by (namespace, name) (webchecker_last_probe_success{{namespace=\"{ns}\"}})");
    let bb_query = format!("probe_success{{namespace=\"{ns}\"}}");
    let (ours, bb) = eventually(Duration::from_secs(60), "probe_success agrees", || async {
        let ours = by_name(&prom.query(&ours_query).await?);
        let bb = by_name(&prom.query(&bb_query).await?);
        let values =
            |m: &BTreeMap<String, (BTreeMap<String, String>, f64)>| -> BTreeMap<String, f64> {
                m.iter().map(|(k, (_, v))| (k.clone(), *v)).collect()
            };
        let (o, b) = (values(&ours), values(&bb));
        (o.len() == 4 && o == b && o["pay"] == 1.0 && o["down"] == 0.0).then_some((ours, bb))
    })
    .await;
    for (name, (labels, _)) in &bb {
        assert_eq!(labels["instance"], labels["url"], "{name}: {labels:?}");
        assert!(ours.contains_key(name));
    }
    println!(
        "probe_success == webchecker_last_probe_success for {:?}",
        bb.keys().collect::<Vec<_>>()
    );
}
