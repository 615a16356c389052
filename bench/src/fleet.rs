//! The fleet of parts 3 and 4, on the kit: release replicas of the operator
//! (`webchecker_kit::Operator`) on the kit's control plane, M checkers at a
//! 10 s interval on one witness whose log is interned as the fault campaign's
//! is (`oracle::ProbeLog`), and what only the bench measures: time to create
//! and to the first probe of every checker, RSS, and stability with every
//! shard within the ring's bound.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use webchecker::coordination::ring;
use webchecker_kit::oracle::ProbeLog;
use webchecker_kit::{Cluster, Operator, Witness, create_checkers_concurrently, faults};

use crate::common::{Res, err};
use crate::sys::proc_status_kib;

/// Every checker's interval.
pub const INTERVAL: u32 = 10;

/// (RSS once every checker was probed again, RSS after one /metrics scrape,
/// series exported), per replica.
pub type MemVariant = (Vec<f64>, Vec<f64>, Vec<f64>);

pub struct Fleet {
    pub client: Client,
    cl: &'static Cluster,
    pub ns: String,
    pub prefix: String,
    pub ops: Vec<Operator>,
    spawned: usize,
    pub witness: Witness,
    /// The witness's probes, interned; `log()` moves new ones in first.
    log: Mutex<ProbeLog>,
    pub names: Vec<String>,
    pub m: usize,
    pub create_s: f64,
    pub all_probed_s: f64,
    /// RSS of each replica once every checker was probed, before any /metrics scrape.
    pub rss_pre_mib: Vec<f64>,
    /// Extra operator flags for replicas spawned from now on.
    extra: Vec<String>,
    /// The first replica's process is started through this (a profiler).
    wrap_first: Vec<String>,
}

pub fn pid(o: &Operator) -> Option<u32> {
    o.child.as_ref().map(|c| c.id())
}

fn rss_mib(ops: &[Operator]) -> Vec<f64> {
    ops.iter()
        .filter_map(pid)
        .map(|p| proc_status_kib(p, "VmRSS:").unwrap_or(0) as f64 / 1024.0)
        .collect()
}

impl Fleet {
    pub async fn start(
        cl: &'static Cluster,
        prefix: &str,
        replicas: usize,
        m: usize,
    ) -> Res<Fleet> {
        Self::start_wrapped(cl, prefix, replicas, m, Vec::new()).await
    }

    /// `start`, the first replica's process started through `wrap_first`.
    pub async fn start_wrapped(
        cl: &'static Cluster,
        prefix: &str,
        replicas: usize,
        m: usize,
        wrap_first: Vec<String>,
    ) -> Res<Fleet> {
        let ns = cl.namespace(&format!("bench-{prefix}"));
        let witness = Witness::start().await;
        witness.set_lean();
        let mut f = Fleet {
            client: cl.client().await,
            cl,
            ns,
            prefix: prefix.to_string(),
            ops: Vec::new(),
            spawned: 0,
            witness,
            log: Mutex::new(ProbeLog::default()),
            names: (0..m).map(|i| format!("c{i}")).collect(),
            m,
            create_s: 0.0,
            all_probed_s: 0.0,
            rss_pre_mib: Vec::new(),
            extra: Vec::new(),
            wrap_first,
        };
        for _ in 0..replicas {
            f.spawn();
        }
        for o in &f.ops {
            o.wait_ready(Duration::from_secs(90)).await;
        }
        let t = Instant::now();
        let url = f.witness.url();
        create_checkers_concurrently(&f.client, &f.ns, &url, &f.names, INTERVAL, 64).await;
        f.create_s = t.elapsed().as_secs_f64();
        eprintln!(
            "bench: {}: created {m} checkers in {:.1} s",
            f.prefix, f.create_s
        );
        f.wait_probed_since(t, Duration::from_secs(240)).await?;
        f.all_probed_s = t.elapsed().as_secs_f64();
        f.rss_pre_mib = rss_mib(&f.ops);
        eprintln!(
            "bench: {}: every checker probed {:.1} s after the first create",
            f.prefix, f.all_probed_s
        );
        Ok(f)
    }

    /// A new replica (new identity, as a Deployment's new pod); its index.
    pub fn spawn(&mut self) -> usize {
        let id = format!("{}-r{}", self.prefix, self.spawned);
        self.spawned += 1;
        let mut args = vec!["--log-level=info"];
        args.extend(self.extra.iter().map(String::as_str));
        let op = if self.spawned == 1 && !self.wrap_first.is_empty() {
            Operator::spawn_through(self.cl, &id, &self.ns, &args, &self.wrap_first)
        } else {
            Operator::spawn(self.cl, &id, &self.ns, &args)
        };
        self.ops.push(op);
        self.ops.len() - 1
    }

