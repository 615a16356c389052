//! Randomized fault campaign, Jepsen style, against a control plane of its own.
//!
//! Three replicas (fast Leases, each behind its own fault proxy to the API
//! server) probe a few hundred checkers on one witness. A schedule of fault
//! windows is drawn from a seed (`CHAOS_SEED`, else random; printed first and
//! in every failure); the campaign runs for `CHAOS_MINUTES`, or, by default
//! and in `make test`, one deck: every fault kind exactly once. Each
//! window injects one fault, holds it, ends it, creates a few new checkers,
//! lets the system settle within a bound, then judges the window from the
//! witness's probe log and the object log (etcd's own history of every
//! WebChecker and membership Lease, read from etcd: every write, in revision
//! order, across the control plane's faults; a gap in it is a violation):
//! the invariants 1 to 7 of docs/invariants.md and liveness (new
//! checkers get owners, a dead or cut-off replica's checkers move, a
//! restarted replica is back with checkers of its own, within bounds). The
//! 20 kinds: the control plane's faults, the proxy's modes for one, two or
//! every replica, the process faults, and a busy API server (a share of
//! 429/503 or added latency on every proxy) while a replica is killed or
//! stopped (`errors+sigkill`, `errors+leader-kill`, `errors+sigstop`,
//! `latency+sigstop`), whose checkers must move within a bound that grows
//! with the load. A window that leaves the system unsettled is healed (every replica
//! restarted) so that later windows can still find other bugs; every
//! violation is reported at the end, with the seed, in stdout and in
//! target/chaos-report.md, and fails the test.
//!
//! `CHAOS_FAULTS=etcd-freeze,proxy:blip` restricts the kinds drawn (replays,
//! focused runs); `CHAOS_APISERVER_ARGS` passes extra kube-apiserver flags
//! (for example `--watch-cache=false`).
//!
//! The other tests of this binary check the campaign's own parts, in
//! seconds and without a cluster (campaign_tests.rs): the schedule, the
//! bounds, and the judgements on made-up histories. The kit's parts (the
//! fault proxy, the Prng, the oracle, the object log) are tested in the kit.

mod campaign;
mod campaign_tests;
mod judge;
mod report;
use webchecker_kit as support;
mod window;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::PostParams;
use report::*;
use support::faults::*;
use support::objlog::*;
use support::oracle::*;
use support::*;
use webchecker::WATCH_IDLE_LIMIT;

// ============================================================== settings

const REPLICAS: usize = 3;
const CHECKERS: usize = 300;
const INTERVAL_S: u32 = 2;
const INTERVAL: Duration = Duration::from_secs(INTERVAL_S as u64);
/// These three match support::FAST_LEASES.
const LEASE: Duration = Duration::from_secs(3);
const RETRY: Duration = Duration::from_millis(500);
/// Room for a loaded two-core machine (the replicas, etcd, kube-apiserver and
/// this test share it).
const LOAD_SLACK: Duration = Duration::from_secs(3);
/// New checkers created after each window (liveness of the sharder).
const NEW_PER_WINDOW: usize = 3;
/// The probes' timeout (`timeoutSeconds` of every checker).
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// How far the test's own watch may lag a replica's.
const WATCH_SLACK: Duration = Duration::from_secs(2);

/// From a fault to every checker of a dead (or cut-off) replica reassigned:
/// the judge's clock may have to start afresh (a new leader, or the judge's
/// own renewals failing) and then run a whole lease duration, plus a few
/// retry periods for renewals, proof and the assignment write.
fn failover_bound() -> Duration {
    LEASE * 2 + RETRY * 4 + LOAD_SLACK
}

/// Invariant 1: a checker is probed again within interval + failover bound.
fn coverage_bound() -> Duration {
    INTERVAL + failover_bound()
}

/// Invariant 7: while a fault hits every
/// replica's API access alike, probing goes on: gaps stay within interval +
/// 2 s (+ 1 s for the load).
fn outage_gap_bound() -> Duration {
    INTERVAL + Duration::from_secs(3)
}

/// A new checker gets an owner within this of its creation, after a fault.
fn new_assign_bound() -> Duration {
    LEASE + RETRY * 4 + LOAD_SLACK
}

/// the cut-off exception (docs/invariants.md): a replica cut off alone stops probing what
/// it lost within one retry period of reconnecting (+ 1 s for the load).
fn cutoff_grace() -> Duration {
    RETRY + Duration::from_secs(1)
}

