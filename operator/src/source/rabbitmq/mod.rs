//! The RabbitMQ source: the partitions are the queues of one virtual host
//! whose whole name matches the spec's pattern, listed read-only through
//! the management HTTP API ([`management`]) with the credentials of a
//! Secret in the operator's namespace ([`credentials`]), every refresh
//! interval (jittered), and at most once per [`MIN_LISTING_INTERVAL`]
//! however often the group is reconciled (a handoff in flight reconciles
//! several times a second; those reconciles reuse the last listing). A
//! queue that appears is a new partition and is
//! assigned; one that disappears (or stops matching) leaves the topology
//! and the document. A listing that fails — the broker cannot be reached,
//! the credentials are refused or missing, the vhost is gone — is an error
//! with a reason of its own, which the controller shows as a condition and
//! an Event while it keeps the last good topology: the published
//! assignment never shrinks because of it. Queues have no lineage and no
//! lease table: a handoff completes on the consumer's release
//! acknowledgement, the pod's departure or the drain timeout.

pub mod credentials;
pub mod management;
mod reasons;

use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Empty;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use regex::Regex;

pub use credentials::{Credentials, FixedSecrets, KubeSecrets, Secrets};
pub use management::{ManagementClient, Queue};
pub use reasons::{BROKER_UNREACHABLE, CREDENTIALS_UNAVAILABLE, VHOST_NOT_FOUND};

use super::{ReadFuture, SourceError, Topology, TopologySource};
use crate::crds::shard_group::RabbitMqSource as RabbitMqSpec;

/// The shortest time between two listings of one group's queues.
pub const MIN_LISTING_INTERVAL: Duration = Duration::from_secs(1);

/// What the RabbitMQ sources of one operator instance share: the HTTP
/// connection pool and where Secrets are read.
#[derive(Debug)]
pub struct RabbitMqProvider {
    secrets: Option<Arc<dyn Secrets>>,
    http: std::sync::OnceLock<Client<HttpsConnector<HttpConnector>, Empty<Bytes>>>,
}

impl RabbitMqProvider {
    /// A provider reading credentials from `secrets` (`None`: this
    /// operator instance reads no Secrets, and a RabbitMQ group says so).
    pub fn new(secrets: Option<Arc<dyn Secrets>>) -> Self {
        Self {
            secrets,
            http: std::sync::OnceLock::new(),
        }
    }

    /// The source of a `rabbitmq` spec. Fails, waiting for a spec change,
    /// when its pattern is not a regular expression or a duration does not
    /// parse.
    pub fn source_for(&self, spec: &RabbitMqSpec) -> Result<RabbitMqTopologySource, SourceError> {
        let pattern = Regex::new(&format!("^(?:{})$", spec.queue_pattern)).map_err(|e| {
            SourceError::Invalid(format!(
                "spec.source.rabbitmq.queuePattern {:?} is not a regular expression: {e}",
                spec.queue_pattern
            ))
        })?;
        let refresh = spec
            .refresh_interval()
            .map_err(|e| SourceError::Invalid(e.to_string()))?;
        let secrets = self.secrets.clone().ok_or_else(|| SourceError::Named {
            reason: CREDENTIALS_UNAVAILABLE,
            message: "this operator instance reads no Secrets, so it cannot read the \
                      credentials of a rabbitmq source"
                .into(),
        })?;
        let http = self.http.get_or_init(management::http_client).clone();
        Ok(RabbitMqTopologySource {
            spec: spec.clone(),
            pattern,
            refresh,
            client: ManagementClient::new(http, &spec.management_url),
            secrets,
            min_interval: MIN_LISTING_INTERVAL,
            last: Mutex::new(None),
        })
    }
}

/// The RabbitMQ source of one ShardGroup.
#[derive(Debug)]
pub struct RabbitMqTopologySource {
    spec: RabbitMqSpec,
    pattern: Regex,
    refresh: Duration,
    client: ManagementClient,
    secrets: Arc<dyn Secrets>,
    min_interval: Duration,
    /// The last successful listing's partitions, and when it was made.
    last: Mutex<Option<(Instant, Vec<String>)>>,
}

