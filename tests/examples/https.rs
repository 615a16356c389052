//! HTTPS: a CA from a ConfigMap, basic and bearer auth from Secrets, against
//! nginx.

use super::*;

/// https-ca-configmap.yaml: nginx serves shop.shop.svc with a certificate of
/// a CA nobody else trusts; the ConfigMap made as the example's comment says
/// brings that CA, and the checker is Ready=True.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_with_a_ca_from_a_config_map() {
    let ns = cluster().namespace("ex-https-ca");
    let client = cluster().client().await;
    let api: Api<WebChecker> = Api::namespaced(client, &ns);
    let ip = loopback_ip();
    let private = TestCa::new();
    let leaf = private.leaf(&["shop.shop.svc"]);
    let server = format!(
        "server {{
  listen {ip}:443 ssl;
  server_name shop.shop.svc;
  ssl_certificate shop.crt;
  ssl_certificate_key shop.key;
  root www;
}}"
    );
    let web = nginx(
        &[("shop", &leaf)],
        &[("www/healthz", "ok\n")],
        server,
        vec![(ip, 443).into()],
    )
    .await;
    resolve(&["shop.shop.svc"], ip);
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
    let ns = cluster().namespace("ex-auth");
    let client = cluster().client().await;
    let api: Api<WebChecker> = Api::namespaced(client, &ns);
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
    let server = format!(
        "server {{
  listen {ip}:443 ssl;
  server_name api.example.com;
  ssl_certificate api.crt;
  ssl_certificate_key api.key;
  root www;
  location = /admin/healthz {{
    auth_basic admin;
    auth_basic_user_file htpasswd;
  }}
  location = /v1/status {{
    default_type application/json;
    if ($http_authorization != \"Bearer {token}\") {{ return 401; }}
  }}
}}"
    );
    let htpasswd = format!("{user}:{{PLAIN}}{password}\n");
    let web = nginx(
        &[("api", &leaf)],
        &[
            ("www/admin/healthz", "ok\n"),
            (
                "www/v1/status",
                "{\"status\": \"ok\", \"version\": \"1.4.2\"}\n",
            ),
            ("htpasswd", &htpasswd),
        ],
        server,
        vec![(ip, 443).into()],
    )
    .await;
    resolve(&["api.example.com"], ip);
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
