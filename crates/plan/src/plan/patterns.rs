//! The regular expressions of a spec (`headerChecks[].regex`,
//! `bodyMatch.regex`, `tcp.queryResponse[].expect`), compiled under size
//! limits.
//!
//! With the regex crate's defaults one pattern may compile to a 10 MiB NFA
//! plus a reverse one, and a spec holds 17 patterns: one checker could take
//! hundreds of MiB and get the replica OOM-killed. So every pattern is
//! compiled with a small size limit, and the patterns of one checker share a
//! budget measured on the compiled result. Compiling is CPU work of up to a
//! few milliseconds per pattern; the operator does it in the checker feed, on
//! the blocking pool (`crate::intake::feed`), never on the engine task.

use std::fmt;
use std::sync::Arc;

use regex_automata::meta;

use webchecker_api::WebCheckerSpec;

/// Size limit of each of a pattern's NFAs (forward and reverse), and of its
/// one-pass DFA. `\w{10}` takes about half of it: Unicode classes are large.
pub const PATTERN_SIZE_LIMIT: usize = 1 << 20;
/// Compiled size of all the patterns of one checker together.
pub const CHECKER_PATTERN_BUDGET: usize = 4 << 20;
/// Lazy DFA cache of a pattern (forward and reverse each), allocated while
/// it searches (the default is 2 MiB); when it fills up the search clears it
/// or falls back to a slower engine, so this bounds memory, not correctness.
pub const PATTERN_CACHE_LIMIT: usize = 1 << 20;

/// A compiled pattern and its source.
#[derive(Clone)]
pub struct Pattern {
    source: Arc<str>,
    re: meta::Regex,
}

impl Pattern {
    /// Searches with caches of its own, freed when it returns: the search
    /// caches (lazy DFAs, PikeVM) live only on the matching thread while it
    /// searches, instead of up to 2 x [`PATTERN_CACHE_LIMIT`] per pattern for
    /// as long as the pattern lives, so a pattern costs its compiled size.
    pub fn is_match(&self, haystack: &str) -> bool {
        let mut cache = self.re.create_cache();
        let input = regex_automata::Input::new(haystack).earliest(true);
        self.re.search_half_with(&mut cache, &input).is_some()
    }

    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Heap bytes of the compiled pattern (without its search caches).
    pub fn memory_usage(&self) -> usize {
        self.re.memory_usage()
    }
}

impl fmt::Debug for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Pattern({:?})", self.source)
    }
}

/// The compiled patterns of one spec: `headerChecks` in order (`None` for a
/// check without a regex), then `bodyMatch`, then the steps of
/// `tcp.queryResponse` (`None` for a step without `expect`).
#[derive(Clone, Debug, Default)]
pub struct Patterns {
    pub headers: Vec<Option<Pattern>>,
    pub body: Option<Pattern>,
    pub expects: Vec<Option<Pattern>>,
    /// Compiled size of them all.
    pub bytes: usize,
}

/// Why a checker has no patterns to probe with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PatternError {
    /// They do not compile within the limits (`InvalidSpec`).
    Invalid(String),
    /// They compile, but the namespace's budget is used by older checkers
    /// (`QuotaExceeded`; `crate::intake::budget`).
    OverBudget(String),
}

impl PatternError {
    pub fn message(&self) -> &str {
        match self {
            PatternError::Invalid(m) | PatternError::OverBudget(m) => m,
        }
    }
}

/// What the feed made of a spec's patterns; shared between the feed and the
/// engine.
pub type Compiled = Arc<Result<Patterns, PatternError>>;

/// The pattern sources of a spec, in the order [`compile`] reads them: what
/// decides whether an earlier compilation can be reused.
pub fn sources(spec: &WebCheckerSpec) -> Vec<Option<&str>> {
    let mut out: Vec<Option<&str>> = spec
        .header_checks
        .iter()
        .flatten()
        .map(|c| c.regex.as_deref())
        .collect();
    out.push(spec.body_match.as_ref().map(|m| m.regex.as_str()));
    out.extend(tcp_steps(spec).map(|s| s.expect.as_deref()));
    out
}

fn tcp_steps(spec: &WebCheckerSpec) -> impl Iterator<Item = &webchecker_api::TcpStep> {
    spec.tcp
        .iter()
        .flat_map(|t| t.query_response.iter().flatten())
}

