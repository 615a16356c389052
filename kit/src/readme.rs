//! The README's `## Install` section as a user copies it: its fenced `sh`
//! blocks, run as they are written (one bash script per block, `set -euo
//! pipefail`) with the registry of a test for the README's placeholder.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::{SETUP_LIMIT, bounded, repo};

/// The registry and path the README's commands name.
pub const PLACEHOLDER: &str = "registry.example.com/team";
const HEADING: &str = "## Install";

/// The text of the section, up to the next `## ` heading.
pub fn install_section() -> String {
    let text = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let mut lines = text.lines().skip_while(|l| *l != HEADING);
    assert!(lines.next().is_some(), "README.md has no line `{HEADING}`");
    lines
        .take_while(|l| !l.starts_with("## "))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The section's fenced `sh` blocks, each as its text.
pub fn blocks() -> Vec<String> {
    let mut out = Vec::new();
    let mut cur: Option<Vec<&str>> = None;
    let section = install_section();
    for l in section.lines() {
        match (&mut cur, l.trim_end()) {
            (None, "```sh") => cur = Some(Vec::new()),
            (Some(b), "```") => {
                out.push(b.join("\n"));
                cur = None;
            }
            (Some(b), _) => b.push(l),
            (None, _) => {}
        }
    }
    assert!(
        cur.is_none(),
        "an unterminated code block in README.md's Install"
    );
    out
}

/// The one block that contains `needle`.
pub fn block_with(needle: &str) -> String {
    let found: Vec<String> = blocks()
        .into_iter()
        .filter(|b| b.contains(needle))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "README.md's Install section must have one sh block with `{needle}`: {found:?}"
    );
    found.into_iter().next().unwrap()
}

/// `block` with `registry` (host and path) for the placeholder.
pub fn for_registry(block: &str, registry: &str) -> String {
    assert!(
        block.contains(PLACEHOLDER),
        "the block names no {PLACEHOLDER}:\n{block}"
    );
    block.replace(PLACEHOLDER, registry)
}

/// A bash running `script` in the repository (where the README's commands
/// run) with `set -euo pipefail`; `bin` (helm, kubectl) first on PATH.
pub fn script(script: &str, bin: &Path) -> Command {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs = vec![bin.to_path_buf()];
    dirs.extend(std::env::split_paths(&path));
    let mut c = bounded("bash", SETUP_LIMIT);
    c.current_dir(repo())
        .args(["-euo", "pipefail", "-c", script])
        .env("PATH", std::env::join_paths(dirs).unwrap())
        .stdin(Stdio::null());
    c
}
