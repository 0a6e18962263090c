//! Building a ShardGroup's source from its spec: [`Providers`] holds what
//! one operator instance shares between the groups of each kind (the
//! Kinesis readers, loaded on first use) and is the one place that matches
//! on the kind of `spec.source`. Nothing here is process-wide: two
//! operators in one process (tests, the demo, the e2e replicas) each own
//! their providers.

use std::sync::Arc;

use prometheus_client::registry::Registry;

use super::kinesis::{AwsSettings, KinesisProvider};
use super::rabbitmq::{RabbitMqProvider, Secrets};
use super::{SourceError, StaticTopologySource, TopologySource};
use crate::crds::ShardGroupSpec;
use crate::crds::shard_group::ShardSource;

/// What the sources of one operator instance may use.
#[derive(Debug, Clone)]
pub struct SourceSettings {
    /// Where the Kinesis sources' AWS configuration comes from.
    pub aws: AwsSettings,
    /// The Secrets of the operator's namespace that a spec may name for
    /// its credentials (a RabbitMQ source's); `None`: none can be read.
    pub secrets: Option<Arc<dyn Secrets>>,
}

impl Default for SourceSettings {
    /// The default AWS chain, loaded when the first Kinesis group appears;
    /// no Secrets.
    fn default() -> Self {
        Self {
            aws: AwsSettings::DefaultChain,
            secrets: None,
        }
    }
}

impl SourceSettings {
    /// These settings with the AWS configuration `aws`.
    #[must_use]
    pub fn with_aws(mut self, aws: AwsSettings) -> Self {
        self.aws = aws;
        self
    }

    /// These settings reading named Secrets from `secrets`.
    #[must_use]
    pub fn with_secrets(mut self, secrets: Arc<dyn Secrets>) -> Self {
        self.secrets = Some(secrets);
        self
    }
}

/// Builds the source of each ShardGroup spec, sharing per-kind state.
#[derive(Debug)]
pub struct Providers {
    kinesis: Arc<KinesisProvider>,
    rabbitmq: RabbitMqProvider,
}

impl Default for Providers {
    fn default() -> Self {
        Self::new(SourceSettings::default(), None)
    }
}

impl Providers {
    /// Providers from `settings`, registering each kind's metrics into
    /// `metrics` when given. Nothing is loaded or connected until a group
    /// of that kind is built.
    pub fn new(settings: SourceSettings, metrics: Option<&mut Registry>) -> Self {
        Self {
            kinesis: Arc::new(KinesisProvider::new(settings.aws, metrics)),
            rabbitmq: RabbitMqProvider::new(settings.secrets),
        }
    }

    /// The Kinesis provider (whether it loaded the AWS configuration yet).
    pub fn kinesis(&self) -> &KinesisProvider {
        &self.kinesis
    }

    /// The source of `spec`: a Kinesis spec gets the shared source of its
    /// stream and lease table (loading the AWS configuration on first use).
    pub(crate) async fn build(
        &self,
        spec: &ShardGroupSpec,
    ) -> Result<Box<dyn TopologySource>, SourceError> {
        match &spec.source {
            ShardSource::Kinesis(_) => Ok(Box::new(self.kinesis.source_for(spec).await?)),
            ShardSource::Static(fixed) => Ok(Box::new(StaticTopologySource::new(fixed.clone()))),
            ShardSource::Rabbitmq(rabbitmq) => Ok(Box::new(self.rabbitmq.source_for(rabbitmq)?)),
        }
    }

    /// Drops what is kept for the deleted group of `spec` (a Kinesis
    /// stream's reader goes once no other group reads it).
    pub(crate) fn forget(&self, spec: &ShardGroupSpec) {
        match &spec.source {
            ShardSource::Kinesis(_) => self.kinesis.forget(spec),
            ShardSource::Static(_) | ShardSource::Rabbitmq(_) => {}
        }
    }
}
