//! Part 1: hostile targets end within the deadline with a precise reason.

use super::*;

/// Hostile targets: each probe ends within timeout + 100 ms with a precise reason.
#[tokio::test]
pub(super) async fn hostile_targets_end_within_the_deadline_with_a_precise_reason() {
    let targets = Hostile::start().await;
    for (kind, want, msg) in Hostile::EXPECTED {
        let o = probe_timed(
            &prober(),
            &plan_with(&targets.yaml(kind, 1), &targets.values()),
        )
        .await;
        println!(
            "{kind:<18} {:<18} {:>5} ms  {}",
            o.reason.as_str(),
            o.duration.as_millis(),
            o.message
        );
        expect(&o, *want, msg);
    }
    // The endless body with checks: judged on the first maxBodyBytes.
    let o = probe_timed(
        &prober(),
        &mk(&format!(
            "{}\njsonChecks: [{{pointer: /x}}]",
            targets.yaml("endless-body", 1)
        )),
    )
    .await;
    expect(
        &o,
        Reason::BodyMismatch,
        "only the first 65536 bytes are read",
    );
    let o = probe_timed(
        &prober(),
        &mk(&format!(
            "{}\nbodyMatch: {{regex: '^x+$'}}",
            targets.yaml("endless-body", 1)
        )),
    )
    .await;
    expect(&o, Reason::ProbeSucceeded, "");
}

/// One local target of each hostile kind (shared by the direct test and the
/// 200-target end-to-end test).
pub(super) struct Hostile {
    pub(super) servers: HashMap<&'static str, Server>,
    pub(super) ca_pem: String,
}

impl Hostile {
    pub(super) const KINDS: [&'static str; 12] = [
        "slow-headers",
        "fat-headers",
        "fat-body",
        "endless-body",
        "trickle-body",
        "huge-headers",
        "redirect-loop",
        "tls-stall",
        "reset",
        "non-http",
        "wrong-name",
        "silent",
    ];

    pub(super) const EXPECTED: &'static [(&'static str, Reason, &'static str)] = &[
        ("slow-headers", Reason::Timeout, "during response headers"),
        ("fat-headers", Reason::Timeout, "during response headers"),
        ("fat-body", Reason::Timeout, "during response body"),
        ("endless-body", Reason::ProbeSucceeded, "HTTP 200"),
        ("trickle-body", Reason::Timeout, "during response body"),
        (
            "huge-headers",
            Reason::ProtocolError,
            "message head is too large",
        ),
        (
            "redirect-loop",
            Reason::UnexpectedStatus,
            "more than 5 redirects",
        ),
        ("tls-stall", Reason::Timeout, "during TLS handshake"),
        ("reset", Reason::ProtocolError, "response body broken"),
        ("non-http", Reason::ProtocolError, "no valid HTTP response"),
        (
            "wrong-name",
            Reason::CertificateInvalid,
            "not valid for the server name",
        ),
        ("silent", Reason::Timeout, "during response headers"),
    ];

    /// Starts one target of each kind, on loopback.
    pub(super) async fn start() -> Hostile {
        let mut servers = HashMap::new();
        servers.insert("slow-headers", slow_headers().await);
        servers.insert("fat-headers", fat_headers().await);
        servers.insert("fat-body", fat_body().await);
        servers.insert("endless-body", endless_body().await);
        servers.insert("trickle-body", trickle_body().await);
        servers.insert("huge-headers", huge_headers().await);
        servers.insert("redirect-loop", redirect_loop().await);
        servers.insert("tls-stall", tls_stall().await);
        servers.insert("reset", reset_mid_body().await);
        servers.insert("non-http", non_http().await);
        // Valid for another name, from a CA the checker trusts (caBundle).
        let pki = TestCa::new();
        let leaf = pki.leaf_valid(&["another.example"], -1, 30);
        servers.insert(
            "wrong-name",
            Server::https("127.0.0.1:0", server_tls(&leaf, BOTH, None), |_| {
                Answer::text("")
            })
            .await,
        );
        servers.insert("silent", silent().await);
        Hostile {
            servers,
            ca_pem: pki.pem,
        }
    }

    /// The referenced values (the CA of "wrong-name", ConfigMap hostile-ca).
    pub(super) fn values(&self) -> Vec<(ValueRef, Vec<u8>)> {
        vec![(
            ValueRef::config_map("hostile-ca", "ca.crt"),
            self.ca_pem.as_bytes().to_vec(),
        )]
    }

    /// The spec lines of a checker of `kind` (timeout in seconds).
    pub(super) fn yaml(&self, kind: &str, timeout: u32) -> String {
        let s = &self.servers[kind];
        let t = format!("timeoutSeconds: {timeout}");
        match kind {
            "redirect-loop" => format!("host: {}\n{t}\nfollowRedirects: true", s.url()),
            "fat-body" => format!(
                "host: {}\n{t}\nbodyMatch: {{regex: 'never-there'}}",
                s.url()
            ),
            "tls-stall" => format!(
                "host: {}\n{t}\ntls: {{insecureSkipVerify: true}}",
                s.https_url()
            ),
            "wrong-name" => format!(
                "host: {}\n{t}\ntls: {{caBundle: {{configMapKeyRef: {{name: hostile-ca, key: ca.crt}}}}}}",
                s.https_url()
            ),
            _ => format!("host: {}\n{t}", s.url()),
        }
    }
}

