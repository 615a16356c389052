//! Request headers of a plan: `headers` (plain or from Secrets) and `auth`.
//! Values from Secrets are marked sensitive and never appear in errors.

use http::{HeaderName, HeaderValue};

use super::values::{ValueRef, basic_keys};
use webchecker_api::{AuthSpec, HeaderSpec};

type Resolve<'a> = &'a dyn Fn(&ValueRef) -> Result<Vec<u8>, String>;

/// `spec.headers`, then the Authorization header of `spec.auth`.
pub fn request_headers(
    headers: &[HeaderSpec],
    auth: Option<&AuthSpec>,
    resolve: Resolve<'_>,
) -> Result<Vec<(HeaderName, HeaderValue)>, String> {
    let mut out = Vec::with_capacity(headers.len() + 1);
    for h in headers {
        let name = HeaderName::from_bytes(h.name.as_bytes())
            .map_err(|_| format!("header name {:?} is not valid", h.name))?;
        let value = match (&h.value, &h.value_from) {
            (Some(v), None) => HeaderValue::from_str(v).map_err(|_| {
                format!(
                    "the value of header {:?} has characters not allowed in a header",
                    h.name
                )
            })?,
            (None, Some(src)) => {
                let r = ValueRef::secret(&src.secret_key_ref.name, &src.secret_key_ref.key);
                let bytes = resolve(&r).map_err(|e| format!("header {:?}: {e}", h.name))?;
                sensitive_header(
                    &bytes,
                    &format!("the value of header {:?} (from {r})", h.name),
                )?
            }
            _ => {
                return Err(format!(
                    "header {:?} needs exactly one of value or valueFrom",
                    h.name
                ));
            }
        };
        out.push((name, value));
    }
    if let Some(auth) = auth {
        if out.iter().any(|(n, _)| n == http::header::AUTHORIZATION) {
            return Err("spec.auth and a header named Authorization cannot be combined".into());
        }
        out.push((http::header::AUTHORIZATION, authorization(auth, resolve)?));
    }
    Ok(out)
}

fn authorization(auth: &AuthSpec, resolve: Resolve<'_>) -> Result<HeaderValue, String> {
    match (&auth.basic, &auth.bearer) {
        (Some(b), None) => {
            let (uk, pk) = basic_keys(b);
            let ur = ValueRef::secret(&b.secret_name, uk);
            let pr = ValueRef::secret(&b.secret_name, pk);
            let user = resolve(&ur).map_err(|e| format!("spec.auth.basic: {e}"))?;
            let pass = resolve(&pr).map_err(|e| format!("spec.auth.basic: {e}"))?;
            let user = trim_line_end(&user);
            if user.contains(&b':') {
                return Err(format!(
                    "spec.auth.basic: the user name ({ur}) contains ':', which Basic authentication does not allow"
                ));
            }
            let mut pair = user.to_vec();
            pair.push(b':');
            pair.extend_from_slice(trim_line_end(&pass));
            let mut v = HeaderValue::from_str(&format!("Basic {}", base64(&pair)))
                .expect("base64 is a valid header value");
            v.set_sensitive(true);
            Ok(v)
        }
        (None, Some(b)) => {
            let r = ValueRef::secret(&b.secret_key_ref.name, &b.secret_key_ref.key);
            let token = resolve(&r).map_err(|e| format!("spec.auth.bearer: {e}"))?;
            let mut full = b"Bearer ".to_vec();
            full.extend_from_slice(trim_line_end(&token));
            sensitive_header(&full, &format!("spec.auth.bearer: the token ({r})"))
        }
        _ => Err("spec.auth needs exactly one of basic or bearer".into()),
    }
}

/// Strips one trailing line ending: Secret values written with `echo` or from
/// files usually carry one, and no header may contain it.
fn trim_line_end(v: &[u8]) -> &[u8] {
    let v = v.strip_suffix(b"\n").unwrap_or(v);
    v.strip_suffix(b"\r").unwrap_or(v)
}

fn sensitive_header(bytes: &[u8], what: &str) -> Result<HeaderValue, String> {
    let mut v = HeaderValue::from_bytes(trim_line_end(bytes))
        .map_err(|_| format!("{what} has characters not allowed in a header"))?;
    v.set_sensitive(true);
    Ok(v)
}

/// Standard base64 with padding (RFC 4648), for Basic authentication.
pub fn base64(input: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::base64;

    #[test]
    fn base64_matches_rfc_4648_vectors() {
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(i.as_bytes()), o);
        }
    }
}