impl RabbitMqTopologySource {
    /// Lists at most once per `interval` (default [`MIN_LISTING_INTERVAL`]).
    #[must_use]
    pub fn with_min_interval(mut self, interval: Duration) -> Self {
        self.min_interval = interval;
        self
    }

    /// The partitions, from a listing no older than the minimum interval.
    async fn list(&self) -> Result<Vec<String>, SourceError> {
        if let Some((at, partitions)) = self.last.lock().as_ref()
            && at.elapsed() < self.min_interval
        {
            return Ok(partitions.clone());
        }
        let credentials = self
            .secrets
            .basic_auth(&self.spec.credentials_secret)
            .await?;
        let queues = self.client.queues(&self.spec.vhost, &credentials).await?;
        let partitions = self.partitions(&queues);
        *self.last.lock() = Some((Instant::now(), partitions.clone()));
        Ok(partitions)
    }

    /// The names of `queues` that are partitions: whole names matching the
    /// pattern, of queues any connection can consume.
    pub fn partitions(&self, queues: &[Queue]) -> Vec<String> {
        queues
            .iter()
            .filter(|queue| queue.is_partition_queue() && self.pattern.is_match(&queue.name))
            .map(|queue| queue.name.clone())
            .collect()
    }
}

impl TopologySource for RabbitMqTopologySource {
    fn describe(&self) -> String {
        crate::crds::shard_group::ShardSource::Rabbitmq(self.spec.clone()).summary()
    }

    fn read(&self) -> ReadFuture<'_> {
        Box::pin(async move { Ok(Topology::of_partitions(self.list().await?)) })
    }

    fn next_refresh(&self) -> Option<Duration> {
        Some(super::refresh::jittered(self.refresh))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(pattern: &str) -> RabbitMqSpec {
        RabbitMqSpec {
            management_url: "http://127.0.0.1:1".into(),
            vhost: "/".into(),
            queue_pattern: pattern.into(),
            credentials_secret: "creds".into(),
            refresh_interval: "10s".into(),
        }
    }

    fn provider() -> RabbitMqProvider {
        let secrets = FixedSecrets::default().with(
            "creds",
            Credentials {
                username: "u".into(),
                password: "p".into(),
            },
        );
        RabbitMqProvider::new(Some(Arc::new(secrets)))
    }

    #[test]
    fn the_pattern_matches_whole_names_of_partition_queues() {
        let source = provider().source_for(&spec(r"orders\.[0-9]+")).unwrap();
        let queue = |name: &str, kind: &str| Queue {
            name: name.into(),
            kind: kind.into(),
            exclusive: false,
        };
        let queues = [
            queue("orders.0", "classic"),
            queue("orders.1", "quorum"),
            queue("orders.10", "classic"),
            queue("orders.2.dlq", "classic"),
            queue("x.orders.3", "classic"),
            queue("orders.4", "stream"),
        ];
        assert_eq!(
            source.partitions(&queues),
            ["orders.0", "orders.1", "orders.10"]
        );
        assert_eq!(source.describe(), r"rabbitmq:orders\.[0-9]+");
        let refresh = source.next_refresh().unwrap();
        assert!(refresh >= Duration::from_secs(9) && refresh <= Duration::from_secs(11));
    }

    #[test]
    fn a_bad_pattern_waits_for_a_spec_change() {
        let error = provider().source_for(&spec("orders.(")).unwrap_err();
        assert_eq!(error.reason(), "InvalidSource");
        assert!(!error.is_transient());
        assert!(error.to_string().contains("queuePattern"), "{error}");
        let error = RabbitMqProvider::new(None)
            .source_for(&spec("orders"))
            .unwrap_err();
        assert_eq!(error.reason(), CREDENTIALS_UNAVAILABLE);
    }

    #[tokio::test]
    async fn a_broker_that_cannot_be_reached_is_an_error_never_an_empty_list() {
        // Port 1 on loopback: connection refused.
        let source = provider().source_for(&spec("orders")).unwrap();
        let error = source.read().await.unwrap_err();
        assert_eq!(error.reason(), BROKER_UNREACHABLE, "{error}");
        assert!(error.to_string().contains("http://127.0.0.1:1"), "{error}");
        assert!(error.is_transient());
    }
}
