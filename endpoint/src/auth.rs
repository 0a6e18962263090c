//! Who is calling: the bearer token of a request, checked with a TokenReview
//! against the API server for the endpoint's audience, must be a projected
//! service-account token bound to a pod. The review's answer names the pod
//! (name and uid, from the token's bound-object claims) and its namespace
//! (from the service account's username). That is [`TokenCheck::Review`],
//! the only check `shardring run` uses. The embedded mode (`shardring
//! demo`) has no API server: there [`LocalTokens`] mints a random token per
//! pod and knows whose it is ([`TokenCheck::Local`]).
//!
//! Positive answers are cached by the token's SHA-256, until the token
//! expires or a bound passes, whichever is first, so a consumer polling in a
//! loop costs one TokenReview per bound and not one per request. The
//! token's `exp` is read from the JWT payload without verifying it: it only
//! shortens how long an answer is trusted, the TokenReview is the check.
//! Negative answers are not cached (the per-IP limit, checked before, keeps
//! a flood of bad tokens off the API server), and concurrent requests with
//! the same uncached token share one review. The cache is moka's (per-entry
//! expiry, a size bound with its TinyLFU eviction, one initialisation per
//! key shared by concurrent callers); a review whose callers all gave up
//! (closed connections) is dropped with them, and the next request with the
//! token reviews it again. Tokens are never logged: at most the first bytes
//! of their hash.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, TokenReviewStatus};
use kube::Api;
use kube::api::PostParams;

use super::metrics::{EndpointMetrics, ReviewLabel};

/// Extra key of the TokenReview user naming the pod a token is bound to.
const POD_NAME_EXTRA: &str = "authentication.kubernetes.io/pod-name";
/// Extra key naming the bound pod's uid.
const POD_UID_EXTRA: &str = "authentication.kubernetes.io/pod-uid";
/// Prefix of a service account's username.
const SA_PREFIX: &str = "system:serviceaccount:";
/// Most cached tokens (one per consumer pod, renewed hourly): past it, the
/// oldest entry goes.
pub(crate) const DEFAULT_CACHE_CAPACITY: usize = 50_000;

/// The pod a token is bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Identity {
    /// The service account's namespace (the pod's).
    pub namespace: String,
    /// The service account.
    pub service_account: String,
    /// The bound pod's name.
    pub pod: String,
    /// The bound pod's uid.
    pub uid: String,
}

/// Why a request is not authenticated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum AuthError {
    /// No `Authorization: Bearer` header (401, no `error` attribute).
    #[error("send a projected service-account token of the pod as `Authorization: Bearer <token>`")]
    Missing,
    /// The API server does not accept the token for the audience (401).
    #[error("the token is not valid for audience {audience:?}: {detail}")]
    Invalid {
        /// The endpoint's audience.
        audience: String,
        /// What the review said.
        detail: String,
    },
    /// A valid token, but not one bound to a pod (401).
    #[error(
        "the token is not bound to a pod ({0}): use a projected service-account token of the \
         pod (a serviceAccountToken volume source with the endpoint's audience)"
    )]
    NotBound(String),
    /// The TokenReview could not be made (503): not the caller's fault.
    #[error("cannot review the token now: {0}")]
    Unavailable(String),
}

/// A positive answer, and until when it may be reused.
#[derive(Debug, Clone)]
struct Answer {
    identity: Arc<Identity>,
    until: Instant,
}

/// Each answer expires at its own `until` (the bound, or the token's
/// expiry when that is sooner).
struct UntilExpiry;

impl moka::Expiry<[u8; 32], Answer> for UntilExpiry {
    fn expire_after_create(
        &self,
        _key: &[u8; 32],
        answer: &Answer,
        created_at: Instant,
    ) -> Option<Duration> {
        Some(answer.until.saturating_duration_since(created_at))
    }
}

/// Authenticates bearer tokens with TokenReviews and a cache.
pub(crate) struct Authenticator {
    client: kube::Client,
    audience: String,
    cache_ttl: Duration,
    /// Positive answers by token hash. Concurrent requests with the same
    /// uncached token wait for one review (moka's `or_try_insert_with`);
    /// a refusal is handed to them and not kept.
    cache: moka::future::Cache<[u8; 32], Answer>,
    metrics: EndpointMetrics,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("audience", &self.audience)
            .field("cache_ttl", &self.cache_ttl)
            .finish_non_exhaustive()
    }
}

