//! The client's TLS: a rustls configuration (ring provider named
//! explicitly, so no process-wide provider is needed) that trusts only the
//! endpoint's CA.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use super::error::EndpointError;

/// A rustls client configuration trusting only the certificates in `pem`
/// (ring provider, TLS 1.2 and 1.3, ALPN `http/1.1`).
pub fn tls_config(path: &Path, pem: &[u8]) -> Result<Arc<rustls::ClientConfig>, EndpointError> {
    let fail = |detail: String| EndpointError::Ca {
        path: path.display().to_string(),
        detail,
    };
    let mut roots = rustls::RootCertStore::empty();
    for certificate in CertificateDer::pem_slice_iter(pem) {
        let certificate = certificate.map_err(|e| fail(format!("not PEM: {e}")))?;
        roots
            .add(certificate)
            .map_err(|e| fail(format!("not a usable CA certificate: {e}")))?;
    }
    if roots.is_empty() {
        return Err(fail("no certificate in the file".to_owned()));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| fail(format!("TLS setup: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
