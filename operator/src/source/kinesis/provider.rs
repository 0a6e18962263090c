//! The Kinesis side of one operator instance: the AWS configuration (loaded
//! from the default chain only when the first Kinesis ShardGroup needs it, or
//! given up front by tests and the local stage), the shared reader registry
//! and one [`KinesisTopologySource`] per distinct (stream, lease table) spec.
//!
//! Nothing here is process-wide: two operators in one process (tests, the
//! demo, the e2e replicas) each own their provider, and an operator whose
//! ShardGroups are all static never touches the AWS SDK (no instance-metadata
//! probes, no credential warnings on clusters outside AWS).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

use prometheus_client::registry::Registry;
use tokio::sync::OnceCell;

use super::{KinesisMetrics, KinesisTopologySource, ReaderOptions, ReaderRegistry};
use crate::crds::ShardGroupSpec;
use crate::crds::shard_group::ShardSource;
use crate::lease_table::LeaseTableMetrics;
use shardring_core::topology::SourceError;

/// Reason of a Kinesis group whose stream has no region: neither the spec
/// nor the operator's environment names one.
pub const NO_REGION: &str = "NoRegion";

/// Where the AWS configuration comes from.
#[derive(Debug, Clone)]
pub enum AwsSettings {
    /// The default chain (environment, web identity / IRSA, EKS Pod
    /// Identity, profile, instance metadata), loaded on first use.
    DefaultChain,
    /// A ready configuration (static credentials for the local emulators).
    Fixed(Box<aws_config::SdkConfig>),
}

/// Readers and per-spec Kinesis sources of one operator instance.
#[derive(Debug)]
pub struct KinesisProvider {
    settings: AwsSettings,
    options: ReaderOptions,
    kinesis_metrics: Option<KinesisMetrics>,
    lease_metrics: Option<LeaseTableMetrics>,
    registry: OnceCell<ReaderRegistry>,
    sources: Mutex<HashMap<String, Arc<KinesisTopologySource>>>,
}

impl KinesisProvider {
    /// A provider reading AWS settings from `settings`, registering the
    /// Kinesis and lease-table metrics into `metrics` when given. Nothing is
    /// loaded until [`Self::source_for`] is first called.
    pub fn new(settings: AwsSettings, metrics: Option<&mut Registry>) -> Self {
        let (kinesis_metrics, lease_metrics) = match metrics {
            Some(registry) => (
                Some(KinesisMetrics::register(registry)),
                Some(LeaseTableMetrics::register(registry)),
            ),
            None => (None, None),
        };
        Self {
            settings,
            options: ReaderOptions::default(),
            kinesis_metrics,
            lease_metrics,
            registry: OnceCell::new(),
            sources: Mutex::new(HashMap::new()),
        }
    }

    /// Uses `options` for the topology readers (tests pace them faster).
    pub fn with_reader_options(mut self, options: ReaderOptions) -> Self {
        self.options = options;
        self
    }

    /// Whether the AWS configuration has been loaded (false until the first
    /// Kinesis ShardGroup is reconciled).
    pub fn is_loaded(&self) -> bool {
        self.registry.initialized()
    }

    /// The reader registry, loading the AWS configuration on first use.
    pub async fn readers(&self) -> &ReaderRegistry {
        self.registry
            .get_or_init(|| async {
                let config = match &self.settings {
                    AwsSettings::Fixed(config) => config.as_ref().clone(),
                    AwsSettings::DefaultChain => {
                        tracing::info!(
                            "loading the AWS configuration (default chain) for the first Kinesis ShardGroup"
                        );
                        aws_config::defaults(aws_config::BehaviorVersion::latest())
                            .load()
                            .await
                    }
                };
                ReaderRegistry::new(config, self.options, self.kinesis_metrics.clone())
            })
            .await
    }

    /// The source of a ShardGroup spec with `source.kinesis`; the same spec
    /// (stream and lease table) always gets the same source. Fails with
    /// the reason [`NO_REGION`] when neither the spec nor the operator's
    /// environment names a region.
    pub async fn source_for(
        &self,
        spec: &ShardGroupSpec,
    ) -> Result<Arc<KinesisTopologySource>, SourceError> {
        let key = serde_json::to_string(&(&spec.source, &spec.lease_table))
            .map_err(|e| SourceError::Invalid(format!("unserialisable source: {e}")))?;
        if let Some(source) = self.sources.lock().get(&key) {
            return Ok(source.clone());
        }
        let readers = self.readers().await;
        if let ShardSource::Kinesis(kinesis) = &spec.source
            && kinesis.region().is_none()
            && readers.sdk_config().region().is_none()
        {
            return Err(SourceError::Named {
                reason: NO_REGION,
                message: format!(
                    "no AWS region for stream {}: set spec.source.kinesis.region (or a streamARN), \
                     or AWS_REGION in the operator's environment",
                    kinesis.stream_name().unwrap_or("?")
                ),
            });
        }
        let source = Arc::new(KinesisTopologySource::for_spec(
            spec,
            readers,
            self.lease_metrics.clone(),
        )?);
        Ok(self.sources.lock().entry(key).or_insert(source).clone())
    }

    /// Drops the cached source of a deleted ShardGroup (its reader goes too
    /// once no other group reads the stream).
    pub(crate) fn forget(&self, spec: &ShardGroupSpec) {
        if let Ok(key) = serde_json::to_string(&(&spec.source, &spec.lease_table)) {
            self.sources.lock().remove(&key);
        }
    }
}
