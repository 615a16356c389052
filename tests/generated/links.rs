//! The documents' links within the repository lead somewhere: every
//! relative Markdown link of the README, docs/, examples/ and the chart's
//! README names a file or folder that exists and, with `#anchor`, a heading
//! of that Markdown file (GitHub's slugs).

use std::path::{Path, PathBuf};

use super::repo;

/// The Markdown files a user reads.
fn documents() -> Vec<PathBuf> {
    let mut out = vec![
        repo().join("README.md"),
        repo().join("CHANGELOG.md"),
        repo().join("examples/README.md"),
        repo().join("deploy/helm/webchecker-operator/README.md"),
    ];
    for entry in std::fs::read_dir(repo().join("docs")).expect("docs/") {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|e| e == "md") {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// The targets of `[text](target)` links, outside code blocks and spans.
fn link_targets(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Code spans hold examples, not links.
        let prose: String = line
            .split('`')
            .enumerate()
            .filter(|(i, _)| i % 2 == 0)
            .map(|(_, s)| s)
            .collect::<Vec<_>>()
            .join(" ");
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            out.push(after[..end].trim().to_string());
            rest = &after[end..];
        }
    }
    out
}

/// GitHub's anchor of a heading: lower case, punctuation but `-` and `_`
/// dropped, spaces to `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown file: its headings' slugs and its
/// `<a id="...">` elements.
fn anchors(markdown: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.push(slug(line.trim_start_matches('#')));
        }
    }
    for piece in markdown.split("<a id=\"").skip(1) {
        if let Some((id, _)) = piece.split_once('"') {
            out.push(id.to_string());
        }
    }
    out
}

/// Why `target`, linked from `from`, leads nowhere, if it does not.
fn broken(from: &Path, target: &str) -> Option<String> {
    let external = ["http://", "https://", "mailto:"];
    if external.iter().any(|p| target.starts_with(p)) {
        return None;
    }
    let (path, anchor) = match target.split_once('#') {
        Some((p, a)) => (p, Some(a)),
        None => (target, None),
    };
    let file = if path.is_empty() {
        from.to_path_buf()
    } else {
        from.parent().unwrap().join(path)
    };
    if !file.exists() {
        return Some("no such file".into());
    }
    let anchor = anchor.filter(|a| !a.is_empty())?;
    if file.extension().is_none_or(|e| e != "md") {
        return None;
    }
    let text = std::fs::read_to_string(&file).unwrap();
    (!anchors(&text).iter().any(|a| a == anchor)).then(|| format!("no heading #{anchor}"))
}

#[test]
fn every_link_within_the_repository_leads_somewhere() {
    let mut bad = Vec::new();
    let mut seen = 0;
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        for target in link_targets(&text) {
            seen += 1;
            if let Some(why) = broken(&doc, &target) {
                let rel = doc.strip_prefix(repo()).unwrap().display().to_string();
                bad.push(format!("{rel}: ({target}): {why}"));
            }
        }
    }
    assert!(seen > 50, "only {seen} links found: the parser is broken");
    assert!(
        bad.is_empty(),
        "links that lead nowhere:\n{}",
        bad.join("\n")
    );
}

#[test]
fn slugs_are_githubs() {
    assert_eq!(
        slug(" Addresses a checker can reach"),
        "addresses-a-checker-can-reach"
    );
    assert_eq!(slug(" CRDs"), "crds");
    assert_eq!(slug(" `spec.tls` and mTLS"), "spectls-and-mtls");
    assert_eq!(
        link_targets("see [a](x.md#b) and `[c](nope)`"),
        vec!["x.md#b".to_string()]
    );
}