// ============================================================== the hostile targets

/// Answers one byte a second, never finishing the head.
async fn slow_headers() -> Server {
    Server::raw("127.0.0.1:0", |mut s| async move {
        read_head(&mut s).await;
        for b in b"HTTP/1.1 200 OK\r\nX-Slow: 1111111111111111111111111111111111".iter() {
            if s.write_all(&[*b]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
    .await
}

/// 60 KiB of headers at once (just under the 64 KiB head limit), then a
/// byte a second: the prober holds a nearly full buffer until the deadline.
async fn fat_headers() -> Server {
    Server::raw("127.0.0.1:0", |mut s| async move {
        read_head(&mut s).await;
        let mut head = b"HTTP/1.1 200 OK\r\n".to_vec();
        for i in 0..60 {
            head.extend_from_slice(format!("X-Fat-{i:02}: {}\r\n", "f".repeat(1000)).as_bytes());
        }
        if s.write_all(&head).await.is_err() {
            return;
        }
        for _ in 0..30 {
            if s.write_all(b"X").await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
    .await
}

/// 60 KiB of body at once, then a byte every 100 ms (the checker keeps
/// the body for bodyMatch).
async fn fat_body() -> Server {
    Server::raw("127.0.0.1:0", |mut s| async move {
        read_head(&mut s).await;
        let _ = s
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10000000\r\n\r\n")
            .await;
        if s.write_all(&vec![b'z'; 60 * 1024]).await.is_err() {
            return;
        }
        while s.write_all(b"z").await.is_ok() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
}

/// A fast body that never ends.
async fn endless_body() -> Server {
    Server::raw("127.0.0.1:0", |mut s| async move {
        read_head(&mut s).await;
        let _ = s
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n")
            .await;
        let chunk = vec![b'x'; 16 * 1024];
        while s.write_all(&chunk).await.is_ok() {}
    })
    .await
}

/// A body that never ends, 10 bytes every 100 ms.
async fn trickle_body() -> Server {
    Server::raw("127.0.0.1:0", |mut s| async move {
        read_head(&mut s).await;
        let _ = s
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\n")
            .await;
        while s.write_all(b"0123456789").await.is_ok() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
}

/// 1 MiB of headers.
async fn huge_headers() -> Server {
    Server::raw("127.0.0.1:0", |mut s| async move {
        read_head(&mut s).await;
        let mut head = b"HTTP/1.1 200 OK\r\n".to_vec();
        let mut i = 0;
        while head.len() < 1024 * 1024 {
            head.extend_from_slice(format!("X-Pad-{i}: {}\r\n", "a".repeat(1000)).as_bytes());
            i += 1;
        }
        head.extend_from_slice(b"\r\n");
        let _ = s.write_all(&head).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
    })
    .await
}

/// Redirects to itself, forever.
async fn redirect_loop() -> Server {
    Server::http("127.0.0.1:0", |_| Answer::redirect(302, "/again")).await
}

/// Accepts TCP, never speaks TLS.
async fn tls_stall() -> Server {
    Server::raw("127.0.0.1:0", |s| async move {
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(s);
    })
    .await
}

/// Promises 100 kB, sends 1 kB, then resets the connection.
async fn reset_mid_body() -> Server {
    Server::raw("127.0.0.1:0", |mut s| async move {
        read_head(&mut s).await;
        let _ = s
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
            .await;
        let _ = s.write_all(&[b'y'; 1000]).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        let _ = s.set_zero_linger();
        drop(s);
    })
    .await
}

/// Greets like an SSH server.
async fn non_http() -> Server {
    Server::raw("127.0.0.1:0", |mut s| async move {
        let _ = s.write_all(b"SSH-2.0-OpenSSH_9.6\r\n").await;
        read_head(&mut s).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
    })
    .await
}

/// Reads the request, never answers.
async fn silent() -> Server {
    Server::raw("127.0.0.1:0", |mut s| async move {
        read_head(&mut s).await;
        tokio::time::sleep(Duration::from_secs(30)).await;
    })
    .await
}
