//! Part 1: the forgery guard, the transport (IP family, proxies) and name
//! resolution.

use super::*;

#[tokio::test]
async fn a_redirect_to_a_denied_address_is_forbidden_and_nothing_is_sent() {
    let denied = Server::raw("127.0.0.2:0", |_s| async {}).await;
    let to = format!("http://{}/meta-data", denied.addr);
    let t = Server::http("127.0.0.1:0", move |_| Answer::redirect(302, &to)).await;
    let p = deny(&["127.0.0.2/32"]);
    let o = probe_timed(
        &p,
        &mk(&format!("host: {}\nfollowRedirects: true", t.url())),
    )
    .await;
    expect(
        &o,
        Reason::Forbidden,
        "after a redirect (HTTP 302) to another origin: the new host is an address the operator may not probe",
    );
    assert!(!o.message.contains("127.0.0.2"), "{}", o.message);
    assert_eq!(o.redirects, 1);
    assert_eq!(t.accepts(), 1);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        denied.accepts(),
        0,
        "no connection reached the denied address"
    );
    // Control: without the deny list the same redirect is followed.
    let o = probe_timed(
        &prober(),
        &mk(&format!("host: {}\nfollowRedirects: true", t.url())),
    )
    .await;
    assert_eq!(o.redirects, 1);
    assert_eq!(denied.accepts(), 1);
}

#[tokio::test]
async fn a_name_resolving_to_a_denied_address_is_forbidden() {
    let name = format!("guard-{}.probe.test", rand_suffix());
    Dns::shared().add(&name, &["127.0.0.1".parse().unwrap()]);
    let t = Server::http("127.0.0.1:0", |_| Answer::text("")).await;
    let url = format!("http://{name}:{}", t.addr.port());
    let o = probe_timed(&deny(&["127.0.0.1/32"]), &mk(&format!("host: {url}"))).await;
    expect(
        &o,
        Reason::Forbidden,
        &format!("{name} resolves only to addresses the operator may not probe"),
    );
    assert_eq!(t.accepts(), 0);
    assert!(Dns::shared().queries(&name) > 0, "resolved through DNS");
    // allow-list form of the guard.
    let only_ten = test_dns(Prober::new(
        None,
        AddressPolicy {
            allow: vec!["10.0.0.0/8".parse().unwrap()],
            ..AddressPolicy::with_loopback()
        },
        65536,
    ));
    expect(
        &probe_timed(&only_ten, &mk(&format!("host: {url}"))).await,
        Reason::Forbidden,
        "",
    );
    assert_eq!(t.accepts(), 0);
    expect(
        &run(&format!("host: {url}")).await,
        Reason::ProbeSucceeded,
        "",
    );
    assert_eq!(t.accepts(), 1);
}

/// `connectTo`: the probe dials that address on the host's port and still
/// names the host (Host header; over TLS, the handshake is the host's); the
/// forgery guard judges the address dialled; a redirect to another origin
/// goes where its host resolves.
#[tokio::test]
async fn connect_to_dials_the_address_and_names_the_host() {
    let name = format!("shop-{}.nowhere.test", rand_suffix());
    let t = Server::http("127.0.0.1:0", |_| Answer::text("ok")).await;
    let port = t.addr.port();
    let via = format!("host: http://{name}:{port}\nconnectTo: 127.0.0.1");
    expect(&run(&via).await, Reason::ProbeSucceeded, "");
    let host = t.seen()[0].headers.get("host").cloned();
    assert_eq!(
        host,
        Some(format!("{name}:{port}")),
        "the request names the host"
    );
    // Without connectTo the name does not resolve: the address came from it.
    expect(
        &run(&format!("host: http://{name}:{port}")).await,
        Reason::DnsError,
        "",
    );
    let o = probe_timed(&deny(&["127.0.0.1/32"]), &mk(&via)).await;
    expect(
        &o,
        Reason::Forbidden,
        "connectTo 127.0.0.1 is an address the operator may not probe",
    );
    assert_eq!(t.accepts(), 1, "nothing reached the denied address");

    let leaf = Leaf::self_signed(&[&name]);
    let tls = Server::https("127.0.0.1:0", server_tls(&leaf, BOTH, None), |_| {
        Answer::text("ok")
    })
    .await;
    let s = format!(
        "host: https://{name}:{}\nconnectTo: 127.0.0.1\ntls: {{insecureSkipVerify: true}}",
        tls.addr.port()
    );
    expect(&run(&s).await, Reason::ProbeSucceeded, "");
    let host = tls.seen()[0].headers.get("host").cloned();
    assert_eq!(host, Some(format!("{name}:{}", tls.addr.port())));

    // A redirect to another origin is not sent to connectTo's address.
    let other = format!("other-{}.nowhere.test", rand_suffix());
    let to = format!("http://{other}:{port}/x");
    let r = Server::http("127.0.0.1:0", move |_| Answer::redirect(302, &to)).await;
    let s = format!(
        "host: http://{name}:{}\nconnectTo: 127.0.0.1\nfollowRedirects: true",
        r.addr.port()
    );
    let o = run(&s).await;
    expect(
        &o,
        Reason::DnsError,
        "after a redirect (HTTP 302) to another origin",
    );
    assert_eq!(t.accepts(), 1);
}

