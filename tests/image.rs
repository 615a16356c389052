//! The images of `make image` (hack/image.sh, no container engine):
//!
//! - the operator image and the Dockerfile's final stage describe the same
//!   image: user, entrypoint, exposed ports, labels, the binary's path; the
//!   version label is the crate's, the revision label (added at build time,
//!   as `docker build --label` would) a commit of this repository;
//! - its base is what distroless cc-debian12:nonroot gives: the nonroot user
//!   and home, CA roots, /tmp, no shell; and the binaries run on it alone
//!   (started in a chroot of the image's file system);
//! - the archives are reproducible and name the images containerd imports.
//!
//! The archives are built first when missing (a release build: minutes;
//! with IMAGE_PROFILE=dev from the test build's binaries: seconds).

use webchecker_kit as support;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use support::oci::{Image, archive, binaries_dir, target_dir};
use support::repo;

/// The final stage of the Dockerfile, as the instructions that matter here.
#[derive(Debug, Default)]
struct Stage {
    user: String,
    entrypoint: Vec<String>,
    exposed: BTreeSet<String>,
    labels: BTreeMap<String, String>,
    copied_to: Vec<String>,
}

/// Splits `a="b c" d=e` into words, quotes removed.
fn words(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut quoted, mut any) = (Vec::new(), String::new(), false, false);
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            '\\' if quoted => cur.extend(chars.next()),
            c if c.is_whitespace() && !quoted => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            c => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// A stage of the Dockerfile: the one named `name` (`FROM .. AS name`), or
/// the last one (the default target, the operator).
fn stage(name: Option<&str>) -> Stage {
    let text = std::fs::read_to_string(repo().join("Dockerfile")).unwrap();
    let joined = text.replace("\\\n", " ");
    let lines: Vec<&str> = joined
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let is_from = |l: &&str| l.to_ascii_uppercase().starts_with("FROM ");
    let begin = match name {
        None => lines.iter().rposition(is_from).expect("a FROM line"),
        Some(n) => lines
            .iter()
            .position(|l| is_from(l) && l.to_ascii_lowercase().ends_with(&format!(" as {n}")))
            .unwrap_or_else(|| panic!("no stage {n} in the Dockerfile")),
    };
    let end = lines[begin + 1..]
        .iter()
        .position(is_from)
        .map_or(lines.len(), |i| begin + 1 + i);
    assert!(
        lines[begin].contains("distroless/cc-debian12:nonroot"),
        "hack/image.sh builds a stand-in for distroless cc-debian12:nonroot; the Dockerfile now starts from {:?}: update hack/image.sh and this test",
        lines[begin]
    );
    let mut st = Stage::default();
    for l in &lines[begin + 1..end] {
        let (ins, rest) = l.split_once(char::is_whitespace).unwrap_or((l, ""));
        let rest = rest.trim();
        match ins.to_ascii_uppercase().as_str() {
            "LABEL" => {
                for w in words(rest) {
                    let (k, v) = w.split_once('=').expect("LABEL key=value");
                    st.labels.insert(k.to_string(), v.to_string());
                }
            }
            "USER" => st.user = rest.to_string(),
            "EXPOSE" => {
                for p in rest.split_whitespace() {
                    let p = if p.contains('/') {
                        p.to_string()
                    } else {
                        format!("{p}/tcp")
                    };
                    st.exposed.insert(p);
                }
            }
            "ENTRYPOINT" => {
                st.entrypoint = serde_json::from_str(rest).expect("ENTRYPOINT in JSON form")
            }
            "COPY" => {
                let w: Vec<&str> = rest
                    .split_whitespace()
                    .filter(|w| !w.starts_with("--"))
                    .collect();
                st.copied_to
                    .push(w.last().expect("COPY destination").to_string());
            }
            other => panic!(
                "the Dockerfile's final stage has {other}, which hack/image.sh does not reproduce: update hack/image.sh and this test"
            ),
        }
    }
    st
}