/// From the end of a fault to a settled system (every checker validly owned,
/// balanced, no drain left).
fn settle_bound() -> Duration {
    failover_bound() + INTERVAL * 3
}

/// Calls made one after another on the failover path of a dead leader, each
/// delayed by a proxy's added latency: the candidate's read of the leader
/// Lease and its acquisition, the new sharder's lists of checkers and
/// members, the proof (a delete), two rounds of assignment writes (64 at a
/// time) and a spare.
const LATENCY_CALLS: u32 = 8;

/// From a fault to every checker of a lost replica reassigned while every
/// replica's calls meet `mode` (a busy API server; the bounds of the busy
/// tests of tests/reliability, for a silent leader as for a non-leader):
/// - a share of errors: up to 30%, the normal bound (the judges' clocks only
///   pause while their own reads fail, and each call is tried again one
///   retry period later); more, each step of the election, the judge rule,
///   the proof and the writes takes on average 1 / (1 - share) attempts:
///   twice the bound at 50%;
/// - added latency: the normal bound plus the delay of each call of the path
///   ([`LATENCY_CALLS`]).
fn busy_failover_bound(mode: &ProxyMode) -> Duration {
    match mode {
        ProxyMode::Errors { share, .. } if *share > 0.3 => {
            failover_bound().mul_f64(1.0 / (1.0 - share.min(0.9)))
        }
        ProxyMode::Latency(d) => failover_bound() + *d * LATENCY_CALLS,
        _ => failover_bound(),
    }
}

/// From a replica's (re)start to its being back: its new membership Lease
/// created (the old one, a SIGKILL's, replaced once peers find its address
/// refusing, or once it stood still for a lease), checkers assigned to it
/// (its old ones at once, or others' through drain handshakes: a few retry
/// periods of writes), and its first probe (within an interval).
fn rejoin_bound() -> Duration {
    LEASE + RETRY * 4 + INTERVAL + LOAD_SLACK
}

/// How soon after its membership Lease was deleted a replica behind a proxy
/// in `mode` could hear so (a renewal answered 404), which ends the cut-off
/// exception for it (docs/invariants.md); `None`: not before the fault ends.
fn hear_bound(mode: &ProxyMode) -> Option<Duration> {
    match mode {
        // The proxy stalls only the connections open at the switch (watches
        // spared), and the operator's Lease client pools no connection: every
        // renewal, one per retry period, goes out on a fresh connection that
        // passes, so the first one after the deletion hears 404.
        ProxyMode::StallOpen => Some(cutoff_grace()),
        // Each renewal (one per retry period) is answered with probability
        // 1 - share, independently of the others: wait for as many renewals
        // as make "every one of them failed" rarer than 1 in 1000 (10 at 50%).
        ProxyMode::Errors { share, .. } if *share < 1.0 => {
            let n = (1e-3f64.ln() / share.max(0.01).ln()).ceil().max(1.0) as u32;
            Some(RETRY * n + cutoff_grace())
        }
        _ => None,
    }
}

// ============================================================== schedule

#[derive(Clone, Debug, PartialEq)]
enum Target {
    Leader,
    /// The k-th replica (mod the count) that is not the leader.
    Other(u64),
}

#[derive(Clone, Debug, PartialEq)]
enum Targets {
    All,
    One(Target),
    /// Every replica but this one (two of three cut off).
    AllBut(Target),
}

#[derive(Clone, Debug, PartialEq)]
enum Fault {
    Proxy {
        mode: ProxyMode,
        targets: Targets,
    },
    /// Every open connection reset once; then traffic passes again.
    Blip(Targets),
    Kill(Target),
    Stop(Target),
    Term(Target),
    /// SIGKILL and start again at once under the same identity.
    Restart(Target),
    /// A busy API server, `mode` on every replica's proxy, while one replica
    /// is lost (`lost`: `Kill` or `Stop`, a node gone or frozen).
    Busy {
        mode: ProxyMode,
        lost: Box<Fault>,
    },
    EtcdFreeze,
    EtcdRestart,
    ApiFreeze,
    /// kube-apiserver stopped for the hold, then started.
    ApiDown,
    Compaction,
}

