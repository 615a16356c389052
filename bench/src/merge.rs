//! A run of some parts (BENCH_PARTS) into an existing report updates those
//! parts only, so that one part can be measured again without the whole
//! bench and without losing the others' figures. The machine table and the
//! summary's closing line stay the last full run's; each section that ran
//! gets a line saying when and how it was measured, and its summary lines
//! replace the old ones of that part, found by how they begin (each part's
//! summary lines begin with one of its prefixes, or with its title when it
//! failed).

/// One part of the report: its title (`## title`), the case-insensitive
/// prefixes of its summary lines, and whether this run measured it.
pub struct Part<'a> {
    pub title: &'a str,
    pub prefixes: &'a [&'a str],
    pub ran: bool,
}

/// `## ` blocks of a document: (heading, whole block with its heading), and
/// the text before the first.
fn blocks(doc: &str) -> (String, Vec<(String, String)>) {
    let mut pre = String::new();
    let mut out: Vec<(String, String)> = Vec::new();
    for line in doc.split_inclusive('\n') {
        if let Some(h) = line.strip_prefix("## ") {
            out.push((h.trim().to_string(), String::new()));
        }
        match out.last_mut() {
            Some((_, b)) => b.push_str(line),
            None => pre.push_str(line),
        }
    }
    (pre, out)
}

/// The summary's items (`- ` lines) and its closing line (`(...)`).
fn summary(block: &str) -> (Vec<String>, String) {
    let items = block
        .lines()
        .filter_map(|l| l.strip_prefix("- "))
        .map(str::to_string)
        .collect();
    let close = block
        .lines()
        .find(|l| l.starts_with('('))
        .unwrap_or_default()
        .to_string();
    (items, close)
}

/// The part an item of the summary belongs to.
fn owner(item: &str, parts: &[Part<'_>]) -> Option<usize> {
    let lower = item.to_lowercase();
    parts
        .iter()
        .position(|p| item.starts_with(p.title) || p.prefixes.iter().any(|x| lower.starts_with(x)))
}

fn block<'a>(bs: &'a [(String, String)], heading: &str) -> Option<&'a str> {
    bs.iter()
        .find(|(h, _)| h == heading)
        .map(|(_, b)| b.as_str())
}

/// `old` with the parts that ran taken from `new`; `note` opens each of
/// their sections and ends each of their summary lines.
pub fn merge(old: &str, new: &str, parts: &[Part<'_>], note: &str) -> String {
    let (pre, old_bs) = blocks(old);
    let (_, new_bs) = blocks(new);
    let (old_items, close) = summary(block(&old_bs, "Summary").unwrap_or_default());
    let (new_items, _) = summary(block(&new_bs, "Summary").unwrap_or_default());
    let mut items = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        if p.ran {
            let ours = new_items.iter().filter(|l| owner(l, parts) == Some(i));
            items.extend(ours.map(|l| format!("{l} ({note})")));
        } else {
            let kept = old_items.iter().filter(|l| owner(l, parts) == Some(i));
            items.extend(kept.cloned());
        }
    }
    // Lines of no known part stay.
    items.extend(
        old_items
            .iter()
            .filter(|l| owner(l, parts).is_none())
            .cloned(),
    );
    let mut doc = pre;
    doc.push_str("## Summary\n\n<!-- bench-summary:start -->\n");
    for l in &items {
        doc.push_str(&format!("- {l}\n"));
    }
    doc.push_str(&format!("\n{close}\n<!-- bench-summary:end -->\n\n"));
    doc.push_str(block(&old_bs, "Machine").unwrap_or_default());
    for p in parts {
        let (from, fresh) = if p.ran {
            (&new_bs, true)
        } else {
            (&old_bs, false)
        };
        let Some(b) = block(from, p.title) else {
            continue;
        };
        if fresh {
            let (head, rest) = b.split_once('\n').unwrap_or((b, ""));
            doc.push_str(&format!("{head}\n\n*{note}.*\n{rest}"));
        } else {
            doc.push_str(b);
        }
    }
    let known = |h: &str| {
        ["Summary", "Machine", "Method notes"].contains(&h) || parts.iter().any(|p| p.title == h)
    };
    for (_, b) in old_bs.iter().filter(|(h, _)| !known(h)) {
        doc.push_str(b);
    }
    doc.push_str(
        block(&new_bs, "Method notes")
            .or(block(&old_bs, "Method notes"))
            .unwrap_or_default(),
    );
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    const OLD: &str = "# Benchmarks\n\nWritten by x.\n\n## Summary\n\n<!-- bench-summary:start -->\n\
        - Ring (simulation): 1.004x\n- Scale, 10,000: 69 MiB\n- Other: kept\n\n(`make bench` on 2, old date.)\n\
        <!-- bench-summary:end -->\n\n## Machine\n\n| date | old |\n\n## 2. Ring\n\nold ring\n\n\
        ## 3. Scale\n\nold scale\n\n## Method notes\n\n- old notes\n";
    const NEW: &str = "# Benchmarks\n\nWritten by y.\n\n## Summary\n\n<!-- bench-summary:start -->\n\
        - Scale, 10,000: 64 MiB\n- Scale: error: boom\n\n(`make bench` on 2, new date.)\n\
        <!-- bench-summary:end -->\n\n## Machine\n\n| date | new |\n\n## 3. Scale\n\nnew scale\n\n\
        ## Method notes\n\n- new notes\n";

    #[test]
    fn only_the_parts_that_ran_change() {
        let parts = [
            Part {
                title: "2. Ring",
                prefixes: &["ring"],
                ran: false,
            },
            Part {
                title: "3. Scale",
                prefixes: &["scale"],
                ran: true,
            },
        ];
        let doc = merge(OLD, NEW, &parts, "again on its own");
        assert_eq!(
            doc,
            "# Benchmarks\n\nWritten by x.\n\n## Summary\n\n<!-- bench-summary:start -->\n\
             - Ring (simulation): 1.004x\n- Scale, 10,000: 64 MiB (again on its own)\n\
             - Scale: error: boom (again on its own)\n- Other: kept\n\n(`make bench` on 2, old date.)\n\
             <!-- bench-summary:end -->\n\n## Machine\n\n| date | old |\n\n## 2. Ring\n\nold ring\n\n\
             ## 3. Scale\n\n*again on its own.*\n\nnew scale\n\n## Method notes\n\n- new notes\n"
        );
    }
}
