//! One row of a KCL-format lease table, parsed from a DynamoDB item and
//! written back as one: the one definition of the KCL lease record, used by
//! the consumer crate's lease manager, by the operator's lease-table reader
//! and by tests that write lease tables as the KCL does. Behind the
//! `dynamodb` feature, so that crates without the AWS SDK can use the rest
//! of this crate. Every field but `leaseKey` may be missing (older KCL
//! versions, other writers): missing or malformed fields become `None`/empty
//! rather than errors.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

pub use super::{Checkpoint, CheckpointKind, attribute};

/// The multi-stream part of a lease key `account:stream:creationEpoch:shardId`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StreamQualifier {
    /// AWS account id.
    pub account: String,
    /// Stream name.
    pub stream: String,
    /// Stream creation time, epoch seconds.
    pub creation_epoch: String,
}

/// A parsed lease.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseRecord {
    /// The raw key.
    pub lease_key: String,
    /// The shard id from the key.
    pub shard_id: String,
    /// The stream, for multi-stream lease keys.
    pub stream: Option<StreamQualifier>,
    /// The worker holding the lease (absent when released).
    pub lease_owner: Option<String>,
    /// Bumped by the owner on every renewal.
    pub lease_counter: Option<u64>,
    /// The checkpoint.
    pub checkpoint: Option<Checkpoint>,
    /// Sub-sequence number of an aggregated record.
    pub checkpoint_sub_sequence_number: Option<u64>,
    /// Owner changes since the last checkpoint.
    pub owner_switches_since_checkpoint: Option<u64>,
    /// Parent shard ids.
    pub parent_shard_ids: Vec<String>,
    /// Child shard ids (written at shard end by KCL 2.x).
    pub child_shard_ids: Vec<String>,
    /// The worker that owns the checkpoint during a graceful handoff.
    pub checkpoint_owner: Option<String>,
    /// Measured throughput.
    pub throughput_kbps: Option<f64>,
    /// Start of the shard's hash key range.
    pub starting_hash_key: Option<String>,
    /// End of the shard's hash key range.
    pub ending_hash_key: Option<String>,
}

/// Splits a lease key into its stream qualifier (multi-stream form) and
/// shard id. Plain keys are the shard id itself.
pub fn split_lease_key(key: &str) -> (Option<StreamQualifier>, String) {
    let parts: Vec<&str> = key.split(':').collect();
    match parts.as_slice() {
        [account, stream, epoch, shard] => (
            Some(StreamQualifier {
                account: (*account).to_owned(),
                stream: (*stream).to_owned(),
                creation_epoch: (*epoch).to_owned(),
            }),
            (*shard).to_owned(),
        ),
        _ => (None, key.to_owned()),
    }
}

/// A DynamoDB item: attribute name to value.
pub type Item = HashMap<String, AttributeValue>;

fn string(item: &Item, name: &str) -> Option<String> {
    match item.get(name)? {
        AttributeValue::S(text) if !text.is_empty() => Some(text.clone()),
        _ => None,
    }
}

fn number<T: std::str::FromStr>(item: &Item, name: &str) -> Option<T> {
    match item.get(name)? {
        AttributeValue::N(text) => text.parse().ok(),
        // Some writers store counters as strings.
        AttributeValue::S(text) => text.parse().ok(),
        _ => None,
    }
}

fn strings(item: &Item, name: &str) -> Vec<String> {
    let mut values = match item.get(name) {
        Some(AttributeValue::Ss(set)) => set.clone(),
        Some(AttributeValue::S(one)) if !one.is_empty() => vec![one.clone()],
        Some(AttributeValue::L(list)) => {
            list.iter().filter_map(|v| v.as_s().ok().cloned()).collect()
        }
        _ => Vec::new(),
    };
    values.sort();
    values.dedup();
    values
}

impl LeaseRecord {
    /// The lease keyed `lease_key` with nothing else set: what a bare item
    /// holding only its key parses to.
    pub fn new(lease_key: impl Into<String>) -> Self {
        let lease_key = lease_key.into();
        let (stream, shard_id) = split_lease_key(&lease_key);
        Self {
            lease_key,
            shard_id,
            stream,
            lease_owner: None,
            lease_counter: None,
            checkpoint: None,
            checkpoint_sub_sequence_number: None,
            owner_switches_since_checkpoint: None,
            parent_shard_ids: Vec::new(),
            child_shard_ids: Vec::new(),
            checkpoint_owner: None,
            throughput_kbps: None,
            starting_hash_key: None,
            ending_hash_key: None,
        }
    }