const KINDS: &[&str] = &[
    "etcd-freeze",
    "etcd-restart",
    "apiserver-freeze",
    "apiserver-down",
    "compaction",
    "proxy:blip",
    "proxy:black-hole",
    "proxy:stall-open",
    "proxy:reset",
    "proxy:hang",
    "proxy:errors",
    "proxy:latency",
    "sigkill",
    "sigstop",
    "sigterm",
    "restart",
    "errors+sigkill",
    "errors+sigstop",
    "errors+leader-kill",
    "latency+sigstop",
];

impl Fault {
    fn kind(&self) -> &'static str {
        match self {
            Fault::Proxy { mode, .. } => match mode {
                ProxyMode::BlackHole => "proxy:black-hole",
                ProxyMode::StallOpen => "proxy:stall-open",
                ProxyMode::Reset => "proxy:reset",
                ProxyMode::Hang => "proxy:hang",
                ProxyMode::Errors { .. } => "proxy:errors",
                ProxyMode::Latency(_) => "proxy:latency",
                ProxyMode::Pass => "proxy:pass",
            },
            Fault::Blip(_) => "proxy:blip",
            Fault::Kill(_) => "sigkill",
            Fault::Stop(_) => "sigstop",
            Fault::Term(_) => "sigterm",
            Fault::Restart(_) => "restart",
            Fault::Busy { mode, lost } => match (mode, lost.as_ref()) {
                (ProxyMode::Latency(_), _) => "latency+sigstop",
                (_, Fault::Stop(_)) => "errors+sigstop",
                (_, Fault::Kill(Target::Leader)) => "errors+leader-kill",
                _ => "errors+sigkill",
            },
            Fault::EtcdFreeze => "etcd-freeze",
            Fault::EtcdRestart => "etcd-restart",
            Fault::ApiFreeze => "apiserver-freeze",
            Fault::ApiDown => "apiserver-down",
            Fault::Compaction => "compaction",
        }
    }

    /// Hits every replica's access to the API server alike: invariant 7
    /// applies (nothing moves, probing goes on). Not a stall of the open
    /// connections: new ones pass, so the API server is reachable, the
    /// leader may move checkers, and a handover in flight waits for stalled
    /// watches ([`Fault::coverage_bound`]).
    fn alike(&self) -> bool {
        match self {
            Fault::Proxy {
                mode: ProxyMode::StallOpen,
                ..
            } => false,
            _ => matches!(
                self,
                Fault::EtcdFreeze
                    | Fault::EtcdRestart
                    | Fault::ApiFreeze
                    | Fault::ApiDown
                    | Fault::Compaction
                    | Fault::Proxy {
                        targets: Targets::All,
                        ..
                    }
                    | Fault::Blip(Targets::All)
            ),
        }
    }

    /// From the fault to every checker of a lost replica reassigned.
    fn failover_bound(&self) -> Duration {
        match self {
            Fault::Busy { mode, .. } => busy_failover_bound(mode),
            _ => failover_bound(),
        }
    }

    /// Invariant 1 for the stretch of this fault. Under a stall of the open
    /// connections a watch goes silent without an error, and a handover in
    /// flight (drain acknowledged, assignment not yet seen by the leader or
    /// the new owner) completes only when the stalled watch is replaced:
    /// within the watch idle limit, the design's bound for a silent watch
    /// (docs/architecture.md, API calls).
    fn coverage_bound(&self) -> Duration {
        match self {
            Fault::Proxy {
                mode: ProxyMode::StallOpen,
                ..
            } => INTERVAL + self.failover_bound().max(WATCH_IDLE_LIMIT),
            _ => INTERVAL + self.failover_bound(),
        }
    }
}

#[derive(Clone, Debug)]
struct Window {
    index: usize,
    fault: Fault,
    hold: Duration,
}

