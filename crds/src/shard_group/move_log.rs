//! One entry of the move budget's log in the status (`moveLog`): when a
//! reconcile moved shards and how many, written as `<RFC 3339> <count>`.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use jiff::Timestamp;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Shards moved by one reconcile, logged for the move budget. Its text form
/// (the wire format of `status.moveLog`) is `<RFC 3339 time> <count>`; a bare
/// time reads as one move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MoveLogEntry {
    /// When the moves were made.
    pub at: Timestamp,
    /// How many shards moved (required and optional).
    pub moves: u64,
}

/// Why a move-log entry could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("move-log entry {0:?} is not `<RFC 3339 time> <count>`")]
pub struct MoveLogEntryError(String);

impl fmt::Display for MoveLogEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.at, self.moves)
    }
}

impl FromStr for MoveLogEntry {
    type Err = MoveLogEntryError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || MoveLogEntryError(text.to_owned());
        let mut parts = text.split_whitespace();
        let at = parts.next().ok_or_else(bad)?.parse().map_err(|_| bad())?;
        let moves = match parts.next() {
            Some(count) => count.parse().map_err(|_| bad())?,
            None => 1,
        };
        Ok(Self { at, moves })
    }
}

impl Serialize for MoveLogEntry {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for MoveLogEntry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = Cow::<str>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for MoveLogEntry {
    fn schema_name() -> Cow<'static, str> {
        "MoveLogEntry".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "string" })
    }
}
