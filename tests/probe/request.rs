//! Part 1: what the request carries (method, headers, body, Secret values),
//! the response checks, and redirects.

use super::*;

#[tokio::test]
async fn method_headers_and_body_reach_the_target() {
    let t = Server::http("127.0.0.1:0", |_| Answer::text("fine")).await;
    let o = run(&format!("host: {}\npath: /p?q=1", t.url())).await;
    expect(&o, Reason::ProbeSucceeded, "HTTP 200");
    let s = t.seen();
    assert_eq!((s[0].method.as_str(), s[0].uri.as_str()), ("GET", "/p?q=1"));
    assert!(s[0].body.is_empty());
    assert!(s[0].headers["user-agent"].starts_with("webchecker-operator/"));
    assert_eq!(s[0].headers["x-webchecker-replica"], "probe-test");

    let o = run(&format!(
        "host: {}\nmethod: PUT\nbody: '{{\"a\": 1}}'\nheaders: [{{name: X-Plain, value: plain-1}}, {{name: Content-Type, value: application/json}}]",
        t.url()
    ))
    .await;
    expect(&o, Reason::ProbeSucceeded, "HTTP 200");
    let s = &t.seen()[1];
    assert_eq!(s.method, "PUT");
    assert_eq!(s.body, b"{\"a\": 1}");
    assert_eq!(s.headers["x-plain"], "plain-1");
    assert_eq!(s.headers["content-type"], "application/json");
    assert_eq!(s.headers["content-length"], "8");
}

#[tokio::test]
async fn secret_header_basic_and_bearer_auth_are_sent() {
    let t = Server::http("127.0.0.1:0", |_| Answer::text("")).await;
    let p = plan_with(
        &format!(
            "host: {}\nheaders: [{{name: X-Api-Key, valueFrom: {{secretKeyRef: {{name: api, key: token}}}}}}]\nauth: {{basic: {{secretName: creds}}}}",
            t.url()
        ),
        &[
            (ValueRef::secret("api", "token"), b"k-123\n".to_vec()),
            (ValueRef::secret("creds", "username"), b"alice".to_vec()),
            (
                ValueRef::secret("creds", "password"),
                b"pa:ss word".to_vec(),
            ),
        ],
    );
    expect(
        &probe_timed(&prober(), &p).await,
        Reason::ProbeSucceeded,
        "",
    );
    let p = plan_with(
        &format!(
            "host: {}\nauth: {{bearer: {{secretKeyRef: {{name: tok, key: t}}}}}}",
            t.url()
        ),
        &[(ValueRef::secret("tok", "t"), b"eyJhbGciOi.x.y".to_vec())],
    );
    expect(
        &probe_timed(&prober(), &p).await,
        Reason::ProbeSucceeded,
        "",
    );
    let s = t.seen();
    assert_eq!(s[0].headers["x-api-key"], "k-123");
    assert_eq!(
        s[0].headers["authorization"],
        format!("Basic {}", base64(b"alice:pa:ss word"))
    );
    assert_eq!(s[1].headers["authorization"], "Bearer eyJhbGciOi.x.y");
}

// ============================================================== response checks

#[tokio::test]
async fn expected_status_codes() {
    let t = Server::http("127.0.0.1:0", |_| Answer::status(404)).await;
    let o = run(&format!("host: {}", t.url())).await;
    expect(&o, Reason::UnexpectedStatus, "HTTP 404");
    assert_eq!(o.status_code, Some(404));
    let o = run(&format!(
        "host: {}\nexpectedStatusCodes: ['200', 400-404]",
        t.url()
    ))
    .await;
    expect(&o, Reason::ProbeSucceeded, "HTTP 404");
}

