//! Figures have one source: the summary `make bench` writes into
//! docs/benchmarks.md. A document that quotes one writes it in bold, and it
//! must be in the summary as written, so a new bench run that changes it
//! fails here until the copy follows. Ratios (`4.6x`) are measured figures
//! wherever they appear: outside the summary's words they are a copy that
//! can drift. The user's guide and the pages it sends a reader to first
//! carry no dates: figures there are the summary's, not a day's.

use super::{repo, repo_file};

const SUMMARY_START: &str = "<!-- bench-summary:start -->";
const SUMMARY_END: &str = "<!-- bench-summary:end -->";

/// Pages whose every bold figure must come from the summary.
const FRONT: &[&str] = &["README.md", "docs/reliability.md", "docs/development.md"];

fn summary() -> String {
    let text = repo_file("docs/benchmarks.md");
    let start = text
        .find(SUMMARY_START)
        .expect("the summary's start marker")
        + SUMMARY_START.len();
    let end = text.find(SUMMARY_END).expect("the summary's end marker");
    text[start..end].to_string()
}

/// Every Markdown page that may quote a figure: README.md, the chart's and
/// examples' READMEs, docs/*.md but the bench's own.
fn pages() -> Vec<String> {
    let mut pages = vec![
        "README.md".to_string(),
        "deploy/helm/webchecker-operator/README.md".to_string(),
    ];
    if repo().join("examples/README.md").exists() {
        pages.push("examples/README.md".to_string());
    }
    let mut docs: Vec<String> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".md") && n != "benchmarks.md")
        .map(|n| format!("docs/{n}"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The page without its fenced code blocks and inline code (commands and
/// output, not prose figures).
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            let mut inline = false;
            for part in line.split('`') {
                if !inline {
                    out.push_str(part);
                }
                inline = !inline;
            }
            out.push('\n');
        }
    }
    out
}

/// The bold spans of `text` with a digit in them, and `text` without them.
fn bold_figures(text: &str) -> (Vec<String>, String) {
    let mut figures = Vec::new();
    let mut rest = String::new();
    for (i, part) in text.split("**").enumerate() {
        if i % 2 == 1 {
            if part.chars().any(|c| c.is_ascii_digit()) {
                figures.push(part.to_string());
            }
        } else {
            rest.push_str(part);
        }
    }
    (figures, rest)
}

/// Ratios such as `4.6x` or `8.4x–9.3x` (not `0x1f`, not `2 x lease`).
fn ratios(text: &str) -> Vec<String> {
    let b = text.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let starts = b[i].is_ascii_digit()
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'.'));
        if !starts {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < b.len() && (b[j].is_ascii_digit() || b[j] == b'.') {
            j += 1;
        }
        let ends = j < b.len()
            && b[j] == b'x'
            && b[j - 1].is_ascii_digit()
            && (j + 1 == b.len() || !b[j + 1].is_ascii_alphanumeric());
        if ends {
            found.push(text[i..=j].to_string());
        }
        i = j.max(i + 1);
    }
    found
}

/// Every figure quoted from the bench is quoted as the summary states it.
#[test]
fn quoted_figures_are_the_summarys() {
    let summary = summary();
    let mut drift = Vec::new();
    for page in pages() {
        let text = prose(&repo_file(&page));
        let (bold, rest) = bold_figures(&text);
        for r in ratios(&rest) {
            drift.push(format!(
                "{page}: the ratio {r} outside bold: quote it from the summary, in bold"
            ));
        }
        for f in bold
            .iter()
            .filter(|f| FRONT.contains(&page.as_str()) || !ratios(f).is_empty())
        {
            if !summary.contains(f.as_str()) {
                drift.push(format!(
                    "{page}: **{f}** is not in docs/benchmarks.md's summary"
                ));
            }
        }
    }
    assert!(
        drift.is_empty(),
        "figures that differ from their source (docs/benchmarks.md's summary, written by make bench):\n  {}",
        drift.join("\n  ")
    );
}

/// The front pages say what holds, not what was seen on a day.
#[test]
fn front_pages_carry_no_dates() {
    let mut dated = Vec::new();
    for page in FRONT {
        for (n, line) in repo_file(page).lines().enumerate() {
            let b = line.as_bytes();
            let date = (0..b.len().saturating_sub(9)).any(|i| {
                b[i..i + 4].iter().all(u8::is_ascii_digit)
                    && b[i + 4] == b'-'
                    && b[i + 5..i + 7].iter().all(u8::is_ascii_digit)
                    && b[i + 7] == b'-'
                    && b[i + 8..i + 10].iter().all(u8::is_ascii_digit)
            });
            if date {
                dated.push(format!("{page}:{}: {line}", n + 1));
            }
        }
    }
    assert!(dated.is_empty(), "dated lines:\n  {}", dated.join("\n  "));
}

#[test]
fn the_scanner_finds_ratios_and_bold_figures() {
    assert_eq!(
        ratios("8.4x–9.3x, 0x1f, 2 x lease, v1.2x, 3x."),
        vec!["8.4x", "9.3x", "3x"]
    );
    let (bold, rest) = bold_figures("a **7.5 s** b **met** c");
    assert_eq!(bold, vec!["7.5 s"]);
    assert_eq!(rest, "a  b  c");
    assert_eq!(prose("x `4x` y\n```\n5x\n```\nz"), "x  y\nz\n");
}
