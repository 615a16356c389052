//! Steady state and shutdown: status writes are rare, probes of one checker
//! never stack and nothing deadlocks, health endpoints and a graceful SIGTERM.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steady_state_writes_are_rare() {
    let (c, ns, id) = world("writes");
    let client = c.client().await;
    let api = checkers(&client, &ns);
    let w = Witness::start().await;
    let op = Operator::spawn(c, &id, &ns, FAST_LEASES);
    op.wait_ready(Duration::from_secs(60)).await;

    // 1 s interval, as the issue asks (create_checkers sets timeoutSeconds 0.5).
    let interval = 1;
    let names: Vec<String> = (0..50).map(|i| format!("w-{i}")).collect();
    let _ = create_checkers(&client, &ns, &w.url(), &names, interval).await;
    let list = eventually(Duration::from_secs(60), "all 50 Ready=True", || async {
        let l = api.list(&ListParams::default()).await.ok()?;
        let n = l
            .items
            .iter()
            .filter(|o| {
                o.status
                    .as_ref()
                    .and_then(|s| s.condition("Ready"))
                    .is_some_and(|c| c.status == "True")
            })
            .count();
        (n == 50).then_some(l)
    })
    .await;
    let rv = list.metadata.resource_version.clone().unwrap();
    let m0 = metrics_of(&op).await;

    let window = Duration::from_secs(30);
    let mut stream = api
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    let t0 = Instant::now();
    let mut writes = 0;
    let mut modified: HashMap<String, usize> = HashMap::new();
    let watched = tokio::time::timeout(window, async {
        while let Some(ev) = stream.next().await {
            match ev.unwrap() {
                WatchEvent::Modified(o) => {
                    writes += 1;
                    *modified.entry(o.name_any()).or_default() += 1;
                }
                WatchEvent::Error(e) => panic!("watch error {e:?}"),
                _ => {}
            }
        }
    })
    .await;
    assert!(watched.is_err(), "the watch ended before the window did");
    let t1 = Instant::now();
    // Control: the same watch does see a write.
    api.patch(
        "w-0",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"control": "1"}}})),
    )
    .await
    .unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(ev) = stream.next().await {
            if let Ok(WatchEvent::Modified(o)) = ev
                && o.name_any() == "w-0"
            {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(seen, Ok(true), "the watch does not see writes");
    let probes = w
        .hits()
        .iter()
        .filter(|h| h.start >= t0 && h.start <= t1)
        .count();
    let m1 = metrics_of(&op).await;
    let ok_writes = metric(&m1, "webchecker_status_writes_total", &[("result", "ok")])
        .unwrap_or(0.0)
        - metric(&m0, "webchecker_status_writes_total", &[("result", "ok")]).unwrap_or(0.0);
    println!(
        "steady state over {:?}: {writes} object writes (watch MODIFIED; operator counted {ok_writes} status writes) vs {probes} probes; {modified:?}",
        t1 - t0
    );
    let expected = 50 * window.as_secs() as usize / interval as usize;
    assert!(
        probes * 6 >= expected * 5,
        "{probes} probes, expected about {expected}"
    );
    assert!(writes * 100 < probes, "{writes} writes for {probes} probes");
}

// ---------------------------------------------------------------- 6

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// Per checker: consecutive exchanges at the witness never overlap, and,
/// once it has settled into its phase, start about one interval (2 s)
/// apart. The operator keeps a 2 s cadence (start = due + lag, due times
/// exactly 2 s apart) and dispatches the next probe only after the previous
/// one ended; the witness adds its own scheduling noise to the start it
/// logs. So: every spacing >= `floor` (hard: a second timer or a probe
/// stacked on another lands anywhere in 0..2 s), and at least 99% of them
/// at least 1.9 s. Returns (smallest spacing, 1st percentile), or None when no
/// checker got past its settling.
fn no_stacking(hits: &[Hit], floor: Duration) -> Option<(Duration, Duration)> {
    let mut by: HashMap<&str, Vec<&Hit>> = HashMap::new();
    for h in hits {
        by.entry(&h.checker).or_default().push(h);
    }
    let mut spacings = Vec::new();
    for (checker, mut hs) in by {
        hs.sort_by_key(|h| h.start);
        for (n, p) in hs.windows(2).enumerate() {
            assert!(
                p[1].start >= p[0].end,
                "{checker}: a probe started {:?} before the previous one ended",
                p[0].end - p[1].start
            );
            // The first two spacings may be shorter, down to half an
            // interval, while a new checker settles into its phase
            // (docs/architecture.md).
            if n < 2 {
                continue;
            }
            let d = p[1].start - p[0].start;
            assert!(
                d >= floor,
                "{checker}: two probes {d:?} apart (interval 2s)"
            );
            spacings.push(d);
        }
    }
    spacings.sort();
    let p1 = *spacings.get(spacings.len() / 100)?;
    assert!(
        p1 >= Duration::from_millis(1900),
        "1% of consecutive probes are less than {p1:?} apart (interval 2s)"
    );
    Some((spacings[0], p1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_stacking_no_deadlock() {
    let c = cluster();
    let client = c.client().await;
    let (hang_names, ok_names) = (names("hang", 500), names("ok", 100));
    // Part 1's witnesses stay up through part 2, as its checkers do.
    let _part_one = default_pool(c, &client, &hang_names, &ok_names).await;
    saturated_pool(c, &client, &hang_names[..200], &ok_names).await;
}

/// Part 1: default pool (1024); 500 hanging beside 100 healthy checkers.
/// Returns the witnesses (hanging, healthy).
async fn default_pool(
    c: &'static Cluster,
    client: &Client,
    hang_names: &[String],
    ok_names: &[String],
) -> (Witness, Witness) {
    let ns = c.namespace("stack");
    let hang = Witness::start().await;
    hang.set_default_mode(Mode::Hang(Duration::from_millis(1500)));
    let ok = Witness::start().await;
    let op = Operator::spawn(c, &format!("op-{ns}"), &ns, FAST_LEASES);
    op.wait_ready(Duration::from_secs(60)).await;
    let t = Instant::now();
    let _ = create_checkers(client, &ns, &hang.url(), hang_names, 2).await;
    let _ = create_checkers(client, &ns, &ok.url(), ok_names, 2).await;
    println!("created 600 checkers in {:?}", t.elapsed());
    let api = checkers(client, &ns);
    all_600_have_a_status(&api).await;
    println!(
        "all 600 have a status {:?} after creation began",
        t.elapsed()
    );
    let from = Instant::now();
    // The assertions are about what happens during these 20 s.
    tokio::time::sleep(Duration::from_secs(22)).await;
    let m = metrics_of(&op).await;
    let hang_hits = hang.all_hits();
    let ok_hits = ok.all_hits();
    // A witness logs an exchange when it ends (answered after 1.5 s, or
    // abandoned when the probe times out after 1 s): the log is complete only
    // for exchanges that started more than 1.5 s ago. Judge the gaps on the
    // 20 s that are complete.
    let to = from + Duration::from_secs(20);
    let min_hang = no_stacking(&hang_hits, Duration::from_millis(1800))
        .expect("hanging checkers probed past their settling");
    let min_ok = no_stacking(&ok_hits, Duration::from_millis(1800))
        .expect("healthy checkers probed past their settling");
    let gap_ok = largest_gap(&ok_hits, ok_names, from, to);
    let gap_hang = largest_gap(&hang_hits, hang_names, from, to);
    let p50 = histogram_quantile(&m, "webchecker_schedule_lag_seconds", 0.5);
    let p99 = histogram_quantile(&m, "webchecker_schedule_lag_seconds", 0.99);
    let missed = metric(&m, "webchecker_missed_intervals_total", &[]).unwrap_or(0.0);
    println!(
        "pool 1024: {} hanging + {} healthy exchanges; spacing (min, 1st percentile) hang {min_hang:?} ok {min_ok:?}; largest gap ok {:?} ({}), hang {:?} ({}); lag p50 <= {p50:?} p99 <= {p99:?}; missed {missed}",
        hang_hits.len(),
        ok_hits.len(),
        gap_ok.0,
        gap_ok.1,
        gap_hang.0,
        gap_hang.1
    );
    assert!(
        gap_ok.0 <= Duration::from_millis(2500),
        "healthy checker {} not probed for {:?}",
        gap_ok.1,
        gap_ok.0
    );
    assert!(
        gap_hang.0 <= Duration::from_millis(2500),
        "hanging checker {} not probed for {:?}",
        gap_hang.1,
        gap_hang.0
    );
    assert!(
        p99.is_some_and(|q| q <= 0.1),
        "schedule lag p99 {p99:?} (bucket upper bound) not under 100 ms"
    );
    drop(op);
    (hang, ok)
}

/// Waits until all 600 checkers of `api` have a Ready condition.
async fn all_600_have_a_status(api: &Api<WebChecker>) {
    eventually(Duration::from_secs(90), "all 600 have a status", || async {
        let l = api.list(&ListParams::default()).await.ok()?;
        let n = l
            .items
            .iter()
            .filter(|o| {
                o.status
                    .as_ref()
                    .and_then(|s| s.condition("Ready"))
                    .is_some()
            })
            .count();
        (n == 600).then_some(())
    })
    .await;
}

/// What the poller of /healthz and /metrics saw.
struct Polls {
    /// The slowest /healthz.
    worst: Duration,
    /// Every /healthz answer that was not a 200.
    bad: Vec<String>,
    /// /healthz polls.
    n: usize,
    /// The most inflight probes the metrics showed.
    max_inflight: f64,
}

/// Polls /healthz and /metrics of the replica at `addr` every 250 ms until
/// `stop_rx` fires.
fn poll_health(
    addr: String,
    mut stop_rx: tokio::sync::oneshot::Receiver<()>,
) -> tokio::task::JoinHandle<Polls> {
    tokio::spawn(async move {
        let (mut worst, mut bad, mut n, mut max_inflight) = (Duration::ZERO, Vec::new(), 0, 0.0f64);
        loop {
            let t = Instant::now();
            match http_get(&addr, "/healthz").await {
                Some((200, _)) => {}
                other => bad.push(format!("{other:?}")),
            }
            worst = worst.max(t.elapsed());
            n += 1;
            if let Some((_, m)) = http_get(&addr, "/metrics").await {
                max_inflight =
                    max_inflight.max(metric(&m, "webchecker_inflight_probes", &[]).unwrap_or(0.0));
            }
            tokio::select! {
                _ = &mut stop_rx => return Polls { worst, bad, n, max_inflight },
                _ = tokio::time::sleep(Duration::from_millis(250)) => {}
            }
        }
    })
}

/// Part 2: the same load on 8 workers: saturated, but alive and fair.
async fn saturated_pool(
    c: &'static Cluster,
    client: &Client,
    hang_names: &[String],
    ok_names: &[String],
) {
    let ns = c.namespace("sat");
    let hang = Witness::start().await;
    hang.set_default_mode(Mode::Hang(Duration::from_millis(1500)));
    let ok = Witness::start().await;
    let op = Operator::spawn(c, &format!("op-{ns}"), &ns, &args(&["--workers=8"]));
    op.wait_ready(Duration::from_secs(60)).await;
    let addr = format!("127.0.0.1:{}", op.port);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let poller = poll_health(addr, stop_rx);
    // 200 hanging checkers every 2 s on 8 workers, each holding one for its
    // 1 s timeout: 12.5 times what the pool can do.
    let t = Instant::now();
    let _ = create_checkers(client, &ns, &hang.url(), hang_names, 2).await;
    let _ = create_checkers(client, &ns, &ok.url(), ok_names, 2).await;
    let created = t.elapsed();
    // One round over the hanging checkers takes 200 * 1 s / 8 = 25 s (the
    // healthy ones take milliseconds). Allow that plus the creation time and
    // a margin.
    let bound = Duration::from_secs(25) + created + Duration::from_secs(20);
    let all_names: Vec<String> = hang_names.iter().chain(ok_names.iter()).cloned().collect();
    let covered = eventually(
        bound,
        "every checker probed at least once on 8 workers",
        || async {
            let seen: std::collections::HashSet<String> = hang
                .all_hits()
                .into_iter()
                .chain(ok.all_hits())
                .map(|h| h.checker)
                .collect();
            all_names
                .iter()
                .all(|n| seen.contains(n))
                .then(|| t.elapsed())
        },
    )
    .await;
    let _ = stop_tx.send(());
    let Polls {
        worst,
        bad,
        n,
        max_inflight,
    } = poller.await.unwrap();
    let m = metrics_of(&op).await;
    let p99 = histogram_quantile(&m, "webchecker_schedule_lag_seconds", 0.99);
    let missed = metric(&m, "webchecker_missed_intervals_total", &[]).unwrap_or(0.0);
    println!(
        "pool 8: created in {created:?}; every checker probed within {covered:?} (bound {bound:?}); /healthz {n} polls, slowest {worst:?}, failures {bad:?}; inflight max {max_inflight}; lag p99 <= {p99:?}; missed {missed}"
    );
    assert!(bad.is_empty(), "/healthz did not answer 200: {bad:?}");
    assert!(worst < Duration::from_secs(1), "/healthz took {worst:?}");
    assert_eq!(
        max_inflight, 8.0,
        "inflight probes should reach the pool size and never pass it"
    );
    assert!(
        p99.is_some_and(|q| q > 1.0),
        "lag p99 {p99:?} should show the saturation"
    );
    assert!(missed > 0.0, "missed intervals should be counted");
    assert_eq!(metric(&m, "webchecker_worker_pool_size", &[]), Some(8.0));
    // Saturated, most checkers get no further than their settling probes.
    let min = no_stacking(&hang.all_hits(), Duration::from_millis(1800));
    println!(
        "pool 8: spacing of one checker's probes past its settling (min, 1st percentile) {min:?}"
    );
}

// ---------------------------------------------------------------- 7

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_endpoints_and_graceful_shutdown() {
    let (c, ns, id) = world("health");
    let client = c.client().await;
    let api = checkers(&client, &ns);
    let w = Witness::start().await;
    w.set_default_mode(Mode::Hang(Duration::from_secs(3)));
    let mut op = Operator::spawn(c, &id, &ns, &args(&["--shutdown-timeout=10s"]));
    op.wait_ready(Duration::from_secs(60)).await;
    assert_eq!(op.get("/healthz").await.map(|r| r.0), Some(200));
    assert_eq!(op.get("/readyz").await, Some((200, "ready\n".to_string())));

    never_ready_without_an_api_server(c, &ns).await;

    // Graceful shutdown while a probe hangs (target hangs 3 s, timeout 2 s).
    let out = c
        .apply(
            &ns,
            &checker_yaml("slow", &w.url(), "/c/slow", 3, "  timeoutSeconds: 2\n"),
        )
        .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Wait for the first probe to be in flight: no status yet, one probe running.
    eventually(Duration::from_secs(30), "first probe in flight", || async {
        let no_status = api.get("slow").await.ok()?.status.is_none();
        let m = op.metrics().await?;
        (no_status && metric(&m, "webchecker_inflight_probes", &[]) == Some(1.0)).then_some(())
    })
    .await;
    sigterm_exits_gracefully(&mut op).await;
    // The in-flight probe was let finish (timed out at 2 s, not cut), and its
    // result was written before the exit.
    // The witness logs the abandoned exchange when it sees the connection close.
    let hits = eventually(
        Duration::from_secs(5),
        "the hung exchange logged",
        || async {
            let h = w.all_hits();
            (!h.is_empty()).then_some(h)
        },
    )
    .await;
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert!(
        hits[0].end - hits[0].start >= Duration::from_millis(1900),
        "probe cut after {:?}",
        hits[0].end - hits[0].start
    );
    let cond = ready(&api, "slow")
        .await
        .expect("status flushed during shutdown");
    assert_eq!(
        (cond.status.as_str(), cond.reason.as_str()),
        ("False", "Timeout"),
        "{cond:?}"
    );
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    assert!(
        leases
            .get_opt(&format!("webchecker-member-{id}"))
            .await
            .unwrap()
            .is_none(),
        "membership Lease released"
    );
}

/// A replica that cannot reach the API server never becomes ready.
async fn never_ready_without_an_api_server(c: &Cluster, ns: &str) {
    let bad_kc = c.dir.join(format!("kubeconfig-closed-{ns}"));
    redirect_kubeconfig(&c.kubeconfig, free_port(), &bad_kc);
    let bad_cluster = Cluster {
        dir: c.dir.clone(),
        kubeconfig: bad_kc,
        bin: c.bin.clone(),
    };
    let mut bad = Operator::spawn(&bad_cluster, &format!("bad-{ns}"), ns, FAST_LEASES);
    let mut answers = Vec::new();
    let until = Instant::now() + Duration::from_secs(5);
    // The assertion is about these 5 s: never ready.
    while Instant::now() < until {
        let r = bad.get("/readyz").await;
        assert_ne!(
            r.as_ref().map(|r| r.0),
            Some(200),
            "ready without an API server"
        );
        if answers.last() != Some(&r) {
            answers.push(r);
        }
        if bad.exited().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let exit = bad.exited();
    println!(
        "unreachable API server: /readyz answers {answers:?}; exit {exit:?}; log tail:\n{}",
        dump_log_tail(&bad, 2)
    );
    if let Some(st) = exit {
        assert!(!st.success(), "exited 0 without an API server");
    }
    drop(bad);
}

/// SIGTERM: /readyz says 503 "shutting down", then the replica exits 0
/// within its shutdown timeout (10 s).
async fn sigterm_exits_gracefully(op: &mut Operator) {
    let term = Instant::now();
    op.signal(libc::SIGTERM);
    let mut saw_503 = None;
    let status = loop {
        if let Some(st) = op.exited() {
            break st;
        }
        if saw_503.is_none()
            && let Some((503, body)) = op.get("/readyz").await
        {
            assert_eq!(body, "shutting down\n");
            saw_503 = Some(term.elapsed());
        }
        assert!(
            term.elapsed() < Duration::from_secs(10),
            "no exit within the shutdown timeout (10s)"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let exited = term.elapsed();
    println!(
        "SIGTERM: readyz 503 \"shutting down\" after {saw_503:?}, exit {status:?} after {exited:?}"
    );
    assert!(
        saw_503.is_some(),
        "readyz never said 503 shutting down before the exit"
    );
    assert!(
        status.success(),
        "exit status {status:?}; log:\n{}",
        dump_log_tail(op, 20)
    );
}
