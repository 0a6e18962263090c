//! The endpoint's serving certificate: read from a directory in the
//! `kubernetes.io/tls` Secret layout (`tls.crt`, `tls.key`, optional
//! `ca.crt`) and re-read when it changes. The kubelet updates a mounted
//! Secret by swapping a symlink, which no file watch sees reliably, so the
//! files are polled every few seconds. The rustls configuration asks a
//! [`ResolvesServerCert`] for the certificate of each handshake: swapping the
//! resolver's key changes what new connections see, and open ones keep
//! theirs. A broken new pair (unreadable, or a key that does not match)
//! keeps the previous one and is logged as an error.
//!
//! Whatever CA is in force (a mounted `ca.crt`, or the development
//! fallback's) goes into [`EndpointState::ca`](super::EndpointState::ca) for
//! the controller to publish to consumers.

use parking_lot::RwLock;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// File names of the `kubernetes.io/tls` Secret layout.
pub(crate) const CERT_FILE: &str = "tls.crt";
/// The private key.
pub(crate) const KEY_FILE: &str = "tls.key";
/// The issuing CA (optional).
pub(crate) const CA_FILE: &str = "ca.crt";

/// Why a certificate pair cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The PEM does not hold a certificate, or the key.
    #[error("{0}")]
    Pem(String),
    /// rustls refused the key or the pair.
    #[error("unusable certificate or key: {0}")]
    Key(#[from] rustls::Error),
}

/// The PEM files of one certificate pair, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PemPair {
    /// `tls.crt`: the certificate chain, leaf first.
    pub cert: Vec<u8>,
    /// `tls.key`.
    pub key: Vec<u8>,
    /// `ca.crt`, when present.
    pub ca: Option<Vec<u8>>,
}

impl PemPair {
    /// Reads `dir`'s files; `Ok(None)` when there is no `tls.crt` and no
    /// `tls.key` (no certificate mounted).
    pub(crate) fn read_dir(dir: &Path) -> Result<Option<Self>, TlsError> {
        let read = |name: &str| {
            let path = dir.join(name);
            match std::fs::read(&path) {
                Ok(bytes) => Ok(Some(bytes)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(source) => Err(TlsError::Read { path, source }),
            }
        };
        let (cert, key) = (read(CERT_FILE)?, read(KEY_FILE)?);
        let ca = read(CA_FILE)?;
        match (cert, key) {
            (None, None) => Ok(None),
            (Some(cert), Some(key)) => Ok(Some(Self { cert, key, ca })),
            (None, Some(_)) => Err(TlsError::Pem(format!(
                "{} has {KEY_FILE} but no {CERT_FILE}",
                dir.display()
            ))),
            (Some(_), None) => Err(TlsError::Pem(format!(
                "{} has {CERT_FILE} but no {KEY_FILE}",
                dir.display()
            ))),
        }
    }

    /// The rustls key, after checking that the key matches the leaf.
    pub(crate) fn certified_key(
        &self,
        provider: &CryptoProvider,
    ) -> Result<CertifiedKey, TlsError> {
        let chain = CertificateDer::pem_slice_iter(&self.cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError::Pem(format!("{CERT_FILE}: {e}")))?;
        if chain.is_empty() {
            return Err(TlsError::Pem(format!("{CERT_FILE} holds no certificate")));
        }
        let key = PrivateKeyDer::from_pem_slice(&self.key)
            .map_err(|e| TlsError::Pem(format!("{KEY_FILE}: {e}")))?;
        let certified = CertifiedKey::from_der(chain, key, provider)?;
        Ok(certified)
    }

    /// `ca.crt` as text, when present and UTF-8 (PEM always is).
    pub(crate) fn ca_pem(&self) -> Option<Arc<str>> {
        let ca = self.ca.as_deref()?;
        std::str::from_utf8(ca).ok().map(Arc::from)
    }
}

/// Hands every TLS handshake the current certificate.
#[derive(Debug)]
pub(crate) struct CertResolver {
    current: RwLock<Arc<CertifiedKey>>,
}

impl CertResolver {
    pub(crate) fn new(key: CertifiedKey) -> Self {
        Self {
            current: RwLock::new(Arc::new(key)),
        }
    }

    /// New connections get `key` from now on.
    pub(crate) fn replace(&self, key: CertifiedKey) {
        *self.current.write() = Arc::new(key);
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().clone())
    }
}

/// rustls's `ring` provider, named explicitly: the process default may be
/// another crate's (aws-lc-rs through the AWS SDK) or unset.
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The server configuration over `resolver` (HTTP/1.1 only).
pub(crate) fn server_config(
    resolver: Arc<CertResolver>,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Polls `dir` every `interval` until `stop`, and installs a changed pair
/// that works. `last` is what is in force now (`None`: the self-signed
/// fallback, replaced as soon as a certificate appears in the directory).
pub(crate) async fn watch_dir(
    dir: PathBuf,
    interval: Duration,
    mut last: Option<PemPair>,
    resolver: Arc<CertResolver>,
    ca: Arc<watch::Sender<Option<Arc<str>>>>,
    stop: CancellationToken,
) {
    let provider = provider();
    // The last content that failed, so a broken pair is reported once and
    // not every poll.
    let mut last_error: Option<PemPair> = None;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(interval) => {}
        }
        let read = {
            let dir = dir.clone();
            tokio::task::spawn_blocking(move || PemPair::read_dir(&dir)).await
        };
        let pair = match read {
            Ok(Ok(Some(pair))) => pair,
            // No certificate (any more): keep serving the one in force.
            Ok(Ok(None)) => continue,
            Ok(Err(error)) => {
                tracing::debug!(%error, dir = %dir.display(), "endpoint certificate not readable now");
                continue;
            }
            Err(error) => {
                tracing::warn!(%error, "reading the endpoint certificate panicked");
                continue;
            }
        };
        if last.as_ref() == Some(&pair) || last_error.as_ref() == Some(&pair) {
            continue;
        }
        match pair.certified_key(&provider) {
            Ok(key) => {
                resolver.replace(key);
                if let Some(pem) = pair.ca_pem() {
                    ca.send_replace(Some(pem));
                }
                tracing::info!(dir = %dir.display(), "endpoint certificate reloaded");
                last = Some(pair);
                last_error = None;
            }
            Err(error) => {
                tracing::error!(%error, dir = %dir.display(), "new endpoint certificate is unusable; keeping the previous one");
                last_error = Some(pair);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_without_files_has_no_pair_and_half_a_pair_is_an_error() {
        let dir = std::env::temp_dir().join(format!("shardring-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let _ = std::fs::remove_file(dir.join(CERT_FILE));
        let _ = std::fs::remove_file(dir.join(KEY_FILE));
        assert!(PemPair::read_dir(&dir).unwrap().is_none());
        std::fs::write(dir.join(KEY_FILE), b"x").unwrap();
        assert!(PemPair::read_dir(&dir).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
