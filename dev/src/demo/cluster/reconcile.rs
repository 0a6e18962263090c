//! The controller's side of the demo's [`Cluster`]: one reconcile is the
//! core's cycle ([`shardring_core::cycle()`]) over [`Cluster::reconcile`],
//! which observes the cluster (with the source's read results and the
//! memory of departed pods its pod watch would keep) and writes to it in the
//! operator's order: the document (also as a file), the pod annotations
//! (each projected into its pod's downward-API file, as kubelet does, quoted
//! by [`go_quote`]), the status, and last the consumer endpoint's views,
//! when there is an endpoint.

use std::sync::Arc;

use jiff::Timestamp;
use shardring_core::PlanMemory;
use shardring_core::cycle::{Apply, Observe, Observed};
use shardring_core::group_state::collect_pods;
use shardring_core::load::LoadObservation;
use shardring_core::observation::{
    LeaseObservation, Observation, Published, PublishedVersion, ReleaseAcks, TopologyObservation,
};
use shardring_core::plan::{Decision, DocumentWrite};
use shardring_core::{AnnotationWrite, EventNote};

use super::{Cluster, NAMESPACE};
use shardring::controller::ControllerMetrics;
use shardring::controller::endpoint_sync::{self, EndpointSeen};
use shardring::endpoint::EndpointState;
use shardring_crds::{AssignmentDocument, ShardGroupStatus};

impl Cluster {
    /// One reconcile's view of the cluster, for the core's cycle: observed
    /// with the source's read results `topology` and `leases`.
    pub fn reconcile(
        &mut self,
        topology: TopologyObservation,
        leases: LeaseObservation,
    ) -> Reconcile<'_> {
        Reconcile {
            cluster: self,
            reads: Some((topology, leases)),
            endpoint: None,
            seen: None,
            memory: None,
        }
    }

    /// The controller's observation of the group at `now`, with the
    /// source's read results and what the endpoint recorded.
    pub fn observation(
        &self,
        (topology, leases): (TopologyObservation, LeaseObservation),
        (releases, loads): (ReleaseAcks, LoadObservation),
        now: Timestamp,
    ) -> Observation {
        Observation {
            group: self.group.clone(),
            pool: Some(self.pool.clone()),
            // Every demo pod carries the pool's label: the pool selects each.
            pods: collect_pods(
                self.pods.values().map(|p| &p.record),
                |_| true,
                self.pool.spec.capacity.label.as_deref(),
                &self.group.annotation_key(),
                |_| None,
            ),
            topology,
            published: self
                .published
                .clone()
                .map_or(Published::Missing, Published::from),
            leases,
            departed: self.departed.departures(NAMESPACE, |_| true, now),
            releases,
            loads,
            now,
            pool_share: Default::default(),
            stateful_sets: self.stateful_sets.clone(),
        }
    }

    /// Stores the published document, also as a file beside the pods'.
    fn publish(&mut self, doc: &Arc<AssignmentDocument>) -> std::io::Result<()> {
        self.published = Some(Arc::clone(doc));
        let json = serde_json::to_vec_pretty(doc.as_ref()).map_err(std::io::Error::other)?;
        shardring_consumer::view::file::write_atomically(&self.dir.join("assignment.json"), &json)
    }

    /// Writes each pod annotation and projects it into the pod's
    /// downward-API file (temp file + rename, as kubelet swaps it
    /// atomically).
    fn annotate(&mut self, writes: &[AnnotationWrite]) -> std::io::Result<()> {
        let key = self.group.annotation_key();
        for write in writes {
            let Some(pod) = self.pods.get_mut(&write.pod) else {
                continue;
            };
            // The uid precondition of the real apply: a write meant for
            // another pod of the same name is refused.
            if write
                .uid
                .as_deref()
                .is_some_and(|uid| uid != pod.record.uid)
            {
                continue;
            }
            let annotation = write.view.as_ref().map(|v| v.to_annotation());
            pod.record.set_annotation(&key, annotation);
            let text = match pod.record.annotation(&key) {
                Some(value) => format!("{key}={}\n", go_quote(value)),
                None => String::new(),
            };
            shardring_consumer::view::file::write_atomically(
                &pod.annotations_file,
                text.as_bytes(),
            )?;
        }
        Ok(())
    }
}

