use std::collections::BTreeMap;

use super::*;

const H: i64 = 3600;
/// 2026-12-05T00:00:00Z, a Saturday.
const SAT: i64 = 1_796_428_800;
/// 2026-03-29T00:00:00Z, the Sunday Europe's clocks jump from 02:00 to 03:00.
const SPRING: i64 = 1_774_742_400;
/// 2026-10-25T00:00:00Z, the Sunday their 02:00 to 03:00 repeats.
const AUTUMN: i64 = 1_792_886_400;

fn days(names: &[usize]) -> [bool; 7] {
    let mut d = [false; 7];
    for i in names {
        d[*i] = true;
    }
    d
}

const SATURDAY: usize = 5;
const SUNDAY: usize = 6;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn a_one_off_window_is_open_from_its_start_to_its_end() {
    let w = When::Once {
        start: SAT,
        end: SAT + H,
    };
    assert_eq!(w.open_until(SAT - 1), None);
    assert_eq!(w.open_until(SAT), Some(SAT + H));
    assert_eq!(w.open_until(SAT + H - 1), Some(SAT + H));
    assert_eq!(w.open_until(SAT + H), None);
}

#[test]
fn a_weekly_window_opens_on_its_days_and_may_reach_into_the_next() {
    let w = When::weekly(days(&[SATURDAY]), "02:00", "2h", "UTC").unwrap();
    assert_eq!(w.open_until(SAT + 2 * H - 1), None);
    assert_eq!(w.open_until(SAT + 2 * H), Some(SAT + 4 * H));
    assert_eq!(w.open_until(SAT + 4 * H), None);
    // A week later, and not on the Friday or Sunday between.
    assert_eq!(
        w.open_until(SAT + 7 * 24 * H + 3 * H),
        Some(SAT + 7 * 24 * H + 4 * H)
    );
    assert_eq!(w.open_until(SAT - 24 * H + 3 * H), None);
    assert_eq!(w.open_until(SAT + 24 * H + 3 * H), None);
    // Sunday 23:00 for 3 h: still open on Monday at 01:00.
    let late = When::weekly(days(&[SUNDAY]), "23:00", "3h", "").unwrap();
    let monday_1am = SAT + 2 * 24 * H + H;
    assert_eq!(late.open_until(monday_1am), Some(monday_1am + H));
    // Open for the whole week: every instant is covered.
    let always = When::weekly(days(&[SATURDAY]), "00:00", "168h", "UTC").unwrap();
    for t in (0..14).map(|i| SAT + i * 12 * H) {
        assert!(always.open_until(t).is_some(), "{t}");
    }
}

#[test]
fn a_weekly_window_follows_its_zones_clock_across_daylight_saving() {
    // Sundays 02:30 Berlin time for an hour.
    let w = When::weekly(days(&[SUNDAY]), "02:30", "1h", "Europe/Berlin").unwrap();
    // In winter 02:30 CET is 01:30 UTC.
    let winter = SPRING - 7 * 24 * H;
    assert_eq!(w.open_until(winter + 90 * 60), Some(winter + 150 * 60));
    assert_eq!(w.open_until(winter + 90 * 60 - 1), None);
    // 02:30 does not exist on the day of the jump: it opens at 03:30 CEST,
    // 01:30 UTC (the clock as it would read without the jump).
    assert_eq!(w.open_until(SPRING + 90 * 60), Some(SPRING + 150 * 60));
    // In summer 02:30 CEST is 00:30 UTC.
    let summer = SPRING + 7 * 24 * H;
    assert_eq!(w.open_until(summer + 30 * 60), Some(summer + 90 * 60));
    assert_eq!(w.open_until(summer + 90 * 60), None);
    // 02:30 happens twice on the day the hour repeats: the first, in CEST.
    assert_eq!(w.open_until(AUTUMN + 30 * 60), Some(AUTUMN + 90 * 60));
}