#[tokio::test]
async fn body_match_and_invert() {
    let t = Server::http("127.0.0.1:0", |_| Answer::text("status: all good\n")).await;
    let base = format!("host: {}", t.url());
    expect(
        &run(&format!("{base}\nbodyMatch: {{regex: 'all go+d'}}")).await,
        Reason::ProbeSucceeded,
        "",
    );
    expect(
        &run(&format!("{base}\nbodyMatch: {{regex: 'degraded'}}")).await,
        Reason::BodyMismatch,
        "does not match bodyMatch.regex",
    );
    expect(
        &run(&format!(
            "{base}\nbodyMatch: {{regex: 'good', invert: true}}"
        ))
        .await,
        Reason::BodyMismatch,
        "which it must not",
    );
    expect(
        &run(&format!(
            "{base}\nbodyMatch: {{regex: 'error', invert: true}}"
        ))
        .await,
        Reason::ProbeSucceeded,
        "",
    );
}

#[tokio::test]
async fn json_checks() {
    let t = Server::http("127.0.0.1:0", |s| {
        if s.uri == "/text" {
            Answer::text("<html>ok</html>")
        } else {
            Answer::text(
                r#"{"status":"ok","version":{"major":2},"ready":true,"items":[{"name":"a"}]}"#,
            )
            .header("content-type", "application/json")
        }
    })
    .await;
    let base = format!("host: {}", t.url());
    let o = run(&format!(
        "{base}\njsonChecks: [{{pointer: /status, equals: ok}}, {{pointer: /version/major, equals: '2'}}, {{pointer: /ready, equals: 'true'}}, {{pointer: /items/0/name}}]"
    ))
    .await;
    expect(&o, Reason::ProbeSucceeded, "");
    let o = run(&format!(
        "{base}\njsonChecks: [{{pointer: /status, equals: degraded}}]"
    ))
    .await;
    expect(&o, Reason::BodyMismatch, "does not equal \"degraded\"");
    assert!(
        !o.message.contains("\"ok\""),
        "no body content in messages: {}",
        o.message
    );
    let o = run(&format!("{base}\njsonChecks: [{{pointer: /missing}}]")).await;
    expect(&o, Reason::BodyMismatch, "no value at \"/missing\"");
    let o = run(&format!(
        "{base}\npath: /text\njsonChecks: [{{pointer: /status}}]"
    ))
    .await;
    expect(&o, Reason::BodyMismatch, "not JSON");
}

#[tokio::test]
async fn header_checks() {
    let t = Server::http("127.0.0.1:0", |_| {
        Answer::text("")
            .header("x-version", "v2.4.1")
            .header("etag", "\"abc\"")
    })
    .await;
    let base = format!("host: {}", t.url());
    expect(
        &run(&format!(
            "{base}\nheaderChecks: [{{name: X-Version, regex: '^v2\\.'}}, {{name: etag}}]"
        ))
        .await,
        Reason::ProbeSucceeded,
        "",
    );
    let o = run(&format!(
        "{base}\nheaderChecks: [{{name: X-Version, regex: '^v3'}}]"
    ))
    .await;
    expect(&o, Reason::BodyMismatch, "x-version header does not match");
    assert!(!o.message.contains("v2.4.1"), "{}", o.message);
    expect(
        &run(&format!("{base}\nheaderChecks: [{{name: X-Missing}}]")).await,
        Reason::BodyMismatch,
        "no x-missing header",
    );
}

#[tokio::test]
async fn max_response_time_gives_slow_response() {
    let t = Server::http("127.0.0.1:0", |_| Answer {
        delay: Duration::from_millis(300),
        ..Answer::text("")
    })
    .await;
    let o = run(&format!("host: {}\nmaxResponseTimeMillis: 100", t.url())).await;
    expect(
        &o,
        Reason::SlowResponse,
        "slower than maxResponseTimeMillis 100",
    );
    assert_eq!(o.status_code, Some(200));
    expect(
        &run(&format!("host: {}\nmaxResponseTimeMillis: 2000", t.url())).await,
        Reason::ProbeSucceeded,
        "",
    );
}

// ============================================================== redirects