    /// Parses one item; `None` when it has no string `leaseKey`.
    pub fn from_item(item: &Item) -> Option<Self> {
        Some(Self::with_key(string(item, attribute::LEASE_KEY)?, item))
    }

    /// Parses the item of the lease keyed `lease_key` (a lease read by its
    /// key), whatever the item's own `leaseKey` attribute holds.
    pub fn with_key(lease_key: String, item: &Item) -> Self {
        let (stream, shard_id) = split_lease_key(&lease_key);
        Self {
            shard_id,
            stream,
            lease_owner: string(item, attribute::LEASE_OWNER),
            lease_counter: number(item, attribute::LEASE_COUNTER),
            checkpoint: string(item, attribute::CHECKPOINT)
                .as_deref()
                .and_then(Checkpoint::parse),
            checkpoint_sub_sequence_number: number(item, attribute::CHECKPOINT_SUB_SEQUENCE_NUMBER),
            owner_switches_since_checkpoint: number(
                item,
                attribute::OWNER_SWITCHES_SINCE_CHECKPOINT,
            ),
            parent_shard_ids: strings(item, attribute::PARENT_SHARD_ID),
            child_shard_ids: strings(item, attribute::CHILD_SHARD_IDS),
            checkpoint_owner: string(item, attribute::CHECKPOINT_OWNER),
            throughput_kbps: number(item, attribute::THROUGHPUT_KBPS),
            starting_hash_key: string(item, attribute::STARTING_HASH_KEY),
            ending_hash_key: string(item, attribute::ENDING_HASH_KEY),
            lease_key,
        }
    }

