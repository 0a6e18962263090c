//! The stage's control loop: the task that runs the core's cycle against
//! the in-process cluster every [`TICK`] with the operator's own source on
//! the emulators (`source`'s), and a controller restart that loses
//! everything the loop kept in memory.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;

use super::super::controller;
use super::source::source;
use super::{ControlLoop, Stage};
use shardring::source::kinesis::KinesisTopologySource;

/// How often the control loop reconciles.
const TICK: Duration = Duration::from_millis(200);

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
            // Its plans start with no memory, from the document as it
            // reads it from the ConfigMap (a copy of its own).
            state.plan_memory = Default::default();
            state.cluster.published = state.cluster.published.as_deref().cloned().map(Arc::new);
        }
        println!("  ! controller stopped; a new one starts from the published state");
        let source = source(&self.sdk, &self.kinesis_url, &self.dynamo_url);
        self.start_control_loop(source);
    }
}
