//! `spec.slo` and `status.slo`: a service-level objective over a checker's
//! probes, and what its owner reports of it.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// CEL: one or two digits, then up to three decimals.
const OBJECTIVE: &str = "^[0-9]{1,2}(\\\\.[0-9]{1,3})?$";

/// A service-level objective over the checker's probes: availability, error budget and burn rates in status.slo and in metrics.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct SloSpec {
    /// The share of probes that must succeed, in percent, written as a string: "99.9", "99.95", "95". At least 1, below 100, at most three decimals.
    #[x_kube(validation = Rule::new(format!("self.matches('{OBJECTIVE}')")).message("spec.slo.objective must be a percentage below 100 with at most three decimals, written as a string, for example \"99.9\""))]
    #[x_kube(validation = Rule::new(format!("!self.matches('{OBJECTIVE}') || double(self) >= 1.0")).message("spec.slo.objective is a percentage: write \"99.9\" for 99.9%, not a ratio such as \"0.999\""))]
    #[schemars(length(max = 6))]
    pub objective: String,
    /// The rolling window the objective is measured over.
    #[serde(default)]
    pub window: SloWindow,
}

/// The rolling window of an objective.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema,
)]
pub enum SloWindow {
    #[serde(rename = "1d")]
    Day,
    #[serde(rename = "7d")]
    Week,
    #[serde(rename = "28d")]
    FourWeeks,
    #[default]
    #[serde(rename = "30d")]
    Month,
}

impl SloWindow {
    pub fn seconds(self) -> u64 {
        let days = match self {
            SloWindow::Day => 1,
            SloWindow::Week => 7,
            SloWindow::FourWeeks => 28,
            SloWindow::Month => 30,
        };
        days * 86_400
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SloWindow::Day => "1d",
            SloWindow::Week => "7d",
            SloWindow::FourWeeks => "28d",
            SloWindow::Month => "30d",
        }
    }
}

impl SloSpec {
    /// The objective in thousandths of a percent (99900 for "99.9"), exact;
    /// `None` for text the schema refuses (an object stored before the rule).
    pub fn milli_percent(&self) -> Option<u32> {
        let (whole, frac) = match self.objective.split_once('.') {
            Some((w, f)) => (w, f),
            None => (self.objective.as_str(), ""),
        };
        let digits = |s: &str| s.chars().all(|c| c.is_ascii_digit());
        if !(1..=2).contains(&whole.len()) || frac.len() > 3 || !digits(whole) || !digits(frac) {
            return None;
        }
        if self.objective.ends_with('.') {
            return None;
        }
        let whole: u32 = whole.parse().ok()?;
        let frac: u32 = format!("{frac:0<3}").parse().ok()?;
        let v = whole * 1000 + frac;
        (1000..100_000).contains(&v).then_some(v)
    }
}

/// What the owner reports of spec.slo. Written with the rest of the status (on changes, at least once per heartbeat, and after at most 120 counted probes), so it may lag the latest probe; metrics carry every probe.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SloStatus {
    /// The objective these figures are for, in percent, for example 99.9%.
    #[schemars(length(max = 16))]
    pub objective: String,
    /// The window these figures are for, for example 30d.
    #[schemars(length(max = 8))]
    pub window: String,
    /// Good probes over counted ones within the window, in percent (for example 99.953%). Absent before the first counted probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    pub availability: Option<String>,
    /// The error budget left, to read: its share and as time, for example "53% (23m of 43m)"; negative once spent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub budget: Option<String>,
    /// The share of the error budget left, as a decimal (1: untouched, 0: spent, negative: overspent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    pub budget_remaining: Option<String>,
    /// The error budget left in seconds (the window's budget times the share left).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_remaining_seconds: Option<i64>,
    /// The whole error budget in seconds: the window times (1 - objective).
    pub budget_seconds: i64,
    /// Bad share of the last hour's probes over the allowed share: 1 spends the budget in exactly the window, 14.4 spends 2% of a 30d budget in an hour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    pub burn_rate_1h: Option<String>,
    /// The same over the last six hours.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    pub burn_rate_6h: Option<String>,
    /// Probes counted within the window that succeeded (or whose failure another replica refuted).
    pub good_probes: i64,
    /// Probes counted within the window: good ones and confirmed failures.
    pub total_probes: i64,
    /// When counting began (RFC 3339). The figures cover the whole window once a window has passed since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub counting_since: Option<String>,
    /// True once the figures cover the whole window.
    pub window_complete: bool,
    /// Counts per time bucket, which the next owner of the checker goes on from. Not meant to be read.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 4096))]
    pub ledger: String,
}

#[cfg(test)]
mod tests {
    use super::{SloSpec, SloWindow};

    #[test]
    fn objectives_read_exactly() {
        let t = |s: &str| {
            SloSpec {
                objective: s.into(),
                window: SloWindow::Month,
            }
            .milli_percent()
        };
        assert_eq!(t("99.9"), Some(99_900));
        assert_eq!(t("99.95"), Some(99_950));
        assert_eq!(t("95"), Some(95_000));
        assert_eq!(t("1"), Some(1000));
        for bad in [
            "100", "0", "0.999", "", "-1", "99.9999", "1e2", "NaN", "inf",
        ] {
            assert_eq!(t(bad), None, "{bad}");
        }
    }
}
