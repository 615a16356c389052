//! The fault proxy's modes, against a TLS upstream on loopback.

use super::*;

/// A TLS upstream for the proxy tests: `/ok` answers at once, `/stream` sends
/// a chunk every 100 ms for 5 s.
async fn tls_upstream() -> (std::net::SocketAddr, String) {
    use http_body_util::{BodyExt, StreamBody};
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
    use rustls::pki_types::pem::PemObject;
    let cfg = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
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
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(cfg));
    let listener = crate::support::listener().await;
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
                let svc = hyper::service::service_fn(
                    |req: hyper::Request<hyper::body::Incoming>| async move {
                        let body = if req.uri().path() == "/stream" {
                            let s = futures::stream::unfold(0u32, |i| async move {
                                if i >= 50 {
                                    return None;
                                }
                                tokio::time::sleep(Duration::from_millis(100)).await;
                                Some((
                                    Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(
                                        bytes::Bytes::from(format!("chunk{i}\n")),
                                    )),
                                    i + 1,
                                ))
                            });
                            StreamBody::new(s).boxed()
                        } else {
                            http_body_util::Full::new(bytes::Bytes::from_static(b"ok")).boxed()
                        };
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(body))
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    (addr, ca.pem())
}

type Sender = hyper::client::conn::http1::SendRequest<http_body_util::Empty<bytes::Bytes>>;

/// A client connection to the proxy, trusting the proxy's CA.
async fn client_conn(proxy: &FaultProxy) -> std::io::Result<Sender> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(proxy.ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let cfg = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(proxy.addr).await?;
    let tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(cfg))
        .connect(
            rustls::pki_types::ServerName::IpAddress(proxy.addr.ip().into()),
            tcp,
        )
        .await?;
    let (sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
        .await
        .map_err(std::io::Error::other)?;
    tokio::spawn(conn);
    Ok(sender)
}