    /// The item the KCL would store for this lease: strings as S, counters
    /// as N, shard id lists as SS; unset fields (and empty lists) are left
    /// out. [`Self::from_item`] reads it back as this record.
    pub fn to_item(&self) -> Item {
        let text = |name: &str, value: Option<&str>| {
            value.map(|text| (name.to_owned(), AttributeValue::S(text.to_owned())))
        };
        let numeric = |name: &str, value: Option<String>| {
            value.map(|text| (name.to_owned(), AttributeValue::N(text)))
        };
        let set = |name: &str, ids: &[String]| {
            (!ids.is_empty()).then(|| (name.to_owned(), AttributeValue::Ss(ids.to_vec())))
        };
        let counter = |value: Option<u64>| value.map(|n| n.to_string());
        [
            text(attribute::LEASE_KEY, Some(&self.lease_key)),
            text(attribute::LEASE_OWNER, self.lease_owner.as_deref()),
            numeric(attribute::LEASE_COUNTER, counter(self.lease_counter)),
            text(
                attribute::CHECKPOINT,
                self.checkpoint.as_ref().map(Checkpoint::as_str),
            ),
            numeric(
                attribute::CHECKPOINT_SUB_SEQUENCE_NUMBER,
                counter(self.checkpoint_sub_sequence_number),
            ),
            numeric(
                attribute::OWNER_SWITCHES_SINCE_CHECKPOINT,
                counter(self.owner_switches_since_checkpoint),
            ),
            set(attribute::PARENT_SHARD_ID, &self.parent_shard_ids),
            set(attribute::CHILD_SHARD_IDS, &self.child_shard_ids),
            text(
                attribute::CHECKPOINT_OWNER,
                self.checkpoint_owner.as_deref(),
            ),
            numeric(
                attribute::THROUGHPUT_KBPS,
                self.throughput_kbps.map(|kbps| kbps.to_string()),
            ),
            text(
                attribute::STARTING_HASH_KEY,
                self.starting_hash_key.as_deref(),
            ),
            text(attribute::ENDING_HASH_KEY, self.ending_hash_key.as_deref()),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// Whether this lease belongs to `stream` (plain keys belong to any).
    pub fn is_for_stream(&self, stream: &str) -> bool {
        self.stream
            .as_ref()
            .is_none_or(|qualifier| qualifier.stream == stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(text: &str) -> AttributeValue {
        AttributeValue::S(text.to_owned())
    }

    #[test]
    fn parses_a_full_kcl_item() {
        let item: Item = [
            ("leaseKey", s("shardId-000000000002")),
            ("leaseOwner", s("worker-a")),
            ("leaseCounter", AttributeValue::N("17".into())),
            (
                "checkpoint",
                s("49590338271490256608559692538361571095921575989136588898"),
            ),
            ("checkpointSubSequenceNumber", AttributeValue::N("0".into())),
            (
                "ownerSwitchesSinceCheckpoint",
                AttributeValue::N("1".into()),
            ),
            (
                "parentShardId",
                AttributeValue::Ss(vec!["shardId-000000000000".into()]),
            ),
            (
                "childShardIds",
                AttributeValue::Ss(vec![
                    "shardId-000000000004".into(),
                    "shardId-000000000003".into(),
                ]),
            ),
            ("checkpointOwner", s("worker-b")),
            ("throughputKBps", AttributeValue::N("12.5".into())),
            ("startingHashKey", s("0")),
            ("endingHashKey", s("100")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let lease = LeaseRecord::from_item(&item).expect("parses");
        assert_eq!(lease.shard_id, "shardId-000000000002");
        assert_eq!(lease.stream, None);
        assert_eq!(lease.lease_owner.as_deref(), Some("worker-a"));
        assert_eq!(lease.lease_counter, Some(17));
        assert_eq!(
            lease.checkpoint.as_ref().map(Checkpoint::kind),
            Some(CheckpointKind::Sequence)
        );
        assert_eq!(lease.owner_switches_since_checkpoint, Some(1));
        assert_eq!(lease.parent_shard_ids, vec!["shardId-000000000000"]);
        assert_eq!(
            lease.child_shard_ids,
            vec!["shardId-000000000003", "shardId-000000000004"]
        );
        assert_eq!(lease.checkpoint_owner.as_deref(), Some("worker-b"));
        assert_eq!(lease.throughput_kbps, Some(12.5));
        assert_eq!(lease.ending_hash_key.as_deref(), Some("100"));
    }

    #[test]
    fn tolerates_missing_fields_and_reads_multi_stream_keys() {
        let item: Item = [(
            "leaseKey".to_owned(),
            s("123456789012:orders:1700000000:shardId-000000000007"),
        )]
        .into();
        let lease = LeaseRecord::from_item(&item).expect("parses");
        assert_eq!(lease.shard_id, "shardId-000000000007");
        assert_eq!(
            lease.stream.as_ref().map(|q| q.stream.as_str()),
            Some("orders")
        );
        assert!(lease.is_for_stream("orders"));
        assert!(!lease.is_for_stream("payments"));
        assert_eq!(lease.lease_owner, None);
        assert_eq!(lease.checkpoint, None);
        assert!(lease.parent_shard_ids.is_empty());
        assert!(LeaseRecord::from_item(&Item::new()).is_none());
    }

    #[test]
    fn an_item_written_from_a_record_reads_back_as_that_record() {
        let full = LeaseRecord {
            lease_owner: Some("worker-a".into()),
            lease_counter: Some(17),
            checkpoint: Some(Checkpoint::Sequence("4959033827149025660855".into())),
            checkpoint_sub_sequence_number: Some(0),
            owner_switches_since_checkpoint: Some(1),
            parent_shard_ids: vec!["shardId-000000000000".into()],
            child_shard_ids: vec!["shardId-000000000003".into(), "shardId-000000000004".into()],
            checkpoint_owner: Some("worker-b".into()),
            throughput_kbps: Some(12.5),
            starting_hash_key: Some("0".into()),
            ending_hash_key: Some("100".into()),
            ..LeaseRecord::new("123456789012:orders:1700000000:shardId-000000000002")
        };
        assert_eq!(full.shard_id, "shardId-000000000002");
        assert_eq!(LeaseRecord::from_item(&full.to_item()), Some(full.clone()));
        let item = full.to_item();
        assert_eq!(item["leaseCounter"], AttributeValue::N("17".into()));
        assert_eq!(
            item["parentShardId"],
            AttributeValue::Ss(vec!["shardId-000000000000".into()])
        );

        let bare = LeaseRecord::new("shardId-000000000007");
        assert_eq!(
            bare.to_item(),
            Item::from([("leaseKey".to_owned(), s("shardId-000000000007"))])
        );
        assert_eq!(LeaseRecord::from_item(&bare.to_item()), Some(bare));
        let ended = LeaseRecord {
            checkpoint: Some(Checkpoint::ShardEnd),
            ..LeaseRecord::new("shardId-000000000001")
        };
        assert_eq!(ended.to_item()["checkpoint"], s("SHARD_END"));
    }
}
