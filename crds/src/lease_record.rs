//! The KCL lease-record contract: what a lease table in the Kinesis Client
//! Library's format stores, as plain data. The attribute names of a lease item
//! ([`attribute`]) and its checkpoint ([`Checkpoint`], [`CheckpointKind`]: a
//! sequence number or one of the KCL's sentinels). The consumer crate reads
//! and writes DynamoDB items with it, the operator reads lease tables with
//! it, and the controller core's lease snapshots carry its
//! [`CheckpointKind`]: one definition, no copies. The DynamoDB item of a
//! lease ([`item`]) is behind the `dynamodb` feature, so crates without the
//! AWS SDK can depend on the rest.

use std::fmt;

#[cfg(feature = "dynamodb")]
pub mod item;

/// Where a worker's checkpoint stands in a shard, as the KCL stores it in the
/// `checkpoint` attribute: a sequence number or one of the sentinels.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Checkpoint {
    /// Processed up to and including this sequence number.
    Sequence(String),
    /// Read to the end of a closed shard: the shard is complete, never read
    /// again.
    ShardEnd,
    /// Not started; will start at the oldest record.
    TrimHorizon,
    /// Not started; will start at the newest record.
    Latest,
    /// Not started; will start at a timestamp (stored in another attribute).
    AtTimestamp,
}

impl Checkpoint {
    /// The attribute value.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Sequence(sequence) => sequence,
            Self::ShardEnd => "SHARD_END",
            Self::TrimHorizon => "TRIM_HORIZON",
            Self::Latest => "LATEST",
            Self::AtTimestamp => "AT_TIMESTAMP",
        }
    }

    /// Parses the `checkpoint` attribute (KCL sentinel names or a number);
    /// anything else is `None`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "SHARD_END" => Some(Self::ShardEnd),
            "TRIM_HORIZON" => Some(Self::TrimHorizon),
            "LATEST" => Some(Self::Latest),
            "AT_TIMESTAMP" => Some(Self::AtTimestamp),
            digits if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => {
                Some(Self::Sequence(digits.to_owned()))
            }
            _ => None,
        }
    }

    /// The kind, as printed by `shardring topology`.
    pub fn kind(&self) -> CheckpointKind {
        match self {
            Self::Sequence(_) => CheckpointKind::Sequence,
            Self::ShardEnd => CheckpointKind::ShardEnd,
            Self::TrimHorizon => CheckpointKind::TrimHorizon,
            Self::Latest => CheckpointKind::Latest,
            Self::AtTimestamp => CheckpointKind::AtTimestamp,
        }
    }
}

impl fmt::Display for Checkpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The kind of a checkpoint, without its sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CheckpointKind {
    /// A sequence number.
    Sequence,
    /// `SHARD_END`.
    ShardEnd,
    /// `TRIM_HORIZON`.
    TrimHorizon,
    /// `LATEST`.
    Latest,
    /// `AT_TIMESTAMP`.
    AtTimestamp,
}

impl CheckpointKind {
    /// The KCL name (`SEQUENCE` for a sequence number).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sequence => "SEQUENCE",
            Self::ShardEnd => "SHARD_END",
            Self::TrimHorizon => "TRIM_HORIZON",
            Self::Latest => "LATEST",
            Self::AtTimestamp => "AT_TIMESTAMP",
        }
    }
}

/// The attribute names of a lease item, as the KCL writes them.
pub mod attribute {
    /// The hash key: a shard id, or `account:stream:creationEpoch:shardId`.
    pub const LEASE_KEY: &str = "leaseKey";
    /// The worker holding the lease (S, absent when free).
    pub const LEASE_OWNER: &str = "leaseOwner";
    /// Bumped by every owner write (N).
    pub const LEASE_COUNTER: &str = "leaseCounter";
    /// A sequence number or a sentinel (S).
    pub const CHECKPOINT: &str = "checkpoint";
    /// Sub-sequence number of an aggregated record (N).
    pub const CHECKPOINT_SUB_SEQUENCE_NUMBER: &str = "checkpointSubSequenceNumber";
    /// Owner changes since the last checkpoint (N).
    pub const OWNER_SWITCHES_SINCE_CHECKPOINT: &str = "ownerSwitchesSinceCheckpoint";
    /// Parent shard ids (SS).
    pub const PARENT_SHARD_ID: &str = "parentShardId";
    /// Child shard ids, written at shard end (SS).
    pub const CHILD_SHARD_IDS: &str = "childShardIds";
    /// The worker that owns the checkpoint during a graceful handoff (S).
    pub const CHECKPOINT_OWNER: &str = "checkpointOwner";
    /// Measured throughput (N).
    pub const THROUGHPUT_KBPS: &str = "throughputKBps";
    /// Start of the shard's hash key range (S).
    pub const STARTING_HASH_KEY: &str = "startingHashKey";
    /// End of the shard's hash key range (S).
    pub const ENDING_HASH_KEY: &str = "endingHashKey";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_sentinels() {
        assert_eq!(Checkpoint::parse("SHARD_END"), Some(Checkpoint::ShardEnd));
        assert_eq!(
            Checkpoint::parse("TRIM_HORIZON"),
            Some(Checkpoint::TrimHorizon)
        );
        assert_eq!(Checkpoint::parse("LATEST"), Some(Checkpoint::Latest));
        assert_eq!(
            Checkpoint::parse("AT_TIMESTAMP"),
            Some(Checkpoint::AtTimestamp)
        );
        assert_eq!(
            Checkpoint::parse("12"),
            Some(Checkpoint::Sequence("12".into()))
        );
        assert_eq!(Checkpoint::parse("garbage"), None);
        assert_eq!(Checkpoint::parse(""), None);
    }

    #[test]
    fn round_trips_sentinels_and_sequences() {
        for checkpoint in [
            Checkpoint::TrimHorizon,
            Checkpoint::Latest,
            Checkpoint::AtTimestamp,
            Checkpoint::ShardEnd,
            Checkpoint::Sequence("49590338271490256608559692538361571095921575989136588898".into()),
        ] {
            assert_eq!(
                Checkpoint::parse(checkpoint.as_str()),
                Some(checkpoint.clone())
            );
            assert_eq!(checkpoint.to_string(), checkpoint.as_str());
            assert_eq!(
                checkpoint.kind().as_str() == "SEQUENCE",
                matches!(checkpoint, Checkpoint::Sequence(_))
            );
        }
    }
}
