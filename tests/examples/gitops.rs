//! Flux and Argo CD: how each judges real WebCheckers read from the API
//! server, in the states a GitOps tool meets (Ready True, Ready False,
//! suspended, no status yet, a spec the operator has not seen).

use std::collections::BTreeMap;

use support::targets::{Answer, RecordingTarget};

use super::*;

/// The checkers of the two namespaces, as one `kubectl get -o json` List:
/// the objects the GitOps tools would read.
async fn checkers_json(namespaces: &[&str]) -> serde_json::Value {
    let mut items = Vec::new();
    for ns in namespaces {
        let out = kubectl(&["get", "webcheckers.test.network.io", "-n", ns, "-o", "json"]).await;
        let list: serde_json::Value = serde_json::from_str(&out).unwrap();
        items.extend(list["items"].as_array().unwrap().iter().cloned());
    }
    serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items})
}

/// Checkers in each state: up (Ready=True), down (Ready=False), paused
/// (suspended), stale (its spec changed while no operator ran), and fresh
/// (in a namespace no operator watches: no status). Returns the List.
async fn checkers_in_every_state() -> serde_json::Value {
    let ns = cluster().namespace("ex-gitops");
    let quiet = cluster().namespace("ex-gitops-unwatched");
    let client = cluster().client().await;
    let api: Api<WebChecker> = Api::namespaced(client, &ns);
    let target = RecordingTarget::http(|_| Answer::ok()).await;
    let nothing = free_port();
    let op = operator(&ns, &format!("op-{ns}"), &[]).await;
    let up = target.url();
    let manifests = [
        ("up", format!("host: {up}")),
        ("down", format!("host: http://127.0.0.1:{nothing}")),
        ("paused", format!("host: {up}\nsuspend: true")),
        ("stale", format!("host: {up}")),
    ];
    for (name, spec) in &manifests {
        let out = cluster().apply(&ns, &checker_manifest(name, spec)).await;
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    for (name, want) in [
        ("up", ("Ready", "True", "ProbeSucceeded")),
        ("down", ("Ready", "False", "ConnectError")),
        ("paused", ("Ready", "Unknown", "Suspended")),
        ("stale", ("Ready", "True", "ProbeSucceeded")),
    ] {
        wait_condition(&api, name, want, FIRST).await;
    }
    let out = cluster()
        .apply(&quiet, &checker_manifest("fresh", &format!("host: {up}")))
        .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    // No operator sees what follows: stale's generation moves past its
    // status.observedGeneration.
    drop(op);
    let patch = r#"{"spec":{"path":"/v2"}}"#;
    kubectl(&[
        "patch",
        "wc",
        "stale",
        "-n",
        &ns,
        "--type=merge",
        "-p",
        patch,
    ])
    .await;
    let list = checkers_json(&[&ns, &quiet]).await;
    for item in list["items"].as_array().unwrap() {
        println!(
            "{}: generation {}, status {}",
            item["metadata"]["name"],
            item["metadata"]["generation"],
            serde_json::to_string(&item["status"]).unwrap()
        );
    }
    list
}

/// A program's output for `input` on its stdin, which must succeed.
async fn output(cmd: std::process::Command, input: String, what: &str) -> String {
    let out = tokio::task::spawn_blocking(move || output_with_stdin(cmd, &input))
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{what}: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// flux-kustomization.yaml applied against kustomize-controller's own
/// Kustomization CRD; then, on the same objects, what Flux decides: plain
/// kstatus (upstream and Flux's fork) and Flux's evaluator of the example's
/// healthCheckExprs. argocd-health-check.yaml patched into an argocd-cm that
/// has a key of its own (kept), applied, and its script, read back from the
/// API server, run by Lua 5.1 on each object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flux_and_argo_cd_judge_real_checkers() {
    let list = checkers_in_every_state().await;
    flux(&list).await;
    argo_cd(&list).await;
}

async fn flux(list: &serde_json::Value) {
    let dir = tokio::task::spawn_blocking(|| {
        script_dir(
            "build-flux-health.sh",
            "Go >= the GO_MIN_VERSION of hack/versions.env and the Go module proxy",
        )
    })
    .await
    .unwrap();
    let crd = dir.join("crd/kustomize.toolkit.fluxcd.io_kustomizations.yaml");
    let crd = crd.to_str().unwrap();
    kubectl(&["apply", "--server-side", "-f", crd]).await;
    tokio::task::spawn_blocking(|| {
        cluster().wait_established("kustomizations.kustomize.toolkit.fluxcd.io")
    })
    .await
    .unwrap();
    kubectl(&["create", "namespace", "flux-system"]).await;
    apply_example("flux-system", "flux-kustomization.yaml").await;

    let mut cmd = bounded(dir.join("bin/flux-health"), TOOL_LIMIT);
    cmd.arg(example("flux-kustomization.yaml"));
    let out = output(cmd, list.to_string(), "flux-health").await;
    let verdicts: BTreeMap<String, serde_json::Value> = out
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (v["name"].as_str().unwrap().to_string(), v)
        })
        .collect();
    println!("Flux: {}", out.trim_end());
    // name, kstatus, Flux's healthCheckExprs. kstatus reads Ready and
    // observedGeneration, but calls a checker without status Current: the
    // example's expression cannot be evaluated there, and Flux waits.
    for (name, kstatus, exprs) in [
        ("up", "Current", "Current"),
        ("down", "InProgress", "InProgress"),
        ("paused", "InProgress", "InProgress"),
        ("stale", "InProgress", "InProgress"),
        ("fresh", "Current", "error"),
    ] {
        let v = &verdicts[name];
        assert_eq!(v["kstatus"], kstatus, "{name}: kstatus: {v}");
        assert_eq!(v["fluxKstatus"], kstatus, "{name}: Flux's kstatus: {v}");
        let e = v["exprs"].as_str().unwrap();
        assert!(
            e == exprs || (exprs == "error" && e.starts_with("error: ")),
            "{name}: healthCheckExprs: {v}"
        );
    }
}

