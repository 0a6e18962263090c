//! The reference consumer's message handler for RabbitMQ: one JSON line per
//! handled message ([`ProcessedRecord`]: the queue as `shard`, the
//! producer's `message_id` as `sequenceNumber`, the pod, the hold's
//! session, the time), flushed before the message is acknowledged, and one
//! line per hold that ended ([`HoldEnd`]: clean, or lost with messages
//! whose acknowledgement may have been in flight), so [`super::verdict`]
//! can tell a duplicate the contract allows from one it does not.

use parking_lot::Mutex;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

use jiff::Timestamp;
use lapin::message::Delivery;
use serde::{Deserialize, Serialize};

use super::{MessageHandler, QueueContext};
use crate::check::ProcessedRecord;

/// The end of one hold of a queue, as a log line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HoldEnd {
    /// The queue.
    pub ended: String,
    /// The pod.
    pub pod: String,
    /// The hold.
    pub session: u64,
    /// Whether the broker confirmed it had every acknowledgement.
    pub clean: bool,
    /// When.
    pub time: Timestamp,
}

/// One line of a queue log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum QueueLogLine {
    /// A hold ended.
    End(HoldEnd),
    /// A message was handled.
    Record(ProcessedRecord),
}

/// Appends handled messages and hold ends to a JSON-lines file.
#[derive(Debug)]
pub struct QueueLog {
    file: Mutex<File>,
}

impl QueueLog {
    /// Opens (creating if needed) `path` for appending.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Self {
            file: Mutex::new(file),
        })
    }

    fn append(&self, line: &QueueLogLine) -> std::io::Result<()> {
        let mut text = serde_json::to_string(line).map_err(std::io::Error::other)?;
        text.push('\n');
        let mut file = self.file.lock();
        file.write_all(text.as_bytes())?;
        file.flush()
    }
}

/// The record of `delivery` handled in `context` at `time`.
pub fn record(context: &QueueContext, delivery: &Delivery, time: Timestamp) -> ProcessedRecord {
    ProcessedRecord {
        shard: context.queue.clone(),
        sequence_number: delivery
            .properties
            .message_id()
            .as_ref()
            .map_or_else(String::new, ToString::to_string),
        partition_key: delivery.routing_key.to_string(),
        pod: context.worker_id.clone(),
        session: context.session,
        time,
        data: String::from_utf8_lossy(&delivery.data).into_owned(),
    }
}

impl MessageHandler for QueueLog {
    async fn handle(&self, context: &QueueContext, delivery: &Delivery) -> anyhow::Result<()> {
        let line = QueueLogLine::Record(record(context, delivery, Timestamp::now()));
        self.append(&line)?;
        Ok(())
    }

    fn ended(&self, context: &QueueContext, clean: bool) {
        let line = QueueLogLine::End(HoldEnd {
            ended: context.queue.clone(),
            pod: context.worker_id.clone(),
            session: context.session,
            clean,
            time: Timestamp::now(),
        });
        if let Err(error) = self.append(&line) {
            tracing::warn!(%error, "cannot log the end of a hold");
        }
    }
}
