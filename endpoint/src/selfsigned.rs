//! The development fallback when no certificate is mounted: a self-signed
//! CA and a serving certificate it signs, for the endpoint Service's names.
//!
//! Every replica must serve under the same CA, or a failover would change
//! the CA consumers trust. So the pair lives in a Secret of the operator's
//! namespace (`shardring-endpoint-selfsigned`, `kubernetes.io/tls` with
//! `ca.crt`): the first replica creates it, the others (409 Conflict on
//! create) read the winner's. Only when the Secret can be neither created
//! nor read is the pair kept in memory, which is logged. The CA's key is
//! discarded once the serving certificate is signed: nothing needs to sign
//! again, and a key not kept cannot leak.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

use super::tls::{CA_FILE, CERT_FILE, KEY_FILE, PemPair};

/// Name of the Secret the replicas share.
pub(crate) const SECRET_NAME: &str = "shardring-endpoint-selfsigned";
/// Name of the endpoint's Service, the base of the certificate's names.
pub(crate) const SERVICE_NAME: &str = "shardring-endpoint";

/// A generated CA and serving certificate, in PEM.
#[derive(Debug, Clone)]
pub(crate) struct SelfSigned {
    /// The serving certificate followed by the CA.
    pub cert: String,
    /// The serving certificate's key.
    pub key: String,
    /// The CA certificate.
    pub ca: String,
}

/// Where the pair in force came from (for the log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// Created in the Secret by this replica.
    Created,
    /// Read from the Secret another replica created.
    Shared,
    /// Only in memory: the Secret could not be used.
    InMemory,
}

/// The names of the serving certificate: the Service's in-cluster names in
/// `namespace`, localhost, and `extra` (`--endpoint-dns-name`).
pub(crate) fn subject_names(namespace: &str, extra: &[String]) -> Vec<String> {
    let mut names = vec![
        SERVICE_NAME.to_owned(),
        format!("{SERVICE_NAME}.{namespace}"),
        format!("{SERVICE_NAME}.{namespace}.svc"),
        format!("{SERVICE_NAME}.{namespace}.svc.cluster.local"),
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
    ];
    for name in extra {
        if !names.contains(name) {
            names.push(name.clone());
        }
    }
    names
}

impl SelfSigned {
    /// A new CA and a serving certificate for `names` (DNS names or IP
    /// addresses).
    pub(crate) fn generate(names: &[String]) -> Result<Self, rcgen::Error> {
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        let mut ca_name = DistinguishedName::new();
        ca_name.push(DnType::CommonName, "shardring endpoint self-signed CA");
        ca_params.distinguished_name = ca_name;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca_params, ca_key);

        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(names.to_vec())?;
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, SERVICE_NAME);
        params.distinguished_name = name;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &issuer)?;
        Ok(Self {
            cert: format!("{}{}", cert.pem(), ca_cert.pem()),
            key: key.serialize_pem(),
            ca: ca_cert.pem(),
        })
    }

    /// The pair in the layout of a mounted Secret.
    pub(crate) fn pair(&self) -> PemPair {
        PemPair {
            cert: self.cert.clone().into_bytes(),
            key: self.key.clone().into_bytes(),
            ca: Some(self.ca.clone().into_bytes()),
        }
    }

    fn to_secret(&self, namespace: &str) -> Secret {
        let data = [
            (CERT_FILE, &self.cert),
            (KEY_FILE, &self.key),
            (CA_FILE, &self.ca),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), ByteString(v.clone().into_bytes())))
        .collect::<BTreeMap<_, _>>();
        Secret {
            metadata: ObjectMeta {
                name: Some(SECRET_NAME.to_owned()),
                namespace: Some(namespace.to_owned()),
                labels: Some(BTreeMap::from([(
                    "app.kubernetes.io/managed-by".to_owned(),
                    "shardring".to_owned(),
                )])),
                ..ObjectMeta::default()
            },
            type_: Some("kubernetes.io/tls".to_owned()),
            data: Some(data),
            ..Secret::default()
        }
    }

    fn from_secret(secret: &Secret) -> Option<Self> {
        let data = secret.data.as_ref()?;
        let text = |key: &str| {
            data.get(key)
                .and_then(|b| String::from_utf8(b.0.clone()).ok())
        };
        Some(Self {
            cert: text(CERT_FILE)?,
            key: text(KEY_FILE)?,
            ca: text(CA_FILE)?,
        })
    }
}

/// The replicas' shared pair: created in the Secret, or the one another
/// replica created; generated in memory when the Secret cannot be used.
pub(crate) async fn get_or_create(
    client: kube::Client,
    namespace: &str,
    names: &[String],
) -> Result<(SelfSigned, Origin), rcgen::Error> {
    let fresh = SelfSigned::generate(names)?;
    let api = Api::<Secret>::namespaced(client, namespace);
    let existing = match api
        .create(&PostParams::default(), &fresh.to_secret(namespace))
        .await
    {
        Ok(_) => return Ok((fresh, Origin::Created)),
        Err(kube::Error::Api(status)) if status.code == 409 => api.get(SECRET_NAME).await,
        Err(error) => Err(error),
    };
    match existing {
        Ok(secret) => {
            if let Some(shared) = SelfSigned::from_secret(&secret) {
                return Ok((shared, Origin::Shared));
            }
            tracing::error!(
                secret = SECRET_NAME,
                %namespace,
                "the endpoint's self-signed Secret lacks tls.crt, tls.key or ca.crt; \
                 using an in-memory certificate (replicas will not share a CA)"
            );
        }
        Err(error) => tracing::error!(
            %error,
            secret = SECRET_NAME,
            %namespace,
            "cannot create or read the endpoint's self-signed Secret; using an in-memory \
             certificate (replicas will not share a CA)"
        ),
    }
    Ok((fresh, Origin::InMemory))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_pair_loads_and_a_mismatched_key_is_refused() {
        let one = SelfSigned::generate(&["localhost".into()]).unwrap();
        let two = SelfSigned::generate(&["localhost".into()]).unwrap();
        let provider = crate::tls::provider();
        one.pair().certified_key(&provider).unwrap();
        let mixed = PemPair {
            key: two.pair().key,
            ..one.pair()
        };
        assert!(mixed.certified_key(&provider).is_err());
        let garbage = PemPair {
            cert: b"not pem".to_vec(),
            ..one.pair()
        };
        assert!(garbage.certified_key(&provider).is_err());
    }

    #[test]
    fn names_cover_the_service_localhost_and_extra_names_once() {
        let names = subject_names("ops", &["ep.example.com".into(), "localhost".into()]);
        assert_eq!(
            names,
            [
                "shardring-endpoint",
                "shardring-endpoint.ops",
                "shardring-endpoint.ops.svc",
                "shardring-endpoint.ops.svc.cluster.local",
                "localhost",
                "127.0.0.1",
                "ep.example.com",
            ]
        );
    }

    #[test]
    fn a_secret_round_trips() {
        let pair = SelfSigned::generate(&["localhost".into()]).unwrap();
        let secret = pair.to_secret("ops");
        assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
        let back = SelfSigned::from_secret(&secret).unwrap();
        assert_eq!(
            (back.cert, back.key, back.ca),
            (pair.cert, pair.key, pair.ca)
        );
    }
}
