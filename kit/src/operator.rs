//! One operator replica, a real process of the binary cargo built next to
//! the test (or bench) binary.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::{Cluster, dns, eventually, free_port, http_get, http_get_within, operator_bin};

/// One operator replica, a real process.
pub struct Operator {
    pub identity: String,
    pub port: u16,
    /// The listener of other replicas' asks (`--confirm-listen`).
    pub confirm_port: u16,
    pub child: Option<Child>,
    pub log: PathBuf,
    args: Vec<String>,
    /// Environment of the test's choice, on top of the kit's.
    env: Vec<(String, String)>,
    kubeconfig: PathBuf,
    /// Started with `env` alone, as a pod's container (see `spawn_pod`).
    pod: bool,
    /// The address it listens on and advertises to peers.
    pub ip: String,
    /// Runs it inside a network namespace (`ip netns exec <name>`), if any.
    prefix: Vec<String>,
    /// kubectl and the admin's kubeconfig: the kit makes the replica's Pod
    /// object with them (crate::pods).
    admin: (PathBuf, PathBuf),
}

/// The proxy variables of the machine: never passed on (a test that wants a
/// proxy sets its own through `spawn_with_env`).
const PROXY_VARS: &[&str] = &[
    "http_proxy",
    "HTTP_PROXY",
    "https_proxy",
    "HTTPS_PROXY",
    "no_proxy",
    "NO_PROXY",
];

/// Lease timings that keep the tests short; the defaults are 10s/7s/2s.
pub const FAST_LEASES: &[&str] = &[
    "--lease-duration=3s",
    "--renew-deadline=2s",
    "--retry-period=500ms",
];

impl Operator {
    pub fn spawn(cluster: &Cluster, identity: &str, namespace: &str, extra: &[&str]) -> Operator {
        Self::spawn_with_kubeconfig(cluster, identity, namespace, extra, &cluster.kubeconfig)
    }

