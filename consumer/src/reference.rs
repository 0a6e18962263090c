//! The reference consumer's record handler: appends one JSON line per
//! processed record ([`ProcessedRecord`]: shard, sequenceNumber,
//! partitionKey, pod, session, time, data) to a log file, flushed before the
//! batch is checkpointed, so [`crate::check`] can prove afterwards that no
//! two pods read a shard at once, nothing was lost and order held.

use parking_lot::Mutex;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

use crate::check::ProcessedRecord;
use crate::reader::Record;
use crate::worker::{RecordHandler, ShardContext};

/// Appends processed records to a JSON-lines file.
#[derive(Debug)]
pub struct RecordLog {
    file: Mutex<File>,
}

impl RecordLog {
    /// Opens (creating if needed) `path` for appending. Several processes may
    /// append to one file: each batch is one `write` of whole lines on an
    /// `O_APPEND` descriptor.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Self {
            file: Mutex::new(file),
        })
    }

    /// The lines for `records` of `context`, stamped now.
    pub fn lines(context: &ShardContext, records: &[Record]) -> String {
        let time = jiff::Timestamp::now();
        let mut out = String::new();
        for record in records {
            let line = ProcessedRecord {
                shard: context.shard.clone(),
                sequence_number: record.sequence_number.clone(),
                partition_key: record.partition_key.clone(),
                pod: context.worker_id.clone(),
                session: context.session,
                time,
                data: String::from_utf8_lossy(&record.data).into_owned(),
            };
            out.push_str(&serde_json::to_string(&line).expect("a record line serializes"));
            out.push('\n');
        }
        out
    }
}

impl RecordHandler for RecordLog {
    async fn handle(&self, context: &ShardContext, records: &[Record]) -> anyhow::Result<()> {
        let text = Self::lines(context, records);
        let mut file = self.file.lock();
        file.write_all(text.as_bytes())?;
        file.flush()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn appends_lines_the_checker_reads() {
        let path = std::env::temp_dir().join(format!(
            "shardring-record-log-{}-{}.jsonl",
            std::process::id(),
            jiff::Timestamp::now().as_nanosecond()
        ));
        let log = RecordLog::open(&path).unwrap();
        let context = ShardContext {
            shard: "shardId-000000000001".into(),
            worker_id: "pod-a".into(),
            session: 3,
        };
        let records: Vec<Record> = (1..=3)
            .map(|i| Record {
                sequence_number: format!("{i}00"),
                partition_key: format!("k{i}"),
                data: format!("payload-{i}").into_bytes(),
            })
            .collect();
        log.handle(&context, &records[..2]).await.unwrap();
        log.handle(&context, &records[2..]).await.unwrap();
        let parsed = crate::check::parse_log(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(parsed.len(), 3);
        assert_eq!(parsed[2].sequence_number, "300");
        assert_eq!(parsed[0].data, "payload-1");
        assert_eq!(parsed[1].session, 3);
        std::fs::remove_file(path).unwrap();
    }
}
