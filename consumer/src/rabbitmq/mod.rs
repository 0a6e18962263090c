//! The RabbitMQ queue worker: the static-partition worker
//! ([`crate::partitions::PartitionWorker`]) over a [`QueueReader`], which
//! consumes exactly the queues the pod's view makes active. Each queue is
//! consumed on a channel of its own with manual acknowledgements, a bounded
//! prefetch and an exclusive consumer ([`subscription`]); each message is
//! acknowledged after the [`MessageHandler`] returned. When the view revokes
//! a queue, the reader finishes the batch in hand, cancels the consumer and
//! closes the channel, and only once the broker confirmed the close (it has
//! every acknowledgement, and put the messages delivered but not handled
//! back in their order) does the worker acknowledge the release at the
//! operator's endpoint, so the next owner starts with the first message
//! this pod did not acknowledge. Processing is at least once: a message
//! whose acknowledgement was in flight when the consumer died (a killed
//! pod, a broker restart) is delivered again.
//!
//! The worker keeps one connection ([`connection`]), opened again with
//! backoff after the broker went away; a queue whose consumer ended (the
//! broker restarted, the queue was deleted) is subscribed again on the next
//! batch, as a new hold. Every call that waits on the broker has a
//! deadline ([`deadline`]): lapin can leave one pending for ever when the
//! connection dies under it. [`log::QueueLog`] is the reference consumer's
//! handler, [`verdict`] the checker of its logs.

mod connection;
pub mod deadline;
pub mod log;
mod subscription;
pub mod verdict;

use parking_lot::Mutex;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lapin::message::Delivery;
use lapin::options::BasicAckOptions;
use tokio::time::Instant;

pub use connection::redact;
pub use lapin::message::Delivery as QueueDelivery;

use self::connection::Shared;
use self::subscription::{Batch, Subscription};
use crate::partitions::{PartitionContext, PartitionHandler};
use crate::view::AssignmentView;
use shardring_backoff::Backoff;

/// Which queue, pod, view epoch and hold a message belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueContext {
    /// The queue (the partition id in the assignment).
    pub queue: String,
    /// This worker's id (the pod name).
    pub worker_id: String,
    /// The view's epoch when the reader started.
    pub epoch: u64,
    /// This hold of the queue: one consumer, from subscribe to release.
    pub session: u64,
}

/// The user's processing of one message.
pub trait MessageHandler: Send + Sync + 'static {
    /// Processes `delivery` of `context.queue`; it is acknowledged when
    /// this returns `Ok`. An `Err` stops the queue's reader: the message
    /// and those after it go back to the queue and are delivered again.
    fn handle(
        &self,
        context: &QueueContext,
        delivery: &Delivery,
    ) -> impl Future<Output = anyhow::Result<()>> + Send;

    /// A hold ended: `clean` when the broker confirmed it has every
    /// acknowledgement (a release), `false` when the consumer was lost
    /// (the connection or channel died) and messages whose acknowledgement
    /// was in flight may be delivered again.
    fn ended(&self, _context: &QueueContext, _clean: bool) {}
}

/// How the worker consumes.
#[derive(Debug, Clone)]
pub struct QueueConfig {
    /// The broker: `amqp://user:password@host:5672/<vhost>` (or `amqps://`).
    pub url: String,
    /// Most messages delivered and not yet acknowledged, per queue.
    pub prefetch: u16,
    /// How long one look at a queue waits for a message before the reader
    /// checks its view again (a revoke is seen within this).
    pub poll: Duration,
}

impl QueueConfig {
    /// Defaults for the broker at `url`: a prefetch of 20, looks of 100 ms.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            prefetch: 20,
            poll: Duration::from_millis(100),
        }
    }
}

/// The backoff of a queue whose consumer could not be opened (the broker
/// is down, another consumer still holds the queue, it was deleted).
const RESUBSCRIBE: Backoff = Backoff {
    base: Duration::from_millis(100),
    cap: Duration::from_secs(2),
    max_attempts: u32::MAX,
};

/// One queue's state between batches.
#[derive(Default)]
struct Slot {
    subscription: Option<Subscription>,
    failures: u32,
    retry_at: Option<Instant>,
}

/// A [`PartitionHandler`] that reads each partition as a RabbitMQ queue of
/// the same name and hands every message to a [`MessageHandler`].
pub struct QueueReader<H> {
    handler: Arc<H>,
    config: QueueConfig,
    connection: Shared,
    slots: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Slot>>>>,
    /// The view the worker follows, when given: a wait for the next
    /// message ends as soon as the queue is no longer active in it.
    view: Option<AssignmentView>,
}

impl<H: MessageHandler> QueueReader<H> {
    /// Reads queues of the broker in `config` for worker `worker_id`,
    /// handing messages to `handler`.
    pub fn new(handler: Arc<H>, config: QueueConfig, worker_id: &str) -> Self {
        Self {
            handler,
            connection: Shared::new(&config.url, &format!("shardring {worker_id}")),
            config,
            slots: Mutex::new(HashMap::new()),
            view: None,
        }
    }

    /// Follows `view` (the worker's): a queue's wait for its next message
    /// ends the moment the view revokes the queue, so the reader stops, and
    /// the queue is released, without waiting out the poll.
    #[must_use]
    pub fn following(mut self, view: AssignmentView) -> Self {
        self.view = Some(view);
        self
    }

