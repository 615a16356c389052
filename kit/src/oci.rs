//! Reading the OCI image archives of `make image` (hack/image.sh): a tar of an
//! OCI image layout. Only what the tests need: the index, the manifest, the
//! config, and the layers' entries (gzip is undone by the system's `gzip`).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{SETUP_LIMIT, bounded, repo};

pub use crate::target_dir;

/// Where hack/image.sh takes the binaries from: `<target>/release`, or the
/// test build's `<target>/debug` when IMAGE_PROFILE=dev (as `make test` sets).
pub fn binaries_dir() -> PathBuf {
    match std::env::var("IMAGE_PROFILE").as_deref() {
        Ok("dev") => target_dir().join("debug"),
        _ => target_dir().join("release"),
    }
}

/// `<target>/oci/<name>.oci.tar`, built by `hack/image.sh` first if missing.
pub fn archive(name: &str) -> PathBuf {
    let path = target_dir().join("oci").join(format!("{name}.oci.tar"));
    if !path.exists() {
        let st = bounded("bash", SETUP_LIMIT)
            .arg(repo().join("hack/image.sh"))
            .env("CARGO_TARGET_DIR", target_dir())
            .status()
            .expect("run hack/image.sh");
        assert!(st.success(), "hack/image.sh failed");
    }
    assert!(
        path.exists(),
        "{} missing after hack/image.sh",
        path.display()
    );
    path
}

/// One entry of a tar stream.
#[derive(Clone, Debug)]
pub struct Entry {
    pub path: String,
    /// b'0' file, b'5' directory, b'2' symlink, ...
    pub kind: u8,
    pub mode: u32,
    pub uid: u64,
    pub gid: u64,
    pub link: String,
    pub data: Vec<u8>,
}

fn octal(field: &[u8]) -> u64 {
    let s = String::from_utf8_lossy(field);
    u64::from_str_radix(s.trim_matches(|c: char| c == '\0' || c == ' '), 8).unwrap_or(0)
}

fn text(field: &[u8]) -> String {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end]).to_string()
}

/// The entries of an uncompressed tar (ustar with PAX headers).
pub fn entries(tar: &[u8]) -> Vec<Entry> {
    let mut out = Vec::new();
    let mut pax: BTreeMap<String, String> = BTreeMap::new();
    let mut at = 0;
    while at + 512 <= tar.len() {
        let h = &tar[at..at + 512];
        if h.iter().all(|&b| b == 0) {
            break;
        }
        let size = octal(&h[124..136]) as usize;
        let data = tar[at + 512..at + 512 + size].to_vec();
        at += 512 + size.div_ceil(512) * 512;
        let kind = h[156];
        if kind == b'x' {
            // PAX records: "<len> key=value\n"
            let s = String::from_utf8_lossy(&data).to_string();
            let mut rest = s.as_str();
            while let Some((len, _)) = rest.split_once(' ') {
                let n: usize = len.parse().unwrap_or(rest.len());
                let rec = &rest[len.len() + 1..n.min(rest.len())];
                if let Some((k, v)) = rec.trim_end_matches('\n').split_once('=') {
                    pax.insert(k.to_string(), v.to_string());
                }
                rest = &rest[n.min(rest.len())..];
            }
            continue;
        }
        let prefix = text(&h[345..500]);
        let name = text(&h[0..100]);
        let mut path = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        if let Some(p) = pax.remove("path") {
            path = p;
        }
        let link = pax.remove("linkpath").unwrap_or_else(|| text(&h[157..257]));
        pax.clear();
        out.push(Entry {
            path: path
                .trim_start_matches("./")
                .trim_end_matches('/')
                .to_string(),
            kind,
            mode: octal(&h[100..108]) as u32,
            uid: octal(&h[108..116]),
            gid: octal(&h[116..124]),
            link,
            data,
        });
    }
    out
}

pub fn gunzip(data: &[u8]) -> Vec<u8> {
    let mut child = Command::new("gzip")
        .arg("-dc")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run gzip");
    let mut stdin = child.stdin.take().unwrap();
    let input = data.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success(), "gzip -dc failed");
    out.stdout
}

/// An image of an archive: its index, manifest, config and layers.
pub struct Image {
    pub index: serde_json::Value,
    pub manifest: serde_json::Value,
    pub config: serde_json::Value,
    /// Layer entries, bottom layer first.
    pub layers: Vec<Vec<Entry>>,
}

impl Image {
    pub fn read(path: &Path) -> Image {
        let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let files: BTreeMap<String, Vec<u8>> = entries(&bytes)
            .into_iter()
            .filter(|e| e.kind == b'0')
            .map(|e| (e.path, e.data))
            .collect();
        let json = |name: &str| -> serde_json::Value {
            serde_json::from_slice(files.get(name).unwrap_or_else(|| panic!("{name} missing")))
                .unwrap_or_else(|e| panic!("{name}: {e}"))
        };
        let blob = |digest: &serde_json::Value| -> String {
            let d = digest.as_str().expect("digest");
            let (alg, hex) = d.split_once(':').expect("alg:hex");
            format!("blobs/{alg}/{hex}")
        };
        assert!(files.contains_key("oci-layout"), "no oci-layout file");
        let index = json("index.json");
        let manifests = index["manifests"].as_array().expect("index.manifests");
        assert_eq!(manifests.len(), 1, "one image per archive");
        let manifest = json(&blob(&manifests[0]["digest"]));
        let config = json(&blob(&manifest["config"]["digest"]));
        let layers = manifest["layers"]
            .as_array()
            .expect("layers")
            .iter()
            .map(|l| {
                let data = &files[&blob(&l["digest"])];
                match l["mediaType"].as_str() {
                    Some(t) if t.ends_with("+gzip") => entries(&gunzip(data)),
                    _ => entries(data),
                }
            })
            .collect();
        Image {
            index,
            manifest,
            config,
            layers,
        }
    }

    /// The file system as seen in a container: later layers win.
    pub fn files(&self) -> BTreeMap<String, Entry> {
        let mut m = BTreeMap::new();
        for l in &self.layers {
            for e in l {
                m.insert(e.path.clone(), e.clone());
            }
        }
        m
    }

    /// The full reference containerd imports the image as.
    pub fn name(&self) -> String {
        self.index["manifests"][0]["annotations"]["io.containerd.image.name"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}