fn describe_fault(fault: &Fault) -> String {
    let t = |t: &Target| match t {
        Target::Leader => "the leader".to_string(),
        Target::Other(k) => format!("non-leader #{}", k % 2),
    };
    let ts = |ts: &Targets| match ts {
        Targets::All => "every replica".to_string(),
        Targets::One(x) => t(x),
        Targets::AllBut(x) => format!("every replica but {}", t(x)),
    };
    match fault {
        Fault::Proxy { mode, targets } => format!("proxy {mode} for {}", ts(targets)),
        Fault::Blip(targets) => format!(
            "proxy blip (every connection reset once) for {}",
            ts(targets)
        ),
        Fault::Kill(x) => format!("SIGKILL {}", t(x)),
        Fault::Stop(x) => format!("SIGSTOP {}", t(x)),
        Fault::Term(x) => format!("SIGTERM {}", t(x)),
        Fault::Restart(x) => format!("restart {} under the same identity", t(x)),
        Fault::Busy { mode, lost } => format!(
            "busy API server (proxy {mode} for every replica) and {}",
            describe_fault(lost)
        ),
        Fault::EtcdFreeze => "etcd frozen (SIGSTOP)".into(),
        Fault::EtcdRestart => "etcd restarted".into(),
        Fault::ApiFreeze => "kube-apiserver frozen (SIGSTOP)".into(),
        Fault::ApiDown => "kube-apiserver stopped".into(),
        Fault::Compaction => "etcd compacted".into(),
    }
}

impl Window {
    fn describe(&self) -> String {
        let what = describe_fault(&self.fault);
        format!(
            "#{} {what}, held {:.1}s",
            self.index,
            self.hold.as_secs_f64()
        )
    }
}

/// The windows of a seed, in order: kinds are dealt from a shuffled deck (so
/// every kind comes up once per pass), parameters drawn per window.
struct Schedule {
    rng: Prng,
    kinds: Vec<&'static str>,
    deck: Vec<&'static str>,
    next: usize,
    /// One pass only (`Length::Deck`): the freezes at their longest hold
    /// (what a campaign of minutes draws 40% of the time), the proxy modes
    /// held 4-12 s (each still longer than a lease and its retries), SIGSTOP
    /// past the Lease, SIGKILL held just past the failover bound.
    deck_only: bool,
}

impl Schedule {
    fn new(seed: u64, kinds: Vec<&'static str>) -> Schedule {
        Schedule {
            rng: Prng::new(seed),
            kinds,
            deck: Vec::new(),
            next: 1,
            deck_only: false,
        }
    }

    fn target(&mut self) -> Target {
        if self.rng.chance(0.35) {
            Target::Leader
        } else {
            Target::Other(self.rng.below(2))
        }
    }

    fn targets(&mut self) -> Targets {
        let x = self.rng.unit();
        if x < 0.45 {
            Targets::One(self.target())
        } else if x < 0.65 {
            Targets::AllBut(self.target())
        } else {
            Targets::All
        }
    }

    fn next_window(&mut self) -> Window {
        if self.deck.is_empty() {
            self.deck = self.kinds.clone();
            self.rng.shuffle(&mut self.deck);
        }
        let kind = self.deck.pop().expect("a kind");
        let s = Duration::from_secs;
        let r = &mut self.rng;
        let (fault, hold) = match kind {
            "etcd-freeze" => {
                let hold = if r.chance(0.4) || self.deck_only {
                    s(25)
                } else {
                    r.between(s(5), s(30))
                };
                (Fault::EtcdFreeze, hold)
            }
            "etcd-restart" => (Fault::EtcdRestart, r.between(s(3), s(10))),
            "apiserver-freeze" => {
                let hold = if r.chance(0.4) || self.deck_only {
                    s(30)
                } else {
                    r.between(s(5), s(30))
                };
                (Fault::ApiFreeze, hold)
            }
            "apiserver-down" => (Fault::ApiDown, r.between(s(0), s(20))),
            "compaction" => (Fault::Compaction, r.between(s(3), s(8))),
            "proxy:blip" => {
                let hold = r.between(s(2), s(8));
                let targets = if self.rng.chance(0.6) {
                    Targets::All
                } else {
                    Targets::One(self.target())
                };
                (Fault::Blip(targets), hold)
            }
            "proxy:black-hole" | "proxy:stall-open" | "proxy:reset" | "proxy:hang"
            | "proxy:errors" | "proxy:latency" => self.proxy(kind),
            "sigkill" => {
                let longest = if self.deck_only { s(16) } else { s(25) };
                let hold = r.between(failover_bound() + INTERVAL, longest);
                (Fault::Kill(self.target()), hold)
            }
            "sigstop" => {
                // In a deck, always past the Lease: the pause that matters.
                let hold = if self.deck_only {
                    r.between(LEASE * 2, s(12))
                } else {
                    r.between(s(1), s(25))
                };
                (Fault::Stop(self.target()), hold)
            }
            "sigterm" => {
                let hold = r.between(s(3), s(15));
                (Fault::Term(self.target()), hold)
            }
            "restart" => {
                let hold = r.between(s(3), s(10));
                (Fault::Restart(self.target()), hold)
            }
            "errors+sigkill" | "errors+sigstop" | "errors+leader-kill" | "latency+sigstop" => {
                self.busy(kind)
            }
            other => panic!("unknown fault kind {other}"),
        };
        let w = Window {
            index: self.next,
            fault,
            hold,
        };
        self.next += 1;
        w
    }
}

