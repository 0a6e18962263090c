//! Projected service-account tokens as the mock API server knows them: a
//! JWT-shaped token whose payload carries the claims in the clear (namespace,
//! pod, uid, audiences, expiry, whether it is bound to its pod), and a
//! TokenReview answerer ([`bound_token_reviewer`]) that judges them as
//! kube-apiserver judges real ones: expired, wrong audience, unbound, or
//! authenticated with the pod's name and uid in `user.extra`. The consumer
//! endpoint's tests and benches share it.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use serde_json::{Value, json};

use super::TokenReviewer;

/// A test token's claims.
#[derive(Debug, Clone)]
pub struct Claims {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod the token is bound to.
    pub pod: String,
    /// That pod's uid.
    pub uid: String,
    /// Audiences the token was issued for.
    pub audiences: Vec<String>,
    /// Expiry, seconds since the epoch.
    pub exp: u64,
    /// Whether the token is bound to its pod.
    pub bound: bool,
    /// Distinguishes otherwise equal tokens (a bad-token flood).
    pub nonce: u64,
}

impl Claims {
    /// A valid token bound to pod `namespace/pod` (uid `uid`) for
    /// `audience`, for an hour.
    pub fn bound(namespace: &str, pod: &str, uid: &str, audience: &str) -> Self {
        Self {
            namespace: namespace.to_owned(),
            pod: pod.to_owned(),
            uid: uid.to_owned(),
            audiences: vec![audience.to_owned()],
            exp: now_secs() + 3600,
            bound: true,
            nonce: 0,
        }
    }

    /// The token.
    pub fn token(&self) -> String {
        let payload = json!({
            "ns": self.namespace, "pod": self.pod, "uid": self.uid,
            "aud": self.audiences, "exp": self.exp, "bound": self.bound, "nonce": self.nonce,
        });
        let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        format!(
            "eyJhbGciOiJSUzI1NiJ9.{}.c2lnbmF0dXJl",
            engine.encode(payload.to_string())
        )
    }
}

/// Seconds since the epoch, now.
pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}

/// The strings of a JSON array (none when it is not one): a token's `aud`,
/// a TokenReview's `spec.audiences`.
pub(crate) fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Answers TokenReviews of [`Claims::token`] tokens as kube-apiserver does.
pub fn bound_token_reviewer() -> TokenReviewer {
    Arc::new(|token: &str, audiences: &[String]| {
        let unauthenticated = |error: &str| json!({"authenticated": false, "error": error});
        let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let Some(claims) = token
            .split('.')
            .nth(1)
            .and_then(|p| engine.decode(p).ok())
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        else {
            return unauthenticated("invalid bearer token");
        };
        if claims["exp"].as_u64().unwrap_or(0) <= now_secs() {
            return unauthenticated("invalid bearer token, token has expired");
        }
        let issued = strings(&claims["aud"]);
        let granted: Vec<&String> = audiences.iter().filter(|a| issued.contains(a)).collect();
        if granted.is_empty() {
            return unauthenticated("token audiences are invalid for the target audiences");
        }
        let mut extra = json!({});
        if claims["bound"] == true {
            extra = json!({
                "authentication.kubernetes.io/pod-name": [claims["pod"]],
                "authentication.kubernetes.io/pod-uid": [claims["uid"]],
            });
        }
        json!({
            "authenticated": true,
            "audiences": granted,
            "user": {
                "username": format!("system:serviceaccount:{}:consumer", claims["ns"].as_str().unwrap_or_default()),
                "uid": "sa-uid",
                "groups": ["system:serviceaccounts"],
                "extra": extra,
            },
        })
    })
}