impl Authenticator {
    pub(crate) fn new(
        client: kube::Client,
        audience: String,
        cache_ttl: Duration,
        capacity: usize,
        metrics: EndpointMetrics,
    ) -> Self {
        Self {
            client,
            audience,
            cache_ttl,
            cache: token_cache(capacity),
            metrics,
        }
    }

    /// The pod `token` is bound to.
    pub(crate) async fn authenticate(&self, token: &str) -> Result<Arc<Identity>, AuthError> {
        let key = token_hash(token);
        let reviewed = async {
            let identity = review(&self.client, &self.audience, token, &self.metrics).await?;
            // An already expired token is answered once and not kept: it
            // expires as it is inserted.
            let until = self.cache_until(token).unwrap_or_else(Instant::now);
            Ok(Answer { identity, until })
        };
        match self.cache.entry(key).or_try_insert_with(reviewed).await {
            Ok(entry) => {
                if !entry.is_fresh() {
                    self.metrics.token_cache_hits.inc();
                }
                Ok(entry.into_value().identity)
            }
            Err(error) => {
                let error = AuthError::clone(&error);
                tracing::debug!(token = %hash_prefix(&key), %error, "token refused");
                Err(error)
            }
        }
    }

    /// Until when an answer about `token` may be reused: the bound, or the
    /// token's expiry when that is sooner (`None`: already expired).
    fn cache_until(&self, token: &str) -> Option<Instant> {
        let now = Instant::now();
        let bound = now + self.cache_ttl;
        let Some(exp) = jwt_exp(token) else {
            return Some(bound);
        };
        let left = UNIX_EPOCH
            .checked_add(Duration::from_secs(exp))?
            .duration_since(SystemTime::now())
            .ok()?;
        Some(bound.min(now + left))
    }
}

/// The answers' cache: at most `capacity` entries, each until its own time.
fn token_cache(capacity: usize) -> moka::future::Cache<[u8; 32], Answer> {
    moka::future::Cache::builder()
        .max_capacity(capacity.max(1) as u64)
        .expire_after(UntilExpiry)
        .build()
}

/// SHA-256 of a token: the cache key (the token itself is not kept).
fn token_hash(token: &str) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    let mut key = [0; 32];
    key.copy_from_slice(digest.as_ref());
    key
}

/// The first bytes of a token's hash in hex: enough to tell tokens apart in
/// logs, nothing to replay.
pub(crate) fn hash_prefix(key: &[u8; 32]) -> String {
    key[..4].iter().map(|b| format!("{b:02x}")).collect()
}

/// The `exp` claim of a JWT, read without verifying the signature.
fn jwt_exp(token: &str) -> Option<u64> {
    let payload = token.split('.').nth(1)?;
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::URL_SAFE,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    let bytes = engine.decode(payload).ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    claims.get("exp")?.as_u64()
}

/// How the endpoint checks tokens.
#[derive(Debug)]
pub(crate) enum TokenCheck {
    /// TokenReviews against the API server (production; boxed, it is
    /// large beside the other).
    Review(Box<Authenticator>),
    /// The tokens an embedded mode minted for its pods (no API server).
    Local(Arc<LocalTokens>),
}

impl TokenCheck {
    /// The pod `token` is bound to.
    pub(crate) async fn authenticate(&self, token: &str) -> Result<Arc<Identity>, AuthError> {
        match self {
            Self::Review(reviewer) => reviewer.authenticate(token).await,
            Self::Local(tokens) => tokens.identity(token),
        }
    }
}

/// The token authority of an embedded mode: a random token per pod, kept
/// by its hash with the pod's identity, standing in for the projected
/// service-account tokens and the TokenReview a cluster would have.
#[derive(Debug, Default)]
pub struct LocalTokens {
    minted: Mutex<HashMap<[u8; 32], Arc<Identity>>>,
}