// ============================================================== transport

#[tokio::test]
async fn ip_family_filters_resolved_addresses_and_auto_falls_back() {
    let v4 = Server::http("127.0.0.1:0", |_| Answer::text("v4")).await;
    let v6 = Server::http("[::1]:0", |_| Answer::text("v6")).await;
    let mut p = prober();
    // dual.test: the IPv6 address first (as getaddrinfo sorts it), nothing
    // listens there on v4's port; v6only.test the other way round.
    p.static_hosts.insert(
        "dual.test".into(),
        vec!["::1".parse().unwrap(), "127.0.0.1".parse().unwrap()],
    );
    p.static_hosts.insert(
        "v6only.test".into(),
        vec!["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()],
    );
    let dual = format!("host: http://dual.test:{}", v4.addr.port());
    let o = probe_timed(&p, &mk(&dual)).await;
    expect(&o, Reason::ProbeSucceeded, "");
    let o = probe_timed(&p, &mk(&format!("{dual}\nipFamily: IPv4"))).await;
    expect(&o, Reason::ProbeSucceeded, "");
    let o = probe_timed(&p, &mk(&format!("{dual}\nipFamily: IPv6"))).await;
    expect(&o, Reason::ConnectError, "connection refused");
    assert_eq!(v4.accepts(), 2);

    let six = format!("host: http://v6only.test:{}", v6.addr.port());
    expect(
        &probe_timed(&p, &mk(&six)).await,
        Reason::ProbeSucceeded,
        "",
    );
    expect(
        &probe_timed(&p, &mk(&format!("{six}\nipFamily: IPv6"))).await,
        Reason::ProbeSucceeded,
        "",
    );
    expect(
        &probe_timed(&p, &mk(&format!("{six}\nipFamily: IPv4"))).await,
        Reason::ConnectError,
        "",
    );
    assert_eq!(v6.accepts(), 2);
    // A literal address of the other family: nothing to connect to.
    let o = run(&format!(
        "host: http://[::1]:{}\nipFamily: IPv4",
        v6.addr.port()
    ))
    .await;
    expect(
        &o,
        Reason::DnsError,
        "has no IPv4 address (spec.ipFamily IPv4)",
    );
    let o = run(&format!(
        "host: http://127.0.0.1:{}\nipFamily: IPv6",
        v4.addr.port()
    ))
    .await;
    expect(&o, Reason::DnsError, "has no IPv6 address");
}

// ============================================================== resolution

/// Names go to the configured name server (here the test kit's): an answer,
/// NXDOMAIN, a name without an address of the family asked for, and a name
/// of the hosts file (answered without asking DNS). The resolve phase is timed.
#[tokio::test]
async fn names_resolve_through_the_configured_name_server() {
    let dns = Dns::shared();
    let zone = format!("r{}.resolve.test", rand_suffix());
    let t = Server::http("127.0.0.1:0", |_| Answer::text("")).await;
    let v6 = Server::http("[::1]:0", |_| Answer::text("")).await;
    dns.add(&format!("www.{zone}"), &["127.0.0.1".parse().unwrap()]);
    dns.add(&format!("six.{zone}"), &["::1".parse().unwrap()]);
    let port = t.addr.port();

    let o = run(&format!("host: http://www.{zone}:{port}")).await;
    expect(&o, Reason::ProbeSucceeded, "");
    assert!(o.phases.resolve > Duration::ZERO, "{:?}", o.phases);
    assert_eq!(dns.queries(&format!("www.{zone}")), 2, "A and AAAA");
    // Upper case and a trailing dot are the same name.
    let o = run(&format!("host: http://WWW.{}.:{port}", zone.to_uppercase())).await;
    expect(&o, Reason::ProbeSucceeded, "");

    let o = run(&format!("host: http://nope.{zone}:{port}")).await;
    expect(
        &o,
        Reason::DnsError,
        &format!("cannot resolve nope.{zone}: no such host"),
    );

    let six = format!("host: http://six.{zone}:{}", v6.addr.port());
    expect(&run(&six).await, Reason::ProbeSucceeded, "");
    expect(
        &run(&format!("{six}\nipFamily: IPv4")).await,
        Reason::DnsError,
        &format!("six.{zone} has no IPv4 address (spec.ipFamily IPv4)"),
    );
    assert_eq!(v6.accepts(), 1);

    let o = run(&format!("host: http://{HOSTS_FILE_NAME}:{port}")).await;
    expect(&o, Reason::ProbeSucceeded, "");
    assert_eq!(dns.queries(HOSTS_FILE_NAME), 0, "the hosts file answered");
    assert_eq!(t.accepts(), 3);
}

/// A zone whose name server never answers: the probe ends at its deadline
/// with DNSError, and the lookup ends with it (no query is sent after the
/// probe returned). A zone that answers A but drops AAAA queries costs the
/// resolution delay (50 ms), not the probe.
#[tokio::test]
async fn a_black_holed_lookup_ends_with_the_probe() {
    let dns = Dns::shared();
    let zone = format!("b{}.blackhole.test", rand_suffix());
    dns.black_hole(&zone);
    let name = format!("www.{zone}");
    // Queries time out after 2 s and are tried 5 times: a lookup that went on
    // after the probe would ask again at 2 s and 4 s.
    let mut p = prober();
    p.resolver = Arc::new(dns.resolver_with("timeout:2 attempts:5"));
    let o = probe_timed(&p, &mk(&format!("host: http://{name}"))).await;
    expect(
        &o,
        Reason::DnsError,
        "timed out after 1s during name resolution",
    );
    let sent = dns.queries(&name);
    assert!(sent >= 2, "A and AAAA were asked: {sent}");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(dns.queries(&name), sent, "no query after the probe ended");

    let half = format!("h{}.noaaaa.test", rand_suffix());
    let t = Server::http("127.0.0.1:0", |_| Answer::text("")).await;
    dns.add(&half, &["127.0.0.1".parse().unwrap()]);
    dns.black_hole_type(&half, hickory_resolver::proto::rr::RecordType::AAAA);
    let url = format!("host: http://{half}:{}", t.addr.port());
    let o = run(&url).await;
    expect(&o, Reason::ProbeSucceeded, "");
    assert!(
        o.phases.resolve >= webchecker::probe::RESOLUTION_DELAY
            && o.phases.resolve < Duration::from_millis(500),
        "resolve took {:?}",
        o.phases.resolve
    );
    expect(
        &run(&format!("{url}\nipFamily: IPv6")).await,
        Reason::DnsError,
        "timed out after 1s during name resolution",
    );
}

/// Resolution never takes a thread of the blocking pool: with a pool of one
/// thread and 50 probes stuck in black-holed lookups, a probe of a name that
/// answers still succeeds at once (getaddrinfo on the blocking pool, as
/// before, would wait for a thread).
#[test]
fn lookups_do_not_use_the_blocking_pool() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(1)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dns = Dns::shared();
        let zone = format!("p{}.pool.test", rand_suffix());
        dns.black_hole(&format!("stuck.{zone}"));
        dns.add(&format!("ok.{zone}"), &["127.0.0.1".parse().unwrap()]);
        let t = Server::http("127.0.0.1:0", |_| Answer::text("")).await;
        // Hold the only blocking thread for the whole test.
        let (hold_tx, hold_rx) = std::sync::mpsc::channel::<()>();
        let held = tokio::task::spawn_blocking(move || hold_rx.recv());
        let p = Arc::new(prober());
        let stuck: Vec<_> = (0..50)
            .map(|i| {
                let p = p.clone();
                let plan = mk(&format!(
                    "host: http://c{i}.stuck.{zone}\nintervalSeconds: 5\ntimeoutSeconds: 3"
                ));
                tokio::spawn(async move { p.probe(&plan, "probe-test", &|| true).await })
            })
            .collect();
        // Every stuck probe has sent its queries.
        eventually(
            Duration::from_secs(2),
            "stuck lookups under way",
            || async { (dns.queries_under(&format!("stuck.{zone}")) >= 100).then_some(()) },
        )
        .await;
        let o = probe_timed(
            &p,
            &mk(&format!("host: http://ok.{zone}:{}", t.addr.port())),
        )
        .await;
        expect(&o, Reason::ProbeSucceeded, "");
        for s in stuck {
            let o = s.await.unwrap().unwrap();
            expect(&o, Reason::DnsError, "during name resolution");
        }
        hold_tx.send(()).unwrap();
        held.await.unwrap().unwrap();
    });
}

