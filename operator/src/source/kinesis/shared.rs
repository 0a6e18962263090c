//! Process-wide Kinesis state for the controller: the reader registry and one
//! [`KinesisShardSource`] per distinct (stream, lease table) spec. The
//! controller may build its source from the spec on every reconcile
//! (`source::for_spec`) and still keep the caches that must outlive a single
//! reconcile: the topology (with its minimum refresh interval), the previous
//! lease snapshot (for counter-change times) and the lifecycle memory.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use prometheus_client::registry::Registry;

use super::{KinesisMetrics, KinesisShardSource, ReaderOptions, ReaderRegistry};
use crate::crds::ShardGroupSpec;
use crate::lease::LeaseMetrics;
use crate::source::SourceError;

/// Readers and per-spec sources shared by all ShardGroups of the process.
#[derive(Debug)]
pub struct SharedKinesis {
    readers: ReaderRegistry,
    lease_metrics: Option<LeaseMetrics>,
    sources: Mutex<HashMap<String, Arc<KinesisShardSource>>>,
}

static SHARED: OnceLock<SharedKinesis> = OnceLock::new();

impl SharedKinesis {
    /// Shared state over `readers`.
    pub fn new(readers: ReaderRegistry, lease_metrics: Option<LeaseMetrics>) -> Self {
        Self {
            readers,
            lease_metrics,
            sources: Mutex::new(HashMap::new()),
        }
    }

    /// Loads the default AWS chain (environment, web identity / IRSA, EKS Pod
    /// Identity, instance profile) and registers the Kinesis and lease-table
    /// metrics into `metrics`.
    pub async fn from_default_chain(metrics: Option<&mut Registry>) -> Self {
        let base = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .load()
            .await;
        let (kinesis_metrics, lease_metrics) = match metrics {
            Some(registry) => (
                Some(KinesisMetrics::register(registry)),
                Some(LeaseMetrics::register(registry)),
            ),
            None => (None, None),
        };
        Self::new(
            ReaderRegistry::new(base, ReaderOptions::default(), kinesis_metrics),
            lease_metrics,
        )
    }

    /// Makes `self` the process-wide state used by `source::for_spec`. Only
    /// the first call installs; later ones get their value back (boxed: it is
    /// large).
    pub fn install(self) -> Result<&'static SharedKinesis, Box<SharedKinesis>> {
        let mut value = Some(self);
        let installed = SHARED.get_or_init(|| value.take().expect("taken once"));
        match value {
            None => Ok(installed),
            Some(rejected) => Err(Box::new(rejected)),
        }
    }

    /// The reader registry.
    pub fn readers(&self) -> &ReaderRegistry {
        &self.readers
    }

    /// The source of a ShardGroup spec with `source.kinesis`; the same spec
    /// (stream and lease table) always gets the same source.
    pub fn source_for(
        &self,
        spec: &ShardGroupSpec,
    ) -> Result<Arc<KinesisShardSource>, SourceError> {
        let key = serde_json::to_string(&(&spec.source.kinesis, &spec.lease_table))
            .map_err(|e| SourceError::Invalid(format!("unserialisable source: {e}")))?;
        let mut sources = self
            .sources
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(source) = sources.get(&key) {
            return Ok(source.clone());
        }
        let source = Arc::new(KinesisShardSource::for_spec(
            spec,
            &self.readers,
            self.lease_metrics.clone(),
        )?);
        sources.insert(key, source.clone());
        Ok(source)
    }

    /// Drops the cached source of a deleted ShardGroup (its reader goes too
    /// once no other group reads the stream).
    pub fn forget(&self, spec: &ShardGroupSpec) {
        if let Ok(key) = serde_json::to_string(&(&spec.source.kinesis, &spec.lease_table)) {
            self.sources
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .remove(&key);
        }
    }
}

/// The process-wide state, once [`SharedKinesis::install`] ran.
pub fn installed() -> Option<&'static SharedKinesis> {
    SHARED.get()
}