    /// Resolves once `queue` is no longer active in the followed view
    /// (never without one).
    async fn revoked(&self, queue: &str) {
        let Some(mut view) = self.view.clone() else {
            return std::future::pending().await;
        };
        while view.can_acquire(queue) {
            if view.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    /// Opens the connection now rather than with the first queue, so the
    /// first queue this pod is given is consumed without a connection
    /// handshake; `false` when the broker cannot be reached yet (the
    /// queues connect when they can).
    pub async fn connect(&self) -> bool {
        self.connection.get().await.is_some()
    }

    /// Closes the connection (after the worker returned).
    pub async fn close(&self) {
        self.connection.close().await;
    }

    fn slot(&self, queue: &str) -> Arc<tokio::sync::Mutex<Slot>> {
        Arc::clone(self.slots.lock().entry(queue.to_owned()).or_default())
    }

    fn queue_context(context: &PartitionContext, session: u64) -> QueueContext {
        QueueContext {
            queue: context.partition.clone(),
            worker_id: context.worker_id.clone(),
            epoch: context.epoch,
            session,
        }
    }

    /// Subscribes `slot` to the queue unless its backoff says wait.
    async fn subscribe(&self, context: &PartitionContext, slot: &mut Slot) {
        if slot.retry_at.is_some_and(|at| Instant::now() < at) {
            return;
        }
        let Some(connection) = self.connection.get().await else {
            return;
        };
        let queue = &context.partition;
        match Subscription::open(&connection, queue, &context.worker_id, self.config.prefetch).await
        {
            Ok(subscription) => {
                tracing::info!(%queue, session = subscription.session, epoch = context.epoch, "consuming");
                *slot = Slot {
                    subscription: Some(subscription),
                    ..Slot::default()
                };
            }
            Err(error) => {
                // Another consumer may still hold the queue (its owner has
                // not let go), or it is gone: the view decides, so retry.
                if slot.failures == 0 {
                    tracing::warn!(%queue, %error, "cannot consume the queue; retrying with backoff");
                }
                slot.retry_at = Some(Instant::now() + RESUBSCRIBE.jittered(slot.failures));
                slot.failures = slot.failures.saturating_add(1);
            }
        }
    }

    /// Ends `slot`'s hold: releases the consumer, and tells the handler
    /// whether that was clean.
    async fn end(&self, context: &PartitionContext, slot: &mut Slot, lost: Option<&str>) {
        let Some(subscription) = slot.subscription.take() else {
            return;
        };
        let queue_context = Self::queue_context(context, subscription.session);
        let clean = match lost {
            Some(why) => {
                tracing::warn!(queue = %context.partition, session = subscription.session, why, "consumer lost; subscribing again");
                // Its channel may still be open (a failed ack): close it so
                // the unacknowledged messages go back to the queue.
                let _ = subscription.release().await;
                false
            }
            None => subscription.release().await,
        };
        self.handler.ended(&queue_context, clean);
    }
}

impl<H: MessageHandler> PartitionHandler for QueueReader<H> {
    async fn process(
        &self,
        context: &PartitionContext,
        _checkpoint: Option<&str>,
    ) -> anyhow::Result<Option<String>> {
        // The queue keeps its own position: a handed-over checkpoint is
        // only the last message id the previous owner acknowledged.
        let slot = self.slot(&context.partition);
        let mut slot = slot.lock().await;
        if slot.subscription.is_none() {
            self.subscribe(context, &mut slot).await;
        }
        let Some(subscription) = slot.subscription.as_mut() else {
            return Ok(None);
        };
        let session = subscription.session;
        let batch = subscription.next_batch(
            self.config.poll,
            usize::from(self.config.prefetch),
            self.revoked(&context.partition),
        );
        let deliveries = match batch.await {
            Batch::Empty => return Ok(None),
            Batch::Ended(why) => {
                self.end(context, &mut slot, Some(&why)).await;
                return Ok(None);
            }
            Batch::Deliveries(deliveries) => deliveries,
        };
        let queue_context = Self::queue_context(context, session);
        let mut checkpoint = None;
        for delivery in &deliveries {
            // An error leaves this and the later messages unacknowledged:
            // the release that follows puts them back in the queue.
            self.handler.handle(&queue_context, delivery).await?;
            let acked = deadline::bounded(
                "basic.ack",
                deadline::CALL,
                delivery.acker.ack(BasicAckOptions::default()),
            )
            .await;
            let lost = match acked {
                Ok(true) => None,
                // lapin sends nothing on a channel it knows is closed.
                Ok(false) => Some("acknowledging: the queue's channel is closed".to_owned()),
                Err(error) => Some(format!("acknowledging: {error}")),
            };
            if let Some(why) = lost {
                self.end(context, &mut slot, Some(&why)).await;
                return Ok(checkpoint);
            }
            checkpoint = Some(checkpoint_of(delivery));
        }
        Ok(checkpoint)
    }

    async fn release(&self, context: &PartitionContext) {
        let slot = self.slots.lock().remove(&context.partition);
        if let Some(slot) = slot {
            let mut slot = slot.lock().await;
            self.end(context, &mut slot, None).await;
        }
    }
}

/// What a release acknowledgement carries for a message: its `message_id`
/// when the producer set one, else its delivery tag on this channel.
fn checkpoint_of(delivery: &Delivery) -> String {
    delivery.properties.message_id().as_ref().map_or_else(
        || format!("tag:{}", delivery.delivery_tag),
        |id| id.to_string(),
    )
}
