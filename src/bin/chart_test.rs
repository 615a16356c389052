//! `helm test` of the chart (templates/tests/): runs in a pod of the release
//! namespace with a ServiceAccount that may manage WebCheckers there.
//!
//! 1. The operator answers: its Service's `/readyz` returns 200.
//! 2. A sample checker becomes Ready: this program serves HTTP on its own pod
//!    address, creates a WebChecker pointing at it, waits for `Ready=True`,
//!    and deletes it again. The probe's `X-Webchecker-Replica` header names
//!    the replica that probed it.
//!
//! Exits 0 when both hold within `--timeout`, 1 otherwise (the last thing it
//! saw is printed: `helm test --logs` shows it).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::get;
use clap::Parser;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::TokioExecutor;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use webchecker::api::WebChecker;

#[derive(Parser, Debug)]
#[command(
    name = "webchecker-chart-test",
    about = "helm test of the webchecker-operator chart"
)]
struct Args {
    /// Base URL of the operator's metrics Service, e.g. http://10.0.0.12:8080.
    #[arg(long)]
    operator_url: String,
    /// Namespace of the sample WebChecker (one the operator watches).
    #[arg(long)]
    namespace: String,
    /// Name of the sample WebChecker.
    #[arg(long)]
    name: String,
    /// This pod's IP address (downward API status.podIP): the sample's target.
    #[arg(long)]
    pod_ip: String,
    /// Port the sample target listens on.
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Seconds both checks may take together.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    match run(&args, deadline).await {
        Ok(()) => println!("PASS"),
        Err(e) => {
            println!("FAIL: {e}");
            std::process::exit(1);
        }
    }
}

async fn run(args: &Args, deadline: Instant) -> Result<(), String> {
    operator_ready(&args.operator_url, deadline).await?;
    println!("ok: {}/readyz answered 200", args.operator_url);

    let probed_by: Arc<Mutex<Option<String>>> = Arc::default();
    let app = Router::new()
        .fallback(get(record))
        .with_state(probed_by.clone());
    let listener = tokio::net::TcpListener::bind(("0.0.0.0", args.port))
        .await
        .map_err(|e| format!("listen on port {}: {e}", args.port))?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });

    let client = Client::try_default()
        .await
        .map_err(|e| format!("in-cluster API client: {e}"))?;
    let api: Api<WebChecker> = Api::namespaced(client, &args.namespace);
    // A checker left by an earlier run that failed half way.
    let _ = api.delete(&args.name, &DeleteParams::default()).await;
    wait_gone(&api, &args.name, deadline).await?;
    let host = if args.pod_ip.contains(':') {
        format!("http://[{}]:{}", args.pod_ip, args.port)
    } else {
        format!("http://{}:{}", args.pod_ip, args.port)
    };
    let checker: WebChecker = serde_json::from_value(serde_json::json!({
        "apiVersion": "test.network.io/v1alpha1",
        "kind": "WebChecker",
        "metadata": {"name": args.name, "labels": {"app.kubernetes.io/component": "chart-test"}},
        "spec": {"host": host, "path": "/chart-test", "intervalSeconds": 2},
    }))
    .map_err(|e| format!("sample checker: {e}"))?;
    api.create(&PostParams::default(), &checker)
        .await
        .map_err(|e| format!("create WebChecker {}/{}: {e}", args.namespace, args.name))?;
    println!(
        "ok: created WebChecker {}/{} -> {host}",
        args.namespace, args.name
    );

    let outcome = checker_ready(&api, &args.name, deadline).await;
    let _ = api.delete(&args.name, &DeleteParams::default()).await;
    outcome?;
    let by = probed_by.lock().unwrap().clone().unwrap_or_default();
    println!("ok: WebChecker {} is Ready (probed by {by:?})", args.name);
    Ok(())
}

/// Answers every probe with 200 and remembers which replica sent it.
async fn record(
    State(seen): State<Arc<Mutex<Option<String>>>>,
    headers: HeaderMap,
) -> &'static str {
    let replica = headers
        .get("x-webchecker-replica")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    *seen.lock().unwrap() = Some(replica);
    "ok\n"
}

async fn operator_ready(base: &str, deadline: Instant) -> Result<(), String> {
    let url: http::Uri = format!("{}/readyz", base.trim_end_matches('/'))
        .parse()
        .map_err(|e| format!("--operator-url: {e}"))?;
    let client = HttpClient::builder(TokioExecutor::new()).build_http::<Empty<bytes::Bytes>>();
    loop {
        let attempt = tokio::time::timeout(Duration::from_secs(3), client.get(url.clone())).await;
        let last = match attempt {
            Ok(Ok(resp)) if resp.status() == 200 => return Ok(()),
            Ok(Ok(resp)) => {
                let code = resp.status();
                let body = resp.into_body().collect().await.map(|b| b.to_bytes());
                let body = body.map(|b| String::from_utf8_lossy(&b).trim().to_string());
                format!("{code} {}", body.unwrap_or_default())
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => "timed out after 3s".into(),
        };
        if Instant::now() > deadline {
            return Err(format!("{url} did not answer 200: {last}"));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn checker_ready(api: &Api<WebChecker>, name: &str, deadline: Instant) -> Result<(), String> {
    let mut last = String::from("no status yet");
    loop {
        match api.get(name).await {
            Ok(wc) => {
                if let Some(c) = wc.status.as_ref().and_then(|s| s.condition("Ready")) {
                    if c.status == "True" {
                        return Ok(());
                    }
                    last = format!("Ready={} {}: {}", c.status, c.reason, c.message);
                }
            }
            Err(e) => last = format!("get: {e}"),
        }
        if Instant::now() > deadline {
            return Err(format!("WebChecker {name} did not become Ready: {last}"));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn wait_gone(api: &Api<WebChecker>, name: &str, deadline: Instant) -> Result<(), String> {
    while api
        .get_opt(name)
        .await
        .map_err(|e| e.to_string())?
        .is_some()
    {
        if Instant::now() > deadline {
            return Err(format!("an earlier WebChecker {name} was not deleted"));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(())
}
