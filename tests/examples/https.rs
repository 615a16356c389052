//! HTTPS: a CA from a ConfigMap, basic and bearer auth from Secrets, against
//! nginx.

use super::*;

/// https-ca-configmap.yaml: nginx serves shop.shop.svc with a certificate of
/// a CA nobody else trusts; the ConfigMap made as the example's comment says
/// brings that CA, and the checker is Ready=True.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_with_a_ca_from_a_config_map() {
    let (ns, api) = world("ex-https-ca").await;
    let ip = loopback_ip();
    let private = TestCa::new();
    let leaf = private.leaf(&["shop.shop.svc"]);
    let web = https_site(
        ip,
        &["shop.shop.svc"],
        &leaf,
        &[("www/healthz", "ok\n")],
        "",
    )
    .await;
    let _op = operator(&ns, &format!("op-{ns}"), &[]).await;

    // The comment's command, with the CA of the test's server.
    let ca_file = cluster().dir.join(format!("{ns}-ca.pem"));
    std::fs::write(&ca_file, &private.pem).unwrap();
    let from = format!("--from-file=ca.crt={}", ca_file.display());
    kubectl(&["create", "configmap", "shop-ca", &from, "-n", &ns]).await;
    apply_example(&ns, "https-ca-configmap.yaml").await;

    let ready = ("Ready", "True", "ProbeSucceeded");
    wait_condition(&api, "shop", ready, FIRST).await;
    let wc = api.get("shop").await.unwrap();
    assert_eq!(wc.status.unwrap().last_status_code, Some(200));
    let log = web.access_log();
    assert!(
        log.contains("shop.shop.svc - \"GET /healthz HTTP/1.1\" 200"),
        "nginx's log:\n{log}"
    );
    show(&ns).await;
}

/// basic-auth.yaml and bearer-auth.yaml: nginx answers 200 to the
/// credentials of the examples' Secrets only (basic auth from an htpasswd
/// file, the bearer token compared by the server), and both checkers are
/// Ready=True; nginx's log names the basic-auth user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_and_bearer_auth_from_secrets() {
    let (ns, api) = world("ex-auth").await;
    let user = secret_value("basic-auth.yaml", "api-probe-basic-auth", "username");
    let password = secret_value("basic-auth.yaml", "api-probe-basic-auth", "password");
    let token = secret_value("bearer-auth.yaml", "api-probe-token", "token");
    assert!(
        token.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'),
        "the token goes into nginx's config as is: {token:?}"
    );
    let ip = loopback_ip();
    let public = PublicCa::new();
    let leaf = public.ca.leaf(&["api.example.com"]);
    // `return` would answer before auth_basic runs: the pages are files.
    let locations = format!(
        "  location = /admin/healthz {{
    auth_basic admin;
    auth_basic_user_file htpasswd;
  }}
  location = /v1/status {{
    default_type application/json;
    if ($http_authorization != \"Bearer {token}\") {{ return 401; }}
  }}"
    );
    let htpasswd = format!("{user}:{{PLAIN}}{password}\n");
    let status = "{\"status\": \"ok\", \"version\": \"1.4.2\"}\n";
    let files = [
        ("www/admin/healthz", "ok\n"),
        ("www/v1/status", status),
        ("htpasswd", htpasswd.as_str()),
    ];
    let web = https_site(ip, &["api.example.com"], &leaf, &files, &locations).await;
    let _op = operator(&ns, &format!("op-{ns}"), &[&public.flag]).await;

    apply_example(&ns, "basic-auth.yaml").await;
    apply_example(&ns, "bearer-auth.yaml").await;
    let ready = ("Ready", "True", "ProbeSucceeded");
    wait_condition(&api, "api-admin", ready, FIRST).await;
    wait_condition(&api, "api-status", ready, FIRST).await;
    let log = web.access_log();
    for line in [
        format!("api.example.com {user} \"GET /admin/healthz HTTP/1.1\" 200"),
        "api.example.com - \"GET /v1/status HTTP/1.1\" 200".to_string(),
    ] {
        assert!(log.contains(&line), "no {line:?} in nginx's log:\n{log}");
    }
    show(&ns).await;
}
