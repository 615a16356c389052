//! The roots of default verification: the public web's (webpki-roots) plus
//! the certificate authorities of `--ca-bundle` (a cluster's private CA),
//! trusted by every checker without a `tls.caBundle` of its own and by every
//! origin a redirect leads to. A checker's own `caBundle` replaces them.

use std::path::Path;
use std::sync::{Arc, LazyLock};

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// A root store, shared (cloning is cheap).
#[derive(Clone, Debug)]
pub struct Roots {
    store: Arc<rustls::RootCertStore>,
    /// Certificates added to the built-in roots.
    extra: usize,
}

static BUILTIN: LazyLock<Roots> = LazyLock::new(|| {
    let mut store = rustls::RootCertStore::empty();
    store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    Roots {
        store: Arc::new(store),
        extra: 0,
    }
});

impl Default for Roots {
    fn default() -> Self {
        Roots::builtin()
    }
}

impl Roots {
    /// The public web's roots alone.
    pub fn builtin() -> Roots {
        BUILTIN.clone()
    }

    /// The built-in roots plus every certificate of the PEM text `pem`
    /// (`source` names it in errors). Text that is not a certificate between
    /// them is ignored, as in any CA bundle; a bundle without one is an error.
    pub fn with_pem(pem: &[u8], source: &str) -> Result<Roots, String> {
        let mut store = (*BUILTIN.store).clone();
        let mut extra = 0;
        for (i, cert) in CertificateDer::pem_slice_iter(pem).enumerate() {
            let cert =
                cert.map_err(|_| format!("{source}: certificate {} is not valid PEM", i + 1))?;
            store.add(cert).map_err(|e| {
                format!(
                    "{source}: certificate {} is not a usable CA certificate: {e}",
                    i + 1
                )
            })?;
            extra += 1;
        }
        if extra == 0 {
            return Err(format!(
                "{source} holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
            ));
        }
        Ok(Roots {
            store: Arc::new(store),
            extra,
        })
    }

    /// [`Roots::with_pem`] of a file; errors name the file.
    pub fn from_file(path: &Path) -> Result<Roots, String> {
        let pem =
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Self::with_pem(&pem, &path.display().to_string())
    }

    /// Certificates added to the built-in roots.
    pub fn extra(&self) -> usize {
        self.extra
    }

    pub fn store(&self) -> rustls::RootCertStore {
        (*self.store).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ca_pem() -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.self_signed(&key).unwrap().pem()
    }

    #[test]
    fn a_bundle_adds_its_certificates_to_the_built_in_roots() {
        let builtin = Roots::builtin().store().len();
        assert!(builtin > 50, "webpki-roots: {builtin}");
        let pem = format!("# two private CAs\n{}\n{}", ca_pem(), ca_pem());
        let r = Roots::with_pem(pem.as_bytes(), "bundle").unwrap();
        assert_eq!(r.extra(), 2);
        assert_eq!(r.store().len(), builtin + 2);
        assert_eq!(Roots::builtin().extra(), 0);
    }

    #[test]
    fn a_bad_bundle_file_is_an_error_naming_it() {
        let dir = std::env::temp_dir().join(format!("webchecker-roots-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("missing.crt");
        let e = Roots::from_file(&missing).unwrap_err();
        assert!(
            e.starts_with(&format!("cannot read {}: ", missing.display())),
            "{e}"
        );
        let cases = [
            ("empty.crt", String::new(), "holds no PEM certificate"),
            (
                "key.crt",
                "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n".to_string(),
                "holds no PEM certificate",
            ),
            (
                "garbled.crt",
                "-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n".to_string(),
                "certificate 1 is not valid PEM",
            ),
            (
                "not-der.crt",
                format!(
                    "{}-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
                    ca_pem()
                ),
                "certificate 2 is not a usable CA certificate",
            ),
        ];
        for (name, text, want) in cases {
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            let e = Roots::from_file(&p).unwrap_err();
            assert!(e.starts_with(&p.display().to_string()), "{name}: {e}");
            assert!(e.contains(want), "{name}: {e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
