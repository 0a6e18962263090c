//! A producer for RabbitMQ partition queues, for the demo's RabbitMQ act
//! and the e2e suite: one message to every queue of its set each interval,
//! persistent, with the queue's own sequence number as `message_id`
//! (1, 2, … per queue), published with confirms and `mandatory`, so a
//! message counts as produced only when the broker confirmed it and routed
//! it to its queue. The set of queues changes while it runs (a queue added,
//! one removed before it is deleted). While the broker is away it keeps
//! trying to connect; sequence numbers are never reused, so a message the
//! broker may or may not have taken just leaves a hole in what the checker
//! expects.

use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use lapin::Confirmation;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use shardring_consumer::check::ProducedRecord;
use shardring_consumer::rabbitmq::deadline::{self, bounded};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// What the producer keeps between ticks, shared with its handle.
#[derive(Default)]
struct Book {
    queues: BTreeSet<String>,
    next: BTreeMap<String, u64>,
    produced: Vec<ProducedRecord>,
    failed: u64,
}

/// A running producer; dropping it stops it.
pub struct QueueProducer {
    book: Arc<Mutex<Book>>,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl QueueProducer {
    /// Publishes to each of `queues` every `interval`, on the broker at
    /// `url` (`amqp://user:password@host:port/<vhost>`).
    pub fn start(
        url: String,
        queues: impl IntoIterator<Item = String>,
        interval: Duration,
    ) -> Self {
        let book = Arc::new(Mutex::new(Book {
            queues: queues.into_iter().collect(),
            ..Book::default()
        }));
        let stop = CancellationToken::new();
        let task = tokio::spawn(run(url, Arc::clone(&book), interval, stop.clone()));
        Self {
            book,
            stop,
            task: Some(task),
        }
    }

    /// Publishes to `queue` too from the next tick on.
    pub fn add_queue(&self, queue: &str) {
        self.book.lock().queues.insert(queue.to_owned());
    }

    /// Stops publishing to `queue`; returns once no publish to it is in
    /// flight (the set is read under the same lock a tick publishes under).
    pub fn remove_queue(&self, queue: &str) {
        self.book.lock().queues.remove(queue);
    }

    /// Messages confirmed and routed so far.
    pub fn produced(&self) -> Vec<ProducedRecord> {
        self.book.lock().produced.clone()
    }

    /// Messages confirmed so far, per queue.
    pub fn produced_per_queue(&self) -> BTreeMap<String, u64> {
        let mut counts = BTreeMap::new();
        for record in &self.book.lock().produced {
            *counts.entry(record.shard.clone()).or_insert(0) += 1;
        }
        counts
    }

    /// Stops; returns every message confirmed and routed, and how many
    /// publishes failed (not expected back).
    pub async fn stop(mut self) -> (Vec<ProducedRecord>, u64) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        let book = self.book.lock();
        (book.produced.clone(), book.failed)
    }
}

impl Drop for QueueProducer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn connect(url: &str) -> Option<(Connection, Channel)> {
    let properties =
        ConnectionProperties::default().with_connection_name("shardring producer".into());
    let connecting = Connection::connect(url, properties);
    let connection = bounded("connection.open", deadline::CONNECT, connecting)
        .await
        .ok()?;
    let opening = connection.create_channel();
    let channel = bounded("channel.open", deadline::CALL, opening)
        .await
        .ok()?;
    let selecting = channel.confirm_select(ConfirmSelectOptions::default());
    bounded("confirm.select", deadline::CALL, selecting)
        .await
        .ok()?;
    Some((connection, channel))
}

async fn run(url: String, book: Arc<Mutex<Book>>, interval: Duration, stop: CancellationToken) {
    let mut link: Option<(Connection, Channel)> = None;
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            _ = ticker.tick() => {}
        }
        if link.as_ref().is_none_or(|(c, _)| !c.status().connected()) {
            link = connect(&url).await;
        }
        let Some((_, channel)) = &link else {
            continue;
        };
        // One message per queue, numbered under the lock, so a queue
        // removed meanwhile gets none.
        let batch: Vec<(String, u64)> = {
            let mut book = book.lock();
            let Book { queues, next, .. } = &mut *book;
            queues
                .iter()
                .map(|queue| {
                    let seq = next.entry(queue.clone()).or_insert(0);
                    *seq += 1;
                    (queue.clone(), *seq)
                })
                .collect()
        };
        for (queue, seq) in batch {
            let routed = publish(channel, &queue, seq).await;
            let mut book = book.lock();
            if routed {
                book.produced.push(ProducedRecord {
                    shard: queue,
                    sequence_number: seq.to_string(),
                });
            } else {
                book.failed += 1;
            }
        }
    }
    if let Some((connection, _)) = link {
        let _ = connection.close(200, "producer stopped".into()).await;
    }
}

/// Publishes message `seq` to `queue`; whether the broker confirmed it and
/// routed it.
async fn publish(channel: &Channel, queue: &str, seq: u64) -> bool {
    let properties = BasicProperties::default()
        .with_message_id(seq.to_string().into())
        .with_delivery_mode(2);
    let options = BasicPublishOptions {
        mandatory: true,
        ..BasicPublishOptions::default()
    };
    let body = format!("{queue} #{seq}");
    let publishing = channel.basic_publish(
        "".into(),
        queue.into(),
        options,
        body.as_bytes(),
        properties,
    );
    // Bounded like the consumers' calls (see `deadline`): a publish or a
    // confirm lapin never resolves would stop the producer for good.
    let Ok(confirm) = bounded("basic.publish", deadline::CALL, publishing).await else {
        return false;
    };
    matches!(
        bounded("the publisher confirm", deadline::CALL, confirm).await,
        Ok(Confirmation::Ack(None))
    )
}
