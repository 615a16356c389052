//! `make demo`'s checkers (examples/demo.yaml) against its own targets
//! (hack/demo-targets.py), and the seed's manifests (examples/seed/), both
//! as committed.

use std::process::Command;

use super::*;

/// hack/demo-targets.py, a process group of its own, killed on drop.
struct DemoTargets {
    child: std::process::Child,
    dir: PathBuf,
}

impl DemoTargets {
    /// Starts it; returns once its three ports accept connections.
    fn start() -> DemoTargets {
        let dir = cluster()
            .dir
            .join(format!("demo-targets-{}", rand_suffix()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut cmd = Command::new("python3");
        cmd.arg(repo().join("hack/demo-targets.py"));
        let mut t = DemoTargets {
            child: spawn_reaped(cmd, &dir, "targets.log").unwrap(),
            dir,
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        for port in [18080, 18081, 18082] {
            let addr = std::net::SocketAddr::from((Ipv4Addr::LOCALHOST, port));
            while std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
                let log = std::fs::read_to_string(t.dir.join("targets.log")).unwrap_or_default();
                assert!(
                    t.child.try_wait().unwrap().is_none() && std::time::Instant::now() < deadline,
                    "hack/demo-targets.py does not listen on {addr} (ports 18080-18082 taken \
                     by a `make demo`?):\n{log}"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        t
    }
}

impl Drop for DemoTargets {
    fn drop(&mut self) {
        kill_group(&mut self.child);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// demo.yaml's five checkers each reach the verdict its name says (the
/// healthy and body-checked targets Ready=True; a 503, a 1.5 s answer under
/// a 1 s timeout and a closed port Ready=False with their reasons), and the
/// seed's two public names, which nothing here resolves, Ready=False with
/// DNSError.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_and_the_seed_manifests() {
    let (ns, api) = world("ex-demo").await;
    let _targets = tokio::task::spawn_blocking(DemoTargets::start)
        .await
        .unwrap();
    let _op = operator(&ns, &format!("op-{ns}"), &[]).await;
    apply_example(&ns, "demo.yaml").await;
    apply_example(&ns, "seed/").await;
    for (name, want) in [
        ("healthy", ("Ready", "True", "ProbeSucceeded")),
        ("body-check", ("Ready", "True", "ProbeSucceeded")),
        ("failing", ("Ready", "False", "UnexpectedStatus")),
        ("slow", ("Ready", "False", "Timeout")),
        ("nothing-listens", ("Ready", "False", "ConnectError")),
        ("badnews", ("Ready", "False", "DNSError")),
        ("flant", ("Ready", "False", "DNSError")),
    ] {
        wait_condition(&api, name, want, FIRST).await;
    }
    show(&ns).await;
    // The README's table: the healthy checker's objective, its budget whole.
    let table = kubectl(&["get", "wc", "-n", &ns, "-o", "wide"]).await;
    let row = table.lines().find(|l| l.starts_with("healthy "));
    assert!(
        row.is_some_and(|r| r.contains("100% (43m of 43m)")),
        "{table}"
    );
}