impl Schedule {
    /// One of the proxy's modes (`kind`, "proxy:..."), for 4-25 s (4-12 in a
    /// deck), on some of the replicas.
    fn proxy(&mut self, kind: &str) -> (Fault, Duration) {
        let s = Duration::from_secs;
        let r = &mut self.rng;
        let mode = match kind {
            "proxy:black-hole" => ProxyMode::BlackHole,
            "proxy:stall-open" => ProxyMode::StallOpen,
            "proxy:reset" => ProxyMode::Reset,
            "proxy:hang" => ProxyMode::Hang,
            "proxy:errors" => ProxyMode::Errors {
                share: *r.pick(&[0.1, 0.3, 0.5, 1.0]),
                codes: r
                    .pick(&[&[429u16][..], &[500], &[503], &[429, 500, 503]])
                    .to_vec(),
            },
            _ => {
                ProxyMode::Latency(r.between(Duration::from_millis(50), Duration::from_millis(800)))
            }
        };
        let hold = r.between(s(4), if self.deck_only { s(12) } else { s(25) });
        let targets = self.targets();
        (Fault::Proxy { mode, targets }, hold)
    }

    /// A busy API server and a lost replica: errors (30% or 50%, 429 or
    /// 429/503) or latency (50-800 ms) on every proxy, and a non-leader
    /// killed (`errors+sigkill`), the leader killed (`errors+leader-kill`) or
    /// any replica stopped. A kill is held past its failover bound (the
    /// victim's checkers must move while the API server is busy); a stop too
    /// in a deck, and otherwise 70% of the time (shorter: safety only).
    fn busy(&mut self, kind: &str) -> (Fault, Duration) {
        let s = Duration::from_secs;
        let mode = if kind.starts_with("latency") {
            ProxyMode::Latency(
                self.rng
                    .between(Duration::from_millis(50), Duration::from_millis(800)),
            )
        } else {
            ProxyMode::Errors {
                share: *self.rng.pick(&[0.3, 0.5]),
                codes: self.rng.pick(&[&[429u16][..], &[429, 503]]).to_vec(),
            }
        };
        let lost = match kind {
            "errors+sigkill" => Fault::Kill(Target::Other(self.rng.below(2))),
            "errors+leader-kill" => Fault::Kill(Target::Leader),
            _ => Fault::Stop(self.target()),
        };
        let kill = matches!(lost, Fault::Kill(_));
        let fault = Fault::Busy {
            mode,
            lost: Box::new(lost),
        };
        let bound = fault.failover_bound();
        let extra = if self.deck_only { s(4) } else { s(10) };
        let hold = if kill {
            self.rng.between(bound + INTERVAL, bound + INTERVAL + extra)
        } else if self.deck_only || self.rng.chance(0.7) {
            self.rng.between(bound + RETRY, bound + RETRY + extra)
        } else {
            self.rng.between(s(1), bound)
        };
        (fault, hold)
    }
}

fn kinds_from_env() -> Vec<&'static str> {
    match std::env::var("CHAOS_FAULTS") {
        Ok(v) if !v.trim().is_empty() => v
            .split(',')
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .map(|k| {
                *KINDS.iter().find(|x| **x == k).unwrap_or_else(|| {
                    panic!(
                        "CHAOS_FAULTS: unknown kind {k:?}; known: {}",
                        KINDS.join(",")
                    )
                })
            })
            .collect(),
        _ => KINDS.to_vec(),
    }
}

// ============================================================== campaign

#[derive(Default)]
struct WindowRecord {
    desc: String,
    kind: &'static str,
    alike: bool,
    started: Option<Instant>,
    ended: Option<Instant>,
    checked: Option<Instant>,
    violations: Vec<Violation>,
    /// Fault end -> every new checker validly owned.
    new_assigned: Option<Duration>,
    /// Fault end -> every checker probed at least once.
    all_probed: Option<Duration>,
    /// Fault start -> every checker of the victims validly owned by others.
    failover: Option<Duration>,
    /// A replica's (re)start -> back: Lease, checkers and a probe of its own.
    rejoined: Option<Duration>,
    largest_gap: Option<(Duration, String)>,
    gap_during_fault: Option<(Duration, String)>,
    moved_after: usize,
    healed: bool,
    notes: Vec<String>,
}

