//! The consumer endpoint's wire contract: the HTTPS API the operator's
//! leader serves to consumer pods (see `docs/api.md`). A pod long-polls its
//! own view of a ShardGroup and acknowledges the release of revoked shards;
//! the operator (server) and the `consumer` crate (client) both speak it
//! through these types, so the two cannot drift apart.
//!
//! Every request carries `Authorization: Bearer <token>`: a projected
//! service-account token of the pod, bound to it, for the audience
//! [`DEFAULT_AUDIENCE`] (or the operator's `--endpoint-audience`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::assignment::PodView;

/// Version prefix of every route.
pub const API_PREFIX: &str = "/v1";
/// Audience the operator expects in consumer tokens unless configured
/// otherwise.
pub const DEFAULT_AUDIENCE: &str = "shardring.io";
/// Query parameter of the view route: the newest epoch the caller has seen
/// (absent or 0: answer at once with the current view).
pub const QUERY_EPOCH: &str = "epoch";
/// Query parameter of the view route: how long to wait for a newer view, in
/// whole seconds (default [`DEFAULT_WAIT_SECONDS`], at most
/// [`MAX_WAIT_SECONDS`]).
pub const QUERY_WAIT: &str = "waitSeconds";
/// Default long-poll wait.
pub const DEFAULT_WAIT_SECONDS: u64 = 30;
/// Longest long-poll wait a caller may ask for.
pub const MAX_WAIT_SECONDS: u64 = 300;
/// Response header: requests allowed per window for this caller.
pub const HEADER_LIMIT: &str = "x-ratelimit-limit";
/// Response header: requests left in the current window.
pub const HEADER_REMAINING: &str = "x-ratelimit-remaining";
/// Response header: whole seconds until the current window ends.
pub const HEADER_RESET: &str = "x-ratelimit-reset";
/// Label the leader puts on its own pod, so the endpoint's Service routes
/// consumers to it only.
pub const LEADER_LABEL: &str = "shardring.io/endpoint-leader";
/// ConfigMap the operator writes in every namespace with a ShardGroup,
/// holding the CA certificate (PEM) of the endpoint under
/// [`CA_CONFIGMAP_KEY`]: consumers mount it and trust only that CA.
pub const CA_CONFIGMAP_NAME: &str = "shardring-endpoint-ca";
/// Key of the CA certificate in [`CA_CONFIGMAP_NAME`].
pub const CA_CONFIGMAP_KEY: &str = "ca.crt";

/// `GET {API_PREFIX}/namespaces/{namespace}/shardgroups/{name}/view`.
pub fn view_path(namespace: &str, group: &str) -> String {
    format!("{API_PREFIX}/namespaces/{namespace}/shardgroups/{group}/view")
}

/// `POST {API_PREFIX}/namespaces/{namespace}/shardgroups/{name}/releases`.
pub fn releases_path(namespace: &str, group: &str) -> String {
    format!("{API_PREFIX}/namespaces/{namespace}/shardgroups/{group}/releases")
}

/// The answer to a view request: the caller's own view, in the annotation's
/// format, plus who it is for and the checkpoints handed over with its
/// active shards.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ViewResponse {
    /// `<namespace>/<name>` of the ShardGroup.
    pub shard_group: String,
    /// The pod the view is for (the caller).
    pub pod: String,
    /// The view, exactly as in the pod's annotation: the epoch at which its
    /// lists last changed, and the lists.
    #[serde(flatten)]
    pub view: PodView,
    /// Per active shard, the checkpoint its previous owner acknowledged when
    /// it released the shard (only shards handed over with one).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub checkpoints: BTreeMap<String, String>,
}

/// A release acknowledgement: the caller stopped reading `shard`, which its
/// view at `epoch` listed as revoking, and will not read it again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReleaseRequest {
    /// The shard released.
    pub shard: String,
    /// The epoch of the view that listed it as revoking.
    pub epoch: u64,
    /// The last checkpoint written for it, when the source has one; the next
    /// owner's view carries it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<String>,
}

/// What became of an accepted release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ReleaseOutcome {
    /// Recorded now (HTTP 202): the next reconcile activates the new owner.
    Accepted,
    /// The same release was already recorded (HTTP 200): nothing changes.
    Duplicate,
}

/// The answer to an accepted release.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseResponse {
    /// The shard.
    pub shard: String,
    /// Accepted now, or a duplicate.
    pub outcome: ReleaseOutcome,
}

/// The body of every error answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorBody {
    /// The HTTP status code.
    pub code: u16,
    /// A constant, machine-readable reason (`Unauthorized`, `NotRevoking`,
    /// `RateLimited`, `NotLeader`, ...).
    pub reason: String,
    /// What is wrong and what to do about it.
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn view_response_flattens_the_annotation_view() {
        let response = ViewResponse {
            shard_group: "ns/g".into(),
            pod: "p-0".into(),
            view: PodView {
                epoch: 7,
                active: vec!["a".into()],
                standby: vec![],
                revoking: vec!["b".into()],
            },
            checkpoints: BTreeMap::from([("a".into(), "42".into())]),
        };
        let json = serde_json::to_value(&response).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "shardGroup": "ns/g", "pod": "p-0", "epoch": 7,
                "active": ["a"], "standby": [], "revoking": ["b"],
                "checkpoints": {"a": "42"}
            })
        );
        let back: ViewResponse = serde_json::from_value(json).unwrap();
        assert_eq!(back, response);
    }

    #[test]
    fn a_release_with_an_unknown_field_is_refused() {
        let err =
            serde_json::from_str::<ReleaseRequest>(r#"{"shard":"a","epoch":1,"chekpoint":"x"}"#)
                .unwrap_err();
        assert!(err.to_string().contains("chekpoint"), "{err}");
        let ok: ReleaseRequest = serde_json::from_str(r#"{"shard":"a","epoch":1}"#).unwrap();
        assert_eq!(ok.checkpoint, None);
    }

    #[test]
    fn paths_are_versioned_and_namespaced() {
        assert_eq!(view_path("ns", "g"), "/v1/namespaces/ns/shardgroups/g/view");
        assert_eq!(
            releases_path("ns", "g"),
            "/v1/namespaces/ns/shardgroups/g/releases"
        );
    }
}