    /// Same, with environment variables of the test's own (a proxy, ...).
    pub fn spawn_with_env(
        cluster: &Cluster,
        identity: &str,
        namespace: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Operator {
        let mut op = Self::build(cluster, identity, namespace, extra, &cluster.kubeconfig);
        op.env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        op.start();
        op
    }

    /// `spawn`, the process started through `wrapper` (a profiler:
    /// `heaptrack -o FILE`); the child is the wrapper's.
    pub fn spawn_through(
        cluster: &Cluster,
        identity: &str,
        namespace: &str,
        extra: &[&str],
        wrapper: &[String],
    ) -> Operator {
        let mut op = Self::build(cluster, identity, namespace, extra, &cluster.kubeconfig);
        op.prefix = wrapper.to_vec();
        op.start();
        op
    }

    pub fn spawn_with_kubeconfig(
        cluster: &Cluster,
        identity: &str,
        namespace: &str,
        extra: &[&str],
        kubeconfig: &Path,
    ) -> Operator {
        let mut op = Self::build(cluster, identity, namespace, extra, kubeconfig);
        op.start();
        op
    }

    /// A replica with its Leases in `lease_ns` that watches `watch_ns` only
    /// (as a pod of the chart runs), with the credentials of `kubeconfig`.
    pub fn spawn_scoped(
        cluster: &Cluster,
        identity: &str,
        lease_ns: &str,
        watch_ns: &str,
        extra: &[&str],
        kubeconfig: &Path,
    ) -> Operator {
        let mut args = vec![
            format!("--identity={identity}"),
            format!("--namespace={lease_ns}"),
            format!("--watch-namespace={watch_ns}"),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut op = Self::with_args(cluster, identity, args, kubeconfig);
        op.start();
        op
    }

    /// A replica started as a pod's container is: with the environment `env`
    /// and nothing else of the test's (no proxy settings, no RUST_LOG, no
    /// loopback allowance), the credentials of `kubeconfig`, `extra` flags.
    /// Only the listen address (`--listen`, a port of its own) and the kit's
    /// name server (the resolver files) are the kit's; `env` must not set them.
    pub fn spawn_pod(
        cluster: &Cluster,
        identity: &str,
        env: Vec<(String, String)>,
        extra: &[&str],
        kubeconfig: &Path,
    ) -> Operator {
        let args = extra.iter().map(|s| s.to_string()).collect();
        let mut op = Self::with_args(cluster, identity, args, kubeconfig);
        op.env = env;
        op.pod = true;
        op.start();
        op
    }

    fn build(
        cluster: &Cluster,
        identity: &str,
        namespace: &str,
        extra: &[&str],
        kubeconfig: &Path,
    ) -> Operator {
        let mut args: Vec<String> = vec![
            format!("--identity={identity}"),
            format!("--namespace={namespace}"),
            format!("--watch-namespace={namespace}"),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        Self::with_args(cluster, identity, args, kubeconfig)
    }

    fn with_args(
        cluster: &Cluster,
        identity: &str,
        args: Vec<String>,
        kubeconfig: &Path,
    ) -> Operator {
        Operator {
            identity: identity.to_string(),
            port: 0,
            confirm_port: 0,
            child: None,
            log: cluster.dir.join(format!("operator-{identity}.log")),
            args,
            env: Vec::new(),
            kubeconfig: kubeconfig.to_path_buf(),
            pod: false,
            ip: "127.0.0.1".into(),
            prefix: Vec::new(),
            admin: (cluster.bin.join("kubectl"), cluster.kubeconfig.clone()),
        }
    }

    /// A replica listening on `ip` (advertised to peers there), inside
    /// `netns` if given (see crate::netns), with the credentials of
    /// `kubeconfig` (for a namespace, one through a proxy it can reach).
    pub fn spawn_placed(
        cluster: &Cluster,
        identity: &str,
        namespace: &str,
        extra: &[&str],
        kubeconfig: &Path,
        ip: &str,
        netns: Option<&crate::netns::Netns>,
    ) -> Operator {
        let op = Self::build(cluster, identity, namespace, extra, kubeconfig);
        op.placed(ip, netns)
    }

    /// `spawn_placed` of a replica that watches every namespace (its Leases
    /// in `namespace`): for a control plane of the test's own, where no
    /// other test left checkers.
    pub fn spawn_placed_watching_all(
        cluster: &Cluster,
        identity: &str,
        namespace: &str,
        extra: &[&str],
        kubeconfig: &Path,
        ip: &str,
        netns: Option<&crate::netns::Netns>,
    ) -> Operator {
        let mut args = vec![
            format!("--identity={identity}"),
            format!("--namespace={namespace}"),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        Self::with_args(cluster, identity, args, kubeconfig).placed(ip, netns)
    }

    /// Started listening on `ip`, inside `netns` if given.
    fn placed(mut self, ip: &str, netns: Option<&crate::netns::Netns>) -> Operator {
        self.ip = ip.to_string();
        self.prefix = netns.map(|n| n.exec_prefix()).unwrap_or_default();
        self.start();
        self
    }

    fn rust_log(&self) -> String {
        match self
            .args
            .iter()
            .find_map(|a| a.strip_prefix("--log-level="))
        {
            Some(level) => level.to_string(),
            None => "info,webchecker=debug".to_string(),
        }
    }

    /// A replica that watches every namespace (default Lease timings).
    pub fn spawn_all_namespaces(
        cluster: &Cluster,
        identity: &str,
        lease_namespace: &str,
    ) -> Operator {
        Self::spawn_all_namespaces_with(cluster, identity, lease_namespace, &[])
    }

    /// Same, with extra flags.
    pub fn spawn_all_namespaces_with(
        cluster: &Cluster,
        identity: &str,
        lease_namespace: &str,
        extra: &[&str],
    ) -> Operator {
        let mut args = vec![
            format!("--identity={identity}"),
            format!("--namespace={lease_namespace}"),
            "--log-level=info".to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut op = Operator {
            identity: identity.to_string(),
            port: 0,
            confirm_port: 0,
            child: None,
            log: cluster.dir.join(format!("operator-{identity}.log")),
            args,
            env: Vec::new(),
            kubeconfig: cluster.kubeconfig.clone(),
            pod: false,
            ip: "127.0.0.1".into(),
            prefix: Vec::new(),
            admin: (cluster.bin.join("kubectl"), cluster.kubeconfig.clone()),
        };
        op.start();
        op
    }

    /// The value of a flag given as `--flag=value`, else of its variable.
    fn setting(&self, flag: &str, var: &str) -> Option<String> {
        let prefix = format!("--{flag}=");
        self.args
            .iter()
            .find_map(|a| a.strip_prefix(&prefix).map(str::to_string))
            .or_else(|| {
                self.env
                    .iter()
                    .find(|(k, _)| k == var)
                    .map(|(_, v)| v.clone())
            })
    }

    /// The replica's Pod object (crate::pods), as a kubelet's pod has one:
    /// its UID, for the tokens of its asks to be bound to it.
    fn pod_uid(&self) -> Option<String> {
        let namespace = self
            .setting("namespace", "POD_NAMESPACE")
            .unwrap_or_else(|| "default".into());
        let service_account = self
            .setting("service-account", "WEBCHECKER_SERVICE_ACCOUNT")
            .unwrap_or_else(|| "webchecker-operator".into());
        crate::pods::ensure(
            &self.admin,
            &namespace,
            &self.identity,
            &service_account,
            &self.log,
        )
    }

    /// Starts (or restarts) the process with the same identity and flags.
    pub fn start(&mut self) {
        self.port = free_port();
        self.confirm_port = free_port();
        let pod_uid = self.pod_uid();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let bin = operator_bin();
        assert!(
            bin.is_file(),
            "{} missing: cargo builds it for the operator's own tests and for the bench; \
             elsewhere build it (same profile) or set WEBCHECKER_OPERATOR_BIN",
            bin.display()
        );
        let mut cmd = match self.prefix.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        if self.pod {
            cmd.env_clear();
        } else {
            for v in PROXY_VARS {
                cmd.env_remove(v);
            }
            cmd
                // Debug logs (every probe) unless the test chose a level.
                .env("RUST_LOG", self.rust_log())
                .env_remove("POD_NAME")
                .env_remove("POD_NAMESPACE")
                // Test targets listen on loopback, which the operator denies by
                // default; a test that wants the default passes --allow-loopback=false.
                .env("WEBCHECKER_ALLOW_LOOPBACK", "true");
        }
        let child = cmd
            .env("KUBECONFIG", &self.kubeconfig)
            // Names resolve through the test's own name server, never the machine's.
            .envs(dns::Dns::shared().operator_env())
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .envs(pod_uid.map(|uid| ("POD_UID", uid)))
            .args(&self.args)
            .arg(format!("--listen={}:{}", self.ip, self.port))
            .arg(format!(
                "--confirm-listen={}:{}",
                self.ip, self.confirm_port
            ))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start the operator");
        self.child = Some(child);
    }

    pub fn live(&self) -> bool {
        self.child.is_some()
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("running").id() as i32
    }

    pub fn signal(&self, sig: i32) {
        unsafe {
            libc::kill(self.pid(), sig);
        }
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM, then waits for a clean exit.
    pub fn terminate(&mut self, timeout: Duration) -> std::process::ExitStatus {
        self.signal(libc::SIGTERM);
        let mut c = self.child.take().unwrap();
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = c.try_wait().unwrap() {
                return st;
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                panic!(
                    "{} did not exit within {timeout:?} of SIGTERM",
                    self.identity
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    pub async fn get(&self, path: &str) -> Option<(u16, String)> {
        http_get(&format!("{}:{}", self.ip, self.port), path).await
    }

    /// `get` with its own deadline (a large /metrics on a loaded machine).
    pub async fn get_within(&self, path: &str, limit: Duration) -> Option<(u16, String)> {
        http_get_within(&format!("{}:{}", self.ip, self.port), path, limit).await
    }

    pub async fn metrics(&self) -> Option<String> {
        self.get("/metrics").await.map(|(_, b)| b)
    }

    /// /metrics, waiting up to 10 s for the endpoint to answer.
    pub async fn scrape(&self) -> String {
        eventually(
            Duration::from_secs(10),
            &format!("metrics of {}", self.identity),
            || self.metrics(),
        )
        .await
    }

    pub async fn wait_ready(&self, timeout: Duration) {
        eventually(timeout, &format!("{} ready", self.identity), || async {
            match self.get("/readyz").await {
                Some((200, _)) => Some(()),
                _ => None,
            }
        })
        .await
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            unsafe {
                libc::kill(c.id() as i32, libc::SIGCONT);
            }
        }
        self.kill();
        // A test fails when a user was shown what only the operator's
        // admin should read (crate::messages).
        let found = crate::messages::take_found();
        if !found.is_empty() && !std::thread::panicking() {
            panic!(
                "{} status or Event messages a user may not be shown (at most {} characters, no debug formatting):\n{}",
                found.len(),
                crate::messages::MAX_MESSAGE,
                found.join("\n")
            );
        }
    }
}
