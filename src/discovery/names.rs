//! Names of generated checkers and the values of their labels: deterministic
//! (the same source gives the same name on every replica and every version,
//! so a new leader finds the checkers of the old one), DNS-1123 subdomains,
//! cut with a short hash of the whole when too long.

/// Longest generated name. A WebChecker name may have 253 characters, but
/// the Events about it are named `<checker>.<16 hex digits>` (which must fit
/// in 253 too) and the name reads in `kubectl get wc`; a label value, where
/// a person may copy it, has at most 63.
pub const MAX_NAME: usize = 63;

/// Hex digits of the hash that makes a cut or lossy name unique.
const HASH_LEN: usize = 8;

/// `parts` joined with `-` as a DNS-1123 subdomain of at most [`MAX_NAME`]
/// characters: lower case, characters other than `a-z 0-9 . -` become `-`,
/// every dot-separated label starts and ends with a letter or digit. When
/// that changed the text, or it is too long, a hash of the original joined
/// text follows (so two different inputs never meet in one name).
pub fn checker_name(parts: &[&str]) -> String {
    let joined = parts.join("-");
    let clean = sanitise(&joined);
    let exact = clean == joined;
    fit(&clean, &joined, exact)
}

/// A label value for `value` (a source's name): itself when it is one
/// (63 characters at most, a DNS-1123 subdomain is always of the allowed
/// characters), else cut with a hash.
pub fn label_value(value: &str) -> String {
    checker_name(&[value])
}

/// The first [`HASH_LEN`] hex digits of SHA-256 of `text`: specified and
/// stable across builds and platforms (unlike Rust's `DefaultHasher`).
pub fn short_hash(text: &str) -> String {
    let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, text.as_bytes());
    d.as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>()[..HASH_LEN]
        .to_string()
}

fn fit(clean: &str, original: &str, exact: bool) -> String {
    if exact && !clean.is_empty() && clean.len() <= MAX_NAME {
        return clean.to_string();
    }
    let room = MAX_NAME - HASH_LEN - 1;
    let head = sanitise(&clean[..clean.len().min(room)]);
    let hash = short_hash(original);
    if head.is_empty() {
        hash
    } else {
        format!("{head}-{hash}")
    }
}

/// Lower case; other characters than `a-z 0-9 . -` to `-`; runs of `-`
/// folded; each dot-separated label trimmed of `-`; empty labels dropped.
fn sanitise(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        let c = c.to_ascii_lowercase();
        let c = if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' {
            c
        } else {
            '-'
        };
        if c == '-' && out.ends_with('-') {
            continue;
        }
        out.push(c);
    }
    out.split('.')
        .map(|l| l.trim_matches('-'))
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(".")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dns1123_subdomain(s: &str) -> bool {
        !s.is_empty()
            && s.len() <= 253
            && s.split('.').all(|l| {
                !l.is_empty()
                    && l.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            })
    }

    #[test]
    fn valid_names_are_kept_as_they_are() {
        assert_eq!(
            checker_name(&["shop", "www.example.com"]),
            "shop-www.example.com"
        );
        assert_eq!(label_value("shop"), "shop");
    }

    #[test]
    fn lossy_or_long_names_carry_a_hash_of_the_whole() {
        let a = checker_name(&["shop", "a.example.com", "API_v1"]);
        let b = checker_name(&["shop", "a.example.com", "api-v1"]);
        assert_ne!(a, b, "case and _ are not lost silently");
        assert!(a.starts_with("shop-a.example.com-api-v1-"), "{a}");
        assert_eq!(b, "shop-a.example.com-api-v1");
        let long = format!("{}.example.com", "x".repeat(80));
        let n = checker_name(&["storefront", &long]);
        assert_eq!(n.len(), MAX_NAME, "{n}");
        assert!(dns1123_subdomain(&n), "{n}");
        assert_eq!(n, checker_name(&["storefront", &long]), "deterministic");
        let other = checker_name(&["storefront", &format!("{}.example.org", "x".repeat(80))]);
        assert_ne!(n, other, "same head, different hash");
        for odd in ["-.-", "..", "A..B--", "/", "Ω", "a.-b.c-", ""] {
            let n = checker_name(&[odd]);
            assert!(dns1123_subdomain(&n), "{odd:?} -> {n:?}");
        }
    }

    #[test]
    fn the_hash_is_pinned() {
        // SHA-256("shop"): a change here renames every generated checker.
        assert_eq!(short_hash("shop"), "8d9001d3");
    }
}
