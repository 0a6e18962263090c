//! Lenient readers of the status times: a stored time (or move-log entry)
//! that does not parse reads as absent instead of failing the whole object.
//!
//! Why: these fields were RFC 3339 strings that the controller parsed on
//! every reconcile, treating one that did not parse as absent (the pod-set
//! change and a drain clock restart at the observation's time, a bad move-log
//! entry is dropped, the oldest revoke's age reads as zero). The one
//! difference: a bad `lastTopologyTime` or `oldestRevoke`, which the
//! controller used to carry along unread, is now replaced (or dropped) by
//! the next status write, as an absent one is. A strict typed
//! field would instead make the whole ShardGroup undeserializable, and the
//! `DeserializeGuard` watch would then hold that group back until someone
//! fixes its status by hand. A status the operator wrote always parses (it
//! writes these fields only from typed times, and the CRD schema declares
//! them `format: date-time`); only a hand-edited status, or one stored before
//! the schema said so, can hold a bad value, and it keeps its old meaning. A
//! value of the wrong JSON type (not a string) still fails, as it did for
//! the string fields.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};

use super::move_log::MoveLogEntry;

/// An optional RFC 3339 time; one that does not parse is `None`.
pub(super) fn time<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Timestamp>, D::Error> {
    let text = Option::<String>::deserialize(d)?;
    Ok(text.and_then(|t| t.parse().ok()))
}

/// A map of RFC 3339 times; entries that do not parse are left out.
pub(super) fn times<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, Timestamp>, D::Error> {
    let texts = BTreeMap::<String, String>::deserialize(d)?;
    Ok(texts
        .into_iter()
        .filter_map(|(key, t)| Some((key, t.parse().ok()?)))
        .collect())
}

/// A map of lists of RFC 3339 times; times that do not parse are left out
/// (and a list left empty with them).
pub(super) fn time_lists<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, Vec<Timestamp>>, D::Error> {
    let texts = BTreeMap::<String, Vec<String>>::deserialize(d)?;
    Ok(texts
        .into_iter()
        .filter_map(|(key, list)| {
            let times: Vec<Timestamp> = list.iter().filter_map(|t| t.parse().ok()).collect();
            (!times.is_empty()).then_some((key, times))
        })
        .collect())
}

/// The move log; entries that do not parse are left out.
pub(super) fn move_log<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<MoveLogEntry>, D::Error> {
    let texts = Vec::<String>::deserialize(d)?;
    Ok(texts.iter().filter_map(|t| t.parse().ok()).collect())
}

/// A list of records (the recent handoffs); entries that do not parse (a
/// hand-edited time) are left out.
pub(super) fn entries<'de, D: Deserializer<'de>, T: DeserializeOwned>(
    d: D,
) -> Result<Vec<T>, D::Error> {
    let values = Vec::<serde_json::Value>::deserialize(d)?;
    Ok(values
        .into_iter()
        .filter_map(|v| serde_json::from_value(v).ok())
        .collect())
}
