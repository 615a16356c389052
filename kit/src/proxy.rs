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
        let text = std::fs::read_to_string(kubeconfig).unwrap();
        let upstream = crate::kubeconfig_server(&text)
            .trim_start_matches("https://")
            .to_string();
        let listener = crate::listener().await;
        let port = listener.local_addr().unwrap().port();
        let path = kubeconfig.with_file_name(format!("kubeconfig-proxy-{port}"));
        crate::redirect_kubeconfig(kubeconfig, port, &path);
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
