//! The process's rustls crypto provider. kube enables rustls's `ring`
//! provider and the AWS SDK enables `aws-lc-rs`; with both compiled in,
//! rustls cannot pick one by itself and panics at the first TLS connection
//! ("Could not automatically determine the process-level CryptoProvider").
//! Every program that builds a kube client (the binary, the e2e suite, the
//! tests) calls [`install_crypto_provider`] first.

/// Installs `ring` (kube's) as the process-wide rustls provider; a provider
/// already installed (by an earlier call, or by the program) is kept.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
