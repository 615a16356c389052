//! Property tests of the pure paths: spec to probe plan, status reducer. No
//! input may make them panic, and the reducer keeps its promises on any
//! sequence of outcomes.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use webchecker::api::WebCheckerSpec;
use webchecker::probe::{Outcome, Phases, Reason, plan};
use webchecker::status::{CheckerStatus, Context};

const REASONS: &[Reason] = &[
    Reason::ProbeSucceeded,
    Reason::DnsError,
    Reason::ConnectError,
    Reason::TlsError,
    Reason::CertificateInvalid,
    Reason::Timeout,
    Reason::UnexpectedStatus,
    Reason::BodyMismatch,
    Reason::SlowResponse,
    Reason::Forbidden,
    Reason::ProtocolError,
];

fn outcome(reason: Reason, code: Option<u16>) -> Outcome {
    Outcome {
        reason,
        message: format!("{reason:?}"),
        status_code: code,
        duration: Duration::from_millis(3),
        phases: Phases::default(),
        cert_not_after: None,
        redirects: 0,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, .. ProptestConfig::default() })]

    /// Whatever reaches the operator (the schema may have been looser when it
    /// was stored), planning returns a plan or an InvalidSpec message.
    #[test]
    fn planning_never_panics(
        host in "\\PC{0,40}",
        path in "\\PC{0,40}",
        interval in -5i32..100,
        timeout in -5i32..100,
        codes in proptest::collection::vec("\\PC{0,8}", 0..4),
        regex in proptest::option::of("\\PC{0,12}"),
        header_name in "\\PC{0,10}",
        header_value in "\\PC{0,10}",
    ) {
        let spec: WebCheckerSpec = serde_json::from_value(serde_json::json!({
            "host": host,
            "path": path,
            "intervalSeconds": interval,
            "timeoutSeconds": timeout,
            "expectedStatusCodes": codes,
            "bodyMatch": regex.map(|r| serde_json::json!({"regex": r})),
            "headers": [{"name": header_name, "value": header_value}],
        }))
        .unwrap();
        match plan(&spec, &|_| Err("no secrets".into())) {
            Ok(p) => {
                prop_assert!(p.timeout < p.interval);
                prop_assert!(p.target.path_and_query.starts_with('/'));
            }
            Err(msg) => prop_assert!(!msg.is_empty()),
        }
    }

    /// lastTransitionTime moves exactly when Ready changes status; a transition
    /// always comes with a write; thresholds are honoured.
    #[test]
    fn reducer_keeps_its_promises(
        steps in proptest::collection::vec((0usize..REASONS.len(), proptest::option::of(100u16..600)), 1..200),
        failure_threshold in 1u32..5,
        success_threshold in 1u32..5,
    ) {
        let start = Instant::now();
        let mut s = CheckerStatus::from_existing(None);
        let mut last_ready = s.ready.clone();
        let mut last_time = s.last_transition_time.clone();
        let mut run_ok = 0u32;
        let mut run_bad = 0u32;
        for (i, (r, code)) in steps.into_iter().enumerate() {
            let o = outcome(REASONS[r], code);
            if o.success() { run_ok += 1; run_bad = 0 } else { run_bad += 1; run_ok = 0 }
            let ctx = Context {
                generation: Some(1),
                owner: "r0",
                now_wall: format!("t{i}"),
                now: start + Duration::from_secs(i as u64),
                heartbeat: Duration::from_secs(300),
                success_threshold,
                failure_threshold,
                certificate_warning_days: None,
            };
            let fx = s.observe(&o, &ctx);
            let changed = s.ready != last_ready;
            prop_assert_eq!(changed, fx.transition.is_some());
            prop_assert_eq!(changed, s.last_transition_time != last_time);
            if changed {
                prop_assert!(fx.write.is_some(), "a transition is always written");
                if s.ready == "True" { prop_assert!(run_ok >= success_threshold) }
                if s.ready == "False" { prop_assert!(run_bad >= failure_threshold) }
            }
            last_ready = s.ready.clone();
            last_time = s.last_transition_time.clone();
        }
    }
}
