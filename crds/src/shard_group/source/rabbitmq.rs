//! RabbitMQ partition queues as a source: the queues of one virtual host
//! whose whole name matches a pattern, listed read-only through the
//! management HTTP API with credentials from a Secret in the operator's
//! namespace (never in the custom resource). Queues that appear are
//! assigned, queues that disappear leave the document.

use std::time::Duration;

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use crate::shard_group::error::positive;
use crate::shard_group::{ENDPOINT_URL, SpecError};

/// The queues of a RabbitMQ virtual host whose names match a pattern.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self.vhost == oldSelf.vhost").message("rabbitmq.vhost cannot be changed (queue names repeat across virtual hosts, so the published assignment cannot carry over); create a new ShardGroup instead")
)]
pub struct RabbitMqSource {
    /// Base URL of the management HTTP API (`http://` or `https://`, the
    /// plugin's port, 15672 by default), e.g.
    /// `http://rabbitmq.messaging.svc:15672`. Only read: the operator lists
    /// queues and declares or deletes nothing.
    #[serde(rename = "managementURL")]
    #[schemars(length(max = 2048))]
    #[x_kube(validation = Rule::new(ENDPOINT_URL).message("rabbitmq.managementURL must be an http:// or https:// URL such as http://rabbitmq.messaging.svc:15672"))]
    pub management_url: String,
    /// The virtual host whose queues are the partitions (default `/`).
    /// Cannot be changed.
    #[serde(default = "default_vhost")]
    #[schemars(length(max = 255))]
    #[x_kube(validation = Rule::new("size(self) >= 1 && size(self) <= 255").message("rabbitmq.vhost must be 1 to 255 characters, e.g. / or orders"))]
    pub vhost: String,
    /// A regular expression (Rust `regex` syntax) that the whole name of a
    /// queue must match for the queue to be a partition, e.g.
    /// `orders\.[0-9]+`. May be changed: queues it newly matches are
    /// assigned, queues it no longer matches are revoked.
    #[schemars(length(max = 1024))]
    #[x_kube(validation = Rule::new("size(self) >= 1 && size(self) <= 1024").message("rabbitmq.queuePattern must be a regular expression of 1 to 1024 characters, e.g. orders\\.[0-9]+"))]
    pub queue_pattern: String,
    /// Name of the Secret in the operator's namespace holding the
    /// management API's `username` and `password` (a
    /// `kubernetes.io/basic-auth` Secret); the operator's RBAC grants `get`
    /// on that one name.
    #[schemars(length(max = 253))]
    #[x_kube(validation = Rule::new("size(self) <= 253 && self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')").message("rabbitmq.credentialsSecret must be the name of a Secret in the operator's namespace (lowercase letters, digits, '-' and '.')"))]
    pub credentials_secret: String,
    /// How often the queues are listed (jittered): a duration of at least
    /// 1s such as `10s` (the default) or `1m`.
    #[serde(default = "default_refresh_interval")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new("self.matches('^([0-9]+(ms|s|m|h))+$') && duration(self) >= duration('1s')").message("rabbitmq.refreshInterval must be a duration of at least 1s, such as 10s or 1m"))]
    pub refresh_interval: String,
}

fn default_vhost() -> String {
    "/".into()
}

fn default_refresh_interval() -> String {
    "10s".into()
}

impl RabbitMqSource {
    /// Short description for the `Source` printer column:
    /// `rabbitmq:<pattern>`, with ` in <vhost>` for a vhost other than `/`.
    pub(super) fn summary(&self) -> String {
        if self.vhost == "/" {
            format!("rabbitmq:{}", self.queue_pattern)
        } else {
            format!("rabbitmq:{} in {}", self.queue_pattern, self.vhost)
        }
    }

    /// `refreshInterval` as a duration.
    pub fn refresh_interval(&self) -> Result<Duration, SpecError> {
        positive("source.rabbitmq.refreshInterval", &self.refresh_interval)
    }
}
