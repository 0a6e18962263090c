//! The static act's partitioned queue, in memory: each partition is an
//! append-only log of numbered messages (0, 1, 2, …), read from a position
//! — the consumer's checkpoint is the number of the last message it
//! processed, so the next owner continues right after it. A producer task
//! appends one message to every partition each interval. A partition's
//! messages all have one size (the hot act makes a few partitions' messages
//! ten times larger: hot keys with big payloads).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Bytes of a message unless a partition says otherwise.
pub const MESSAGE_BYTES: u64 = 1024;

/// Message counts per partition.
#[derive(Debug, Default)]
pub struct Queue {
    lengths: Mutex<BTreeMap<String, u64>>,
    /// Bytes per message of each partition.
    sizes: Mutex<BTreeMap<String, u64>>,
}

impl Queue {
    /// A queue with the partitions `names`, empty.
    pub fn new(names: impl IntoIterator<Item = String>) -> Self {
        Self::with_sizes(names.into_iter().map(|n| (n, MESSAGE_BYTES)))
    }

    /// A queue with the partitions and message sizes `sizes`, empty.
    pub fn with_sizes(sizes: impl IntoIterator<Item = (String, u64)>) -> Self {
        let sizes: BTreeMap<String, u64> = sizes.into_iter().collect();
        Self {
            lengths: Mutex::new(sizes.keys().map(|n| (n.clone(), 0)).collect()),
            sizes: Mutex::new(sizes),
        }
    }

    fn sizes(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, u64>> {
        self.sizes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bytes of each of `partition`'s messages.
    pub fn message_bytes(&self, partition: &str) -> u64 {
        self.sizes()
            .get(partition)
            .copied()
            .unwrap_or(MESSAGE_BYTES)
    }

    /// Makes `partition`'s messages from now on `bytes` large (its keys
    /// turn hot, or cool down).
    pub fn set_message_bytes(&self, partition: &str, bytes: u64) {
        self.sizes().insert(partition.to_owned(), bytes);
    }

    fn lengths(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, u64>> {
        self.lengths.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends one message to every partition.
    fn append_to_all(&self) {
        for length in self.lengths().values_mut() {
            *length += 1;
        }
    }

    /// The numbers of up to `max` messages of `partition` from `from` on.
    pub fn read(&self, partition: &str, from: u64, max: u64) -> std::ops::Range<u64> {
        let length = self.lengths().get(partition).copied().unwrap_or(0);
        from.min(length)..length.min(from.saturating_add(max))
    }

    /// Messages written per partition so far.
    pub fn produced(&self) -> BTreeMap<String, u64> {
        self.lengths().clone()
    }
}

/// Appends to every partition each `interval` until stopped.
pub struct Producer {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Producer {
    /// Starts writing to `queue`.
    pub fn start(queue: Arc<Queue>, interval: Duration) -> Self {
        let stop = CancellationToken::new();
        let token = stop.clone();
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(interval);
            loop {
                tokio::select! {
                    () = token.cancelled() => return,
                    _ = ticks.tick() => queue.append_to_all(),
                }
            }
        });
        Self { stop, task }
    }

    /// Stops writing; nothing is appended after this returns.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_continue_from_a_position() {
        let queue = Queue::new(["q-0".to_owned(), "q-1".to_owned()]);
        for _ in 0..5 {
            queue.append_to_all();
        }
        assert_eq!(queue.read("q-0", 0, 3), 0..3);
        assert_eq!(queue.read("q-0", 3, 3), 3..5);
        assert!(queue.read("q-0", 5, 3).is_empty());
        assert!(queue.read("q-9", 0, 3).is_empty());
        assert_eq!(queue.produced()["q-1"], 5);
    }
}
