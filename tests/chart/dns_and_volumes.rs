//! The pod's DNS (`dnsPolicy`, `dnsConfig`: the probes' resolver reads the
//! pod's resolv.conf) and `extraVolumes` / `extraVolumeMounts`: absent by
//! default, passed as given, next to the chart's own /tmp.

use super::platform::{render_fails, render_values};
use super::rendered::*;
use super::*;

fn names(list: &Value) -> Vec<&str> {
    list.as_sequence()
        .expect("a list")
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect()
}

#[test]
fn dns_settings_and_extra_volumes_are_absent_by_default() {
    let docs = render(&[]);
    let dep = one(&docs, "Deployment");
    let pod = pod_spec(dep);
    assert!(pod["dnsPolicy"].is_null(), "Kubernetes' default");
    assert!(pod["dnsConfig"].is_null());
    assert_eq!(names(&pod["volumes"]), ["tmp"]);
    assert_eq!(names(&container(dep)["volumeMounts"]), ["tmp"]);
}

#[test]
fn dns_settings_and_extra_volumes_are_passed_as_given() {
    let values = r#"
dnsPolicy: None
dnsConfig:
  nameservers: [10.96.0.10]
  searches: [probes.svc.cluster.local]
  options:
    - {name: ndots, value: "1"}
    - {name: edns0}
extraVolumes:
  - name: resolver
    configMap: {name: webchecker-resolver}
  - name: scratch
    emptyDir: {medium: Memory}
extraVolumeMounts:
  - {name: resolver, mountPath: /etc/webchecker, readOnly: true}
  - {name: scratch, mountPath: /scratch}
operator:
  resolvConf: /etc/webchecker/resolv.conf
"#;
    let docs = render_values(values);
    let given: Value = serde_yaml::from_str(values).unwrap();
    let dep = one(&docs, "Deployment");
    let pod = pod_spec(dep);
    assert_eq!(pod["dnsPolicy"].as_str(), Some("None"));
    assert_eq!(pod["dnsConfig"], given["dnsConfig"]);
    let volumes = pod["volumes"].as_sequence().unwrap();
    assert_eq!(names(&pod["volumes"]), ["tmp", "resolver", "scratch"]);
    assert_eq!(&volumes[1..], given["extraVolumes"].as_sequence().unwrap());
    let mounts = container(dep)["volumeMounts"].as_sequence().unwrap();
    assert_eq!(mounts[0]["mountPath"].as_str(), Some("/tmp"));
    assert_eq!(
        &mounts[1..],
        given["extraVolumeMounts"].as_sequence().unwrap()
    );
    let cfg = rendered_config(dep, &format!("{FULLNAME}-5c9f7d8b6-x2b7k"));
    assert_eq!(
        cfg.resolv_conf.to_str(),
        Some("/etc/webchecker/resolv.conf")
    );

    // The all-on values hold each of them.
    let docs = render(&["-f", ALL_ON]);
    let pod = pod_spec(one(&docs, "Deployment"));
    assert_eq!(pod["dnsPolicy"].as_str(), Some("ClusterFirst"));
    assert_eq!(
        pod["dnsConfig"]["options"][0]["name"].as_str(),
        Some("ndots")
    );
    assert!(names(&pod["volumes"]).contains(&"resolver"));
}

#[test]
fn dns_and_volume_mistakes_fail_with_a_clear_message() {
    for (values, want) in [
        (
            "dnsPolicy: None\n",
            "dnsPolicy None: set dnsConfig.nameservers",
        ),
        (
            "dnsConfig: {nameservers: [a, b, c, d]}\n",
            "/dnsConfig/nameservers",
        ),
        (
            "extraVolumes: [{name: tmp, emptyDir: {}}]\n",
            "extraVolumes[0]: the name \"tmp\" is the chart's own volume",
        ),
        (
            "extraVolumeMounts: [{name: x, mountPath: /tmp}]\n",
            "extraVolumeMounts[0]: \"/tmp\" is mounted by the chart",
        ),
        (
            "extraVolumeMounts: [{name: x}]\n",
            "missing property 'mountPath'",
        ),
    ] {
        let out = render_fails(values);
        assert!(out.contains(want), "{values}: {want:?} not in:\n{out}");
    }
}
