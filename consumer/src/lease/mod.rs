//! KCL-compatible leases and checkpoints in a DynamoDB lease table, gated by
//! the published assignment: a lease is created or taken only while the
//! shard is `active` for this pod at the newest epoch, and only when it is
//! free or expired (its counter unchanged for the failover time, as observed
//! by this worker). Every write is a single-item conditional write (no
//! transactions: dynalite has none, and none are needed).
//!
//! Item layout (the KCL's): `leaseKey` (S, hash key: the shard id),
//! `leaseOwner` (S, absent when free), `leaseCounter` (N, bumped by every
//! owner write), `checkpoint` (S: a sequence number, `TRIM_HORIZON` or
//! `SHARD_END`), `checkpointSubSequenceNumber` (N),
//! `ownerSwitchesSinceCheckpoint` (N), `parentShardId` (SS), `childShardIds` (SS).
//! [`record`] (the API crate's) parses such an item; the operator reads
//! lease tables with it too.

mod error;
mod manager;
mod table;

pub use shardring_crds::lease_record::item as record;

pub use error::LeaseError;
pub use manager::{Lease, LeaseConfig, LeaseManager, TakeOutcome};
pub use record::{Checkpoint, CheckpointKind, LeaseRecord, StreamQualifier};
pub use table::{TableError, create_table};