struct Campaign {
    seed: u64,
    clk: Clock,
    cluster: &'static Cluster,
    cp: ControlPlane,
    ns: String,
    client: kube::Client,
    witness: Witness,
    probes: ProbeLog,
    objs: ObjectLog,
    proxies: Vec<FaultProxy>,
    ops: Vec<Operator>,
    paused: HashSet<usize>,
    /// When each replica's process was last started.
    started: HashMap<usize, Instant>,
    checkers: Vec<(String, Instant)>,
    /// Cut-off exception: (replica, from, until).
    isolations: Vec<(String, Instant, Instant)>,
    /// SIGTERM: status writes after the Lease release are allowed (replica, from, until).
    graceful: Vec<(String, Instant, Instant)>,
    records: Vec<WindowRecord>,
    prev_check: Instant,
    aborted: Option<String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomized_fault_campaign() {
    let seed = seed_from_env();
    let length = Length::from_env();
    let kinds = kinds_from_env();
    println!(
        "chaos: seed {seed}, {} (replay: CHAOS_SEED={seed} CHAOS_MINUTES={} make chaos)",
        length.describe(),
        length.arg()
    );
    let mut c = Campaign::start(seed, length).await;
    c.settle_before_faults().await;
    let ran = c.run_windows(length, &kinds).await;
    c.finish(length, ran, &kinds);
}

impl Campaign {
    /// A control plane of its own, the witness, the object log, a proxy per
    /// replica, the replicas ready, and the first checkers created.
    async fn start(seed: u64, length: Length) -> Campaign {
        let args = std::env::var("CHAOS_APISERVER_ARGS").unwrap_or_default();
        let args = format!("{args} {JSON_STORAGE}");
        let cluster: &'static Cluster = Box::leak(Box::new(Cluster::start_with("chaos", &args)));
        let ns = cluster.namespace("chaos");
        let client = cluster.client().await;
        let witness = Witness::start().await;
        let objs = ObjectLog::from_etcd(cluster, &ns).await;
        let mut proxies = Vec::new();
        for i in 0..REPLICAS {
            proxies.push(
                FaultProxy::for_cluster(cluster, &format!("r{i}"), seed ^ (i as u64 + 1)).await,
            );
        }
        let ops = start_replicas(cluster, &ns, &proxies, length).await;
        let names: Vec<String> = (0..CHECKERS).map(|i| format!("c{i}")).collect();
        let created = create_checkers(&client, &ns, &witness.url(), &names, INTERVAL_S).await;
        let origin = Instant::now();
        Campaign {
            seed,
            clk: Clock { origin },
            cluster,
            cp: ControlPlane::new(cluster),
            ns,
            client,
            witness,
            probes: ProbeLog::default(),
            objs,
            proxies,
            ops,
            paused: HashSet::new(),
            started: HashMap::new(),
            checkers: names.iter().map(|n| (n.clone(), created[n])).collect(),
            isolations: Vec::new(),
            graceful: Vec::new(),
            records: Vec::new(),
            prev_check: origin,
            aborted: None,
        }
    }

    /// Waits for every checker to be owned, balanced and probed before the
    /// first fault.
    async fn settle_before_faults(&mut self) {
        let seed = self.seed;
        let origin = self.clk.origin;
        let all = self.all_names();
        let settled = self
            .wait_for(Duration::from_secs(90), |c| {
                let seen = c.probes.probed_since(origin);
                c.unowned(&all).is_empty()
                    && c.balance().2
                    && all.iter().all(|n| seen.contains(n.as_str()))
            })
            .await;
        assert!(
            settled.is_some(),
            "seed {seed}: the fleet did not settle before the first fault: {}",
            self.describe_unowned(&self.unowned(&all))
        );
        self.prev_check = Instant::now();
        println!("chaos: {CHECKERS} checkers settled on {REPLICAS} replicas; faults begin");
    }

