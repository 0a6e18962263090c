//! [`KinesisTopologySource`]: the Kinesis source of one ShardGroup, its
//! stream's shared reader and optional lease table turned into a
//! lifecycle of engine shards, and what one read of it observed
//! ([`KinesisObservation`]).

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use shardring_core::leases::LeaseTable;
use shardring_core::topology::{SourceError, Topology};

use super::lifecycle::{self, Lifecycle, LifecycleMemory};
use super::{ReaderRegistry, StreamTopology, TopologyReader};
use crate::crds::ShardGroupSpec;
use crate::crds::shard_group::ShardSource;
use crate::lease_table::{LeaseTableError, LeaseTableMetrics, LeaseTableReader, dynamodb_client};
use crate::source::{ReadFuture, TopologySource};

/// One observation of a Kinesis ShardGroup's source.
#[derive(Debug, Clone)]
pub struct KinesisObservation {
    /// The listed topology (shared, possibly served from the reader's cache).
    pub topology: Arc<StreamTopology>,
    /// Engine shards with lifecycle states.
    pub lifecycle: Lifecycle,
    /// The lease snapshot, when a table is configured and was read.
    pub leases: Option<LeaseTable>,
    /// The lease read error, when the table could not be read (children then
    /// stay pending: completion cannot be concluded).
    pub lease_error: Option<LeaseTableError>,
    /// Set when the topology could not be read and `topology` is the last
    /// good one (from [`KinesisTopologySource::observe_or_last`]): the status
    /// marks it stale and shows this error's reason.
    pub stale: Option<SourceError>,
}

/// The Kinesis source of one ShardGroup.
#[derive(Debug)]
pub struct KinesisTopologySource {
    reader: Arc<TopologyReader>,
    leases: Option<Arc<LeaseTableReader>>,
    memory: Mutex<LifecycleMemory>,
    /// Lineage of the last derived lifecycle (for [`TopologySource::lineage`]).
    lineage: Mutex<BTreeMap<String, Vec<String>>>,
    refresh_interval: Duration,
}

/// The refresh interval when the spec does not say (`refreshInterval`).
pub(crate) const DEFAULT_REFRESH_INTERVAL: Duration = Duration::from_secs(30);

impl KinesisTopologySource {
    /// A source over a shared topology reader and an optional lease reader.
    pub fn new(reader: Arc<TopologyReader>, leases: Option<Arc<LeaseTableReader>>) -> Self {
        Self {
            reader,
            leases,
            memory: Mutex::new(LifecycleMemory::default()),
            lineage: Mutex::default(),
            refresh_interval: DEFAULT_REFRESH_INTERVAL,
        }
    }

    /// Sets the refresh interval (`source.kinesis.refreshInterval`).
    pub(crate) fn with_refresh_interval(mut self, interval: Duration) -> Self {
        self.refresh_interval = interval;
        self
    }

    /// When to read again: the refresh interval, jittered by ±10%.
    pub(crate) fn next_refresh(&self) -> Duration {
        crate::source::refresh::jittered(self.refresh_interval)
    }

    /// The source of a ShardGroup spec with `source.kinesis`: its reader comes
    /// from `registry` (shared per stream); its lease reader, when
    /// `spec.leaseTable` is set, uses the lease table's region (default: the
    /// stream's) and endpoint.
    pub(crate) fn for_spec(
        spec: &ShardGroupSpec,
        registry: &ReaderRegistry,
        lease_metrics: Option<LeaseTableMetrics>,
    ) -> Result<Self, SourceError> {
        let ShardSource::Kinesis(kinesis) = &spec.source else {
            return Err(SourceError::Invalid("source.kinesis is not set".to_owned()));
        };
        let reader = registry.for_spec(kinesis)?;
        let leases = spec.lease_table.as_ref().map(|table| {
            let region = table.region.as_deref().or(kinesis.region());
            let client = dynamodb_client(registry.sdk_config(), region, table.endpoint.as_deref());
            Arc::new(LeaseTableReader::new(
                client,
                &table.table_name,
                Some(reader.stream().name.clone()),
                lease_metrics,
            ))
        });
        let refresh = kinesis
            .refresh_interval()
            .map_err(|e| SourceError::Invalid(e.to_string()))?;
        Ok(Self::new(reader, leases).with_refresh_interval(refresh))
    }