async fn argo_cd(list: &serde_json::Value) {
    kubectl(&["create", "namespace", "argocd"]).await;
    let url = "--from-literal=url=https://argocd.example.com";
    kubectl(&["create", "configmap", "argocd-cm", "-n", "argocd", url]).await;
    let file = example("argocd-health-check.yaml");
    let patch = [
        "-n",
        "argocd",
        "patch",
        "configmap",
        "argocd-cm",
        "--patch-file",
    ];
    let mut args = patch.to_vec();
    args.push(file.to_str().unwrap());
    kubectl(&args).await;
    apply_example("argocd", "argocd-health-check.yaml").await;
    let cm = kubectl(&[
        "get",
        "configmap",
        "argocd-cm",
        "-n",
        "argocd",
        "-o",
        "json",
    ])
    .await;
    let cm: serde_json::Value = serde_json::from_str(&cm).unwrap();
    assert_eq!(cm["data"]["url"], "https://argocd.example.com", "{cm}");
    let key = "resource.customizations.health.test.network.io_WebChecker";
    let script = cm["data"][key].as_str().expect("the health script");
    let dir = cluster().dir.join(format!("argocd-{}", rand_suffix()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("health.lua"), script).unwrap();

    for (name, status, message) in [
        ("up", "Healthy", "ProbeSucceeded: "),
        ("down", "Degraded", "ConnectError: "),
        ("paused", "Suspended", "Suspended: "),
        (
            "stale",
            "Progressing",
            "Waiting for the operator to probe generation 2",
        ),
        ("fresh", "Progressing", "Waiting for the first probe"),
    ] {
        let obj = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["metadata"]["name"] == name)
            .unwrap();
        let (got, said) = health(&dir, name, obj).await;
        println!("Argo CD: {name}: {got}: {said}");
        assert_eq!(got, status, "{name}: {said}");
        assert!(said.starts_with(message), "{name}: {said}");
    }
}

/// Argo CD's verdict on `obj`: its health script with `obj` set as Argo
/// sets it (a global table of the object), run by Lua 5.1.
async fn health(dir: &std::path::Path, name: &str, obj: &serde_json::Value) -> (String, String) {
    let harness = dir.join(format!("{name}.lua"));
    std::fs::write(
        &harness,
        format!(
            "obj = {}\nlocal hs = dofile({})\nio.write(hs.status, \"\\n\", hs.message or \"\", \"\\n\")\n",
            lua(obj),
            lua_string(dir.join("health.lua").to_str().unwrap())
        ),
    )
    .unwrap();
    let lua = "/usr/bin/lua5.1";
    assert!(
        std::path::Path::new(lua).is_file(),
        "{lua} is missing: install it with hack/install-deps.sh (apt-get install lua5.1)"
    );
    let mut cmd = bounded(lua, TOOL_LIMIT);
    cmd.arg(&harness);
    let out = output(cmd, String::new(), &format!("lua5.1 {}", harness.display())).await;
    let mut lines = out.lines();
    let status = lines.next().unwrap_or_default().to_string();
    (status, lines.next().unwrap_or_default().to_string())
}

/// A JSON value as a Lua 5.1 table constructor (null leaves a key out, as
/// Argo CD's conversion does).
fn lua(v: &serde_json::Value) -> String {
    use serde_json::Value as J;
    match v {
        J::Null => "nil".into(),
        J::Bool(b) => b.to_string(),
        J::Number(n) => n.to_string(),
        J::String(s) => lua_string(s),
        J::Array(a) => format!("{{{}}}", a.iter().map(lua).collect::<Vec<_>>().join(", ")),
        J::Object(o) => {
            let fields: Vec<String> = o
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| format!("[{}] = {}", lua_string(k), lua(v)))
                .collect();
            format!("{{{}}}", fields.join(", "))
        }
    }
}

/// A Lua string literal: printable ASCII as is, every other byte as `\ddd`.
fn lua_string(s: &str) -> String {
    let mut out = String::from("\"");
    for b in s.bytes() {
        match b {
            b'"' | b'\\' => {
                out.push('\\');
                out.push(b as char);
            }
            0x20..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("\\{b:03}")),
        }
    }
    out.push('"');
    out
}
