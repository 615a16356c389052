//! A checker's service-level objective: the ledger of good and bad probes
//! over its window, and what it says (availability, error budget left, burn
//! rates). Pure: the caller says what each probe counts for ([`Tally`]) and
//! passes the time in.
//!
//! Counts are kept in two tiers of buckets aligned to the Unix epoch, so
//! that any replica that resumes a ledger from its [`Snapshot`] lines its
//! buckets up with the old owner's:
//! - coarse buckets, [`COARSE_PER_WINDOW`] per window, for the window's
//!   totals (the oldest one may reach past the window's start by less than
//!   one bucket: the window's figures are that exact);
//! - fine buckets of [`FINE`] seconds over the last [`FINE_SPAN`], for burn
//!   rates over an hour and six.
//!
//! A 30-day window holds 30 + 72 buckets of two counts: under 1 KiB per
//! checker, whatever the probe rate.

use std::collections::VecDeque;

/// Seconds of a fine bucket.
pub const FINE: u64 = 300;
/// How far back the fine buckets reach: the longest burn-rate span.
pub const FINE_SPAN: u64 = 6 * 3600;
/// Coarse buckets per window.
pub const COARSE_PER_WINDOW: u64 = 30;
/// Buckets of one tier at most: a window's coarse ones (one more while
/// the oldest is partly out), or the fine span's.
const MAX_BUCKETS: usize = (FINE_SPAN / FINE) as usize + 1;

/// What one probe counts for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tally {
    Good,
    /// A failure that counts against the budget (confirmed, or nobody could
    /// say otherwise).
    Bad,
    /// Neither side: a maintenance window.
    Excluded,
}

/// The objective: the share of good probes (0 < target < 1) over `window`
/// seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Objective {
    pub target: f64,
    pub window: u64,
}

impl Objective {
    /// Seconds of a coarse bucket: a [`COARSE_PER_WINDOW`]th of the window,
    /// never under a fine bucket.
    pub fn coarse(&self) -> u64 {
        (self.window / COARSE_PER_WINDOW).max(FINE)
    }
}

/// Good and bad probes of one bucket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub good: u32,
    pub bad: u32,
}

impl Counts {
    fn add(&mut self, tally: Tally) {
        match tally {
            Tally::Good => self.good = self.good.saturating_add(1),
            Tally::Bad => self.bad = self.bad.saturating_add(1),
            Tally::Excluded => {}
        }
    }
}

/// Buckets of one tier: (index since the epoch, counts), oldest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Tier {
    len: u64,
    buckets: VecDeque<(u64, Counts)>,
}

impl Tier {
    fn new(len: u64) -> Self {
        Tier {
            len,
            buckets: VecDeque::new(),
        }
    }

    fn add(&mut self, now: u64, tally: Tally) {
        let index = now / self.len;
        match self.buckets.back_mut() {
            // A clock that went back counts in the newest bucket.
            Some((i, c)) if *i >= index => c.add(tally),
            _ => {
                let mut c = Counts::default();
                c.add(tally);
                self.buckets.push_back((index, c));
            }
        }
    }

    /// Drops the buckets that ended `span` seconds or more before `now`.
    fn prune(&mut self, now: u64, span: u64) {
        let start = now.saturating_sub(span);
        while let Some((i, _)) = self.buckets.front() {
            if (i + 1) * self.len <= start {
                self.buckets.pop_front();
            } else {
                break;
            }
        }
    }

    /// (good, bad) of the buckets that end after `now - span`.
    fn sum(&self, now: u64, span: u64) -> (u64, u64) {
        let start = now.saturating_sub(span);
        self.buckets
            .iter()
            .filter(|(i, _)| (i + 1) * self.len > start)
            .fold((0, 0), |(g, b), (_, c)| {
                (g + u64::from(c.good), b + u64::from(c.bad))
            })
    }
}

/// The ledger of one checker's objective.
#[derive(Clone, Debug, PartialEq)]
pub struct Ledger {
    objective: Objective,
    coarse: Tier,
    fine: Tier,
    /// When counting began (Unix seconds): the window's figures are
    /// complete once a window has passed since.
    since: Option<u64>,
}

/// What a ledger says at one time.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    pub good: u64,
    pub bad: u64,
    /// Good over counted probes; `None` before any was counted.
    pub availability: Option<f64>,
    /// The share of the error budget left: 1 with no bad probe, 0 when the
    /// bad ones reached the objective's allowance, below 0 past it.
    pub budget_left: Option<f64>,
    /// The whole budget as time: the window times (1 - target).
    pub budget_seconds: u64,
    /// Burn rates: the bad share over the last hour and six, divided by the
    /// allowed share (1: the budget lasts exactly the window).
    pub burn_1h: Option<f64>,
    pub burn_6h: Option<f64>,
    /// Since when the ledger counted; the figures cover the whole window
    /// once `now - since >= window`.
    pub since: Option<u64>,
}

impl Report {
    /// The budget left as time (`budget_seconds` times the share left; below
    /// 0 past the allowance).
    pub fn budget_left_seconds(&self) -> Option<i64> {
        self.budget_left
            .map(|share| (share * self.budget_seconds as f64).round() as i64)
    }
}