    /// The shared topology reader.
    pub fn reader(&self) -> &Arc<TopologyReader> {
        &self.reader
    }

    /// The lease reader, when a lease table is configured.
    pub fn lease_reader(&self) -> Option<&Arc<LeaseTableReader>> {
        self.leases.as_ref()
    }

    /// The lease snapshot taken by the last successful read (every
    /// [`TopologySource::read`] / [`Self::observe`] scans the table), so the
    /// handoff can use it without scanning again; `None` without a lease
    /// table or before the first successful scan.
    pub(crate) fn last_leases(&self) -> Option<LeaseTable> {
        self.leases.as_ref()?.last()
    }

    /// Reads the lease table as of `now` (for the handoff evidence); `None`
    /// without a lease table.
    pub(crate) async fn read_leases(
        &self,
        now: jiff::Timestamp,
    ) -> Option<Result<LeaseTable, LeaseTableError>> {
        Some(self.leases.as_ref()?.read(now).await)
    }

    /// Reads the topology and (when configured) the lease table, and derives
    /// the lifecycle. A topology error is returned as is (the caller keeps its
    /// last good topology; [`TopologyReader::last`] holds it too); a lease
    /// error is reported in the observation and concludes nothing.
    pub async fn observe(&self, now: jiff::Timestamp) -> Result<KinesisObservation, SourceError> {
        let topology = self.reader.topology().await?;
        Ok(self.derive(topology, now, None).await)
    }

    /// Like [`Self::observe`], but when the topology read fails and a good
    /// topology was read before, observes that one with `stale` set: the
    /// assignment never shrinks because of a failed read. Fails only when no
    /// topology was ever read.
    pub async fn observe_or_last(
        &self,
        now: jiff::Timestamp,
    ) -> Result<KinesisObservation, SourceError> {
        match self.reader.topology().await {
            Ok(topology) => Ok(self.derive(topology, now, None).await),
            Err(error) => match self.reader.last() {
                Some(last) => Ok(self.derive(last, now, Some(error)).await),
                None => Err(error),
            },
        }
    }

    async fn derive(
        &self,
        topology: Arc<StreamTopology>,
        now: jiff::Timestamp,
        stale: Option<SourceError>,
    ) -> KinesisObservation {
        let (leases, lease_error) = match self.read_leases(now).await {
            None => (None, None),
            Some(Ok(table)) => (Some(table), None),
            Some(Err(error)) => {
                tracing::warn!(stream = %self.reader.stream().name, %error, "lease table read failed");
                (None, Some(error))
            }
        };
        let lifecycle = {
            let mut memory = self.memory.lock();
            lifecycle::derive(
                &topology.shards,
                leases.as_ref(),
                self.leases.is_some(),
                &mut memory,
            )
        };
        *self.lineage.lock() = lifecycle.lineage.clone();
        KinesisObservation {
            topology,
            lifecycle,
            leases,
            lease_error,
            stale,
        }
    }
}

impl TopologySource for Arc<KinesisTopologySource> {
    fn describe(&self) -> String {
        self.as_ref().describe()
    }

    fn read(&self) -> ReadFuture<'_> {
        self.as_ref().read()
    }

    fn leases(&self) -> Option<LeaseTable> {
        self.last_leases()
    }

    fn ordering_enforced(&self) -> Option<bool> {
        self.as_ref().ordering_enforced()
    }

    fn lineage(&self) -> BTreeMap<String, Vec<String>> {
        self.as_ref().lineage()
    }

    fn next_refresh(&self) -> Option<Duration> {
        Some(KinesisTopologySource::next_refresh(self))
    }
}

impl TopologySource for KinesisTopologySource {
    fn describe(&self) -> String {
        format!("kinesis:{}", self.reader.stream().name)
    }

    fn read(&self) -> ReadFuture<'_> {
        Box::pin(async move {
            let observation = self.observe(jiff::Timestamp::now()).await?;
            Ok(Topology {
                shards: observation.lifecycle.shards.into(),
            })
        })
    }

    fn leases(&self) -> Option<LeaseTable> {
        self.last_leases()
    }

    fn ordering_enforced(&self) -> Option<bool> {
        Some(self.leases.is_some())
    }

    fn lineage(&self) -> BTreeMap<String, Vec<String>> {
        self.lineage.lock().clone()
    }

    fn next_refresh(&self) -> Option<Duration> {
        Some(KinesisTopologySource::next_refresh(self))
    }
}
