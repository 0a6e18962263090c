//! The RabbitMQ act's consumer pods, each a task of this process running
//! what a real queue consumer runs: the endpoint's view and release
//! sender ([`PodEndpoint`], shared with the static act's pods) and the
//! static-partition worker over the consumer crate's queue reader on the
//! broker, following the view, logging every message and every end of a
//! hold for the queue checker.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use shardring_consumer::partitions::{PartitionConfig, PartitionWorker};
use shardring_consumer::rabbitmq::log::QueueLog;
use shardring_consumer::rabbitmq::{QueueConfig, QueueReader};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::{GROUP, PREFETCH};
use crate::demo::cluster::NAMESPACE;
use crate::demo::partitioned::pods::PodEndpoint;

/// What one queue consumer pod needs.
pub(super) struct QueuePod {
    pub(super) name: String,
    /// `https://127.0.0.1:<port>`.
    pub(super) endpoint_url: String,
    pub(super) token_file: PathBuf,
    pub(super) ca_file: PathBuf,
    /// The broker, with the vhost.
    pub(super) amqp_url: String,
    /// The queue log.
    pub(super) log: PathBuf,
    pub(super) drain_deadline: Duration,
}

impl QueuePod {
    /// Waits for `start` (the pod exists and its view is served), consumes
    /// until `shutdown` and the drain that follows.
    pub(super) async fn run(self, start: oneshot::Receiver<()>, shutdown: CancellationToken) {
        if start.await.is_err() {
            return;
        }
        let Some(endpoint) = PodEndpoint::connect(
            &self.name,
            (NAMESPACE, GROUP),
            &self.endpoint_url,
            self.token_file,
            self.ca_file,
        ) else {
            return;
        };
        let log = match QueueLog::open(&self.log) {
            Ok(log) => log,
            Err(error) => {
                tracing::error!(pod = %self.name, %error, "cannot open the queue log");
                return;
            }
        };
        let config = QueueConfig {
            prefetch: PREFETCH,
            ..QueueConfig::new(self.amqp_url)
        };
        let reader = Arc::new(
            QueueReader::new(Arc::new(log), config, &self.name)
                .following(endpoint.assignment.clone()),
        );
        reader.connect().await;
        let config = PartitionConfig {
            tick: Duration::from_millis(50),
            idle: Duration::from_millis(10),
            drain_deadline: self.drain_deadline,
            stop_timeout: Duration::from_secs(5),
            ..PartitionConfig::new(self.name.clone())
        };
        let report = PartitionWorker::new(
            endpoint.assignment,
            endpoint.source.status.clone(),
            Arc::clone(&reader),
            config,
        )
        .with_release_acks(endpoint.acks)
        .run(shutdown.cancelled())
        .await;
        reader.close().await;
        tracing::info!(pod = %self.name, ?report, "queue consumer exited");
        endpoint.source.task.abort();
    }
}
