//! One-shot operations on a `coordination.k8s.io/v1` Lease used as a leader
//! lock: acquire it when free or expired, renew it while held, release it on
//! shutdown. Every write is a `replace` carrying the `resourceVersion` that was
//! read (or a `create` for a missing Lease), so the API server rejects the
//! second of two concurrent writers with 409 Conflict: two replicas can never
//! both win. The loop that calls these lives in [`super::leader`].
//!
//! Expiry follows the Lease's own fields: a Lease is expired when
//! `renewTime + leaseDurationSeconds < now`. This assumes node clocks agree to
//! well within the lease duration (NTP), which the 15 s default leaves room for.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::PostParams;
use kube::{Api, Client};

use crate::clock::Clock;

/// Result of one [`LeaderLease::try_acquire_or_renew`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// We took a missing, free or expired Lease.
    Acquired,
    /// We already held the Lease and renewed it.
    Renewed,
    /// Another identity holds an unexpired Lease.
    HeldBy(String),
    /// Another writer changed the Lease between our read and our write (409).
    Conflict,
}

impl Attempt {
    /// True when this replica holds the Lease after the attempt.
    pub fn is_leader(&self) -> bool {
        matches!(self, Attempt::Acquired | Attempt::Renewed)
    }
}

/// Errors of Lease operations (409 Conflict is not an error: it is
/// [`Attempt::Conflict`]).
#[derive(Debug, thiserror::Error)]
pub enum LeaderLeaseError {
    /// The API server refused or failed a request.
    #[error("cannot {op} Lease {namespace}/{name}: {source}")]
    Api {
        /// `get`, `create` or `replace`.
        op: &'static str,
        /// Lease namespace.
        namespace: String,
        /// Lease name.
        name: String,
        /// The client error (boxed: `kube::Error` is large).
        #[source]
        source: Box<kube::Error>,
    },
}

impl LeaderLeaseError {
    /// True for errors retrying cannot fix: forbidden (RBAC needs
    /// get/create/update on leases), an invalid Lease, or a missing namespace.
    pub fn is_fatal(&self) -> bool {
        let LeaderLeaseError::Api { op, source, .. } = self;
        match source.as_ref() {
            kube::Error::Api(status) => {
                status.code == 403 || status.code == 422 || (*op == "create" && status.code == 404)
            }
            _ => false,
        }
    }

    /// Constant label for metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        if self.is_fatal() {
            "lease_fatal"
        } else {
            "lease_transient"
        }
    }
}

/// A Lease used as a leader lock by one identity.
#[derive(Clone)]
pub struct LeaderLease {
    api: Api<Lease>,
    namespace: String,
    name: String,
    identity: String,
    lease_duration: Duration,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for LeaderLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderLease")
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .field("identity", &self.identity)
            .field("lease_duration", &self.lease_duration)
            .finish_non_exhaustive()
    }
}

impl LeaderLease {
    /// The Lease `namespace/name`, held as `identity` for `lease_duration`
    /// (rounded down to whole seconds, at least 1).
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: &str,
        lease_duration: Duration,
    ) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            identity: identity.to_owned(),
            lease_duration,
            clock: crate::clock::system(),
        }
    }

    /// Replaces the wall clock (tests).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// This replica's identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    fn duration_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }

    fn error(&self, op: &'static str, source: kube::Error) -> LeaderLeaseError {
        LeaderLeaseError::Api {
            op,
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            source: Box::new(source),
        }
    }

    /// Reads the Lease and, when it is missing, free, expired or already
    /// ours, writes it with us as holder. One read and at most one write.
    pub async fn try_acquire_or_renew(&self) -> Result<Attempt, LeaderLeaseError> {
        let now = self.clock.now();
        let current = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|e| self.error("get", e))?;
        let Some(mut lease) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    namespace: Some(self.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(self.duration_seconds()),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Attempt::Acquired),
                Err(e) if is_conflict(&e) => Ok(Attempt::Conflict),
                Err(e) => Err(self.error("create", e)),
            };
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let outcome = match &holder {
            Some(holder) if *holder == self.identity => Attempt::Renewed,
            Some(holder) if !is_expired(spec, self.lease_duration, now) => {
                return Ok(Attempt::HeldBy(holder.clone()));
            }
            _ => Attempt::Acquired,
        };
        if outcome == Attempt::Acquired {
            spec.holder_identity = Some(self.identity.clone());
            spec.acquire_time = Some(MicroTime(now));
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        }
        spec.renew_time = Some(MicroTime(now));
        spec.lease_duration_seconds = Some(self.duration_seconds());
        // `lease` still carries the resourceVersion we read: the replace is
        // rejected with 409 if anyone wrote in between.
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(outcome),
            Err(e) if is_conflict(&e) => Ok(Attempt::Conflict),
            Err(e) => Err(self.error("replace", e)),
        }
    }

    /// Gives the Lease up if we hold it: clears `holderIdentity` (and sets a
    /// 1 s duration for readers that only look at expiry) so a successor takes
    /// over at its next retry instead of waiting for expiry. Returns whether
    /// a release was written.
    pub async fn release(&self) -> Result<bool, LeaderLeaseError> {
        let current = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|e| self.error("get", e))?;
        let Some(mut lease) = current else {
            return Ok(false);
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(false);
        };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(false);
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(self.clock.now()));
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            // Someone else wrote the Lease: it is no longer ours to release.
            Err(e) if is_conflict(&e) => Ok(false),
            Err(e) => Err(self.error("replace", e)),
        }
    }
}

/// True when `renewTime + leaseDurationSeconds < now` (a Lease that was never
/// renewed or acquired counts as expired). `default_duration` stands in for
/// a missing `leaseDurationSeconds`.
pub fn is_expired(spec: &LeaseSpec, default_duration: Duration, now: Timestamp) -> bool {
    let Some(MicroTime(renewed)) = spec.renew_time.as_ref().or(spec.acquire_time.as_ref()) else {
        return true;
    };
    let seconds = spec
        .lease_duration_seconds
        .map(i64::from)
        .unwrap_or(i64::try_from(default_duration.as_secs()).unwrap_or(i64::MAX));
    now.duration_since(*renewed) > SignedDuration::from_secs(seconds)
}

/// 409: Conflict on replace, AlreadyExists on create.
fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(renew_second: i64, duration: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some("other".into()),
            renew_time: Some(MicroTime(Timestamp::from_second(renew_second).unwrap())),
            lease_duration_seconds: Some(duration),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn expiry_is_renew_time_plus_duration() {
        let at = |s| Timestamp::from_second(s).unwrap();
        let fifteen = Duration::from_secs(15);
        assert!(!is_expired(&spec(1000, 15), fifteen, at(1015)));
        assert!(is_expired(&spec(1000, 15), fifteen, at(1016)));
        assert!(!is_expired(&spec(1000, 60), fifteen, at(1030)));
        assert!(is_expired(&LeaseSpec::default(), fifteen, at(0)));
    }
}
