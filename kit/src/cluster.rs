//! The control plane of one test binary (or of the bench): hack/cluster.sh,
//! the same code path as `make cluster-up`, with the CRD installed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};

use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::{SETUP_LIMIT, TOOL_LIMIT, bounded, repo};

pub struct Cluster {
    pub dir: PathBuf,
    pub kubeconfig: PathBuf,
    pub bin: PathBuf,
}

static SHARED: OnceLock<Cluster> = OnceLock::new();

impl Cluster {
    /// The control plane shared by the tests of one test binary. Started once,
    /// stopped by a reaper when the test process exits.
    pub fn shared(name: &str) -> &'static Cluster {
        SHARED.get_or_init(|| Cluster::start(name))
    }

    /// A control plane of one's own (for tests that stop the API server).
    pub fn start(name: &str) -> Cluster {
        Self::start_with(name, "")
    }

    /// Same, with extra kube-apiserver flags (space separated).
    pub fn start_with(name: &str, apiserver_args: &str) -> Cluster {
        let c = Self::start_bare(name, apiserver_args);
        c.install_crd();
        c
    }

    /// A control plane of one's own without the WebChecker CRD (a test that
    /// lets helm install it).
    pub fn start_bare(name: &str, apiserver_args: &str) -> Cluster {
        let dir = repo()
            .join("target")
            .join("e2e")
            .join(format!("{name}-{}", std::process::id()));
        Self::up(dir, apiserver_args)
    }

    /// A control plane with its state in `dir` (the bench's work directory).
    pub fn start_in(dir: PathBuf, apiserver_args: &str) -> Cluster {
        let c = Self::up(dir, apiserver_args);
        c.install_crd();
        c
    }

    fn up(dir: PathBuf, apiserver_args: &str) -> Cluster {
        std::fs::create_dir_all(&dir).unwrap();
        let out = bounded("bash", SETUP_LIMIT)
            .arg(repo().join("hack/cluster.sh"))
            .arg("up")
            .arg(&dir)
            .env("CLUSTER_APISERVER_EXTRA_ARGS", apiserver_args)
            .stderr(Stdio::inherit())
            .output()
            .expect("run hack/cluster.sh");
        assert!(out.status.success(), "hack/cluster.sh up failed");
        let kubeconfig = PathBuf::from(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .last()
                .unwrap()
                .trim(),
        );
        let env = std::fs::read_to_string(dir.join("cluster.env")).unwrap();
        let bin = env
            .lines()
            .find_map(|l| {
                l.strip_prefix("BIN=")
                    .or_else(|| l.strip_prefix("export BIN="))
            })
            .map(|v| PathBuf::from(v.trim_matches(|c| c == '"' || c == '\'')))
            .expect("BIN in cluster.env");
        // Reaper: take the control plane down when this test process exits.
        crate::reap_at_exit(&repo().join("hack/cluster.sh"), &dir);
        // What users read, checked for every test that runs here.
        crate::messages::watch_cluster(kubeconfig.clone());
        Cluster {
            dir,
            kubeconfig,
            bin,
        }
    }

    /// Takes the control plane down now (the reaper would at exit).
    pub fn down(&self) {
        let _ = bounded("bash", TOOL_LIMIT)
            .arg(repo().join("hack/cluster.sh"))
            .arg("down")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }

    pub fn script(&self, sub: &str) {
        let st = bounded("bash", TOOL_LIMIT)
            .arg(repo().join("hack/cluster.sh"))
            .arg(sub)
            .arg(&self.dir)
            .status()
            .unwrap();
        assert!(st.success(), "hack/cluster.sh {sub} failed");
    }

    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_as(&self.kubeconfig, args)
            .output()
            .expect("run kubectl")
    }

    /// A kubectl command of this cluster with the credentials of `kubeconfig`.
    pub fn kubectl_as(&self, kubeconfig: &Path, args: &[&str]) -> Command {
        let mut c = bounded(self.bin.join("kubectl"), TOOL_LIMIT);
        c.env("KUBECONFIG", kubeconfig).args(args);
        c
    }

    pub fn kubectl_stdin(&self, args: &[&str], input: &str) -> Output {
        output_with_stdin(self.kubectl_as(&self.kubeconfig, args), input)
    }

    /// `kubectl` off the async worker threads (the witnesses share them).
    pub async fn kubectl_async(&self, args: &[&str]) -> Output {
        let mut c = self.kubectl_as(&self.kubeconfig, args);
        tokio::task::spawn_blocking(move || c.output().expect("run kubectl"))
            .await
            .unwrap()
    }

    /// `kubectl_stdin` off the async worker threads.
    pub async fn kubectl_stdin_async(&self, args: &[&str], input: &str) -> Output {
        let (c, input) = (self.kubectl_as(&self.kubeconfig, args), input.to_string());
        tokio::task::spawn_blocking(move || output_with_stdin(c, &input))
            .await
            .unwrap()
    }

    /// `kubectl apply -n <ns> -f -` of `yaml`, off the async worker threads.
    pub async fn apply(&self, ns: &str, yaml: &str) -> Output {
        self.kubectl_stdin_async(&["apply", "-n", ns, "-f", "-"], yaml)
            .await
    }

    /// The operator's CRDs: WebChecker and WebCheckerMaintenance.
    pub fn install_crd(&self) {
        self.install_crds(
            &repo().join("crds"),
            &[
                "webcheckers.test.network.io",
                "webcheckermaintenances.test.network.io",
            ],
        );
    }

    /// Applies the CRDs of `path` (a file or a directory) server-side and
    /// waits until each of `names` is Established.
    pub fn install_crds(&self, path: &Path, names: &[&str]) {
        let out = self.kubectl(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            path.to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "installing the CRDs of {}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        for name in names {
            self.wait_established(name);
        }
    }

    /// [`Cluster::install_crds`] once per control plane, `path` and process.
    pub fn install_crds_once(&self, path: &Path, names: &[&str]) {
        static DONE: Mutex<Vec<(PathBuf, PathBuf)>> = Mutex::new(Vec::new());
        let mut done = DONE.lock().unwrap_or_else(|p| p.into_inner());
        let key = (self.kubeconfig.clone(), path.to_path_buf());
        if !done.contains(&key) {
            self.install_crds(path, names);
            done.push(key);
        }
    }

    /// Waits (60 s at most) until the CRD `name` is Established. `kubectl
    /// wait --for=condition` fails at once instead of waiting when it reads
    /// the CRD before the API server has given it any condition
    /// (`.status.conditions accessor error: <nil>`, kubernetes#66439): that
    /// failure is asked again.
    pub fn wait_established(&self, name: &str) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let out = self.kubectl(&[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                &format!("crd/{name}"),
            ]);
            let stderr = String::from_utf8_lossy(&out.stderr);
            if out.status.success() {
                return;
            }
            assert!(
                stderr.contains("accessor error") && std::time::Instant::now() < deadline,
                "kubectl wait for crd/{name} Established: {stderr}"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    pub async fn client(&self) -> Client {
        let kc = Kubeconfig::read_from(&self.kubeconfig).unwrap();
        let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .unwrap();
        Client::try_from(cfg).unwrap()
    }

    /// A fresh namespace (never deleted: there is no namespace controller).
    pub fn namespace(&self, prefix: &str) -> String {
        let ns = format!("{prefix}-{}", rand_suffix());
        let out = self.kubectl(&["create", "namespace", &ns]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The replicas' ServiceAccount, as the chart makes it: replicas run
        // as processes (with the admin's credentials) make the tokens of
        // their confirmation asks for it.
        let out = self.kubectl(&["-n", &ns, "create", "serviceaccount", "webchecker-operator"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        ns
    }
}

/// A kubectl answer that must be a refusal whose message holds `want`: its
/// stderr. `case` names the manifest in the report and the failure.
pub fn assert_refused(out: &Output, case: &str, want: &str) -> String {
    let err = crate::release::text(&out.stderr);
    println!("{case}: {}", err.trim());
    assert!(
        !out.status.success(),
        "{case} was accepted: {}",
        crate::release::text(&out.stdout)
    );
    assert!(err.contains(want), "{case}: expected {want:?} in {err}");
    err
}

/// Runs `cmd` with `input` on its stdin; its output.
pub fn output_with_stdin(mut cmd: Command, input: &str) -> Output {
    use std::io::Write;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run command");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// The API server URL of a kubeconfig (its `server:`).
pub fn kubeconfig_server(kubeconfig_text: &str) -> String {
    kubeconfig_text
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .expect("server in kubeconfig")
        .trim()
        .to_string()
}

/// Writes at `to` the kubeconfig `from` with its server moved to
/// https://127.0.0.1:`port` (a proxy, or a port where nothing listens).
pub fn redirect_kubeconfig(from: &Path, port: u16, to: &Path) {
    let text = std::fs::read_to_string(from).unwrap();
    let server = kubeconfig_server(&text);
    std::fs::write(
        to,
        text.replace(&server, &format!("https://127.0.0.1:{port}")),
    )
    .unwrap();
}

pub fn rand_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{:x}{}", t & 0xfffff, N.fetch_add(1, Ordering::Relaxed))
}