    /// The witness's log so far.
    pub fn log(&self) -> std::sync::MutexGuard<'_, ProbeLog> {
        let mut log = self.log.lock().unwrap();
        log.absorb(self.witness.take_hits());
        log
    }

    /// Probe starts of each checker (by name), sorted, and who probed.
    pub fn starts(&self) -> HashMap<String, Vec<(Instant, u16)>> {
        let log = self.log();
        let mut by: HashMap<String, Vec<(Instant, u16)>> = HashMap::new();
        for p in &log.probes {
            by.entry(log.checker(p.checker).to_string())
                .or_default()
                .push((p.start, p.replica));
        }
        for v in by.values_mut() {
            v.sort_by_key(|x| x.0);
        }
        by
    }

    /// Replaces every replica by a new one started with `extra` flags (the
    /// objects stay).
    pub async fn restart_with(&mut self, extra: &[&str]) -> Res<MemVariant> {
        let n = self.live_ids().len();
        for o in self.ops.iter().filter(|o| o.live()) {
            o.signal(libc::SIGTERM);
        }
        for o in self.ops.iter_mut().filter(|o| o.live()) {
            faults::sigterm(o, Duration::from_secs(30)).await?;
        }
        self.extra = extra.iter().map(|s| s.to_string()).collect();
        let first = self.ops.len();
        for _ in 0..n {
            self.spawn();
        }
        for o in &self.ops[first..] {
            o.wait_ready(Duration::from_secs(90)).await;
        }
        // Every checker moves to the new identities: 10,000 of them on a
        // machine busy with builds took longer than 240 s.
        self.wait_probed_since(Instant::now(), Duration::from_secs(600))
            .await?;
        let pre = rss_mib(&self.ops[first..]);
        let texts = self.scrape_all().await?;
        let post = rss_mib(&self.ops[first..]);
        let series = texts.iter().map(|t| series(t)).collect();
        Ok((pre, post, series))
    }

    /// Waits until the first status write of every checker is written (the
    /// first probe of each writes one): the steady state begins after that
    /// backlog. Returns the seconds waited (at most 240).
    pub async fn wait_writes_settled(&self) -> Res<f64> {
        let writes = |texts: &[String]| -> f64 {
            texts
                .iter()
                .filter_map(|t| webchecker_kit::metric(t, "webchecker_status_writes_total", &[]))
                .sum()
        };
        let t = Instant::now();
        let mut last = writes(&self.scrape_all().await?);
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            let now = writes(&self.scrape_all().await?);
            let settled = now >= self.m as f64 && now - last <= (self.m as f64 / 500.0).max(3.0);
            last = now;
            if settled || t.elapsed() > Duration::from_secs(240) {
                return Ok(t.elapsed().as_secs_f64());
            }
        }
    }

    /// /metrics of every live replica.
    pub async fn scrape_all(&self) -> Res<Vec<String>> {
        let mut out = Vec::new();
        for o in self.ops.iter().filter(|o| o.live()) {
            match o.get_within("/metrics", Duration::from_secs(20)).await {
                Some((200, text)) => out.push(text),
                _ => return Err(err(format!("no metrics from {}", o.identity))),
            }
        }
        Ok(out)
    }

    pub fn live_ids(&self) -> Vec<String> {
        self.ops
            .iter()
            .filter(|o| o.live())
            .map(|o| o.identity.clone())
            .collect()
    }

    pub async fn wait_probed_since(&self, since: Instant, timeout: Duration) -> Res<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let seen = self.log().probed_since(since).len();
            if seen >= self.m {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(err(format!(
                    "{}: only {seen} of {} checkers probed within {timeout:?}",
                    self.prefix, self.m
                )));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Owner of every checker; None while unassigned or draining.
    pub async fn owners(&self) -> Res<HashMap<String, Option<String>>> {
        Ok(webchecker_kit::owners(&self.client, &self.ns).await?)
    }

    pub async fn leader(&self) -> Option<String> {
        let api: Api<Lease> = Api::namespaced(self.client.clone(), &self.ns);
        api.get("webchecker-leader")
            .await
            .ok()?
            .spec?
            .holder_identity
    }

    /// Every checker owned by a live replica, none draining, shards within
    /// the bound, and every checker probed since.
    pub async fn wait_stable(&self, timeout: Duration) -> Res<HashMap<String, String>> {
        let deadline = Instant::now() + timeout;
        let live = self.live_ids();
        let cap = ring::capacity(self.m, live.len());
        loop {
            let owners = self.owners().await?;
            let mut sizes: HashMap<&str, usize> = HashMap::new();
            let ok = owners.len() == self.m
                && owners.values().all(|o| {
                    o.as_ref().is_some_and(|o| {
                        *sizes.entry(o.as_str()).or_default() += 1;
                        live.contains(o)
                    })
                })
                && sizes.values().all(|&s| s <= cap);
            if ok {
                let rest = deadline
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_secs(15));
                self.wait_probed_since(Instant::now(), rest).await?;
                return Ok(owners.into_iter().map(|(k, v)| (k, v.unwrap())).collect());
            }
            if Instant::now() > deadline {
                return Err(err(format!(
                    "{}: not stable within {timeout:?}",
                    self.prefix
                )));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    pub fn shutdown(&mut self) {
        for o in &mut self.ops {
            o.kill();
        }
    }
}

/// Series in a /metrics text.
pub fn series(text: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .count() as f64
}