impl LocalTokens {
    /// A new random token for pod `pod` (uid `uid`) in `namespace`, valid
    /// until the authority is dropped. Write it where the pod's consumer
    /// reads its token file.
    pub fn mint(&self, namespace: &str, pod: &str, uid: &str) -> String {
        let mut bytes = [0u8; 32];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
            .expect("the system's random source works");
        let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let identity = Identity {
            namespace: namespace.to_owned(),
            service_account: "default".to_owned(),
            pod: pod.to_owned(),
            uid: uid.to_owned(),
        };
        self.minted
            .lock()
            .insert(token_hash(&token), Arc::new(identity));
        token
    }

    fn identity(&self, token: &str) -> Result<Arc<Identity>, AuthError> {
        self.minted
            .lock()
            .get(&token_hash(token))
            .cloned()
            .ok_or_else(|| AuthError::Invalid {
                audience: "local".to_owned(),
                detail: "not a token this embedded endpoint minted".to_owned(),
            })
    }
}

/// One TokenReview and what it says.
async fn review(
    client: &kube::Client,
    audience: &str,
    token: &str,
    metrics: &EndpointMetrics,
) -> Result<Arc<Identity>, AuthError> {
    let request = TokenReview {
        spec: TokenReviewSpec {
            token: Some(token.to_owned()),
            audiences: Some(vec![audience.to_owned()]),
        },
        ..TokenReview::default()
    };
    let answer = Api::<TokenReview>::all(client.clone())
        .create(&PostParams::default(), &request)
        .await;
    let result = match answer {
        Ok(review) => identity(audience, review.status.unwrap_or_default()),
        Err(error) => {
            tracing::warn!(%error, "TokenReview failed");
            Err(AuthError::Unavailable(error.to_string()))
        }
    };
    let label = match &result {
        Ok(_) => "authenticated",
        Err(AuthError::Unavailable(_)) => "error",
        Err(_) => "rejected",
    };
    metrics
        .token_reviews
        .get_or_create(&ReviewLabel { result: label })
        .inc();
    result.map(Arc::new)
}