    /// The windows of the schedule, one after another, for the campaign's
    /// length (or until it is aborted); how long they ran.
    async fn run_windows(&mut self, length: Length, kinds: &[&'static str]) -> Duration {
        let began = Instant::now();
        let mut schedule = Schedule::new(self.seed, kinds.to_vec());
        schedule.deck_only = length == Length::Deck;
        let more = |windows: usize| match length {
            Length::Minutes(m) => began.elapsed().as_secs_f64() < m * 60.0,
            Length::Deck => windows < kinds.len(),
        };
        while more(self.records.len()) && self.aborted.is_none() {
            let w = schedule.next_window();
            println!(
                "chaos: {} (at {})",
                w.describe(),
                self.clk.t(Instant::now())
            );
            let rec = self.run_window(&w).await;
            self.print_window(&w, &rec);
            self.records.push(rec);
        }
        began.elapsed()
    }

    /// A window's violations (the first 5 per invariant) and measurements.
    fn print_window(&self, w: &Window, rec: &WindowRecord) {
        let mut shown: HashMap<Inv, usize> = HashMap::new();
        for v in &rec.violations {
            let n = shown.entry(v.inv).or_default();
            *n += 1;
            if *n <= 5 {
                println!("chaos: VIOLATION {}", violation_line(self, rec, v));
            }
        }
        for (inv, n) in shown.iter().filter(|(_, n)| **n > 5) {
            println!(
                "chaos: ... and {} more {inv} violations in window {} (see the report)",
                n - 5,
                w.index
            );
        }
        println!(
            "chaos: window {} done: failover {}, rejoined {}, new owned {}, all probed {}, largest gap {}, {} violations",
            w.index,
            fmt_d(rec.failover),
            fmt_d(rec.rejoined),
            fmt_d(rec.new_assigned),
            fmt_d(rec.all_probed),
            rec.largest_gap
                .as_ref()
                .map(|(d, n)| format!("{:.1}s ({n})", d.as_secs_f64()))
                .unwrap_or_default(),
            rec.violations.len()
        );
    }

    /// The report (stdout and target/chaos-report.md), the teardown, and
    /// the verdict: no violation, not aborted.
    fn finish(mut self, length: Length, ran: Duration, kinds: &[&str]) {
        let seed = self.seed;
        for (i, p) in self.proxies.iter().enumerate() {
            println!("chaos: proxy r{i}: {}", p.stats());
        }
        let text = report(&self, length, ran, kinds);
        println!("{text}");
        let path = repo().join("target").join("chaos-report.md");
        let _ = std::fs::create_dir_all(path.parent().unwrap());
        std::fs::write(&path, &text).unwrap();
        let lines: Vec<String> = self
            .records
            .iter()
            .flat_map(|w| {
                w.violations
                    .iter()
                    .map(|v| violation_line(&self, w, v))
                    .collect::<Vec<_>>()
            })
            .collect();
        let aborted = self.aborted.clone();
        // Tear down: replicas first (they hold connections through the proxies).
        self.ops.clear();
        self.proxies.clear();
        drop(self.objs);
        drop(self.cp);
        self.cluster.script("down");
        assert!(
            lines.is_empty() && aborted.is_none(),
            "chaos campaign, seed {seed} (replay: CHAOS_SEED={seed} CHAOS_MINUTES={} make chaos): {} violations{}; report {}\n{}",
            length.arg(),
            lines.len(),
            aborted
                .map(|a| format!(", aborted: {a}"))
                .unwrap_or_default(),
            path.display(),
            lines
                .iter()
                .take(30)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

/// The replicas, each through its own proxy, once ready; at debug level
/// unless the campaign runs over 10 minutes.
async fn start_replicas(
    cluster: &'static Cluster,
    ns: &str,
    proxies: &[FaultProxy],
    length: Length,
) -> Vec<Operator> {
    let level = if !matches!(length, Length::Minutes(m) if m > 10.0) {
        "--log-level=info,webchecker=debug"
    } else {
        "--log-level=info"
    };
    let mut flags: Vec<&str> = FAST_LEASES.to_vec();
    flags.push(level);
    let ops: Vec<Operator> = (0..REPLICAS)
        .map(|i| {
            Operator::spawn_with_kubeconfig(
                cluster,
                &format!("r{i}"),
                ns,
                &flags,
                &proxies[i].kubeconfig,
            )
        })
        .collect();
    for o in &ops {
        o.wait_ready(Duration::from_secs(60)).await;
    }
    ops
}