impl Ledger {
    pub fn new(objective: Objective) -> Self {
        Ledger {
            objective,
            coarse: Tier::new(objective.coarse()),
            fine: Tier::new(FINE),
            since: None,
        }
    }

    pub fn objective(&self) -> Objective {
        self.objective
    }

    /// Counts one probe that ended at `now` (Unix seconds).
    pub fn record(&mut self, now: u64, tally: Tally) {
        if tally == Tally::Excluded {
            return;
        }
        self.since.get_or_insert(now);
        self.coarse.add(now, tally);
        self.fine.add(now, tally);
        self.prune(now);
    }

    fn prune(&mut self, now: u64) {
        self.coarse.prune(now, self.objective.window);
        self.fine.prune(now, FINE_SPAN);
    }

    pub fn report(&self, now: u64) -> Report {
        let allowed = 1.0 - self.objective.target;
        let (good, bad) = self.coarse.sum(now, self.objective.window);
        let total = good + bad;
        let share = |(g, b): (u64, u64)| (g + b > 0).then(|| b as f64 / (g + b) as f64);
        let burn = |span| share(self.fine.sum(now, span)).map(|s| s / allowed);
        Report {
            good,
            bad,
            availability: (total > 0).then(|| good as f64 / total as f64),
            budget_left: share((good, bad)).map(|s| 1.0 - s / allowed),
            budget_seconds: (self.objective.window as f64 * allowed).round() as u64,
            burn_1h: burn(3600),
            burn_6h: burn(FINE_SPAN),
            since: self.since,
        }
    }

    /// What a new owner needs to go on counting.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            coarse_len: self.coarse.len,
            since: self.since,
            coarse: self.coarse.buckets.iter().copied().collect(),
            fine: self.fine.buckets.iter().copied().collect(),
        }
    }

    /// Goes on from an earlier owner's snapshot. A snapshot of another
    /// window (the spec changed) is dropped: counts of one window do not
    /// mean the same in another.
    pub fn resume(objective: Objective, snapshot: Snapshot, now: u64) -> Self {
        let mut ledger = Ledger::new(objective);
        if snapshot.coarse_len != ledger.coarse.len {
            return ledger;
        }
        ledger.since = snapshot.since;
        ledger.coarse.buckets = snapshot.coarse.into();
        ledger.fine.buckets = snapshot.fine.into();
        ledger.prune(now);
        ledger
    }
}

/// A ledger as an owner persists it and the next one resumes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    coarse_len: u64,
    since: Option<u64>,
    coarse: Vec<(u64, Counts)>,
    fine: Vec<(u64, Counts)>,
}

/// Why a persisted snapshot could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unreadable(pub String);

impl Snapshot {
    /// One line: `v1 <coarse seconds> <since or -> <coarse buckets>
    /// <fine buckets>`, each tier `index:good:bad` joined by commas (`-`
    /// when empty).
    pub fn render(&self) -> String {
        let tier = |t: &[(u64, Counts)]| {
            if t.is_empty() {
                return "-".to_string();
            }
            let parts: Vec<String> = t
                .iter()
                .map(|(i, c)| format!("{i}:{}:{}", c.good, c.bad))
                .collect();
            parts.join(",")
        };
        let since = self.since.map_or("-".to_string(), |s| s.to_string());
        format!(
            "v1 {} {since} {} {}",
            self.coarse_len,
            tier(&self.coarse),
            tier(&self.fine)
        )
    }

    pub fn parse(text: &str) -> Result<Self, Unreadable> {
        let bad = |what: &str| Unreadable(format!("{what} in {:.60}", text));
        let fields: Vec<&str> = text.split_whitespace().collect();
        let [version, coarse_len, since, coarse, fine] = fields[..] else {
            return Err(bad("not five fields"));
        };
        if version != "v1" {
            return Err(bad("an unknown version"));
        }
        let number = |s: &str| s.parse::<u64>().map_err(|_| bad("a number"));
        let coarse_len = number(coarse_len)?;
        if coarse_len == 0 {
            return Err(bad("a zero bucket"));
        }
        let since = match since {
            "-" => None,
            s => Some(number(s)?),
        };
        let tier = |s: &str| -> Result<Vec<(u64, Counts)>, Unreadable> {
            if s == "-" {
                return Ok(Vec::new());
            }
            let mut out: Vec<(u64, Counts)> = Vec::new();
            for part in s.split(',') {
                // No ledger holds more: a longer one was not written by us.
                if out.len() > MAX_BUCKETS {
                    return Err(bad("more buckets than a ledger holds"));
                }
                let mut p = part.split(':');
                let (Some(i), Some(g), Some(b), None) = (p.next(), p.next(), p.next(), p.next())
                else {
                    return Err(bad("a bucket that is not index:good:bad"));
                };
                let index = number(i)?;
                if out.last().is_some_and(|(last, _)| *last >= index) {
                    return Err(bad("buckets out of order"));
                }
                let count = |s: &str| s.parse::<u32>().map_err(|_| bad("a count"));
                out.push((
                    index,
                    Counts {
                        good: count(g)?,
                        bad: count(b)?,
                    },
                ));
            }
            Ok(out)
        };
        Ok(Snapshot {
            coarse_len,
            since,
            coarse: tier(coarse)?,
            fine: tier(fine)?,
        })
    }
}

#[cfg(test)]
mod tests;
