//! The fault proxy's modes, against a TLS upstream on loopback.

use std::collections::HashSet;
use std::time::Instant;

use super::*;

/// How long a request that should be answered may take.
const LIMIT: Duration = Duration::from_secs(5);

/// The upstream's answer: to `/stream` a chunk every 100 ms for 5 s, to
/// anything else `ok` at once.
async fn upstream_answer(
    req: hyper::Request<Incoming>,
) -> Result<hyper::Response<BoxBody<Bytes, std::convert::Infallible>>, std::convert::Infallible> {
    use http_body_util::StreamBody;
    let body = if req.uri().path() == "/stream" {
        let s = futures::stream::unfold(0u32, |i| async move {
            if i >= 50 {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            Some((
                Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(Bytes::from(format!(
                    "chunk{i}\n"
                )))),
                i + 1,
            ))
        });
        StreamBody::new(s).boxed()
    } else {
        Full::new(Bytes::from_static(b"ok")).boxed()
    };
    Ok(hyper::Response::new(body))
}

/// A TLS upstream for the proxy tests ([`upstream_answer`]): its address and
/// its CA.
async fn tls_upstream() -> (SocketAddr, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = params.self_signed(&key).unwrap();
    let issuer = rcgen::Issuer::new(params, key);
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap();
    use rustls::pki_types::PrivateKeyDer;
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![leaf.der().clone()],
        PrivateKeyDer::from_pem_slice(leaf_key.serialize_pem().as_bytes()).unwrap(),
    )
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let listener = crate::listener().await;
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service_fn(upstream_answer))
                    .await;
            });
        }
    });
    (addr, ca.pem())
}

type Sender = hyper::client::conn::http1::SendRequest<http_body_util::Empty<Bytes>>;

/// A client connection to the proxy, trusting the proxy's CA.
async fn client_conn(proxy: &FaultProxy) -> io::Result<Sender> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(proxy.ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = TcpStream::connect(proxy.addr).await?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(ServerName::IpAddress(proxy.addr.ip().into()), tcp)
        .await?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(io::Error::other)?;
    tokio::spawn(conn);
    Ok(sender)
}

/// The status, Retry-After and body of GET `path` on `sender`.
async fn get(sender: &mut Sender, path: &str) -> Result<(u16, Option<String>, String), String> {
    let req = hyper::Request::get(path)
        .header("host", "127.0.0.1")
        .body(http_body_util::Empty::new())
        .unwrap();
    sender.ready().await.map_err(|e| e.to_string())?;
    let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
    let code = resp.status().as_u16();
    let retry = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((code, retry, String::from_utf8_lossy(&body).to_string()))
}

/// GET `path` on a new connection to the proxy; `None` when nothing came
/// within `limit`.
async fn get_within(
    proxy: &FaultProxy,
    path: &str,
    limit: Duration,
) -> Option<Result<(u16, Option<String>, String), String>> {
    tokio::time::timeout(limit, async {
        let mut s = client_conn(proxy).await.map_err(|e| e.to_string())?;
        get(&mut s, path).await
    })
    .await
    .ok()
}

/// The status of GET `path` on a new connection, which must be answered.
async fn status_of(proxy: &FaultProxy, path: &str) -> u16 {
    get_within(proxy, path, LIMIT).await.unwrap().unwrap().0
}

