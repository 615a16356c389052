//! What a bearer token says of itself, read without trusting it: a JWT's
//! payload, base64url-decoded. Nothing here proves anything (the signature
//! is not checked; TokenReview does that); it only lets a confirmer refuse
//! for free a token that could never pass the review: another audience,
//! another ServiceAccount, expired, or bound to a pod other than the
//! replica that says it asks. Made-up tokens then cost no API call.

use serde::Deserialize;

/// The claims a confirmer looks at.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Claims {
    pub audiences: Vec<String>,
    pub subject: String,
    /// Seconds since the epoch.
    pub expires: Option<i64>,
    /// The pod a bound token was made for.
    pub pod: Option<String>,
}

#[derive(Deserialize)]
struct Raw {
    #[serde(default)]
    aud: Option<Audience>,
    #[serde(default)]
    sub: String,
    #[serde(default)]
    exp: Option<i64>,
    #[serde(default, rename = "kubernetes.io")]
    kubernetes: Option<Private>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Audience {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
struct Private {
    #[serde(default)]
    pod: Option<Named>,
}

#[derive(Deserialize)]
struct Named {
    name: String,
}

/// The claims of `token`, or `None` when it is no JWT at all.
pub fn read(token: &str) -> Option<Claims> {
    let mut parts = token.split('.');
    let (_, payload, _) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || payload.len() > 8192 {
        return None;
    }
    let raw: Raw = serde_json::from_slice(&base64url(payload)?).ok()?;
    Some(Claims {
        audiences: match raw.aud {
            Some(Audience::One(a)) => vec![a],
            Some(Audience::Many(v)) => v,
            None => Vec::new(),
        },
        subject: raw.sub,
        expires: raw.exp,
        pod: raw.kubernetes.and_then(|k| k.pod).map(|p| p.name),
    })
}

/// Unpadded base64url (RFC 4648 section 5), as JWTs use it.
fn base64url(s: &str) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' => 62,
            b'_' => 63,
            _ => return None,
        } as u32)
    };
    let bytes = s.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            n |= value(*c)? << (18 - 6 * i);
        }
        match chunk.len() {
            4 => out.extend_from_slice(&[(n >> 16) as u8, (n >> 8) as u8, n as u8]),
            3 => out.extend_from_slice(&[(n >> 16) as u8, (n >> 8) as u8]),
            2 => out.push((n >> 16) as u8),
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
pub(crate) fn encode(payload: &serde_json::Value) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = serde_json::to_vec(payload).unwrap();
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    format!("eyJhbGciOiJSUzI1NiJ9.{out}.c2lnbmF0dXJl")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_bound_tokens_claims_are_read_and_garbage_is_none() {
        let token = encode(&json!({
            "aud": ["webchecker-operator.test.network.io/confirm"],
            "exp": 1_900_000_000,
            "sub": "system:serviceaccount:ops:webchecker-operator",
            "kubernetes.io": {"namespace": "ops", "pod": {"name": "r1", "uid": "u"},
                "serviceaccount": {"name": "webchecker-operator", "uid": "s"}},
        }));
        let c = read(&token).unwrap();
        assert_eq!(c.audiences, ["webchecker-operator.test.network.io/confirm"]);
        assert_eq!(c.subject, "system:serviceaccount:ops:webchecker-operator");
        assert_eq!(c.expires, Some(1_900_000_000));
        assert_eq!(c.pod.as_deref(), Some("r1"));
        let unbound = read(&encode(&json!({"aud": "x", "sub": "s"}))).unwrap();
        assert_eq!(
            (unbound.audiences, unbound.pod),
            (vec!["x".to_string()], None)
        );
        for garbage in ["", "abc", "a.b", "a.!!!.c", "a.b.c.d", "x.eyJ.y"] {
            assert_eq!(read(garbage), None, "{garbage:?}");
        }
    }

    #[test]
    fn base64url_round_trips_every_length() {
        for n in 0..40usize {
            let v = json!({"sub": "x".repeat(n)});
            let token = encode(&v);
            let payload = token.split('.').nth(1).unwrap();
            assert_eq!(base64url(payload).unwrap(), serde_json::to_vec(&v).unwrap());
        }
    }
}
