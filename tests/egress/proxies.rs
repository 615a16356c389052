//! Proxies without a cluster: the denial applies before the proxy, and a
//! restricted namespace may use only the admin's proxy.

use super::*;

fn plan(yaml: &str) -> webchecker::probe::ProbePlan {
    let spec: WebCheckerSpec = serde_yaml::from_str(yaml).unwrap();
    webchecker::probe::plan(&spec, &|_| Err("no values".into())).unwrap()
}

/// A prober that may dial loopback, with names of its own table (no system
/// resolver involved): `metadata.test` and `nat64.test` resolve to
/// link-local addresses, `mixed.test` to an allowed one and AWS's IPv6
/// metadata address, `fine.test` to an allowed one alone.
fn prober_with_test_names() -> Prober {
    let mut p = Prober::new(Some("egress"), AddressPolicy::with_loopback(), 65536);
    let hosts: HashMap<&str, &[&str]> = HashMap::from([
        ("metadata.test", &["169.254.169.254"][..]),
        ("mixed.test", &["192.0.2.1", "[fd00:ec2::254]"][..]),
        ("nat64.test", &["64:ff9b::a9fe:a9fe"][..]),
        ("fine.test", &["192.0.2.1"][..]),
    ]);
    for (h, ips) in &hosts {
        p.static_hosts.insert(
            h.to_string(),
            ips.iter()
                .map(|i| i.trim_matches(['[', ']']).parse().unwrap())
                .collect(),
        );
    }
    p
}

/// One probe of the checker `yaml` describes, in namespace "ns".
async fn probe_spec(p: &Prober, yaml: &str) -> webchecker::probe::Outcome {
    p.probe(&plan(yaml), "ns", &|| true).await.unwrap()
}

/// Behind a proxy the operator resolves the target's name and judges every
/// address before the proxy hears of it. Names come from the prober's own
/// table (no system resolver involved).
#[tokio::test]
async fn a_proxied_name_resolving_to_a_denied_address_is_refused_before_the_proxy() {
    let proxy = Recorder::bind("127.0.0.1:0").await;
    let via = format!("proxy: {{url: 'http://{}'}}", proxy.addr);
    let mut p = prober_with_test_names();
    // What a name resolves to is not quoted, only why it is refused.
    for (url, why) in [
        (
            "http://metadata.test",
            "metadata.test resolves to an address the operator may not probe (link-local",
        ),
        ("https://metadata.test", "(link-local"),
        (
            "http://mixed.test:8080",
            "(cloud metadata: AWS instance metadata over IPv6)",
        ),
        ("https://nat64.test", "(link-local"),
        (
            "http://169.254.169.254",
            "169.254.169.254 is an address the operator may not probe (link-local",
        ),
    ] {
        let o = probe_spec(&p, &format!("host: {url}\n{via}")).await;
        assert_eq!(o.reason, Reason::Forbidden, "{url}: {o:?}");
        assert!(o.message.contains(why), "{url}: {}", o.message);
        if !url.contains("//169") {
            assert!(
                o.message.contains("the proxy was not asked"),
                "{}",
                o.message
            );
        }
    }
    assert_eq!(proxy.accepts(), 0, "the proxy heard of a denied target");
    // A name with only allowed addresses goes to the proxy, in absolute form.
    let o = probe_spec(&p, &format!("host: http://fine.test\n{via}")).await;
    assert_eq!(o.reason, Reason::ProbeSucceeded, "{o:?}");
    assert_eq!(proxy.heads(), vec!["GET http://fine.test/ HTTP/1.1"]);
    // A proxy at a denied address is not dialled either.
    let o = probe_spec(
        &p,
        "host: http://fine.test\nproxy: {url: 'http://169.254.169.254:3128'}",
    )
    .await;
    assert_eq!(o.reason, Reason::Forbidden);
    assert!(
        o.message
            .contains("the proxy 169.254.169.254 is an address"),
        "{}",
        o.message
    );
    // --check-proxied-targets=false: names are the proxy's business (a
    // literal address is still judged).
    p.policy.check_proxied_targets = false;
    let o = probe_spec(&p, &format!("host: http://metadata.test\n{via}")).await;
    assert_eq!(o.reason, Reason::ProbeSucceeded, "{o:?}");
    assert_eq!(proxy.heads()[1], "GET http://metadata.test/ HTTP/1.1");
    let o = probe_spec(&p, &format!("host: http://169.254.169.254\n{via}")).await;
    assert_eq!(o.reason, Reason::Forbidden);
    assert_eq!(proxy.accepts(), 2);
}

/// A restricted namespace's `proxy.url` is judged like its targets; the
/// operator's own proxy (`proxy.fromEnvironment`) is the admin's choice.
#[tokio::test]
async fn a_restricted_namespace_may_use_the_admins_proxy_but_not_its_own() {
    let proxy = Recorder::bind("127.0.0.1:0").await;
    let (tx, rx) = tokio::sync::watch::channel(ClusterAddresses::default());
    tx.send_modify(|c| {
        c.restricted_namespaces.insert("shop".into());
    });
    let policy = AddressPolicy {
        private: vec!["127.0.0.0/8".parse().unwrap()],
        cluster: rx,
        ..AddressPolicy::with_loopback()
    };
    let mut p = Prober::new(Some("egress"), policy, 65536);
    p.env_proxy = webchecker::probe::EnvProxy::parse(
        Some(format!("http://{}", proxy.addr).as_str()),
        None,
        None,
    );
    p.static_hosts
        .insert("public.test".into(), vec!["192.0.2.1".parse().unwrap()]);
    let own = plan(&format!(
        "host: http://public.test\nproxy: {{url: 'http://{}'}}",
        proxy.addr
    ));
    let env = plan("host: http://public.test\nproxy: {fromEnvironment: true}");
    let o = p.probe(&own, "shop", &|| true).await.unwrap();
    assert_eq!(o.reason, Reason::Forbidden, "{o:?}");
    assert!(
        o.message.contains("closed to this namespace"),
        "{}",
        o.message
    );
    assert_eq!(proxy.accepts(), 0);
    let o = p.probe(&env, "shop", &|| true).await.unwrap();
    assert_eq!(o.reason, Reason::ProbeSucceeded, "{o:?}");
    let o = p.probe(&own, "other", &|| true).await.unwrap();
    assert_eq!(o.reason, Reason::ProbeSucceeded, "{o:?}");
    assert_eq!(proxy.accepts(), 2);
}
