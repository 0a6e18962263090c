//! The stage's control loop: the operator's own Kinesis source and lease
//! reader on the emulators, the task that runs the core's cycle against the
//! in-process cluster every [`TICK`], and a controller restart that loses
//! everything the loop kept in memory.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::super::controller;
use super::super::{LEASE_TABLE, REGION, STREAM};
use super::Stage;
use shardring::lease_table::LeaseTableReader;
use shardring::source::kinesis::{KinesisTopologySource, ReaderOptions, StreamId, TopologyReader};

/// How often the control loop reconciles.
const TICK: Duration = Duration::from_millis(200);

/// The running control loop: its task and the token that stops it.
pub(super) struct ControlLoop {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Stage {
    pub(super) fn start_control_loop(&mut self, source: Arc<KinesisTopologySource>) {
        let stop = self._cleanup.stop.child_token();
        let task = tokio::spawn(controller::run(
            self.shared.clone(),
            source,
            TICK,
            stop.clone(),
        ));
        self.control = Some(ControlLoop { stop, task });
    }

    pub(super) async fn stop_control_loop(&mut self) {
        if let Some(control) = self.control.take() {
            control.stop.cancel();
            let _ = control.task.await;
        }
    }

    /// Restarts the controller: the control loop stops, everything it kept
    /// in memory (topology, lease snapshot, the source's caches, the memory
    /// of departed pods) is lost, and a new loop starts from what the
    /// cluster holds (the published document, the ShardGroup's status, the
    /// pods), as a new operator process would.
    pub async fn restart_controller(&mut self) {
        self.stop_control_loop().await;
        {
            let mut state = self.state();
            state.topology.reset();
            state.leases = None;
            // The new controller's pod watch lists the pods when it starts:
            // it has seen no pod leave before that.
            let departed = shardring::controller::observe::departed::DepartureMemory::default();
            departed.listed(Timestamp::now());
            state.cluster.departed = departed;
        }
        println!("  ! controller stopped; a new one starts from the published state");
        let source = source(&self.sdk, &self.kinesis_url, &self.dynamo_url);
        self.start_control_loop(source);
    }
}

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