/// The body of GET `path` on a new connection, once its head came.
async fn open_stream(proxy: &FaultProxy, path: &str) -> (Sender, Incoming) {
    let mut s = client_conn(proxy).await.unwrap();
    let req = hyper::Request::get(path)
        .header("host", "x")
        .body(http_body_util::Empty::new())
        .unwrap();
    let body = s.send_request(req).await.unwrap().into_body();
    (s, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_proxy_modes() {
    let (up, ca) = tls_upstream().await;
    let proxy = FaultProxy::start(up, ca.as_bytes(), 1).await;
    pass_streams_and_reset_cuts(&proxy).await;
    errors_and_latency(&proxy).await;
    black_hole_stalls_and_resumes(&proxy).await;
    stall_open_spares_new_connections_and_watches(&proxy).await;
    hang_stays_hung(&proxy).await;
    let st = proxy.stats();
    println!("proxy: {st}");
    assert!(st.injected_errors.load(Ordering::Relaxed) >= 2);
    assert!(st.resets.load(Ordering::Relaxed) >= 2);
}

/// Pass, and a streamed body arrives piece by piece; reset fails the open
/// stream at once, and new connections too.
async fn pass_streams_and_reset_cuts(proxy: &FaultProxy) {
    assert_eq!(status_of(proxy, "/ok").await, 200);
    {
        let (_s, mut body) = open_stream(proxy, "/stream").await;
        let started = Instant::now();
        let first = tokio::time::timeout(LIMIT, body.frame())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(first.data_ref().is_some_and(|d| d.starts_with(b"chunk0")));
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "the first chunk is not held back"
        );
        // Reset: the open stream fails at once.
        proxy.set_mode(ProxyMode::Reset);
        let rest = tokio::time::timeout(LIMIT, async {
            loop {
                match body.frame().await {
                    Some(Ok(_)) => continue,
                    Some(Err(_)) => return true,
                    None => return false,
                }
            }
        })
        .await
        .expect("the reset stream ends quickly");
        assert!(rest, "the stream ended with an error, not a clean end");
    }
    // Reset: new connections fail too.
    assert!(matches!(
        get_within(proxy, "/ok", LIMIT).await,
        Some(Err(_))
    ));
    proxy.set_mode(ProxyMode::Pass);
    assert_eq!(status_of(proxy, "/ok").await, 200);
}

/// Errors: every request answered by the proxy, with Retry-After on 429;
/// a share: some pass, some do not; latency.
async fn errors_and_latency(proxy: &FaultProxy) {
    proxy.set_mode(ProxyMode::Errors {
        share: 1.0,
        codes: vec![429],
    });
    let (code, retry, body) = get_within(proxy, "/ok", LIMIT).await.unwrap().unwrap();
    assert_eq!((code, retry.as_deref()), (429, Some("1")));
    assert!(body.contains("\"reason\":\"TooManyRequests\""), "{body}");
    proxy.set_mode(ProxyMode::Errors {
        share: 1.0,
        codes: vec![500],
    });
    assert_eq!(status_of(proxy, "/ok").await, 500);
    // A share: some pass, some do not.
    proxy.set_mode(ProxyMode::Errors {
        share: 0.5,
        codes: vec![503],
    });
    let mut codes = HashSet::new();
    for _ in 0..20 {
        codes.insert(status_of(proxy, "/ok").await);
    }
    assert_eq!(codes, HashSet::from([200, 503]));
    // Latency.
    proxy.set_mode(ProxyMode::Latency(Duration::from_millis(400)));
    let at = Instant::now();
    assert_eq!(status_of(proxy, "/ok").await, 200);
    assert!(at.elapsed() >= Duration::from_millis(400));
}

/// Black-hole: an open connection stalls, and resumes when it ends.
async fn black_hole_stalls_and_resumes(proxy: &FaultProxy) {
    proxy.set_mode(ProxyMode::Pass);
    let mut held = client_conn(proxy).await.unwrap();
    assert_eq!(get(&mut held, "/ok").await.unwrap().0, 200);
    proxy.set_mode(ProxyMode::BlackHole);
    let stalled = tokio::spawn(async move { get(&mut held, "/ok").await });
    assert!(
        get_within(proxy, "/ok", Duration::from_millis(700))
            .await
            .is_none(),
        "a new connection gets nothing"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!stalled.is_finished(), "the open connection is stalled");
    proxy.set_mode(ProxyMode::Pass);
    let r = tokio::time::timeout(LIMIT, stalled)
        .await
        .expect("resumes")
        .unwrap();
    assert_eq!(r.unwrap().0, 200);
}

/// Stall open connections: the open one stalls, new ones pass, a watch
/// streaming meanwhile goes on.
async fn stall_open_spares_new_connections_and_watches(proxy: &FaultProxy) {
    let mut held = client_conn(proxy).await.unwrap();
    assert_eq!(get(&mut held, "/ok").await.unwrap().0, 200);
    let mut watch = open_stream(proxy, "/stream?watch=true").await;
    tokio::time::timeout(LIMIT, watch.1.frame()).await.unwrap();
    proxy.set_mode(ProxyMode::StallOpen);
    let stalled = tokio::spawn(async move { get(&mut held, "/ok").await });
    assert_eq!(
        status_of(proxy, "/ok").await,
        200,
        "a new connection passes"
    );
    for _ in 0..3 {
        let f = tokio::time::timeout(Duration::from_secs(1), watch.1.frame())
            .await
            .expect("the watch flows on");
        assert!(f.is_some_and(|f| f.is_ok()));
    }
    drop(watch);
    assert!(!stalled.is_finished(), "the open connection is stalled");
    proxy.set_mode(ProxyMode::Pass);
    let r = tokio::time::timeout(LIMIT, stalled)
        .await
        .expect("resumes")
        .unwrap();
    assert_eq!(r.unwrap().0, 200);
}

/// Hang: accepted, never answered, even after the mode changes back.
async fn hang_stays_hung(proxy: &FaultProxy) {
    let mut hung_conn = client_conn(proxy).await.unwrap();
    proxy.set_mode(ProxyMode::Hang);
    let hung = tokio::spawn(async move { get(&mut hung_conn, "/ok").await });
    assert!(
        get_within(proxy, "/ok", Duration::from_millis(700))
            .await
            .is_none()
    );
    proxy.set_mode(ProxyMode::Pass);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!hung.is_finished(), "a hung request stays hung");
    hung.abort();
    assert_eq!(status_of(proxy, "/ok").await, 200);
}