impl Patterns {
    /// Whether these are the patterns of `spec`.
    pub fn belong_to(&self, spec: &WebCheckerSpec) -> bool {
        let mine = self
            .headers
            .iter()
            .map(|p| p.as_ref().map(Pattern::as_str))
            .chain(std::iter::once(self.body.as_ref().map(Pattern::as_str)))
            .chain(self.expects.iter().map(|p| p.as_ref().map(Pattern::as_str)));
        mine.eq(sources(spec))
    }
}

/// Compiles the patterns of `spec` under the default limits.
pub fn compile(spec: &WebCheckerSpec) -> Result<Patterns, String> {
    compile_within(spec, PATTERN_SIZE_LIMIT, CHECKER_PATTERN_BUDGET)
}

/// Compiles the patterns of `spec`: each under `per_pattern`, all together
/// under `budget`. The error names the field and says what to change.
pub fn compile_within(
    spec: &WebCheckerSpec,
    per_pattern: usize,
    budget: usize,
) -> Result<Patterns, String> {
    let mut out = Patterns::default();
    for (i, c) in spec.header_checks.iter().flatten().enumerate() {
        let p = match &c.regex {
            Some(r) => Some(one(
                &format!("spec.headerChecks[{i}].regex (header {:?})", c.name),
                r,
                per_pattern,
                budget,
                &mut out.bytes,
            )?),
            None => None,
        };
        out.headers.push(p);
    }
    if let Some(m) = &spec.body_match {
        out.body = Some(one(
            "spec.bodyMatch.regex",
            &m.regex,
            per_pattern,
            budget,
            &mut out.bytes,
        )?);
    }
    for (i, step) in tcp_steps(spec).enumerate() {
        let p = match &step.expect {
            Some(r) => Some(one(
                &format!("spec.tcp.queryResponse[{i}].expect"),
                r,
                per_pattern,
                budget,
                &mut out.bytes,
            )?),
            None => None,
        };
        out.expects.push(p);
    }
    Ok(out)
}

fn one(
    field: &str,
    source: &str,
    per_pattern: usize,
    budget: usize,
    used: &mut usize,
) -> Result<Pattern, String> {
    let left = budget.saturating_sub(*used);
    // A pattern never gets more than what is left of the budget, so a failed
    // checker costs at most about its budget while it compiles.
    let limit = per_pattern.min(left);
    let config = meta::Config::new()
        .nfa_size_limit(Some(limit))
        .onepass_size_limit(Some(limit))
        .hybrid_cache_capacity(PATTERN_CACHE_LIMIT);
    let re = meta::Builder::new()
        .configure(config)
        .build(source)
        .map_err(|e| {
            if let Some(syntax) = e.syntax_error() {
                format!("{field} is not a valid regular expression: {syntax}")
            } else if e.size_limit().is_some() && limit < per_pattern {
                over_budget(field, budget)
            } else if e.size_limit().is_some() {
                format!(
                    "{field} is too large once compiled (limit {} per expression): use smaller counts of Unicode classes (\\w{{100}}, .{{500}}) or ASCII ones ([a-z0-9_], (?-u:\\w))",
                    mib(per_pattern)
                )
            } else {
                format!("{field} cannot be compiled: {e}")
            }
        })?;
    let bytes = re.memory_usage();
    if *used + bytes > budget {
        return Err(over_budget(field, budget));
    }
    *used += bytes;
    Ok(Pattern {
        source: source.into(),
        re,
    })
}

fn over_budget(field: &str, budget: usize) -> String {
    format!(
        "{field}: the regular expressions of this checker together are too large once compiled (limit {} per checker): make them fewer or smaller (ASCII classes: [a-z], (?-u:\\w))",
        mib(budget)
    )
}

