//! Pod objects for the replicas the kit runs as processes. A replica asks
//! its peers with a token bound to its pod (TokenRequest with a
//! boundObjectRef, which needs a Pod of that name and UID), and peers
//! accept only such tokens (crate docs/security.md). No kubelet runs these
//! pods: each is created with a scheduling gate, so a scheduler (the real
//! node's tests run one) never places it, and it stays Pending while its
//! process plays its container. Its UID goes to the process as `POD_UID`.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;

use crate::{TOOL_LIMIT, bounded};

/// UIDs of the pods made so far, by kubeconfig, namespace and name: a
/// restarted replica keeps its pod.
static MADE: Mutex<Option<HashMap<PodKey, String>>> = Mutex::new(None);

/// The admin's kubeconfig, the pod's namespace and name.
type PodKey = (PathBuf, String, String);

fn manifest(namespace: &str, name: &str, service_account: &str) -> String {
    format!(
        r#"{{"apiVersion": "v1", "kind": "Pod",
  "metadata": {{"name": "{name}", "namespace": "{namespace}",
    "labels": {{"webchecker.test.network.io/kit": "process"}}}},
  "spec": {{"serviceAccountName": "{service_account}", "automountServiceAccountToken": false,
    "schedulingGates": [{{"name": "webchecker.test.network.io/process"}}],
    "containers": [{{"name": "operator", "image": "webchecker-operator:process"}}]}}}}"#
    )
}

fn kubectl(admin: &(PathBuf, PathBuf), args: &[&str], input: Option<&str>) -> Option<String> {
    let mut cmd = bounded(&admin.0, TOOL_LIMIT);
    cmd.env("KUBECONFIG", &admin.1)
        .args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().ok()?;
    if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
        let _ = stdin.write_all(text.as_bytes());
    }
    let out = child.wait_with_output().ok()?;
    let uid = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !uid.is_empty()).then_some(uid)
}

/// The UID of the Pod `name` in `namespace` running as `service_account`,
/// made now if it does not exist; `None` when it cannot be made (no such
/// ServiceAccount, no API server), said in `log`: the replica then asks
/// with an unbound token, which its peers refuse.
pub fn ensure(
    admin: &(PathBuf, PathBuf),
    namespace: &str,
    name: &str,
    service_account: &str,
    log: &Path,
) -> Option<String> {
    let key = (admin.1.clone(), namespace.to_string(), name.to_string());
    if let Some(uid) = MADE
        .lock()
        .unwrap()
        .get_or_insert_with(HashMap::new)
        .get(&key)
    {
        return Some(uid.clone());
    }
    let uid_path = ["-o", "jsonpath={.metadata.uid}"];
    let created = kubectl(
        admin,
        &["create", "-f", "-", uid_path[0], uid_path[1]],
        Some(&manifest(namespace, name, service_account)),
    );
    let uid = created.or_else(|| {
        kubectl(
            admin,
            &[
                "-n",
                namespace,
                "get",
                "pod",
                name,
                uid_path[0],
                uid_path[1],
            ],
            None,
        )
    });
    match &uid {
        Some(uid) => {
            MADE.lock()
                .unwrap()
                .get_or_insert_with(HashMap::new)
                .insert(key, uid.clone());
        }
        None => {
            if let Ok(mut f) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
            {
                let _ = writeln!(
                    f,
                    "kit: no Pod object {namespace}/{name} (ServiceAccount {service_account} missing?): this replica's asks carry an unbound token"
                );
            }
        }
    }
    uid
}
