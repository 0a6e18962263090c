//! shardring's consumer library: what a consumer pod needs to honour the
//! published assignment.
//!
//! - [`view`]: the pod's view (mounted ConfigMap file, downward-API
//!   annotations file, or a ConfigMap watch) and `can_acquire(shard)`;
//! - [`lease`]: KCL-compatible leases and checkpoints in DynamoDB, taken only
//!   while the view allows it;
//! - [`reader`]: a Kinesis shard reader from a checkpoint to shard end;
//! - [`worker`]: ties them together, hands shards back on revoke, drains on SIGTERM;
//! - [`partitions`]: the same for static partitions without a lease table
//!   (SQS, RabbitMQ, any queue), driven by the consumer endpoint's view and
//!   handing checkpoints over through release acknowledgements;
//! - [`rabbitmq`]: a worker for RabbitMQ partition queues on that worker:
//!   manual acknowledgements, a bounded prefetch, exclusive consumers, and
//!   a release acknowledged only once the broker has every acknowledgement;
//! - [`check`]: a pure checker of processed-record logs (no overlap, no loss, order).

pub mod check;
pub mod clients;
pub mod lease;
pub mod partitions;
pub mod rabbitmq;
pub mod reader;
pub mod reference;
pub mod view;
pub mod worker;

pub use shardring_crds::assignment::PodView;