fn mib(bytes: usize) -> String {
    if bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> WebCheckerSpec {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn with(headers: &[&str], body: Option<&str>) -> WebCheckerSpec {
        let mut s = String::from("host: http://x\n");
        if !headers.is_empty() {
            s.push_str("headerChecks:\n");
            for (i, h) in headers.iter().enumerate() {
                s.push_str(&format!("- {{name: X-H{i}, regex: '{h}'}}\n"));
            }
        }
        if let Some(b) = body {
            s.push_str(&format!("bodyMatch: {{regex: '{b}'}}\n"));
        }
        spec(&s)
    }

    #[test]
    fn ordinary_patterns_compile_and_match() {
        let p = compile(&with(
            &[
                "^ok$",
                r#"(?i)application/json"#,
                r"\w+",
                r"\d{1,3}\.\d{1,3}",
            ],
            Some(r#""status"\s*:\s*"UP""#),
        ))
        .unwrap();
        assert_eq!(p.headers.len(), 4);
        assert!(p.headers[1].as_ref().unwrap().is_match("Application/JSON"));
        assert!(p.body.as_ref().unwrap().is_match(r#"{"status": "UP"}"#));
        assert!(p.bytes > 0 && p.bytes < CHECKER_PATTERN_BUDGET);
        assert!(p.belong_to(&with(
            &[
                "^ok$",
                r#"(?i)application/json"#,
                r"\w+",
                r"\d{1,3}\.\d{1,3}"
            ],
            Some(r#""status"\s*:\s*"UP""#),
        )));
        assert!(!p.belong_to(&with(&["^ok$"], None)));
    }

    #[test]
    fn a_header_check_without_regex_keeps_its_place() {
        let s = spec("host: http://x\nheaderChecks: [{name: A}, {name: B, regex: b}]");
        let p = compile(&s).unwrap();
        assert!(p.headers[0].is_none());
        assert_eq!(p.headers[1].as_ref().unwrap().as_str(), "b");
        assert!(p.belong_to(&s));
    }

    #[test]
    fn a_pattern_over_the_limit_names_its_field_and_the_fix() {
        let e = compile(&with(&["^ok$", r"\w{1000}"], None)).unwrap_err();
        assert!(
            e.starts_with(r#"spec.headerChecks[1].regex (header "X-H1") is too large once compiled (limit 1 MiB per expression)"#),
            "{e}"
        );
        assert!(e.contains("(?-u:\\w)"), "{e}");
        let e = compile(&with(&[], Some(r"\p{L}{500}"))).unwrap_err();
        assert!(e.starts_with("spec.bodyMatch.regex is too large"), "{e}");
        // The ASCII form of the same pattern is small.
        compile(&with(&[r"(?-u:\w){1000}"], None)).unwrap();
    }

    #[test]
    fn patterns_share_one_budget_per_checker() {
        // Each fits the per-pattern limit (about 0.55 MiB); eight do not fit 4 MiB.
        let each = compile(&with(&[r"\w{10}"], None)).unwrap().bytes;
        assert!(each > 256 << 10 && each < PATTERN_SIZE_LIMIT, "{each}");
        let fit = (CHECKER_PATTERN_BUDGET / each).min(16);
        compile(&with(&vec![r"\w{10}"; fit], None)).unwrap();
        let e = compile(&with(&vec![r"\w{10}"; fit + 1], None)).unwrap_err();
        assert!(
            e.starts_with(&format!(
                "spec.headerChecks[{fit}].regex (header \"X-H{fit}\"): the regular expressions of this checker together are too large once compiled (limit 4 MiB per checker)"
            )),
            "{e}"
        );
        // The body pattern counts too.
        let e = compile(&with(&vec![r"\w{10}"; fit], Some(r"\w{10}"))).unwrap_err();
        assert!(e.starts_with("spec.bodyMatch.regex: the regular"), "{e}");
    }

    #[test]
    fn a_syntax_error_names_its_field() {
        let e = compile(&with(&[], Some("(unclosed"))).unwrap_err();
        assert!(
            e.starts_with("spec.bodyMatch.regex is not a valid regular expression"),
            "{e}"
        );
    }

    #[test]
    fn seventeen_maximal_patterns_fail_on_the_first() {
        // The patterns of the issue, at the CRD's length limit (1024): the
        // first one fails, nothing is kept, the others are not compiled.
        let big = format!("{}\\w{{1000}}", "\\p{L}{100}".repeat(100));
        assert!(big.len() <= 1024);
        let s = with(&vec![big.as_str(); 16], Some(big.as_str()));
        let e = compile(&s).unwrap_err();
        assert!(e.starts_with("spec.headerChecks[0].regex"), "{e}");
    }
}
