//! The management API's credentials: a Secret in the operator's namespace,
//! named by the spec (never the credentials themselves in the custom
//! resource), read with `get` on that one name — the operator neither
//! lists nor watches Secrets. Read at every listing, so a rotated password
//! is used from the next refresh on. What a missing or unreadable Secret
//! means is said in a [`SourceError`] with reason
//! [`CREDENTIALS_UNAVAILABLE`] and what to do.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};

use super::CREDENTIALS_UNAVAILABLE;
use crate::source::SourceError;

/// A user name and password for HTTP basic authentication.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The management user.
    pub username: String,
    /// Its password.
    pub password: String,
}

impl fmt::Debug for Credentials {
    /// Never prints the password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// A future of [`Secrets::basic_auth`].
pub type CredentialsFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Credentials, SourceError>> + Send + 'a>>;

/// Where the named Secrets of the operator's namespace are read.
pub trait Secrets: Send + Sync + fmt::Debug {
    /// The `username` and `password` of Secret `name`.
    fn basic_auth<'a>(&'a self, name: &'a str) -> CredentialsFuture<'a>;
}

/// The Secrets of the operator's namespace through the Kubernetes API
/// (`get` by name only).
#[derive(Clone)]
pub struct KubeSecrets {
    api: Api<Secret>,
    namespace: String,
}

impl fmt::Debug for KubeSecrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeSecrets")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl KubeSecrets {
    /// Reads Secrets of `namespace` (the operator's own) with `client`.
    pub fn new(client: Client, namespace: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
        }
    }
}

impl Secrets for KubeSecrets {
    fn basic_auth<'a>(&'a self, name: &'a str) -> CredentialsFuture<'a> {
        Box::pin(async move {
            let unavailable = |message: String| SourceError::Named {
                reason: CREDENTIALS_UNAVAILABLE,
                message,
            };
            let qualified = format!("{}/{name}", self.namespace);
            let secret = match self.api.get(name).await {
                Ok(secret) => secret,
                Err(kube::Error::Api(status)) if status.code == 404 => {
                    return Err(unavailable(format!(
                        "Secret {qualified} does not exist: create it (type kubernetes.io/basic-auth) \
                         with the keys username and password of a management user"
                    )));
                }
                Err(kube::Error::Api(status)) if status.code == 403 => {
                    return Err(unavailable(format!(
                        "the operator may not get Secret {qualified}: add {name:?} to the \
                         resourceNames of its Role shardring-rabbitmq-credentials (Helm value \
                         rabbitmq.credentialsSecrets)"
                    )));
                }
                Err(error) => {
                    return Err(SourceError::Other(format!(
                        "reading Secret {qualified}: {error}"
                    )));
                }
            };
            let data: BTreeMap<String, Vec<u8>> = secret
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(key, value)| (key, value.0))
                .collect();
            from_data(&qualified, &data).map_err(unavailable)
        })
    }
}

/// The credentials in a Secret's data, or what is missing from it.
pub(crate) fn from_data(
    qualified: &str,
    data: &BTreeMap<String, Vec<u8>>,
) -> Result<Credentials, String> {
    let field = |key: &str| -> Result<String, String> {
        let value = data.get(key).ok_or_else(|| {
            format!("Secret {qualified} has no key {key}: set username and password")
        })?;
        let text = String::from_utf8(value.clone())
            .map_err(|_| format!("the {key} of Secret {qualified} is not UTF-8 text"))?;
        if text.is_empty() {
            return Err(format!("the {key} of Secret {qualified} is empty"));
        }
        Ok(text)
    };
    Ok(Credentials {
        username: field("username")?,
        password: field("password")?,
    })
}

/// Credentials held in memory, by Secret name: the demo's stage, which has
/// no API server, and tests.
#[derive(Debug, Default)]
pub struct FixedSecrets {
    secrets: BTreeMap<String, Credentials>,
}

impl FixedSecrets {
    /// These secrets, with `name` holding `credentials` too.
    #[must_use]
    pub fn with(mut self, name: &str, credentials: Credentials) -> Self {
        self.secrets.insert(name.to_owned(), credentials);
        self
    }
}

impl Secrets for FixedSecrets {
    fn basic_auth<'a>(&'a self, name: &'a str) -> CredentialsFuture<'a> {
        let found = self
            .secrets
            .get(name)
            .cloned()
            .ok_or_else(|| SourceError::Named {
                reason: CREDENTIALS_UNAVAILABLE,
                message: format!("no Secret {name} holds RabbitMQ credentials"),
            });
        Box::pin(std::future::ready(found))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_needs_both_keys_as_text() {
        let data = |pairs: &[(&str, &[u8])]| -> BTreeMap<String, Vec<u8>> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.to_vec()))
                .collect()
        };
        let ok = from_data(
            "ns/s",
            &data(&[("username", b"shardring"), ("password", b"pw")]),
        )
        .unwrap();
        assert_eq!(ok.username, "shardring");
        assert_eq!(ok.password, "pw");
        assert!(
            !format!("{ok:?}").contains("pw"),
            "the password is never printed"
        );
        let missing = from_data("ns/s", &data(&[("username", b"u")])).unwrap_err();
        assert_eq!(
            missing,
            "Secret ns/s has no key password: set username and password"
        );
        let empty = from_data("ns/s", &data(&[("username", b""), ("password", b"p")])).unwrap_err();
        assert_eq!(empty, "the username of Secret ns/s is empty");
        let binary =
            from_data("ns/s", &data(&[("username", b"u"), ("password", &[0xff])])).unwrap_err();
        assert!(binary.contains("not UTF-8"), "{binary}");
    }
}
