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

/// `POST {API_PREFIX}/namespaces/{namespace}/shardgroups/{name}/loads`.
pub fn loads_path(namespace: &str, group: &str) -> String {
    format!("{API_PREFIX}/namespaces/{namespace}/shardgroups/{group}/loads")
}

/// Most shards one load report may carry: a pod reading more sends several
/// reports (each well under the 16 KiB body limit).
pub const MAX_REPORTED_SHARDS: usize = 128;

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

/// A load report: what the caller measured on the shards it reads, over
/// its last reporting interval, as the view at `epoch` lists them active.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LoadReport {
    /// The epoch of the newest view the caller acts on.
    pub epoch: u64,
    /// One entry per shard it reads (at most [`MAX_REPORTED_SHARDS`]).
    pub shards: Vec<ShardRate>,
}

/// What one shard carried over the caller's last reporting interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ShardRate {
    /// The shard.
    pub shard: String,
    /// Bytes of records read per second (finite, at least 0, at most the
    /// group's `throughput.maxShardKBps` × 1024).
    pub bytes_per_second: f64,
    /// Records read per second (finite, at least 0).
    #[serde(default)]
    pub records_per_second: f64,
}

/// The answer to a load report (HTTP 200): how many rates were recorded,
/// and why the others were not (they change nothing).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadReportResponse {
    /// Rates recorded.
    pub accepted: u32,
    /// Rates refused, each with its reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rejected: Vec<RejectedRate>,
}

/// One refused rate of a load report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RejectedRate {
    /// The shard.
    pub shard: String,
    /// A constant reason: `InvalidLoad` (negative or not a number),
    /// `AbsurdLoad` (above `throughput.maxShardKBps`), `UnknownShard` (the
    /// group has no such shard), `NotOwner` (the shard is not the caller's),
    /// `StaleReport` (the view's epoch predates the
    /// caller's ownership of the shard).
    pub reason: String,
    /// What is wrong.
    pub message: String,
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
                held: vec![],
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
    fn a_load_report_refuses_unknown_fields_and_non_numbers() {
        let ok: LoadReport =
            serde_json::from_str(r#"{"epoch":3,"shards":[{"shard":"a","bytesPerSecond":1024.5}]}"#)
                .unwrap();
        assert_eq!(ok.shards[0].records_per_second.to_bits(), 0.0f64.to_bits());
        for bad in [
            r#"{"epoch":3,"shards":[{"shard":"a","bytesPerSecond":"NaN"}]}"#,
            r#"{"epoch":3,"shards":[{"shard":"a","bytesPerSecond":NaN}]}"#,
            r#"{"epoch":3,"shards":[{"shard":"a","bytesPerSec":1}]}"#,
            r#"{"epoch":-1,"shards":[]}"#,
        ] {
            assert!(serde_json::from_str::<LoadReport>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn paths_are_versioned_and_namespaced() {
        assert_eq!(view_path("ns", "g"), "/v1/namespaces/ns/shardgroups/g/view");
        assert_eq!(
            releases_path("ns", "g"),
            "/v1/namespaces/ns/shardgroups/g/releases"
        );
        assert_eq!(
            loads_path("ns", "g"),
            "/v1/namespaces/ns/shardgroups/g/loads"
        );
    }
}
