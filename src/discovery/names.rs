//! Names of generated checkers and the values of their labels: deterministic
//! (the same source gives the same name on every replica, so a new leader
//! finds the checkers of the old one; the rule is pinned by the tests below),
//! DNS-1123 subdomains, unambiguous (a checker's name ends with a hash of
//! what it was generated for).

/// Longest generated name. A WebChecker name may have 253 characters, but
/// the Events about it are named `<checker>.<16 hex digits>` (which must fit
/// in 253 too) and the name reads in `kubectl get wc`; a label value, where
/// a person may copy it, has at most 63.
pub const MAX_NAME: usize = 63;

/// Hex digits of the hash that makes a cut or lossy name unique.
const HASH_LEN: usize = 8;

/// The name of a generated checker: `head` (the source's name, the host,
/// ...) joined with `-` as a DNS-1123 subdomain, cut to leave room for `-`
/// and a hash of the source's `kind` (its `source` label) and `identity`
/// (each part length-prefixed). Always hashed: joined parts are ambiguous
/// (Ingress `a` with host `b-c` and Ingress `a-b` with host `c` both read
/// `a-b-c`, an Ingress and an HTTPRoute of one name share their hosts), the
/// hash is not, so two sources meet on one name only by a hash collision
/// (which the writer then refuses as `NameTaken`, like any name in use).
pub fn checker_name(kind: &str, identity: &[&str], head: &[&str]) -> String {
    let mut whole = kind.to_string();
    for part in identity {
        whole.push_str(&format!("\n{}:{part}", part.len()));
    }
    headed(&sanitise(&head.join("-")), short_hash(&whole))
}

/// The name of the checker a source of `kind` (its `source` label) named
/// `source` generates for `host` (a Service's: `svc`), through `gateway`
/// (`namespace/name`, and as the name shows it) with `via: gateway`, for
/// `path` with `per-path` (`/` or None: the host's own checker).
pub fn generated(
    kind: &str,
    source: &str,
    host: &str,
    gateway: Option<(&str, &str)>,
    path: Option<&str>,
) -> String {
    let (gateway, label) = gateway.unwrap_or_default();
    let path = path.filter(|p| *p != "/");
    let identity = [source, host, gateway, path.unwrap_or_default()];
    let slug = path.map(|p| p.trim_matches('/').replace('/', "-"));
    let head: Vec<&str> = [source, host, label]
        .into_iter()
        .chain(slug.as_deref())
        .filter(|p| !p.is_empty())
        .collect();
    checker_name(kind, &identity, &head)
}

/// A label value for `value` (a source's name): itself when it is one
/// (63 characters at most, a DNS-1123 subdomain is always of the allowed
/// characters), else cut with a hash of the whole.
pub fn label_value(value: &str) -> String {
    let clean = sanitise(value);
    fit(&clean, value, clean == value)
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
    headed(clean, short_hash(original))
}

/// `clean` (of `sanitise`: ASCII) cut to leave room for `-<hash>`, then it.
fn headed(clean: &str, hash: String) -> String {
    let room = MAX_NAME - HASH_LEN - 1;
    let head = sanitise(&clean[..clean.len().min(room)]);
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
    fn label_values_are_kept_when_valid_and_cut_with_a_hash_else() {
        assert_eq!(label_value("shop"), "shop");
        let long = "x".repeat(80);
        let v = label_value(&long);
        assert_eq!(v.len(), MAX_NAME, "{v}");
        assert!(v.starts_with("xxx") && v != label_value(&"x".repeat(81)));
        assert!(label_value("Shop_1").ends_with(&short_hash("Shop_1")));
    }

    #[test]
    fn names_read_as_their_parts_and_end_with_a_hash_of_the_source() {
        let n = checker_name(
            "ingress",
            &["shop", "www.example.com"],
            &["shop", "www.example.com"],
        );
        assert_eq!(
            n,
            format!("shop-www.example.com-{}", &n[n.len() - HASH_LEN..])
        );
        assert!(dns1123_subdomain(&n), "{n}");
        assert_eq!(
            n,
            checker_name(
                "ingress",
                &["shop", "www.example.com"],
                &["shop", "www.example.com"]
            ),
            "deterministic"
        );
    }

    #[test]
    fn sources_whose_parts_join_alike_get_different_names() {
        let a = checker_name("ingress", &["a", "b-c"], &["a", "b-c"]);
        let b = checker_name("ingress", &["a-b", "c"], &["a-b", "c"]);
        assert!(
            a.starts_with("a-b-c-") && b.starts_with("a-b-c-"),
            "{a} {b}"
        );
        assert_ne!(a, b, "Ingress a with host b-c, Ingress a-b with host c");
        let route = checker_name("httproute", &["a", "b-c"], &["a", "b-c"]);
        assert_ne!(a, route, "an Ingress and an HTTPRoute of one name and host");
        let case = checker_name("ingress", &["a", "b", "/API_v1"], &["a", "b", "API_v1"]);
        let lower = checker_name("ingress", &["a", "b", "/api-v1"], &["a", "b", "api-v1"]);
        assert_ne!(case, lower, "case and _ are not lost silently");
        let empty = checker_name("ingress", &["a", ""], &["a"]);
        assert_ne!(
            empty,
            checker_name("ingress", &["a"], &["a"]),
            "parts are length-prefixed"
        );
    }

    #[test]
    fn long_or_odd_names_are_cut_to_fit() {
        let long = format!("{}.example.com", "x".repeat(80));
        let n = checker_name("ingress", &["storefront", &long], &["storefront", &long]);
        assert_eq!(n.len(), MAX_NAME, "{n}");
        assert!(dns1123_subdomain(&n), "{n}");
        let other = format!("{}.example.org", "x".repeat(80));
        let o = checker_name("ingress", &["storefront", &other], &["storefront", &other]);
        assert_ne!(n, o, "same head, different hash");
        for odd in ["-.-", "..", "A..B--", "/", "Ω", "a.-b.c-", ""] {
            let n = checker_name("service", &[odd], &[odd, "svc"]);
            assert!(dns1123_subdomain(&n), "{odd:?} -> {n:?}");
            let bare = checker_name("service", &[odd], &[odd]);
            assert!(dns1123_subdomain(&bare), "{odd:?} -> {bare:?}");
        }
    }

    #[test]
    fn the_names_are_pinned() {
        // SHA-256("shop"): a change here renames every generated checker.
        assert_eq!(short_hash("shop"), "8d9001d3");
        assert_eq!(
            checker_name(
                "ingress",
                &["shop", "www.example.com"],
                &["shop", "www.example.com"]
            ),
            "shop-www.example.com-0202554e"
        );
    }
}
