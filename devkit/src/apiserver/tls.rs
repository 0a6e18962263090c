//! TLS identity of the mock API server: a self-signed CA and a leaf
//! certificate for `127.0.0.1` and `localhost`, generated at start with
//! rcgen, and the rustls server configuration (ring provider, ALPN
//! `http/1.1`).

use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// The CA (PEM, for kubeconfigs) and the server's rustls configuration.
pub(crate) struct TlsIdentity {
    /// The CA certificate in PEM, for `certificate-authority-data`.
    pub ca_pem: String,
    /// The server configuration presenting the leaf certificate.
    pub server_config: Arc<rustls::ServerConfig>,
}

/// Generates a fresh CA and leaf and builds the server configuration.
///
/// # Panics
///
/// When certificate generation fails (it does not with ring and valid
/// parameters).
pub(crate) fn generate() -> TlsIdentity {
    let ca_key = KeyPair::generate().expect("CA key pair");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    let mut ca_name = DistinguishedName::new();
    ca_name.push(DnType::CommonName, "shardring mock apiserver CA");
    ca_params.distinguished_name = ca_name;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key).expect("self-signed CA");
    let issuer = Issuer::new(ca_params, ca_key);

    let leaf_key = KeyPair::generate().expect("leaf key pair");
    let mut leaf_params =
        CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .expect("leaf params");
    let mut leaf_name = DistinguishedName::new();
    leaf_name.push(DnType::CommonName, "kube-apiserver");
    leaf_params.distinguished_name = leaf_name;
    leaf_params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    leaf_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let leaf_cert = leaf_params
        .signed_by(&leaf_key, &issuer)
        .expect("leaf signed by the CA");

    let chain: Vec<CertificateDer<'static>> = vec![leaf_cert.der().clone(), ca_cert.der().clone()];
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
    // The provider is named explicitly: the process default may be unset, or
    // be another crate's (aws-lc-rs through the AWS SDK).
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("leaf certificate and key match");
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    TlsIdentity {
        ca_pem: ca_cert.pem(),
        server_config: Arc::new(config),
    }
}