#[test]
fn bad_schedules_say_what_to_write() {
    let e = When::weekly(days(&[SUNDAY]), "02:30", "1h", "Europe/Berln").unwrap_err();
    assert!(
        e.0.contains("\"Europe/Berln\"") && e.0.contains("Europe/Berlin"),
        "{e:?}"
    );
    for at in ["2:30", "24:00", "02:60", "0230", "ab:cd"] {
        let e = When::weekly(days(&[SUNDAY]), at, "1h", "UTC").unwrap_err();
        assert!(e.0.contains("HH:MM"), "{at}: {e:?}");
    }
    assert!(When::weekly([false; 7], "02:30", "1h", "UTC").is_err());
}

#[test]
fn durations_are_whole_hours_and_minutes_up_to_a_week() {
    for (text, secs) in [
        ("2h", 7200),
        ("90m", 5400),
        ("1h30m", 5400),
        ("1m", 60),
        ("168h", 604_800),
    ] {
        assert_eq!(parse_duration(text), Ok(secs), "{text}");
    }
    for text in [
        "", "0m", "169h", "2", "h", "m", "-1h", "1h-30m", "1.5h", "30s", "1h30",
    ] {
        let e = parse_duration(text).unwrap_err();
        assert!(e.0.contains("for example 2h"), "{text}: {e:?}");
    }
}

#[test]
fn selectors_read_as_kubernetes_reads_them() {
    let s = Selector {
        labels: labels(&[("team", "shop")]),
        expressions: vec![
            Requirement::In("tier".into(), vec!["web".into(), "api".into()]),
            Requirement::NotIn("stage".into(), vec!["prod".into()]),
            Requirement::DoesNotExist("pinned".into()),
        ],
    };
    assert!(s.matches(&labels(&[("team", "shop"), ("tier", "web")])));
    assert!(s.matches(&labels(&[
        ("team", "shop"),
        ("tier", "api"),
        ("stage", "dev")
    ])));
    assert!(!s.matches(&labels(&[("team", "shop"), ("tier", "db")])));
    assert!(!s.matches(&labels(&[
        ("team", "shop"),
        ("tier", "web"),
        ("stage", "prod")
    ])));
    assert!(!s.matches(&labels(&[
        ("team", "shop"),
        ("tier", "web"),
        ("pinned", "")
    ])));
    assert!(!s.matches(&labels(&[("tier", "web")])));
    let exists = Selector {
        expressions: vec![Requirement::Exists("team".into())],
        ..Default::default()
    };
    assert!(exists.matches(&labels(&[("team", "")])));
    assert!(!exists.matches(&labels(&[])));
    assert!(
        Selector::default().matches(&labels(&[])),
        "none selects all"
    );
}

fn cover<'a>(
    c: &'a Calendar,
    ns: &str,
    labels: &BTreeMap<String, String>,
    now: i64,
) -> Option<(&'a str, i64)> {
    c.covering(ns, labels, now).map(|(n, until)| (&**n, until))
}

#[test]
fn a_window_covers_its_own_namespace_only() {
    let mut c = Calendar::default();
    let window = |name: &str, start: i64| Window {
        name: name.into(),
        selector: Selector::default(),
        when: When::Once {
            start,
            end: start + H,
        },
    };
    c.set("shop", window("b-later", SAT + H / 2));
    c.set("shop", window("a-now", SAT));
    let any = labels(&[]);
    assert_eq!(cover(&c, "shop", &any, SAT), Some(("a-now", SAT + H)));
    assert_eq!(
        cover(&c, "other", &any, SAT),
        None,
        "another namespace's window"
    );
    // Both open: the first by name; one removed, the other.
    assert_eq!(
        cover(&c, "shop", &any, SAT + H / 2).map(|w| w.0),
        Some("a-now")
    );
    c.remove("shop", "a-now");
    assert_eq!(
        cover(&c, "shop", &any, SAT + H / 2),
        Some(("b-later", SAT + 3 * H / 2))
    );
    // Replaced under the same name: the new times.
    c.set("shop", window("b-later", SAT + 5 * H));
    assert_eq!(cover(&c, "shop", &any, SAT + H / 2), None);
}

