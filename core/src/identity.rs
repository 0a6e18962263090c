//! Stable identity: which pods that hold shards and are not eligible now
//! may come back within their pool's return window (`spec.identity`), so
//! their shards wait for them instead of moving ([`Returning`]), and which
//! will not, and why ([`Identities::not_returning`]).
//!
//! A pod may return when it is the same pod object, not terminating (its
//! container restarts, its readiness flaps), or when a StatefulSet will
//! create a pod of its name again: the set exists and the pod's ordinal is
//! below its `spec.replicas` (a rolling restart, a deleted pod). A
//! terminating or deleted pod that no StatefulSet recreates (a Deployment's,
//! a scaled-down ordinal) never returns. The window counts from when the pod
//! stopped being eligible: the hold the published document already records
//! for it (so a restarted operator keeps the same deadline), else what the
//! pod shows (its deletion request, its Ready transition) or when it left the
//! API, else now.
//!
//! Only pods that own shards in the documents given are considered: a pod
//! that holds nothing (a new pod not Ready yet) has nothing to wait for.
//! Pure: time is an input.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use crate::crds::{AssignmentDocument, ConsumerPool, ShardPhase};
use crate::departures::Departures;
use crate::observation::PodInfo;
use crate::pacing::add;
use crate::plan::eligible;

/// The StatefulSets of a namespace: name → `spec.replicas`.
pub type StatefulSets = BTreeMap<String, u32>;

/// A pod whose shards wait for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Returning {
    /// When it stopped being eligible.
    pub since: Timestamp,
    /// When the wait ends.
    pub until: Timestamp,
    /// The uid of its pod object when it left, when known.
    pub uid: Option<String>,
}

/// Who of the pods that own shards and are away is waited for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identities {
    /// Pods waited for, by name.
    pub returning: BTreeMap<String, Returning>,
    /// Pods away that are not waited for, with why (for the Event of a
    /// hold that ended without them).
    pub not_returning: BTreeMap<String, String>,
}

impl Identities {
    /// The hold for pod `name`, when it is waited for.
    pub fn hold_for(&self, name: &str) -> Option<&Returning> {
        self.returning.get(name)
    }

    /// Why `name` is not waited for, for an Event.
    pub fn why_not(&self, name: &str) -> &str {
        self.not_returning
            .get(name)
            .map_or("it is no longer a pod of the pool", String::as_str)
    }

    /// The earliest end of a wait.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        self.returning.values().map(|r| r.until).min()
    }
}

/// The pods of `pool` (`pods`, sorted by name, as an observation holds
/// them) that own shards in `documents`, are not eligible at `now` and may
/// return (see the module header), and those that will not.
/// Empty unless the pool sets `identity.stable`.
pub fn identities(
    pool: &ConsumerPool,
    pods: &[PodInfo],
    sets: &StatefulSets,
    departed: &Departures,
    documents: &[&AssignmentDocument],
    now: Timestamp,
) -> Identities {
    let mut out = Identities::default();
    let Some(window) = pool
        .spec
        .identity
        .as_ref()
        .and_then(|identity| identity.window().ok().flatten())
    else {
        return out;
    };
    let min_ready = pool.spec.min_ready();
    for (name, recorded) in owners(documents) {
        // The observation's pods are sorted by name.
        let pod = pods
            .binary_search_by(|p| p.name.as_str().cmp(name))
            .ok()
            .map(|i| &pods[i]);
        if pod.is_some_and(|p| eligible(p, min_ready, now)) {
            continue;
        }
        if let Err(why) = may_return(name, pod, sets) {
            out.not_returning.insert(name.to_owned(), why);
            continue;
        }
        let latest_departure = departed
            .pods
            .get(name)
            .and_then(|left| left.iter().max_by_key(|d| d.at));
        let seen = match pod {
            Some(pod) => away_since(pod),
            None => latest_departure.map(|d| d.at),
        };
        let since = recorded
            .as_ref()
            .map(|r| r.0)
            .or(seen)
            .unwrap_or(now)
            .min(now);
        let until = add(since, window);
        if now >= until {
            out.not_returning.insert(
                name.to_owned(),
                format!(
                    "it did not return within identity.returnWithin ({})",
                    describe(window)
                ),
            );
            continue;
        }
        let uid = pod
            .map(|p| p.uid.clone())
            .or_else(|| latest_departure.map(|d| d.uid.clone()))
            .or_else(|| recorded.and_then(|r| r.1));
        out.returning
            .insert(name.to_owned(), Returning { since, until, uid });
    }
    out
}