/// Reads the bound pod out of a review's status.
fn identity(audience: &str, status: TokenReviewStatus) -> Result<Identity, AuthError> {
    let invalid = |detail: String| AuthError::Invalid {
        audience: audience.to_owned(),
        detail,
    };
    if status.authenticated != Some(true) {
        return Err(invalid(
            status
                .error
                .unwrap_or_else(|| "not authenticated".to_owned()),
        ));
    }
    let audiences = status.audiences.unwrap_or_default();
    if !audiences.iter().any(|a| a == audience) {
        return Err(invalid(format!(
            "issued for audiences {audiences:?}; request a projected token with audience \
             {audience:?}"
        )));
    }
    let user = status.user.unwrap_or_default();
    let username = user.username.unwrap_or_default();
    let Some((namespace, service_account)) = username
        .strip_prefix(SA_PREFIX)
        .and_then(|rest| rest.split_once(':'))
    else {
        return Err(AuthError::NotBound(format!(
            "user {username:?} is not a service account"
        )));
    };
    let extra = user.extra.unwrap_or_default();
    let first = |key: &str| {
        extra
            .get(key)
            .and_then(|values| values.first())
            .filter(|v| !v.is_empty())
            .cloned()
    };
    let (Some(pod), Some(uid)) = (first(POD_NAME_EXTRA), first(POD_UID_EXTRA)) else {
        return Err(AuthError::NotBound(format!(
            "service account {namespace}/{service_account} without a bound pod"
        )));
    };
    Ok(Identity {
        namespace: namespace.to_owned(),
        service_account: service_account.to_owned(),
        pod,
        uid,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::authentication::v1::UserInfo;

    use super::*;

    fn status(audiences: &[&str], username: &str, pod: Option<(&str, &str)>) -> TokenReviewStatus {
        let extra = pod.map(|(name, uid)| {
            BTreeMap::from([
                (POD_NAME_EXTRA.to_owned(), vec![name.to_owned()]),
                (POD_UID_EXTRA.to_owned(), vec![uid.to_owned()]),
            ])
        });
        TokenReviewStatus {
            authenticated: Some(true),
            audiences: Some(audiences.iter().map(|a| (*a).to_owned()).collect()),
            user: Some(UserInfo {
                username: Some(username.to_owned()),
                extra,
                ..UserInfo::default()
            }),
            error: None,
        }
    }

    #[test]
    fn a_bound_token_names_its_pod_and_namespace() {
        let got = identity(
            "shardring.io",
            status(
                &["shardring.io"],
                "system:serviceaccount:team:consumer",
                Some(("c-0", "u-0")),
            ),
        )
        .unwrap();
        assert_eq!(
            got,
            Identity {
                namespace: "team".into(),
                service_account: "consumer".into(),
                pod: "c-0".into(),
                uid: "u-0".into(),
            }
        );
    }

    #[test]
    fn refusals_say_why() {
        let sa = "system:serviceaccount:team:consumer";
        let wrong_audience = identity("shardring.io", status(&["api"], sa, Some(("p", "u"))));
        assert!(
            matches!(&wrong_audience, Err(AuthError::Invalid { detail, .. }) if detail.contains("api")),
            "{wrong_audience:?}"
        );
        let unbound = identity("shardring.io", status(&["shardring.io"], sa, None));
        assert!(matches!(unbound, Err(AuthError::NotBound(_))));
        assert!(
            unbound
                .unwrap_err()
                .to_string()
                .contains("projected service-account token")
        );
        let user = identity(
            "shardring.io",
            status(&["shardring.io"], "alice", Some(("p", "u"))),
        );
        assert!(matches!(user, Err(AuthError::NotBound(_))));
        let refused = identity(
            "shardring.io",
            TokenReviewStatus {
                authenticated: Some(false),
                error: Some("token expired".into()),
                ..TokenReviewStatus::default()
            },
        );
        assert!(
            matches!(&refused, Err(AuthError::Invalid { detail, .. }) if detail == "token expired")
        );
    }

    #[tokio::test]
    async fn local_tokens_name_the_pod_they_were_minted_for() {
        let tokens = Arc::new(LocalTokens::default());
        let a = tokens.mint("team", "c-0", "u-0");
        let b = tokens.mint("team", "c-1", "u-1");
        assert_ne!(a, b);
        assert_eq!(a.len(), 64);
        let check = TokenCheck::Local(tokens);
        let who = check.authenticate(&a).await.unwrap();
        assert_eq!(
            (who.namespace.as_str(), who.pod.as_str(), who.uid.as_str()),
            ("team", "c-0", "u-0")
        );
        assert_eq!(check.authenticate(&b).await.unwrap().pod, "c-1");
        assert!(matches!(
            check.authenticate("forged").await,
            Err(AuthError::Invalid { .. })
        ));
    }

    #[test]
    fn jwt_exp_is_read_from_the_payload_with_or_without_padding() {
        let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let payload = engine.encode(br#"{"exp":1700000000,"aud":["x"]}"#);
        assert_eq!(jwt_exp(&format!("h.{payload}.s")), Some(1_700_000_000));
        let padded = base64::engine::general_purpose::URL_SAFE.encode(br#"{"exp":42}"#);
        assert_eq!(jwt_exp(&format!("h.{padded}.s")), Some(42));
        assert_eq!(jwt_exp("opaque-token"), None);
        assert_eq!(jwt_exp("h.!!!.s"), None);
    }

    #[tokio::test]
    async fn the_cache_expires_each_answer_at_its_own_time_and_stays_bounded() {
        let cache = token_cache(2);
        let now = Instant::now();
        let answer = |pod: &str, until: Instant| Answer {
            identity: Arc::new(Identity {
                namespace: "ns".into(),
                service_account: "sa".into(),
                pod: pod.into(),
                uid: "u".into(),
            }),
            until,
        };
        cache
            .insert([1; 32], answer("a", now + Duration::from_secs(60)))
            .await;
        // A token that expired before its answer came is not kept.
        cache.insert([2; 32], answer("b", now)).await;
        assert_eq!(cache.get(&[1; 32]).await.unwrap().identity.pod, "a");
        assert!(cache.get(&[2; 32]).await.is_none(), "expired");
        for key in 3..10u8 {
            cache
                .insert([key; 32], answer("c", now + Duration::from_secs(60)))
                .await;
        }
        cache.run_pending_tasks().await;
        assert!(cache.entry_count() <= 2, "{} entries", cache.entry_count());
        assert_eq!(hash_prefix(&token_hash("secret")).len(), 8);
    }
}