fn labels_of(img: &Image) -> BTreeMap<String, String> {
    img.config["config"]["Labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

fn strings(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

/// The label `make image` adds at build time (the Dockerfile cannot know it).
const REVISION: &str = "org.opencontainers.image.revision";

/// The differences between a Dockerfile stage and an image archive.
fn differences(st: &Stage, img: &Image, binary: &str) -> Vec<String> {
    let c = &img.config["config"];
    let mut problems = Vec::new();
    if c["User"].as_str() != Some(st.user.as_str()) {
        problems.push(format!(
            "user: Dockerfile {:?}, image {}",
            st.user, c["User"]
        ));
    }
    if strings(&c["Entrypoint"]) != st.entrypoint {
        problems.push(format!(
            "entrypoint: Dockerfile {:?}, image {}",
            st.entrypoint, c["Entrypoint"]
        ));
    }
    let exposed: BTreeSet<String> = c["ExposedPorts"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    if exposed != st.exposed {
        problems.push(format!(
            "ports: Dockerfile {:?}, image {exposed:?}",
            st.exposed
        ));
    }
    let mut labels = labels_of(img);
    labels.remove(REVISION);
    if labels != st.labels {
        problems.push(format!(
            "labels: Dockerfile {:?}, image {labels:?}",
            st.labels
        ));
    }
    let files = img.files();
    for dst in &st.copied_to {
        match files.get(dst.trim_start_matches('/')) {
            Some(e) if e.kind == b'0' && e.mode & 0o111 != 0 => {}
            other => problems.push(format!("{dst}: not an executable in the image ({other:?})")),
        }
    }
    // The binary is the build of this tree hack/image.sh took it from.
    let built = binaries_dir().join(binary);
    let path = format!("usr/local/bin/{binary}");
    if let (Ok(b), Some(e)) = (std::fs::read(&built), files.get(&path))
        && b != e.data
    {
        problems.push(format!(
            "{path} differs from {} (run make image)",
            built.display()
        ));
    }
    if img.config["os"] != "linux" {
        problems.push(format!("os {}", img.config["os"]));
    }
    problems
}

#[test]
fn dockerfile_and_built_images_describe_the_same_images() {
    for (stage_name, archive_name, binary) in [
        (None, "webchecker-operator", "webchecker-operator"),
        (Some("chart-test"), "chart-test", "webchecker-chart-test"),
    ] {
        let img = Image::read(&archive(archive_name));
        let problems = differences(&stage(stage_name), &img, binary);
        assert!(
            problems.is_empty(),
            "Dockerfile stage {stage_name:?} and {archive_name}.oci.tar differ:\n  {}",
            problems.join("\n  ")
        );
        assert_eq!(
            img.manifest["mediaType"],
            "application/vnd.oci.image.manifest.v1+json"
        );
    }
}

/// The version label is the crate's (the Dockerfile says so too: the
/// comparison above); the revision label, where present, names a commit of
/// this repository (hack/image.sh leaves it out for a changed tree).
#[test]
fn images_are_labelled_with_version_and_revision() {
    for name in ["webchecker-operator", "chart-test"] {
        let l = labels_of(&Image::read(&archive(name)));
        assert_eq!(
            l.get("org.opencontainers.image.version")
                .map(String::as_str),
            Some(env!("CARGO_PKG_VERSION")),
            "{name}: {l:?}"
        );
        if let Some(rev) = l.get(REVISION) {
            assert!(
                rev.len() == 40 && rev.chars().all(|c| c.is_ascii_hexdigit()),
                "{name}: {REVISION}={rev:?}"
            );
            let known = Command::new("git")
                .args(["cat-file", "-e", &format!("{rev}^{{commit}}")])
                .current_dir(repo())
                .status()
                .expect("git");
            assert!(
                known.success(),
                "{name}: {REVISION}={rev} is no commit here"
            );
        }
    }
}

/// What gcr.io/distroless/cc-debian12:nonroot gives a program.
#[test]
fn base_is_a_distroless_nonroot_equivalent() {
    for name in ["webchecker-operator", "chart-test"] {
        let img = Image::read(&archive(name));
        let c = &img.config["config"];
        assert_eq!(c["WorkingDir"], "/home/nonroot", "{name}");
        let env = strings(&c["Env"]);
        assert!(
            env.contains(&"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt".to_string()),
            "{name}: {env:?}"
        );
        let files = img.files();
        let get = |p: &str| {
            files
                .get(p)
                .unwrap_or_else(|| panic!("{name}: {p} missing"))
        };
        let passwd = String::from_utf8_lossy(&get("etc/passwd").data).to_string();
        assert!(
            passwd.contains("nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin"),
            "{passwd}"
        );
        let home = get("home/nonroot");
        assert_eq!(
            (home.uid, home.gid, home.mode & 0o7777),
            (65532, 65532, 0o700)
        );
        assert_eq!(get("tmp").mode & 0o7777, 0o1777, "{name}: /tmp");
        let roots =
            String::from_utf8_lossy(&get("etc/ssl/certs/ca-certificates.crt").data).to_string();
        assert!(
            roots.matches("-----BEGIN CERTIFICATE-----").count() > 100,
            "{name}: the CA bundle holds Mozilla's roots"
        );
        assert!(
            files.contains_key("usr/share/zoneinfo/UTC"),
            "{name}: tzdata"
        );
        assert!(
            get("etc/os-release").kind == b'2',
            "{name}: os-release link"
        );
        // No shell and no package manager: nothing to exec into.
        let shells: Vec<&String> = files
            .iter()
            .filter(|(p, e)| {
                let base = p.rsplit('/').next().unwrap_or(p);
                e.kind != b'5'
                    && ["sh", "bash", "dash", "busybox", "dpkg", "apt", "apt-get"].contains(&base)
            })
            .map(|(p, _)| p)
            .collect();
        assert!(shells.is_empty(), "{name}: {shells:?}");
        // Everything but the nonroot home belongs to root.
        let foreign: Vec<&String> = files
            .iter()
            .filter(|(p, e)| (e.uid, e.gid) != (0, 0) && p.as_str() != "home/nonroot")
            .map(|(p, _)| p)
            .collect();
        assert!(foreign.is_empty(), "{name}: {foreign:?}");
    }
}

/// The binaries start with nothing but the image's own files (its glibc,
/// libgcc and loader), as the non-root user: a chroot of the unpacked image.
#[test]
fn binaries_run_on_the_image_alone() {
    if unsafe { libc::geteuid() } != 0 {
        panic!("this test unpacks the image with its owners and chroots into it: run it as root");
    }
    for (name, bin) in [
        ("webchecker-operator", "/usr/local/bin/webchecker-operator"),
        ("chart-test", "/usr/local/bin/webchecker-chart-test"),
    ] {
        let img = Image::read(&archive(name));
        let root = tempfile::tempdir().unwrap();
        for (path, e) in img.files() {
            let p = root.path().join(&path);
            match e.kind {
                b'5' => std::fs::create_dir_all(&p).unwrap(),
                b'2' => {
                    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                    std::os::unix::fs::symlink(&e.link, &p).unwrap();
                }
                b'0' => {
                    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                    std::fs::write(&p, &e.data).unwrap();
                    use std::os::unix::fs::PermissionsExt;
                    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(e.mode)).unwrap();
                }
                _ => {}
            }
        }
        let dir = std::ffi::CString::new(root.path().to_str().unwrap()).unwrap();
        let mut cmd = Command::new(bin);
        cmd.arg("--help").env_clear();
        // In the child, before exec: into the image's root, as nonroot.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(move || {
                if libc::chroot(dir.as_ptr()) != 0
                    || libc::chdir(c"/".as_ptr()) != 0
                    || libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(65532) != 0
                    || libc::setuid(65532) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let out = cmd
            .output()
            .expect("start the binary in a chroot of the image");
        assert!(
            out.status.success(),
            "{name}: {bin} --help in a chroot of the image failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn archives_name_their_images_and_are_reproducible() {
    let version = env!("CARGO_PKG_VERSION");
    let op = Image::read(&archive("webchecker-operator"));
    let tag = op.name().rsplit(':').next().unwrap_or_default().to_string();
    assert_eq!(
        op.name(),
        format!("docker.io/library/webchecker-operator:{tag}")
    );
    if std::env::var_os("IMAGE_TAG").is_none() {
        assert_eq!(
            tag, version,
            "the default tag is the crate's version (the chart's appVersion)"
        );
    }
    let test = Image::read(&archive("chart-test"));
    assert_eq!(
        test.name(),
        format!("docker.io/library/webchecker-operator-chart-test:{tag}")
    );
    let env = std::fs::read_to_string(repo().join("hack/versions.env")).unwrap();
    let pause = env
        .lines()
        .find_map(|l| l.strip_prefix("PAUSE_IMAGE="))
        .expect("PAUSE_IMAGE in hack/versions.env");
    assert_eq!(Image::read(&archive("pause")).name(), pause);
    // Both images share the base layer (containerd stores it once).
    assert_eq!(
        op.manifest["layers"][0]["digest"],
        test.manifest["layers"][0]["digest"]
    );

    // The same inputs give the same bytes: build the pause image twice, and
    // the chart test's image (with this project's labels) from the binary
    // built above.
    let out = tempfile::tempdir().unwrap();
    let build = |what: &str, dir: &std::path::Path| {
        let st = Command::new("bash")
            .arg(repo().join("hack/image.sh"))
            .arg(what)
            .env("OUT", dir)
            .env("CARGO_TARGET_DIR", target_dir())
            .env("SKIP_CARGO_BUILD", "1")
            .status()
            .unwrap();
        assert!(st.success(), "hack/image.sh {what}");
        std::fs::read(dir.join(format!("{what}.oci.tar"))).unwrap()
    };
    for what in ["pause", "chart-test"] {
        let (a, b) = (
            out.path().join(format!("{what}-a")),
            out.path().join(format!("{what}-b")),
        );
        assert!(
            build(what, &a) == build(what, &b),
            "two builds of the {what} image differ"
        );
    }
}
