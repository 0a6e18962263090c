//! `spec.identity` of a ConsumerPool: whether a pod that stops being
//! eligible has its shards held for its return (the same pod after a
//! container restart or a readiness flap, or a StatefulSet's pod of the
//! same name recreated) instead of given to its peers, and for how long.
//! Off unless set: a hold leaves the pod's shards unread until it returns
//! or the window ends, a trade of availability for stickiness that the
//! user chooses (as Kafka's static membership is chosen per consumer).

use std::time::Duration;

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use crate::duration::{DurationError, parse_positive_duration};

/// CEL: a positive Go-style duration of at most one hour.
const RETURN_WINDOW: &str = "self.matches('^([0-9]+(ms|s|m|h))+$') && duration(self) > duration('0s') && duration(self) <= duration('1h')";

/// Whether and how long the pool's pods keep their shards while away.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct IdentitySpec {
    /// Hold the shards of a pod that stops being eligible (not Ready, or
    /// terminating) for its return within `returnWithin`: revoked at once
    /// (it must stop reading) but given to no other pod, and active on it
    /// again, at a higher epoch, once it is eligible. A pod may return when
    /// it is the same pod (not terminating: a container restart) or a
    /// StatefulSet's pod whose ordinal is below the set's replicas (a
    /// rolling restart, a deleted pod recreated). A StatefulSet scaled
    /// below a pod's ordinal, and a Deployment's deleted pod, move their
    /// shards at once. Default `false`.
    #[serde(default)]
    pub stable: bool,
    /// How long shards wait for their pod, counted from when it stopped
    /// being eligible: a positive duration of at most `1h`, default `2m`.
    /// Past it they move to other pods as without a hold.
    #[serde(default = "default_return_within")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new(RETURN_WINDOW).message("identity.returnWithin must be a positive duration of at most 1h, such as 2m (units ms, s, m, h)"))]
    pub return_within: String,
}

impl Default for IdentitySpec {
    fn default() -> Self {
        Self {
            stable: false,
            return_within: default_return_within(),
        }
    }
}

impl IdentitySpec {
    /// The return window, when holds are on (`stable`); `Err` when the
    /// stored text is not a positive duration (a spec stored before the
    /// rule: reported, never guessed at).
    pub fn window(&self) -> Result<Option<Duration>, DurationError> {
        if !self.stable {
            return Ok(None);
        }
        parse_positive_duration(&self.return_within).map(Some)
    }
}

fn default_return_within() -> String {
    "2m".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_is_set_only_when_stable() {
        let mut identity = IdentitySpec::default();
        assert_eq!(identity.window(), Ok(None));
        identity.stable = true;
        assert_eq!(identity.window(), Ok(Some(Duration::from_secs(120))));
        identity.return_within = "0s".into();
        assert!(identity.window().is_err());
    }
}