#[test]
fn a_spec_becomes_a_window_or_says_why_not() {
    let spec =
        |yaml: &str| -> webchecker_api::MaintenanceSpec { serde_yaml::from_str(yaml).unwrap() };
    let w = Window::from_spec(
        "db-upgrade",
        &spec("selector: {matchLabels: {team: shop}, matchExpressions: [{key: tier, operator: In, values: [db]}]}\nstart: '2026-12-05T02:00:00Z'\nend: '2026-12-05T03:00:00Z'"),
    )
    .unwrap();
    assert_eq!(w.when.open_until(SAT + 2 * H), Some(SAT + 3 * H));
    assert!(
        w.selector
            .matches(&labels(&[("team", "shop"), ("tier", "db")]))
    );
    assert!(!w.selector.matches(&labels(&[("team", "shop")])));
    let weekly = Window::from_spec(
        "nightly",
        &spec(
            "selector: {}\nschedule: {days: [Saturday], at: '02:00', duration: 2h, timeZone: UTC}",
        ),
    )
    .unwrap();
    assert_eq!(weekly.when.open_until(SAT + 3 * H), Some(SAT + 4 * H));
    let bad_zone = spec(
        "selector: {}\nschedule: {days: [Saturday], at: '02:00', duration: 2h, timeZone: Mars/Olympus}",
    );
    let e = Window::from_spec("x", &bad_zone).unwrap_err();
    assert!(e.0.contains("Mars/Olympus"), "{e:?}");
    let both = spec(
        "selector: {}\nstart: '2026-12-05T02:00:00Z'\nend: '2026-12-05T03:00:00Z'\nschedule: {days: [Saturday], at: '02:00', duration: 2h}",
    );
    assert!(Window::from_spec("x", &both).is_err());
    let backwards =
        spec("selector: {}\nstart: '2026-12-05T03:00:00Z'\nend: '2026-12-05T02:00:00Z'");
    assert!(Window::from_spec("x", &backwards).is_err());
}

#[test]
fn a_namespace_has_at_most_max_windows_and_the_rest_by_name_cover_nothing() {
    let mut c = Calendar::default();
    for i in 0..MAX_PER_NAMESPACE + 1 {
        let selector = Selector {
            labels: labels(&[("n", &i.to_string())]),
            ..Default::default()
        };
        c.set(
            "shop",
            Window {
                name: format!("w{i:03}").into(),
                selector,
                when: When::Once {
                    start: SAT,
                    end: SAT + H,
                },
            },
        );
    }
    let last = MAX_PER_NAMESPACE - 1;
    assert!(cover(&c, "shop", &labels(&[("n", &last.to_string())]), SAT).is_some());
    let over = MAX_PER_NAMESPACE.to_string();
    assert_eq!(cover(&c, "shop", &labels(&[("n", &over)]), SAT), None);
    assert!(c.ignored("shop", &format!("w{MAX_PER_NAMESPACE:03}")));
    assert!(!c.ignored("shop", "w000"));
}

#[test]
fn a_selector_past_the_limits_is_refused_with_the_limit() {
    let with = |yaml: &str| -> Result<Selector, Invalid> {
        Selector::from_api(&serde_yaml::from_str(yaml).unwrap())
    };
    let many: Vec<String> = (0..=MAX_REQUIREMENTS).map(|i| format!("k{i}: v")).collect();
    let e = with(&format!("matchLabels: {{{}}}", many.join(", "))).unwrap_err();
    assert!(e.0.contains("at most 16"), "{e:?}");
    let values: Vec<String> = (0..=MAX_VALUES).map(|i| format!("v{i}")).collect();
    let e = with(&format!(
        "matchExpressions: [{{key: tier, operator: In, values: [{}]}}]",
        values.join(", ")
    ))
    .unwrap_err();
    assert!(e.0.contains("at most 32"), "{e:?}");
    let long = "x".repeat(MAX_LABEL_TEXT + 1);
    let e = with(&format!("matchLabels: {{tier: {long}}}")).unwrap_err();
    assert!(e.0.contains("longer than 317"), "{e:?}");
    assert!(with("matchLabels: {tier: db}").is_ok());
}
