//! One queue's consumer on a channel of its own: `basic.qos` bounds the
//! messages in flight, `basic.consume` with manual acknowledgements and
//! `exclusive` (the broker refuses a second consumer while one holds the
//! queue: even a consumer that ignores its view cannot read beside the
//! owner), deliveries taken in batches of what already arrived, and the
//! release: closing the channel, which cancels the consumer and puts the
//! messages delivered but not acknowledged back in the queue, in their
//! order, in one step of the queue; its `close-ok` comes after the broker
//! processed every acknowledgement sent before it. (A `basic.cancel` first
//! would leave a moment with no consumer on the queue while those messages
//! are still held: a second consumer could take newer ones before them.)

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::{FutureExt as _, StreamExt as _};
use lapin::message::Delivery;
use lapin::options::{BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Connection, Consumer};

use super::deadline::{self, CallError, bounded};

/// A queue being consumed.
pub(crate) struct Subscription {
    channel: Channel,
    consumer: Consumer,
    tag: String,
    /// Identifies this hold of the queue (one `basic.consume`).
    pub(crate) session: u64,
}

/// What one look at the consumer found.
pub(crate) enum Batch {
    /// Deliveries, in order.
    Deliveries(Vec<Delivery>),
    /// Nothing arrived within the poll.
    Empty,
    /// The consumer ended (the broker cancelled it, the queue was deleted,
    /// the channel or connection closed): subscribe again.
    Ended(String),
}

/// A session number no other hold of this process has had: the time in
/// milliseconds, times a thousand, plus a counter (so holds stay ordered
/// and distinct across restarts of the process too).
pub(crate) fn next_session() -> u64 {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = u64::try_from(jiff::Timestamp::now().as_millisecond()).unwrap_or(0) * 1000;
    let mut last = LAST.load(Ordering::Relaxed);
    loop {
        let next = now.max(last + 1);
        match LAST.compare_exchange(last, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return next,
            Err(seen) => last = seen,
        }
    }
}

impl Subscription {
    /// Consumes `queue` on a new channel of `connection`, at most
    /// `prefetch` messages unacknowledged, as consumer `worker/session`;
    /// each call within [`deadline::CALL`].
    pub(crate) async fn open(
        connection: &Arc<Connection>,
        queue: &str,
        worker: &str,
        prefetch: u16,
    ) -> Result<Self, CallError> {
        let channel = bounded("channel.open", deadline::CALL, connection.create_channel()).await?;
        let session = next_session();
        let tag = format!("{worker}/{session}");
        let options = BasicConsumeOptions {
            no_ack: false,
            exclusive: true,
            ..BasicConsumeOptions::default()
        };
        let consumed = async {
            bounded(
                "basic.qos",
                deadline::CALL,
                channel.basic_qos(prefetch, BasicQosOptions::default()),
            )
            .await?;
            bounded(
                "basic.consume",
                deadline::CALL,
                channel.basic_consume(
                    queue.into(),
                    tag.as_str().into(),
                    options,
                    FieldTable::default(),
                ),
            )
            .await
        };
        match consumed.await {
            Ok(consumer) => Ok(Self {
                channel,
                consumer,
                tag,
                session,
            }),
            Err(error) => {
                // A refused consume closes the channel on the broker's side;
                // close ours too (and a consume that timed out may yet be
                // registered: the close cancels it).
                let closing = channel.close(200, "consume refused".into());
                let _ = bounded("channel.close", deadline::CALL, closing).await;
                Err(error)
            }
        }
    }

    /// Waits up to `poll` for a delivery (less when `interrupt` resolves
    /// first: nothing is in hand yet), then takes every one that has
    /// already arrived, up to `most`.
    pub(crate) async fn next_batch(
        &mut self,
        poll: Duration,
        most: usize,
        interrupt: impl Future<Output = ()>,
    ) -> Batch {
        let waited = tokio::select! {
            waited = tokio::time::timeout(poll, self.consumer.next()) => waited,
            () = interrupt => return Batch::Empty,
        };
        let first = match waited {
            // Nothing within the poll. A consumer whose channel died without
            // its stream hearing of it (seen once after a broker restart:
            // every other queue of the connection ended, this one waited on)
            // would look idle for ever, so a closed channel ends the hold.
            Err(_) if !self.channel.status().connected() => {
                return Batch::Ended("the queue's channel is no longer open".into());
            }
            Err(_) => return Batch::Empty,
            Ok(None) => return Batch::Ended("the broker cancelled the consumer".into()),
            Ok(Some(Err(error))) => return Batch::Ended(error.to_string()),
            Ok(Some(Ok(delivery))) => delivery,
        };
        let mut deliveries = vec![first];
        while deliveries.len() < most {
            match self.consumer.next().now_or_never() {
                Some(Some(Ok(delivery))) => deliveries.push(delivery),
                _ => break,
            }
        }
        Batch::Deliveries(deliveries)
    }

    /// Gives the queue back: closes the channel (the consumer with it).
    /// `true` when the broker confirmed the close within
    /// [`deadline::CALL`], so every acknowledgement sent before it is
    /// processed and the rest is back in the queue.
    pub(crate) async fn release(self) -> bool {
        let closing = self.channel.close(200, "released".into());
        match bounded("channel.close", deadline::CALL, closing).await {
            Ok(()) => true,
            Err(error) => {
                tracing::warn!(tag = %self.tag, %error, "closing the queue's channel failed: its last acknowledgements may not have reached the broker");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::next_session;

    #[test]
    fn sessions_increase() {
        let a = next_session();
        let b = next_session();
        assert!(b > a);
    }
}
