//! The witness: an HTTP target that logs which replica probed which checker
//! when, and the exclusivity checks over its log.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// The request header of a confirmation probe, naming the owner it
/// confirms for.
pub const CONFIRM_FOR: &str = "x-webchecker-confirm-for";
/// The request header of a zone's probe of a checker with `spec.locations`,
/// naming the owner it probes for.
pub const ZONE_FOR: &str = "x-webchecker-zone-for";

/// How a witness target answers a checker.
#[derive(Clone, Debug)]
pub enum Mode {
    Ok,
    Status(u16),
    Hang(Duration),
}

#[derive(Clone, Debug)]
pub struct Hit {
    pub checker: String,
    pub replica: String,
    pub start: Instant,
    pub end: Instant,
    pub headers: HashMap<String, String>,
}

#[derive(Default)]
struct WitnessState {
    hits: Vec<Hit>,
    /// Count probes only (no log): for load scenarios.
    quiet: bool,
    /// Log probes without their headers: for long runs that only need who
    /// probed what when (the bench).
    lean: bool,
    count: u64,
    modes: HashMap<String, Mode>,
    default_mode: Option<Mode>,
    /// Exchanges the client abandoned before the answer (for example a probe
    /// that timed out on a hanging target): `end` is when the witness saw the
    /// connection close.
    abandoned: Vec<Hit>,
    /// Confirmation and zone probes the client abandoned: apart from the
    /// owners' (the exclusivity and coverage checks read those).
    abandoned_asks: Vec<Hit>,
    /// Exchanges under way (started, neither answered nor abandoned), per checker.
    open: HashMap<String, usize>,
    /// Confirmation probes (header `X-Webchecker-Confirm-For`): a replica
    /// probing once for the owner, kept apart from the owners' probes that
    /// the exclusivity and coverage checks read.
    confirmations: Vec<Hit>,
    /// Zone probes (header `X-Webchecker-Zone-For`): another zone's replica
    /// probing every interval for the owner of a checker with
    /// `spec.locations`; kept apart like confirmations.
    zone_probes: Vec<Hit>,
    /// Each answer waits a random time in this range, so that two replicas
    /// probing one checker show as overlapping exchanges (an instant answer
    /// hides all but exact coincidences).
    hold: Option<(Duration, Duration)>,
}

/// Counts an exchange as open while it lives, and records it as abandoned if
/// its future is dropped before it answered.
struct AbandonGuard {
    state: Arc<Mutex<WitnessState>>,
    checker: String,
    hit: Option<Hit>,
    /// A probe for another replica (confirmation, zone).
    asked: bool,
}

impl AbandonGuard {
    fn new(state: Arc<Mutex<WitnessState>>, hit: Hit) -> Self {
        let checker = hit.checker.clone();
        *state
            .lock()
            .unwrap()
            .open
            .entry(checker.clone())
            .or_default() += 1;
        AbandonGuard {
            state,
            checker,
            hit: Some(hit),
            asked: false,
        }
    }
}

impl Drop for AbandonGuard {
    fn drop(&mut self) {
        let Ok(mut s) = self.state.lock() else {
            return;
        };
        if let Some(n) = s.open.get_mut(&self.checker) {
            *n -= 1;
        }
        if let Some(mut h) = self.hit.take() {
            h.end = Instant::now();
            if self.asked {
                s.abandoned_asks.push(h);
            } else {
                s.abandoned.push(h);
            }
        }
    }
}

