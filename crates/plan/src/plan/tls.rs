//! The TLS part of a plan: `spec.tls`, with its CA bundle and client
//! certificate parsed from their Secret or ConfigMap values.

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::values::{CLIENT_CERT_KEY, CLIENT_KEY_KEY, ValueRef};
use super::{Alpn, MinTlsVersion, TlsConfig, TlsPlan};
use crate::roots::Roots;
use crate::tls::{ClientIdentity, Trust, client_config};
use webchecker_api::{TlsSpec, TlsVersion};

/// `defaults` are the roots of default verification, for a checker without
/// a `caBundle` that still needs a configuration of its own.
pub fn tls_plan(
    tls: &TlsSpec,
    alpn: Alpn,
    resolve: &dyn Fn(&ValueRef) -> Result<Vec<u8>, String>,
    defaults: &Roots,
) -> Result<TlsPlan, String> {
    let insecure = tls.insecure_skip_verify.unwrap_or(false);
    let min_version = match tls.min_version.unwrap_or(TlsVersion::Tls12) {
        TlsVersion::Tls12 => MinTlsVersion::Tls12,
        TlsVersion::Tls13 => MinTlsVersion::Tls13,
    };
    let mut roots = None;
    let mut ca_certificates = 0;
    if let Some(ca) = &tls.ca_bundle {
        let r = match (&ca.secret_key_ref, &ca.config_map_key_ref) {
            (Some(s), None) => ValueRef::secret(&s.name, &s.key),
            (None, Some(c)) => ValueRef::config_map(&c.name, &c.key),
            _ => {
                return Err(
                    "spec.tls.caBundle needs exactly one of secretKeyRef or configMapKeyRef".into(),
                );
            }
        };
        let pem = resolve(&r).map_err(|e| format!("spec.tls.caBundle: {e}"))?;
        let mut store = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|_| format!("spec.tls.caBundle: {r} is not valid PEM"))?;
            store.add(cert).map_err(|e| {
                format!("spec.tls.caBundle: a certificate of {r} is not usable: {e}")
            })?;
            ca_certificates += 1;
        }
        if ca_certificates == 0 {
            return Err(format!(
                "spec.tls.caBundle: {r} holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
            ));
        }
        roots = Some(store);
    }
    let mut client = None;
    if let Some(c) = &tls.client_certificate {
        let cr = ValueRef::secret(&c.secret_name, CLIENT_CERT_KEY);
        let kr = ValueRef::secret(&c.secret_name, CLIENT_KEY_KEY);
        let crt = resolve(&cr).map_err(|e| format!("spec.tls.clientCertificate: {e}"))?;
        let key = resolve(&kr).map_err(|e| format!("spec.tls.clientCertificate: {e}"))?;
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&crt)
            .collect::<Result<_, _>>()
            .map_err(|_| format!("spec.tls.clientCertificate: {cr} is not valid PEM"))?;
        if chain.is_empty() {
            return Err(format!(
                "spec.tls.clientCertificate: {cr} holds no PEM certificate"
            ));
        }
        let key = PrivateKeyDer::from_pem_slice(&key)
            .map_err(|_| format!("spec.tls.clientCertificate: {kr} holds no PEM private key"))?;
        client = Some(ClientIdentity { chain, key });
    }
    let custom = roots.is_some() || client.is_some() || min_version == MinTlsVersion::Tls13;
    let client_certificate = client.is_some();
    let config = if custom {
        let trust = match (insecure, roots) {
            (true, _) => Trust::AnyCertificate,
            (false, Some(store)) => Trust::Roots(store),
            (false, None) => Trust::Roots(defaults.store()),
        };
        let config = client_config(trust, min_version, client, alpn).map_err(|e| {
            if client_certificate {
                format!(
                    "spec.tls.clientCertificate: the certificate and key are not usable together: {e}"
                )
            } else {
                format!("spec.tls: {e}")
            }
        })?;
        Some(TlsConfig(Arc::new(config)))
    } else {
        None
    };
    Ok(TlsPlan {
        insecure_skip_verify: insecure,
        server_name: tls.server_name.clone(),
        min_version,
        ca_certificates,
        client_certificate,
        expiry_warning_days: tls
            .certificate_expiry_warning_days
            .map(|d| d.clamp(1, 3650) as u32),
        config,
    })
}
