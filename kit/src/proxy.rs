//! A plain TCP proxy in front of the API server (the TLS-terminating one of
//! the fault campaign is faults::FaultProxy).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// A TCP proxy in front of the API server that a test can cut and restore,
/// to cut one replica off while the others still reach the API server.
pub struct TcpProxy {
    pub kubeconfig: PathBuf,
    cut: Arc<std::sync::atomic::AtomicBool>,
    conns: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl TcpProxy {
    pub async fn start(kubeconfig: &Path) -> TcpProxy {
        Self::start_on(kubeconfig, "127.0.0.1").await
    }

    /// A proxy listening on `ip` (a network namespace's way to the host,
    /// crate::netns); its kubeconfig names the API server's certificate name.
    pub async fn start_on(kubeconfig: &Path, ip: &str) -> TcpProxy {
        let text = std::fs::read_to_string(kubeconfig).unwrap();
        let upstream = crate::kubeconfig_server(&text)
            .trim_start_matches("https://")
            .to_string();
        let listener = crate::listener_on(ip).await;
        let port = listener.local_addr().unwrap().port();
        let path = kubeconfig.with_file_name(format!("kubeconfig-proxy-{port}"));
        crate::redirect_kubeconfig(kubeconfig, port, &path);
        if ip != "127.0.0.1" {
            let text = std::fs::read_to_string(&path).unwrap();
            let server = crate::kubeconfig_server(&text);
            let line = text
                .lines()
                .find(|l| l.trim_start().starts_with("server: "))
                .unwrap()
                .to_string();
            let indent = &line[..line.len() - line.trim_start().len()];
            let moved = text.replace(
                &line,
                &format!(
                    "{}\n{indent}tls-server-name: localhost",
                    line.replace(&server, &format!("https://{ip}:{port}"))
                ),
            );
            std::fs::write(&path, moved).unwrap();
        }
        let cut = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::new(Mutex::new(Vec::new()));
        let (c2, k2) = (cut.clone(), conns.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                if c2.load(std::sync::atomic::Ordering::SeqCst) {
                    drop(inbound);
                    continue;
                }
                let upstream = upstream.clone();
                let task = tokio::spawn(async move {
                    if let Ok(mut out) = tokio::net::TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                    }
                });
                k2.lock().unwrap().push(task.abort_handle());
            }
        });
        TcpProxy {
            kubeconfig: path,
            cut,
            conns,
        }
    }

    /// Drops every connection and refuses new ones.
    pub fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        for c in self.conns.lock().unwrap().drain(..) {
            c.abort();
        }
    }

    pub fn restore(&self) {
        self.cut.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}