/// One reconcile of the [`Cluster`]: the core's cycle observes it with the
/// source's read results and writes to it (document, annotations, status;
/// the demo keeps no Events).
pub struct Reconcile<'a> {
    cluster: &'a mut Cluster,
    /// The topology and lease table reads, until the observe half takes them.
    reads: Option<(TopologyObservation, LeaseObservation)>,
    /// The consumer endpoint whose releases and loads the observation
    /// takes and which serves the views, with the metrics its publication
    /// observes.
    endpoint: Option<(&'a EndpointState, &'a ControllerMetrics)>,
    /// What the observe half kept for serving views at the cycle's end.
    seen: Option<EndpointSeen>,
    /// The controller's plan memory for the group, when it keeps one.
    memory: Option<&'a mut PlanMemory>,
}

impl<'a> Reconcile<'a> {
    /// Takes `endpoint`'s acknowledged releases and loads into the
    /// observation and serves the views through it (as the operator's
    /// cycle does).
    pub fn with_endpoint(
        mut self,
        endpoint: Option<(&'a EndpointState, &'a ControllerMetrics)>,
    ) -> Self {
        self.endpoint = endpoint;
        self
    }

    /// Plans with the group's `memory`, kept by the controller between its
    /// cycles (as the operator keeps one per group).
    pub fn with_plan_memory(mut self, memory: &'a mut PlanMemory) -> Self {
        self.memory = Some(memory);
        self
    }
}

impl Observe for Reconcile<'_> {
    async fn observe(&mut self, now: Timestamp) -> Observed {
        let (topology, leases) = self.reads.take().unwrap_or_default();
        let group = &self.cluster.group;
        let recorded = match self.endpoint {
            Some((endpoint, _)) => {
                let published = self.cluster.published.as_deref();
                let loads =
                    endpoint_sync::observe_loads(&endpoint.loads, group, published, &leases, now);
                (endpoint_sync::observe_releases(endpoint, group), loads)
            }
            None => Default::default(),
        };
        let observation = self.cluster.observation((topology, leases), recorded, now);
        self.seen = self
            .endpoint
            .map(|(endpoint, _)| endpoint_sync::seen(endpoint, &observation));
        Observed {
            observation,
            // The in-process store applies every write at once: nothing
            // can land after a newer one, so there is no precondition.
            published: PublishedVersion::Absent,
        }
    }

    fn plan_memory(&mut self) -> Option<&mut PlanMemory> {
        self.memory.as_deref_mut()
    }
}

impl Apply for Reconcile<'_> {
    type Error = std::io::Error;
    type Receipt = ();

    async fn document(
        &mut self,
        write: &DocumentWrite,
        _: &PublishedVersion,
    ) -> std::io::Result<()> {
        self.cluster.publish(&write.document)
    }

    async fn annotations(&mut self, writes: &[AnnotationWrite]) -> std::io::Result<()> {
        self.cluster.annotate(writes)
    }

    async fn status(&mut self, status: &ShardGroupStatus) -> std::io::Result<()> {
        self.cluster.group.status = Some(status.clone());
        Ok(())
    }

    async fn events(&mut self, _: &[EventNote]) {}

    /// As the operator does once a cycle wrote everything: the endpoint
    /// never serves a view ahead of the document.
    async fn serve(&mut self, decision: &Decision, document: Option<&()>) {
        if let (Some((endpoint, metrics)), Some(seen)) = (self.endpoint, self.seen.take()) {
            let written = document.is_some();
            endpoint_sync::publish(
                endpoint,
                metrics,
                &seen,
                decision,
                written,
                Timestamp::now(),
            );
        }
    }
}

/// Quotes `value` the way Go's `strconv.Quote` does for the downward-API
/// annotations file (the characters a JSON view can hold).
pub(crate) fn go_quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_views_parse_back() {
        let view = shardring_crds::PodView {
            epoch: 7,
            active: vec!["shardId-000000000001".into()],
            standby: Vec::new(),
            revoking: vec!["shardId-000000000002".into()],
            held: Vec::new(),
        };
        let line = format!(
            "assignment.shardring.io/orders={}\n",
            go_quote(&view.to_annotation())
        );
        let parsed =
            shardring_consumer::view::parse::view_from_annotations_file(&line, "default/orders")
                .unwrap()
                .unwrap();
        assert_eq!(parsed, view);
        assert_eq!(go_quote("a\\b\"\u{1}"), "\"a\\\\b\\\"\\x01\"");
    }
}