async fn get(sender: &mut Sender, path: &str) -> Result<(u16, Option<String>, String), String> {
    use http_body_util::BodyExt;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_proxy_modes() {
    let (up, ca) = tls_upstream().await;
    let proxy = FaultProxy::start(up, ca.as_bytes(), 1).await;
    let limit = Duration::from_secs(5);
    // Pass, and a streamed body arrives piece by piece.
    assert_eq!(
        get_within(&proxy, "/ok", limit).await.unwrap().unwrap().0,
        200
    );
    {
        use http_body_util::BodyExt;
        let mut s = client_conn(&proxy).await.unwrap();
        let req = hyper::Request::get("/stream")
            .header("host", "x")
            .body(http_body_util::Empty::new())
            .unwrap();
        let resp = s.send_request(req).await.unwrap();
        let mut body = resp.into_body();
        let started = Instant::now();
        let first = tokio::time::timeout(limit, body.frame())
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
        let rest = tokio::time::timeout(limit, async {
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
        get_within(&proxy, "/ok", limit).await,
        Some(Err(_))
    ));
    proxy.set_mode(ProxyMode::Pass);
    assert_eq!(
        get_within(&proxy, "/ok", limit).await.unwrap().unwrap().0,
        200
    );
    // Errors: every request answered by the proxy, with Retry-After on 429.
    proxy.set_mode(ProxyMode::Errors {
        share: 1.0,
        codes: vec![429],
    });
    let (code, retry, body) = get_within(&proxy, "/ok", limit).await.unwrap().unwrap();
    assert_eq!((code, retry.as_deref()), (429, Some("1")));
    assert!(body.contains("\"reason\":\"TooManyRequests\""), "{body}");
    proxy.set_mode(ProxyMode::Errors {
        share: 1.0,
        codes: vec![500],
    });
    assert_eq!(
        get_within(&proxy, "/ok", limit).await.unwrap().unwrap().0,
        500
    );
    // A share: some pass, some do not.
    proxy.set_mode(ProxyMode::Errors {
        share: 0.5,
        codes: vec![503],
    });
    let mut codes = HashSet::new();
    for _ in 0..20 {
        codes.insert(get_within(&proxy, "/ok", limit).await.unwrap().unwrap().0);
    }
    assert_eq!(codes, HashSet::from([200, 503]));
    // Latency.
    proxy.set_mode(ProxyMode::Latency(Duration::from_millis(400)));
    let at = Instant::now();
    assert_eq!(
        get_within(&proxy, "/ok", limit).await.unwrap().unwrap().0,
        200
    );
    assert!(at.elapsed() >= Duration::from_millis(400));
    // Black-hole: an open connection stalls, and resumes when it ends.
    proxy.set_mode(ProxyMode::Pass);
    let mut held = client_conn(&proxy).await.unwrap();
    assert_eq!(get(&mut held, "/ok").await.unwrap().0, 200);
    proxy.set_mode(ProxyMode::BlackHole);
    let stalled = tokio::spawn(async move { get(&mut held, "/ok").await });
    assert!(
        get_within(&proxy, "/ok", Duration::from_millis(700))
            .await
            .is_none(),
        "a new connection gets nothing"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!stalled.is_finished(), "the open connection is stalled");
    proxy.set_mode(ProxyMode::Pass);
    let r = tokio::time::timeout(limit, stalled)
        .await
        .expect("resumes")
        .unwrap();
    assert_eq!(r.unwrap().0, 200);
    // Stall open connections: the open one stalls, new ones pass, a watch
    // streaming meanwhile goes on.
    let mut held = client_conn(&proxy).await.unwrap();
    assert_eq!(get(&mut held, "/ok").await.unwrap().0, 200);
    let mut watch = {
        use http_body_util::BodyExt;
        let mut s = client_conn(&proxy).await.unwrap();
        let req = hyper::Request::get("/stream?watch=true")
            .header("host", "x")
            .body(http_body_util::Empty::new())
            .unwrap();
        let mut body = s.send_request(req).await.unwrap().into_body();
        tokio::time::timeout(limit, body.frame()).await.unwrap();
        (s, body)
    };
    proxy.set_mode(ProxyMode::StallOpen);
    let stalled = tokio::spawn(async move { get(&mut held, "/ok").await });
    assert_eq!(
        get_within(&proxy, "/ok", limit).await.unwrap().unwrap().0,
        200,
        "a new connection passes"
    );
    {
        use http_body_util::BodyExt;
        for _ in 0..3 {
            let f = tokio::time::timeout(Duration::from_secs(1), watch.1.frame())
                .await
                .expect("the watch flows on");
            assert!(f.is_some_and(|f| f.is_ok()));
        }
    }
    drop(watch);
    assert!(!stalled.is_finished(), "the open connection is stalled");
    proxy.set_mode(ProxyMode::Pass);
    let r = tokio::time::timeout(limit, stalled)
        .await
        .expect("resumes")
        .unwrap();
    assert_eq!(r.unwrap().0, 200);
    // Hang: accepted, never answered, even after the mode changes back.
    let mut hung_conn = client_conn(&proxy).await.unwrap();
    proxy.set_mode(ProxyMode::Hang);
    let hung = tokio::spawn(async move { get(&mut hung_conn, "/ok").await });
    assert!(
        get_within(&proxy, "/ok", Duration::from_millis(700))
            .await
            .is_none()
    );
    proxy.set_mode(ProxyMode::Pass);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!hung.is_finished(), "a hung request stays hung");
    hung.abort();
    assert_eq!(
        get_within(&proxy, "/ok", limit).await.unwrap().unwrap().0,
        200
    );
    let st = proxy.stats();
    println!("proxy: {st}");
    assert!(
        st.injected_errors
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 2
    );
    assert!(st.resets.load(std::sync::atomic::Ordering::Relaxed) >= 2);
}