#[tokio::test]
async fn redirects_are_followed_counted_and_bounded() {
    let t = Server::http("127.0.0.1:0", |s| match s.uri.as_str() {
        "/start" => Answer::redirect(302, "/middle"),
        "/middle" => Answer::redirect(301, "/end"),
        "/end" => Answer::text("landed"),
        "/loop" => Answer::redirect(302, "/loop"),
        "/post" => Answer::redirect(303, "/end"),
        _ => Answer::status(404),
    })
    .await;
    let base = format!("host: {}", t.url());
    // Without followRedirects a 3xx is judged by expectedStatusCodes (seed behaviour).
    let o = run(&format!("{base}\npath: /start")).await;
    assert_eq!(
        (o.reason, o.status_code, o.redirects),
        (Reason::ProbeSucceeded, Some(302), 0)
    );
    let o = run(&format!(
        "{base}\npath: /start\nexpectedStatusCodes: ['200']"
    ))
    .await;
    expect(&o, Reason::UnexpectedStatus, "HTTP 302");
    let before = t.accepts();
    let o = run(&format!(
        "{base}\npath: /start\nfollowRedirects: true\nbodyMatch: {{regex: landed}}"
    ))
    .await;
    assert_eq!(
        (o.reason, o.status_code, o.redirects),
        (Reason::ProbeSucceeded, Some(200), 2)
    );
    assert_eq!(t.accepts() - before, 3, "a fresh connection per hop");
    // Timings are summed over the hops: three connects, three exchanges.
    assert!(o.phases.connect > Duration::ZERO && o.phases.processing > Duration::ZERO);
    let o = run(&format!(
        "{base}\npath: /start\nfollowRedirects: true\nmaxRedirects: 1"
    ))
    .await;
    expect(
        &o,
        Reason::UnexpectedStatus,
        "more than 1 redirects (maxRedirects)",
    );
    let o = run(&format!("{base}\npath: /loop\nfollowRedirects: true")).await;
    expect(&o, Reason::UnexpectedStatus, "more than 5 redirects");
    assert_eq!(o.redirects, 5);
    // 303 turns a POST into a GET without body.
    let o = run(&format!(
        "{base}\npath: /post\nmethod: POST\nbody: x\nfollowRedirects: true"
    ))
    .await;
    expect(&o, Reason::ProbeSucceeded, "");
    let s = t.seen();
    let last = s.last().unwrap();
    assert_eq!((last.method.as_str(), last.body.len()), ("GET", 0));
}

#[tokio::test]
async fn credentials_do_not_follow_a_redirect_to_another_origin() {
    let other = Server::http("127.0.0.1:0", |_| Answer::text("")).await;
    let to = format!("{}/elsewhere", other.url());
    let t = Server::http("127.0.0.1:0", move |s| match s.uri.as_str() {
        "/same" => Answer::redirect(302, "/end"),
        "/cross" => Answer::redirect(302, &to),
        _ => Answer::text(""),
    })
    .await;
    for path in ["/same", "/cross"] {
        let p = plan_with(
            &format!(
                "host: {}\npath: {path}\nfollowRedirects: true\nheaders: [{{name: X-Plain, value: p}}, {{name: X-Key, valueFrom: {{secretKeyRef: {{name: s, key: k}}}}}}]\nauth: {{bearer: {{secretKeyRef: {{name: s, key: k}}}}}}",
                t.url()
            ),
            &[(ValueRef::secret("s", "k"), b"s3cr3t".to_vec())],
        );
        expect(
            &probe_timed(&prober(), &p).await,
            Reason::ProbeSucceeded,
            "",
        );
    }
    let same = &t.seen()[1];
    assert_eq!(same.uri, "/end");
    assert_eq!(same.headers["x-key"], "s3cr3t");
    assert_eq!(same.headers["authorization"], "Bearer s3cr3t");
    let cross = &other.seen()[0];
    assert_eq!(cross.headers["x-plain"], "p", "plain headers still go");
    assert!(!cross.headers.contains_key("x-key"), "{:?}", cross.headers);
    assert!(!cross.headers.contains_key("authorization"));
}
