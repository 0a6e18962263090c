//! The endpoint's answers: an [`Answer`] being built (status, JSON body,
//! extra headers), the error answers every route shares (an [`ErrorBody`]
//! with a constant reason), and why the directory refused a caller
//! ([`refusal`]), each with a message that says what to do.

use std::net::IpAddr;

use bytes::Bytes;
use http::StatusCode;
use http::header::{self, HeaderValue};
use shardring_crds::endpoint::ErrorBody;

use super::Lookup;
use super::auth::Identity;
use super::ratelimit::Admission;
use shardring_core::GroupKey;

/// An answer being built: status, body, and the headers beyond the usual.
pub(super) struct Answer {
    pub(super) status: StatusCode,
    pub(super) body: Bytes,
    pub(super) headers: Vec<(header::HeaderName, HeaderValue)>,
}

impl Answer {
    pub(super) fn json(status: StatusCode, body: impl Into<Bytes>) -> Self {
        Self {
            status,
            body: body.into(),
            headers: Vec::new(),
        }
    }

    pub(super) fn error(status: StatusCode, reason: &str, message: impl Into<String>) -> Self {
        let body = ErrorBody {
            code: status.as_u16(),
            reason: reason.to_owned(),
            message: message.into(),
        };
        let bytes = serde_json::to_vec(&body).expect("an ErrorBody always serializes");
        Self::json(status, bytes)
    }

    pub(super) fn with(mut self, name: header::HeaderName, value: HeaderValue) -> Self {
        self.headers.push((name, value));
        self
    }

    /// This answer, closing the connection after it.
    pub(super) fn closing(self) -> Self {
        self.with(header::CONNECTION, HeaderValue::from_static("close"))
    }

    /// 503 for a replica that does not serve: retry at once, on a new
    /// connection (the Service sends it to the leader).
    pub(super) fn not_leader() -> Self {
        Self::error(
            StatusCode::SERVICE_UNAVAILABLE,
            "NotLeader",
            "this operator replica is not the leader; retry at once on a new connection",
        )
        .with(header::RETRY_AFTER, HeaderValue::from_static("0"))
        .closing()
    }

    pub(super) fn rate_limited(key: &str, decision: Admission) -> Self {
        Self::error(
            StatusCode::TOO_MANY_REQUESTS,
            "RateLimited",
            format!(
                "too many requests from this {key}: at most {} per window; retry in {} s",
                decision.limit, decision.reset_secs
            ),
        )
        .with(header::RETRY_AFTER, HeaderValue::from(decision.reset_secs))
    }
}

/// Why the directory refuses the caller, as an answer.
pub(super) fn refusal(lookup: &Lookup, group: &GroupKey, who: &Identity, ip: IpAddr) -> Answer {
    let forbidden =
        |reason: &str, message: String| Answer::error(StatusCode::FORBIDDEN, reason, message);
    match lookup {
        // `Found` is not a refusal; callers never pass it.
        Lookup::UnknownGroup | Lookup::Found(_) => Answer::error(
            StatusCode::NOT_FOUND,
            "UnknownShardGroup",
            format!("ShardGroup {group} is not served by this operator (yet); retry shortly"),
        ),
        // The first request for a group: its views are being prepared.
        Lookup::Warming => Answer::error(
            StatusCode::SERVICE_UNAVAILABLE,
            "Warming",
            format!(
                "ShardGroup {group}'s views are being prepared for the endpoint; retry in a second"
            ),
        )
        .with(header::RETRY_AFTER, HeaderValue::from_static("1")),
        Lookup::NotMember => forbidden(
            "NotMember",
            format!(
                "pod {} is not a member of ShardGroup {group}'s ConsumerPool",
                who.pod
            ),
        ),
        Lookup::UidMismatch => forbidden(
            "UidMismatch",
            format!(
                "the token is bound to another incarnation of pod {} (uid {}): the pod was \
                 deleted; use the token of the running pod",
                who.pod, who.uid
            ),
        ),
        Lookup::IpMismatch { expected } => forbidden(
            "IpMismatch",
            format!(
                "the request comes from {ip}, not from pod {}'s IP ({}); behind a proxy or \
                 with hostNetwork, run the operator with --endpoint-no-peer-ip-check",
                who.pod,
                expected.map_or_else(|| "none yet".to_owned(), |e| e.to_string())
            ),
        ),
    }
}