/// The owners of readable or held shards in `documents`, each with the
/// earliest hold a document records for it (its start and uid).
fn owners<'a>(
    documents: &[&'a AssignmentDocument],
) -> BTreeMap<&'a str, Option<(Timestamp, Option<String>)>> {
    let mut owners: BTreeMap<&str, Option<(Timestamp, Option<String>)>> = BTreeMap::new();
    for record in documents.iter().flat_map(|d| d.shards.values()) {
        if !matches!(
            record.state,
            ShardPhase::Active | ShardPhase::Revoking | ShardPhase::Held
        ) {
            continue;
        }
        let Some(owner) = record.owner.as_deref() else {
            continue;
        };
        let entry = owners.entry(owner).or_default();
        if let Some(hold) = &record.return_hold
            && entry.as_ref().is_none_or(|(since, _)| hold.since < *since)
        {
            *entry = Some((hold.since, hold.uid.clone()));
        }
    }
    owners
}

/// When `pod`, not eligible, stopped being so, as far as it shows: the
/// deletion request of a terminating pod, the Ready transition of one that
/// is not Ready.
fn away_since(pod: &PodInfo) -> Option<Timestamp> {
    if let Some(deadline) = pod.deletion_timestamp {
        // The deletion timestamp is the request plus the grace period.
        let grace = pod.deletion_grace_seconds.unwrap_or(0).max(0);
        return deadline.checked_sub(SignedDuration::from_secs(grace)).ok();
    }
    (!pod.ready).then_some(pod.ready_since).flatten()
}

/// Whether a pod named `name` (the object `pod`, when it exists) may be
/// eligible again; `Err` says why not.
fn may_return(name: &str, pod: Option<&PodInfo>, sets: &StatefulSets) -> Result<(), String> {
    if let Some(pod) = pod {
        if !pod.selected {
            return Err("the pool no longer selects it".into());
        }
        if pod.deletion_timestamp.is_none() {
            // The same pod: its containers restart in place.
            return Ok(());
        }
    }
    let owner = pod.and_then(|p| p.stateful_set.as_deref());
    let Some((set, ordinal)) = stateful_set_of(name, owner, sets) else {
        return Err("no StatefulSet creates a pod of its name again".into());
    };
    let replicas = sets.get(set).copied().unwrap_or(0);
    if ordinal >= replicas {
        return Err(format!(
            "StatefulSet {set} has {replicas} replicas, below its ordinal {ordinal}"
        ));
    }
    Ok(())
}

/// The StatefulSet that names a pod `name` and its ordinal: the pod's
/// controller when known, else the set whose name, a dash and a number
/// make up `name` (a deleted pod), when it exists.
fn stateful_set_of<'a>(
    name: &str,
    owner: Option<&'a str>,
    sets: &'a StatefulSets,
) -> Option<(&'a str, u32)> {
    let ordinal_after = |set: &str| -> Option<u32> {
        let rest = name.strip_prefix(set)?.strip_prefix('-')?;
        (!rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()))
            .then(|| rest.parse().ok())
            .flatten()
    };
    if let Some(set) = owner {
        return Some((set, ordinal_after(set)?));
    }
    // The longest matching name: `web-1-0` is pod 0 of `web-1`, not a pod of `web`.
    sets.keys()
        .filter_map(|set| Some((set.as_str(), ordinal_after(set)?)))
        .max_by_key(|(set, _)| set.len())
}

/// `window` as the spec shows it, for messages.
pub fn describe(window: Duration) -> String {
    SignedDuration::try_from(window).map_or_else(|_| format!("{window:?}"), |d| format!("{d:#}"))
}

#[cfg(test)]
mod tests;