#[tokio::test]
async fn proxy_url_connect_for_https_and_absolute_form_for_http() {
    let proxy = Proxy::start(false).await;
    let plain = Server::http("127.0.0.1:0", |_| Answer::text("")).await;
    let leaf = Leaf::self_signed(&["127.0.0.1"]);
    let tls = Server::https("127.0.0.1:0", server_tls(&leaf, BOTH, None), |_| {
        Answer::text("")
    })
    .await;
    // Default: no proxy at all.
    expect(
        &run(&format!("host: {}", plain.url())).await,
        Reason::ProbeSucceeded,
        "",
    );
    assert!(proxy.lines().is_empty());
    let via = format!("proxy: {{url: '{}'}}", proxy.url());
    let o = run(&format!("host: {}\npath: /x?y=1\n{via}", plain.url())).await;
    expect(&o, Reason::ProbeSucceeded, "");
    assert_eq!(
        proxy.lines(),
        vec![format!("GET {}/x?y=1 HTTP/1.1", plain.url())]
    );
    assert_eq!(
        plain.seen()[1].uri,
        format!("{}/x?y=1", plain.url()),
        "absolute form"
    );
    let o = run(&format!(
        "host: {}\ntls: {{insecureSkipVerify: true}}\n{via}",
        tls.https_url()
    ))
    .await;
    expect(&o, Reason::ProbeSucceeded, "");
    assert!(o.phases.tls > Duration::ZERO);
    assert_eq!(proxy.lines()[1], format!("CONNECT {} HTTP/1.1", tls.addr));
    assert_eq!(tls.seen()[0].uri, "/", "origin form inside the tunnel");
    // A proxy that refuses the tunnel.
    let refusing = Proxy::start(true).await;
    let o = run(&format!(
        "host: {}\ntls: {{insecureSkipVerify: true}}\nproxy: {{url: '{}'}}",
        tls.https_url(),
        refusing.url()
    ))
    .await;
    expect(&o, Reason::ConnectError, "refused CONNECT");
    // A proxy at a denied address: the guard applies to the proxy.
    let o = probe_timed(
        &deny(&["127.0.0.1/32"]),
        &mk(&format!("host: http://192.0.2.10\n{via}")),
    )
    .await;
    expect(
        &o,
        Reason::Forbidden,
        "the proxy 127.0.0.1 is an address the operator may not probe",
    );
    // A literal target address is checked even behind a proxy.
    let o = probe_timed(
        &deny(&["192.0.2.0/24"]),
        &mk(&format!("host: http://192.0.2.10\n{via}")),
    )
    .await;
    expect(
        &o,
        Reason::Forbidden,
        "192.0.2.10 is an address the operator may not probe",
    );
    assert_eq!(proxy.lines().len(), 2, "nothing reached the proxy");
    // A proxy that is down.
    let o = run(&format!(
        "host: {}\nproxy: {{url: 'http://127.0.0.1:{}'}}",
        plain.url(),
        closed_port()
    ))
    .await;
    expect(&o, Reason::ConnectError, "cannot connect to proxy");
}

