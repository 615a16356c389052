//! A hostile pod on the replicas' network: it sends asks to their confirm
//! listeners (`POST /confirm`) from an address of its own, with made-up
//! tokens or real ones it should not be able to use, floods them, and
//! uploads bodies it never finishes. Real TCP from a real address, as a pod
//! of the cluster would (crate::netns gives the address).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::Cluster;

/// The audience of the replicas' asks.
pub const AUDIENCE: &str = "webchecker-operator.test.network.io/confirm";

/// A token that says all the right things and is signed by nobody: our
/// audience, the replicas' ServiceAccount in `namespace`, bound to pod
/// `from`, valid for an hour. Each is different (`salt`).
pub fn made_up_token(namespace: &str, from: &str, salt: u64) -> String {
    let now = chrono::Utc::now().timestamp();
    let claims = json!({
        "aud": [AUDIENCE], "exp": now + 3600, "iat": now, "nbf": now, "jti": salt,
        "iss": "https://kubernetes.default.svc.cluster.local",
        "sub": format!("system:serviceaccount:{namespace}:webchecker-operator"),
        "kubernetes.io": {"namespace": namespace,
            "pod": {"name": from, "uid": "00000000-0000-4000-8000-000000000000"},
            "serviceaccount": {"name": "webchecker-operator", "uid": "00000000-0000-4000-8000-000000000001"}},
    });
    let header = B64URL.encode(br#"{"alg":"RS256","kid":"made-up"}"#);
    let payload = B64URL.encode(serde_json::to_vec(&claims).unwrap());
    let signature = B64URL.encode([salt as u8; 256]);
    format!("{header}.{payload}.{signature}")
}

/// A real token of ServiceAccount `sa` in `namespace` for `audience`,
/// bound to pod `pod` when given (TokenRequest, through kubectl).
pub fn real_token(
    cluster: &Cluster,
    namespace: &str,
    sa: &str,
    audience: &str,
    pod: Option<&str>,
) -> String {
    let mut args = vec![
        "create".to_string(),
        "token".into(),
        sa.into(),
        "-n".into(),
        namespace.into(),
        format!("--audience={audience}"),
        "--duration=1h".into(),
    ];
    if let Some(pod) = pod {
        args.extend([
            "--bound-object-kind=Pod".into(),
            format!("--bound-object-name={pod}"),
        ]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = cluster.kubectl(&args);
    assert!(
        out.status.success(),
        "kubectl create token: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// TokenReviews the API server served so far (its own metrics).
pub async fn token_reviews(cluster: &Cluster) -> f64 {
    let out = cluster.kubectl_async(&["get", "--raw", "/metrics"]).await;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| {
            l.starts_with("apiserver_request_total{")
                && l.contains("resource=\"tokenreviews\"")
                && l.contains("verb=\"POST\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// An ask as a replica sends it.
pub fn ask(from: &str, namespace: &str, name: &str, uid: &str, generation: i64) -> Value {
    json!({"from": from, "namespace": namespace, "name": name, "uid": uid,
        "generation": generation, "purpose": "Confirm", "waitMillis": 10_000})
}

/// A pod at `source`.
#[derive(Clone, Copy, Debug)]
pub struct Intruder {
    pub source: IpAddr,
}

impl Intruder {
    async fn connect(&self, target: SocketAddr) -> std::io::Result<TcpStream> {
        let socket = match self.source {
            IpAddr::V4(_) => TcpSocket::new_v4()?,
            IpAddr::V6(_) => TcpSocket::new_v6()?,
        };
        socket.bind(SocketAddr::new(self.source, 0))?;
        socket.connect(target).await
    }

    /// Sends `ask` with `token` to `target`'s confirm listener: the status
    /// and body of the answer (0 and the error when there was none).
    pub async fn ask(&self, target: SocketAddr, token: &str, ask: &Value) -> (u16, String) {
        let body = serde_json::to_vec(ask).unwrap();
        let head = format!(
            "POST /confirm HTTP/1.1\r\nhost: {target}\r\nconnection: close\r\ncontent-type: application/json\r\nauthorization: Bearer {token}\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        let exchange = async {
            let mut s = self.connect(target).await?;
            s.write_all(head.as_bytes()).await?;
            s.write_all(&body).await?;
            let mut out = Vec::new();
            s.read_to_end(&mut out).await?;
            Ok::<_, std::io::Error>(out)
        };
        match tokio::time::timeout(Duration::from_secs(20), exchange).await {
            Ok(Ok(out)) => {
                let text = String::from_utf8_lossy(&out).to_string();
                let status = text
                    .split(' ')
                    .nth(1)
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                let body = text.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
                (status, body)
            }
            Ok(Err(e)) => (0, e.to_string()),
            Err(_) => (0, "no answer in 20 s".into()),
        }
    }

    /// Sends `per_second` asks a second to each of `targets`, each with a
    /// new made-up token (as from a member of `namespace`, named in turn
    /// from `members`), until dropped. Counts answers by status.
    pub fn flood(
        self,
        targets: Vec<SocketAddr>,
        per_second: u32,
        namespace: String,
        members: Vec<String>,
        checker: (String, String, String),
    ) -> Flood {
        let stats = Arc::new(FloodStats::default());
        let counted = stats.clone();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1) / per_second.max(1));
            let mut n = 0u64;
            loop {
                tick.tick().await;
                for target in &targets {
                    n += 1;
                    let from = &members[n as usize % members.len()];
                    let token = made_up_token(&namespace, from, n);
                    let a = ask(from, &checker.0, &checker.1, &checker.2, 1);
                    let stats = counted.clone();
                    let target = *target;
                    tokio::spawn(async move {
                        let (status, _) = self.ask(target, &token, &a).await;
                        stats.record(status);
                    });
                }
            }
        });
        Flood { task, stats }
    }

    /// Opens `n` connections to `target`, each sending the head of a
    /// `POST /confirm` with a body of `size` bytes and then the body but
    /// its last byte, and holds them: what is left open is returned.
    pub async fn stall(&self, target: SocketAddr, n: usize, size: usize) -> Vec<TcpStream> {
        let head = format!(
            "POST /confirm HTTP/1.1\r\nhost: {target}\r\ncontent-type: application/json\r\ncontent-length: {size}\r\n\r\n"
        );
        let uploads = (0..n).map(|_| {
            let head = head.clone();
            async move {
                let mut s = self.connect(target).await.ok()?;
                s.write_all(head.as_bytes()).await.ok()?;
                let chunk = vec![b' '; 64 * 1024];
                let mut left = size - 1;
                while left > 0 {
                    let k = left.min(chunk.len());
                    // The replica may close at once: what it refuses to
                    // read is no cost of its own.
                    if tokio::time::timeout(Duration::from_secs(5), s.write_all(&chunk[..k]))
                        .await
                        .map_or(true, |r| r.is_err())
                    {
                        break;
                    }
                    left -= k;
                }
                Some(s)
            }
        });
        futures::future::join_all(uploads)
            .await
            .into_iter()
            .flatten()
            .collect()
    }
}

/// Answers to a flood, by kind.
#[derive(Default)]
pub struct FloodStats {
    pub sent: AtomicU64,
    /// 200: a reply (a refusal, the asker not accepted).
    pub answered: AtomicU64,
    /// 503 and the like: busy.
    pub busy: AtomicU64,
    /// No HTTP answer (connection refused or closed).
    pub closed: AtomicU64,
}

impl FloodStats {
    fn record(&self, status: u16) {
        self.sent.fetch_add(1, Ordering::Relaxed);
        let counter = match status {
            200 => &self.answered,
            0 => &self.closed,
            _ => &self.busy,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// A flood under way; stops when dropped.
pub struct Flood {
    task: tokio::task::JoinHandle<()>,
    pub stats: Arc<FloodStats>,
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.task.abort();
    }
}
