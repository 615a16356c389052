//! (b) The probe counters against what the witness saw: each checker's series
//! on exactly one replica, its owner's counter equal to the probes the witness
//! saw from it, and Prometheus' last scraped values equal to the probes the
//! witness saw by that scrape.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use crate::prom::{by_label, labels, num, samples};
use crate::scenario::{Run, now_unix};
use crate::support::*;

/// The checks; returns every replica's /metrics as (identity, text).
pub async fn probe_counts_match_the_witness(run: &Run) -> Vec<(String, String)> {
    series_on_one_replica(run).await;
    let texts = owner_counts_match_the_witness(run).await;
    prometheus_counts_match_the_witness(run).await;
    texts
}

/// Series on exactly one replica, as Prometheus sees it.
async fn series_on_one_replica(run: &Run) {
    let q = format!("count by (name) (webchecker_up{{{}}})", run.sel());
    eventually(
        Duration::from_secs(10),
        "each checker's webchecker_up on exactly one replica",
        || async {
            let m = by_label(run.prom.samples(&q).await, "name");
            (m.len() == run.total() && m.values().all(|x| *x == 1.0)).then_some(())
        },
    )
    .await;
}

/// Direct: snapshot the witness, then read every replica's /metrics. The
/// owner's counter equals the probes the witness saw from it since it took
/// the checker over, give or take the one probe in flight; no other replica
/// exports the checker.
async fn owner_counts_match_the_witness(run: &Run) -> Vec<(String, String)> {
    let (ns, after) = (&run.ns, &run.after);
    assert_eq!(
        &run.owners_now().await,
        after,
        "no move after the scale-out settled"
    );
    let hits = run.witness.all_hits();
    let mut texts = Vec::new();
    for o in &run.ops {
        texts.push((o.identity.clone(), o.metrics().await.expect("metrics")));
    }
    assert_eq!(exclusivity_violation(&hits), None);
    assert_eq!(reappearance(&hits), None);
    let by_checker = by_checker(&hits);
    let mut off_by_one = 0;
    for n in &run.names {
        let exporters: Vec<&(String, String)> = texts
            .iter()
            .filter(|(_, t)| !checker_lines(t, ns, n).is_empty())
            .collect();
        let ids: Vec<&str> = exporters.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(
            ids,
            vec![after[n].as_str()],
            "{n}: series exported by {ids:?}"
        );
        let text = &exporters[0].1;
        let count = metric(
            text,
            "webchecker_probes_total",
            &[("namespace", ns), ("name", n)],
        )
        .expect("probes_total") as i64;
        let hs = &by_checker[n.as_str()];
        let run_len = hs
            .iter()
            .rev()
            .take_while(|h| h.replica == after[n])
            .count() as i64;
        assert!(
            (count - run_len).abs() <= 1,
            "{n}: owner {} counts {count} probes, the witness saw {run_len} from it",
            after[n]
        );
        if count != run_len {
            off_by_one += 1;
        }
        // The series of docs/metrics.md "Series per checker": 25 + k for
        // http, 3 more with spec.slo (the failing ones have it), 2 more
        // while Ready is not True (since when, and whether a dependency is
        // down).
        let labels = [("namespace", ns.as_str()), ("name", n.as_str())];
        let failing = ["down-", "sla-", "brk-"].iter().any(|p| n.starts_with(p));
        let up = metric(text, "webchecker_up", &labels).expect("webchecker_up");
        assert_eq!(up == 0.0, failing, "{n}: webchecker_up {up}");
        let since = metric(text, "webchecker_down_since_timestamp_seconds", &labels);
        assert_eq!(since.is_some(), failing, "{n}: down since {since:?}");
        let blamed = metric(text, "webchecker_dependency_down", &labels);
        assert_eq!(
            blamed,
            failing.then_some(0.0),
            "{n}: dependency down {blamed:?}"
        );
        let lines = checker_lines(text, ns, n);
        let k = lines
            .iter()
            .filter(|l| l.starts_with("webchecker_probes_total{"))
            .count();
        let slo = if n.starts_with("down-") {
            slo_counts_every_confirmed_failure(text, ns, n, count);
            3
        } else {
            0
        };
        assert_eq!(
            lines.len(),
            25 + k + slo + 2 * usize::from(failing),
            "{n}: series of an http checker (docs/metrics.md):\n{}",
            lines.join("\n")
        );
    }
    println!(
        "direct: {} checkers, owner counter = witness count, {off_by_one} off by one (probe in flight)",
        run.total()
    );
    texts
}