#[tokio::test]
async fn proxy_from_environment_honours_no_proxy() {
    let proxy = Proxy::start(false).await;
    let t = Server::http("127.0.0.1:0", |_| Answer::text("")).await;
    let mut p = prober();
    p.env_proxy = EnvProxy::parse(Some(&proxy.url()), Some(&proxy.url()), None);
    let yaml = format!("host: {}\nproxy: {{fromEnvironment: true}}", t.url());
    // Without spec.proxy the environment is ignored.
    expect(
        &probe_timed(&p, &mk(&format!("host: {}", t.url()))).await,
        Reason::ProbeSucceeded,
        "",
    );
    assert!(proxy.lines().is_empty());
    expect(
        &probe_timed(&p, &mk(&yaml)).await,
        Reason::ProbeSucceeded,
        "",
    );
    assert_eq!(proxy.lines().len(), 1);
    p.env_proxy = EnvProxy::parse(Some(&proxy.url()), None, Some("localhost,127.0.0.0/8"));
    expect(
        &probe_timed(&p, &mk(&yaml)).await,
        Reason::ProbeSucceeded,
        "",
    );
    assert_eq!(proxy.lines().len(), 1, "NO_PROXY bypassed the proxy");
    assert_eq!(t.accepts(), 3);
    p.env_proxy = EnvProxy::parse(Some("socks5://127.0.0.1:1080"), None, None);
    expect(
        &probe_timed(&p, &mk(&yaml)).await,
        Reason::InvalidSpec,
        "proxy environment is not usable",
    );
}
