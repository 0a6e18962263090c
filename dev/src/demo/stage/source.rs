//! The operator's own Kinesis source and lease reader on the emulators, as
//! `shardring run` builds them: what the stage's control loop reconciles
//! with, at the start and after a controller restart.

use std::sync::Arc;
use std::time::Duration;

use super::super::{LEASE_TABLE, REGION, STREAM};
use shardring::lease_table::LeaseTableReader;
use shardring::source::kinesis::{KinesisTopologySource, ReaderOptions, StreamId, TopologyReader};

/// The operator's own source and lease reader on the emulators, as
/// `shardring run` builds them (fresh caches each time).
pub(super) fn source(
    sdk: &aws_config::SdkConfig,
    kinesis_url: &str,
    dynamo_url: &str,
) -> Arc<KinesisTopologySource> {
    let reader = TopologyReader::new(
        shardring::source::kinesis::kinesis_client(sdk, Some(REGION), Some(kinesis_url)),
        StreamId::named(STREAM),
        ReaderOptions {
            min_refresh_interval: Duration::from_millis(300),
            ..ReaderOptions::default()
        },
        None,
    );
    let leases = LeaseTableReader::new(
        shardring::lease_table::dynamodb_client(sdk, Some(REGION), Some(dynamo_url)),
        LEASE_TABLE,
        Some(STREAM.to_owned()),
        None,
    );
    Arc::new(KinesisTopologySource::new(
        Arc::new(reader),
        Some(Arc::new(leases)),
    ))
}