/// An HTTP target that logs every probe: path `/c/<checker>`, header
/// `X-Webchecker-Replica`, start and end of the exchange.
pub struct Witness {
    pub addr: SocketAddr,
    state: Arc<Mutex<WitnessState>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Witness {
    pub async fn start() -> Witness {
        Self::start_on("127.0.0.1").await
    }

    /// A witness on another local address (a real node's pods cannot reach
    /// the host's loopback; they reach the node's address).
    pub async fn start_on(ip: &str) -> Witness {
        let listener = crate::listener_on(ip).await;
        let addr = listener.local_addr().unwrap();
        let mut w = Witness {
            addr,
            state: Arc::new(Mutex::new(WitnessState::default())),
            stop: None,
        };
        w.serve(listener);
        w
    }

    fn serve(&mut self, listener: TcpListener) {
        let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
        self.stop = Some(tx);
        let state = self.state.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = &mut rx => return,
                    acc = listener.accept() => {
                        let Ok((stream, _)) = acc else { continue };
                        let state = state.clone();
                        tokio::spawn(async move {
                            let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                                let state = state.clone();
                                async move {
                                    let start = Instant::now();
                                    let path = req.uri().path().to_string();
                                    let checker = path.strip_prefix("/c/").unwrap_or(&path).split('/').next().unwrap_or("").to_string();
                                    let headers: HashMap<String, String> = req
                                        .headers()
                                        .iter()
                                        .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
                                        .collect();
                                    let replica = headers.get("x-webchecker-replica").cloned().unwrap_or_default();
                                    let zone_probe = headers.contains_key(ZONE_FOR);
                                    let confirming = headers.contains_key(CONFIRM_FOR) || zone_probe;
                                    let mut guard = AbandonGuard::new(
                                        state.clone(),
                                        Hit { checker: checker.clone(), replica: replica.clone(), start, end: start, headers: headers.clone() },
                                    );
                                    // Not an owner's probe: never among the abandoned ones either.
                                    guard.asked = confirming;
                                    let (mode, hold) = {
                                        let s = state.lock().unwrap();
                                        (s.modes.get(&checker).cloned().or(s.default_mode.clone()).unwrap_or(Mode::Ok), s.hold)
                                    };
                                    if let Some((min, max)) = hold {
                                        tokio::time::sleep(min + (max - min).mul_f64(rand::random::<f64>())).await;
                                    }
                                    let code = match mode {
                                        Mode::Ok => 200,
                                        Mode::Status(c) => c,
                                        Mode::Hang(d) => {
                                            tokio::time::sleep(d).await;
                                            200
                                        }
                                    };
                                    guard.hit = None;
                                    {
                                        let mut s = state.lock().unwrap();
                                        if zone_probe {
                                            s.zone_probes.push(Hit { checker, replica, start, end: Instant::now(), headers });
                                        } else if confirming {
                                            s.confirmations.push(Hit { checker, replica, start, end: Instant::now(), headers });
                                        } else {
                                            s.count += 1;
                                            if !s.quiet {
                                                let headers = if s.lean { HashMap::new() } else { headers };
                                                s.hits.push(Hit { checker, replica, start, end: Instant::now(), headers });
                                            }
                                        }
                                    }
                                    Ok::<_, std::convert::Infallible>(
                                        hyper::Response::builder().status(code).body(Full::new(Bytes::from_static(b"ok\n"))).unwrap(),
                                    )
                                }
                            });
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(TokioIo::new(stream), svc)
                                .await;
                        });
                    }
                }
            }
        });
    }

    /// Stop logging hits (only count them), for load scenarios.
    pub fn set_quiet(&self) {
        self.state.lock().unwrap().quiet = true;
    }

    /// Hold each answer a random time in [min, max] (see `hold`).
    pub fn set_hold(&self, min: Duration, max: Duration) {
        self.state.lock().unwrap().hold = Some((min, max));
    }

    /// Log probes without their headers (see `lean`).
    pub fn set_lean(&self) {
        self.state.lock().unwrap().lean = true;
    }

    pub fn total(&self) -> u64 {
        self.state.lock().unwrap().count
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn set_mode(&self, checker: &str, mode: Mode) {
        self.state
            .lock()
            .unwrap()
            .modes
            .insert(checker.to_string(), mode);
    }

    pub fn set_default_mode(&self, mode: Mode) {
        self.state.lock().unwrap().default_mode = Some(mode);
    }

    /// Exchanges under way now (started, neither answered nor abandoned) of
    /// the checkers in `of`.
    pub fn open_exchanges(&self, of: &[String]) -> usize {
        let s = self.state.lock().unwrap();
        of.iter().filter_map(|c| s.open.get(c)).sum()
    }

    /// Exchanges abandoned by the client before the answer (see `abandoned`).
    pub fn abandoned_hits(&self) -> Vec<Hit> {
        self.state.lock().unwrap().abandoned.clone()
    }

    /// Confirmation and zone probes the client abandoned (a probe that
    /// timed out on a hanging target), with their headers.
    pub fn abandoned_ask_hits(&self) -> Vec<Hit> {
        self.state.lock().unwrap().abandoned_asks.clone()
    }

    /// Every exchange that reached the witness: answered and abandoned.
    pub fn all_hits(&self) -> Vec<Hit> {
        let s = self.state.lock().unwrap();
        s.hits.iter().chain(s.abandoned.iter()).cloned().collect()
    }

    pub fn hits(&self) -> Vec<Hit> {
        self.state.lock().unwrap().hits.clone()
    }

    /// Confirmation probes answered (see `confirmations`), with their
    /// headers; never among `hits`.
    pub fn confirmation_hits(&self) -> Vec<Hit> {
        self.state.lock().unwrap().confirmations.clone()
    }

    /// Zone probes answered (see `zone_probes`), with their headers; never
    /// among `hits`.
    pub fn zone_probe_hits(&self) -> Vec<Hit> {
        self.state.lock().unwrap().zone_probes.clone()
    }

    /// Takes every exchange logged so far (answered and abandoned) out of the
    /// witness, for long runs that keep their own compact log.
    pub fn take_hits(&self) -> Vec<Hit> {
        let mut s = self.state.lock().unwrap();
        let mut out = std::mem::take(&mut s.hits);
        out.append(&mut s.abandoned);
        out
    }

    /// Answered probes that started at `from` or later.
    pub fn hits_since(&self, from: Instant) -> Vec<Hit> {
        self.hits_where(|h| h.start >= from)
    }

    /// Answered probes that started in `[from, to]`.
    pub fn hits_between(&self, from: Instant, to: Instant) -> Vec<Hit> {
        self.hits_where(|h| h.start >= from && h.start <= to)
    }

    fn hits_where(&self, keep: impl Fn(&Hit) -> bool) -> Vec<Hit> {
        let s = self.state.lock().unwrap();
        s.hits.iter().filter(|h| keep(h)).cloned().collect()
    }

    pub fn hits_for(&self, checker: &str) -> Vec<Hit> {
        self.hits_where(|h| h.checker == checker)
    }

    pub fn count_for(&self, checker: &str) -> usize {
        self.state
            .lock()
            .unwrap()
            .hits
            .iter()
            .filter(|h| h.checker == checker)
            .count()
    }

    /// Stops listening (connections are refused) until `resume`.
    pub fn pause(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }

    pub async fn resume(&mut self) {
        let listener = loop {
            match crate::ports::bind(&self.addr.to_string()).await {
                Ok(l) => break l,
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        };
        self.serve(listener);
    }
}

/// How long the witness holds answers in the tests that judge exclusivity
/// from its log: long enough that two probers of one checker overlap now and
/// then, short against any probe timeout or interval.
pub const HOLD: (Duration, Duration) = (Duration::from_millis(10), Duration::from_millis(60));

/// Checks exclusivity from the witness log: no two replicas probe one checker
/// at overlapping times, and no replica probes a checker in between two
/// consecutive probes of another (A, B, A within one cadence: two probers on
/// their own timers, which need not ever overlap). A handover keeps the
/// checker's cadence, so A's probes around a legitimate run of B's are at
/// least two cadences apart; the cadence is the median spacing of one
/// replica's consecutive probes of the checker. Returns the first violation.
pub fn exclusivity_violation(hits: &[Hit]) -> Option<String> {
    let mut by: HashMap<&str, Vec<&Hit>> = HashMap::new();
    for h in hits {
        by.entry(&h.checker).or_default().push(h);
    }
    let mut checkers: Vec<&str> = by.keys().copied().collect();
    checkers.sort();
    checkers.into_iter().find_map(|c| {
        let hs = by.get_mut(c).expect("grouped");
        hs.sort_by_key(|h| h.start);
        overlap_in(c, hs).or_else(|| interleaving_in(c, hs))
    })
}

/// Two replicas' exchanges of one checker open at once (`hs` by start).
fn overlap_in(checker: &str, hs: &[&Hit]) -> Option<String> {
    let mut last_end: HashMap<&str, (Instant, Instant)> = HashMap::new();
    for h in hs {
        for (r, (start, end)) in &last_end {
            if *r != h.replica && *end > h.start {
                return Some(format!(
                    "{checker}: {r} probed it {:?} .. {:?} and {} from {:?}: overlapped",
                    *start - hs[0].start,
                    *end - hs[0].start,
                    h.replica,
                    h.start - hs[0].start,
                ));
            }
        }
        let e = last_end.entry(&h.replica).or_insert((h.start, h.end));
        if h.end >= e.1 {
            *e = (h.start, h.end);
        }
    }
    None
}

/// A, B, A within one cadence (`hs` by start).
fn interleaving_in(checker: &str, hs: &[&Hit]) -> Option<String> {
    let cadence = cadence(hs)?;
    let mut latest: HashMap<&str, Instant> = HashMap::new();
    for h in hs {
        if let Some(prev) = latest.get(h.replica.as_str()).copied() {
            let between = latest
                .iter()
                .find(|(r, at)| **r != h.replica && **at > prev);
            if let Some((other, at)) = between
                && h.start - prev <= cadence.mul_f64(1.5)
            {
                return Some(format!(
                    "{checker}: {} probed it at {:?} and {:?}, {other} at {:?} in between (cadence {cadence:?}): two probers",
                    h.replica,
                    prev - hs[0].start,
                    h.start - hs[0].start,
                    *at - hs[0].start,
                ));
            }
        }
        latest.insert(&h.replica, h.start);
    }
    None
}

/// The median spacing of one replica's consecutive probes of a checker.
fn cadence(hs: &[&Hit]) -> Option<Duration> {
    let mut latest: HashMap<&str, Instant> = HashMap::new();
    let mut spacings = Vec::new();
    for h in hs {
        if let Some(prev) = latest.insert(&h.replica, h.start) {
            spacings.push(h.start - prev);
        }
    }
    spacings.sort();
    spacings.get(spacings.len() / 2).copied()
}

/// Strict form of the second half of invariant 2, for scenarios where no
/// checker may legitimately move back: a replica never probes a checker again
/// after another replica started probing it.
pub fn reappearance(hits: &[Hit]) -> Option<String> {
    let mut by: HashMap<&str, Vec<&Hit>> = HashMap::new();
    for h in hits {
        by.entry(&h.checker).or_default().push(h);
    }
    for (checker, mut hs) in by {
        hs.sort_by_key(|h| h.start);
        let mut runs: Vec<&str> = Vec::new();
        for h in &hs {
            if runs.last() != Some(&h.replica.as_str()) {
                if runs.contains(&h.replica.as_str()) {
                    return Some(format!(
                        "{checker}: {} probed again after {:?} took over",
                        h.replica,
                        runs.last()
                    ));
                }
                runs.push(&h.replica);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Probes (replica, start ms, length ms) of one checker.
    fn log(probes: &[(&str, u64, u64)]) -> Vec<Hit> {
        let t0 = Instant::now();
        probes
            .iter()
            .map(|(r, at, len)| Hit {
                checker: "c".into(),
                replica: r.to_string(),
                start: t0 + Duration::from_millis(*at),
                end: t0 + Duration::from_millis(at + len),
                headers: HashMap::new(),
            })
            .collect()
    }

    #[test]
    fn a_handover_keeps_the_cadence_and_passes() {
        let hits = log(&[
            ("a", 0, 30),
            ("a", 1000, 30),
            ("a", 2000, 30),
            ("b", 3000, 30),
            ("b", 4000, 30),
            ("b", 5000, 30),
        ]);
        assert_eq!(exclusivity_violation(&hits), None);
    }

    #[test]
    fn a_move_back_after_a_while_passes() {
        let hits = log(&[
            ("a", 0, 30),
            ("a", 1000, 30),
            ("b", 2000, 30),
            ("b", 3000, 30),
            ("a", 4000, 30),
            ("a", 5000, 30),
        ]);
        assert_eq!(exclusivity_violation(&hits), None);
    }

    #[test]
    fn an_overlap_with_an_earlier_long_exchange_is_found() {
        // b's exchange lies inside a's long one, with a shorter one of a's
        // between them in start order: adjacent pairs alone miss it.
        let hits = log(&[("a", 0, 900), ("a", 100, 10), ("b", 500, 10)]);
        let v = exclusivity_violation(&hits).expect("an overlap");
        assert!(v.contains("overlapped"), "{v}");
    }

    #[test]
    fn two_probers_on_their_own_timers_are_found_though_they_never_overlap() {
        let hits = log(&[
            ("a", 0, 30),
            ("b", 500, 30),
            ("a", 1000, 30),
            ("b", 1500, 30),
            ("a", 2000, 30),
        ]);
        let v = exclusivity_violation(&hits).expect("interleaving");
        assert!(v.contains("two probers"), "{v}");
    }
}
