//! Shared topology readers: ShardGroups that read the same stream (same
//! region, endpoint and stream) get the same [`TopologyReader`], so the stream
//! is listed once per refresh interval however many groups watch it.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, Weak};

use super::metrics::KinesisMetrics;
use super::reader::{ReaderOptions, StreamId, TopologyReader, kinesis_client};
use crate::crds::shard_group::KinesisSource as KinesisSpec;
use shardring_core::topology::SourceError;

/// What makes two readers the same.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ReaderKey {
    /// Resolved region (`None`: the SDK default chain had none either).
    pub region: Option<String>,
    /// Endpoint override.
    pub endpoint: Option<String>,
    /// Stream ARN when given, else the stream name.
    pub stream: String,
}

/// Hands out shared readers; holds them weakly so a reader is dropped with
/// the last ShardGroup that used it.
#[derive(Debug)]
pub struct ReaderRegistry {
    base: aws_config::SdkConfig,
    options: ReaderOptions,
    metrics: Option<KinesisMetrics>,
    readers: Mutex<HashMap<ReaderKey, Weak<TopologyReader>>>,
}

impl ReaderRegistry {
    /// A registry building clients from `base` (the default AWS chain, or
    /// static credentials for emulators).
    pub fn new(
        base: aws_config::SdkConfig,
        options: ReaderOptions,
        metrics: Option<KinesisMetrics>,
    ) -> Self {
        Self {
            base,
            options,
            metrics,
            readers: Mutex::new(HashMap::new()),
        }
    }

    /// The shared AWS config (the lease readers reuse its credentials).
    pub fn sdk_config(&self) -> &aws_config::SdkConfig {
        &self.base
    }

    /// The reader for a ShardGroup's `source.kinesis`.
    pub(crate) fn for_spec(&self, spec: &KinesisSpec) -> Result<Arc<TopologyReader>, SourceError> {
        let name = spec.stream_name().ok_or_else(|| {
            SourceError::Invalid("set source.kinesis.streamName or streamARN".to_owned())
        })?;
        let stream = StreamId {
            name: name.to_owned(),
            arn: spec.stream_arn.clone(),
        };
        Ok(self.reader(stream, spec.region(), spec.endpoint.as_deref()))
    }

    /// The reader of `stream` in `region` (default: the SDK's region) at
    /// `endpoint` (default: the AWS endpoint).
    pub fn reader(
        &self,
        stream: StreamId,
        region: Option<&str>,
        endpoint: Option<&str>,
    ) -> Arc<TopologyReader> {
        let region = region
            .map(str::to_owned)
            .or_else(|| self.base.region().map(|region| region.as_ref().to_owned()));
        let key = ReaderKey {
            region: region.clone(),
            endpoint: endpoint.map(str::to_owned),
            stream: stream.arn.clone().unwrap_or_else(|| stream.name.clone()),
        };
        let mut readers = self.readers.lock();
        if let Some(reader) = readers.get(&key).and_then(Weak::upgrade) {
            return reader;
        }
        readers.retain(|_, reader| reader.strong_count() > 0);
        let client = kinesis_client(&self.base, region.as_deref(), endpoint);
        let reader = Arc::new(TopologyReader::new(
            client,
            stream,
            self.options,
            self.metrics.clone(),
        ));
        readers.insert(key, Arc::downgrade(&reader));
        reader
    }

    /// Live readers (for metrics and tests).
    pub fn len(&self) -> usize {
        let readers = self.readers.lock();
        readers
            .values()
            .filter(|reader| reader.strong_count() > 0)
            .count()
    }

    /// Whether no reader is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