/// Through Prometheus: the last scraped value of each replica's counters
/// (sum over result and reason) against the probes the witness saw from that
/// replica up to that scrape. A counter restarts on a new owner and the old
/// owner's series disappear, so the fleet total is the sum of the last
/// values of every replica's series: the query of the issue.
async fn prometheus_counts_match_the_witness(run: &Run) {
    let (prom, sel) = (&run.prom, run.sel());
    let at = now_unix();
    let (agg, raw) = prom
        .query_pair_at(
            &format!("sum by (name) (last_over_time(webchecker_probes_total{{{sel}}}[10m]))"),
            &format!("webchecker_probes_total{{{sel}}}[10m]"),
            at,
        )
        .await;
    assert_eq!(agg["status"], "success", "{agg}");
    let agg = by_label(samples(&agg["data"]), "name");
    assert_eq!(raw["status"], "success", "{raw}");
    // Every probe that ended by the last scrape is in this snapshot.
    let hits = run.witness.all_hits();
    let by_checker = by_checker(&hits);
    // (name, pod) -> (timestamp of the last scrape, sum of the last values)
    let mut last: BTreeMap<(String, String), (f64, f64)> = BTreeMap::new();
    for s in raw["data"]["result"].as_array().unwrap() {
        let l = labels(&s["metric"]);
        let vals = s["values"].as_array().unwrap();
        let lastv = vals.last().unwrap();
        let (t, v) = (lastv[0].as_f64().unwrap(), num(&lastv[1]));
        let e = last
            .entry((l["name"].clone(), l["pod"].clone()))
            .or_insert((t, 0.0));
        assert!(
            (e.0 - t).abs() < 1e-6,
            "{l:?}: series of one owner end at different scrapes"
        );
        e.1 += v;
    }
    let mut unexported_old = 0;
    let mut unscraped_current = 0;
    for n in &run.names {
        let owners_of: Vec<&(String, String)> = last.keys().filter(|(c, _)| c == n).collect();
        let sum: f64 = owners_of.iter().map(|k| last[*k].1).sum();
        assert_eq!(agg.get(n).copied(), Some(sum), "{n}: last_over_time sum");
        let hs = &by_checker[n.as_str()];
        let replicas: BTreeSet<&str> = hs.iter().map(|h| h.replica.as_str()).collect();
        let pods: BTreeSet<&str> = owners_of.iter().map(|(_, p)| p.as_str()).collect();
        assert_eq!(
            pods,
            replicas,
            "{n}: replicas with series vs replicas seen by the witness (owner before the \
             scale-out {:?}, after {:?}; the witness's probes per replica: {})",
            run.before.get(n),
            run.after.get(n),
            probe_spans(run, hs)
        );
        for k in owners_of {
            let (t, v) = last[k];
            let seen = hs
                .iter()
                .filter(|h| h.replica == k.1 && run.clock.wall(h.end) <= t)
                .count() as f64;
            assert!(
                (v - seen).abs() <= 1.0,
                "{n} on {}: Prometheus' last value {v} at {t:.3}, the witness saw {seen} probes from it by then",
                k.1
            );
            let after_scrape = hs
                .iter()
                .filter(|h| h.replica == k.1 && run.clock.wall(h.end) > t)
                .count();
            if k.1 == run.after[n] {
                unscraped_current += after_scrape;
            } else {
                unexported_old += after_scrape;
            }
        }
    }
    let witness_total = hits.len();
    let prom_total: f64 = agg.values().sum();
    println!(
        "Prometheus: sum of last values {prom_total} vs {witness_total} probes at the witness; \
         old owners' probes after their last scrape (never exported) {unexported_old}, \
         current owners' probes after the last scrape {unscraped_current}"
    );
}

/// Each replica's probes of one checker: how many, and the Unix times of the
/// first start and the last end.
fn probe_spans(run: &Run, hs: &[&Hit]) -> String {
    let mut by: BTreeMap<&str, (usize, f64, f64)> = BTreeMap::new();
    for h in hs {
        let (s, e) = (run.clock.wall(h.start), run.clock.wall(h.end));
        let v = by.entry(h.replica.as_str()).or_insert((0, s, e));
        *v = (v.0 + 1, v.1.min(s), v.2.max(e));
    }
    by.iter()
        .map(|(r, (k, s, e))| format!("{r} {k} probes {s:.3}..{e:.3}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The witness's log by checker, each in the order the probes started.
fn by_checker(hits: &[Hit]) -> HashMap<&str, Vec<&Hit>> {
    let mut by: HashMap<&str, Vec<&Hit>> = HashMap::new();
    for h in hits {
        by.entry(&h.checker).or_default().push(h);
    }
    for hs in by.values_mut() {
        hs.sort_by_key(|h| h.start);
    }
    by
}

/// Lines of a /metrics text that belong to one checker.
fn checker_lines<'a>(text: &'a str, ns: &str, name: &str) -> Vec<&'a str> {
    let n = format!("namespace=\"{ns}\"");
    let m = format!("name=\"{name}\"");
    text.lines()
        .filter(|l| !l.starts_with('#') && l.contains(&n) && l.contains(&m))
        .collect()
}

/// A checker whose every probe fails, confirmed by another replica: the
/// owner counted each of its probes bad against spec.slo (but the one whose
/// verdict may still be on its way), none good.
fn slo_counts_every_confirmed_failure(text: &str, ns: &str, n: &str, probes: i64) {
    let of = |family: &str| {
        metric(text, family, &[("namespace", ns), ("name", n)])
            .unwrap_or_else(|| panic!("{n}: no {family}")) as i64
    };
    let (good, counted) = (
        of("webchecker_slo_good_probes_total"),
        of("webchecker_slo_probes_total"),
    );
    assert_eq!(good, 0, "{n}: good probes of a checker answering 503");
    assert!(
        counted <= probes && probes - counted <= 1,
        "{n}: {counted} counted against its objective of {probes} probes"
    );
}
