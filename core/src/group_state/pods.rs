//! Pod facts: one pod as its adapter's store holds it ([`PodRecord`]: the
//! facts the core reads, each derived once by the adapter from its own
//! kind of pod object), and the one translation of those records into what
//! the plan step sees ([`collect_pods`] into [`PodInfo`]) and into what the
//! memory of departed pods keeps ([`PodRecord::departure`]).
//!
//! Why here: the operator reads the pod watch's objects, the simulation
//! its in-memory pods and the demo its in-process ones; each keeps only
//! the step from its object to a record (its I/O), and all three select,
//! label and date pods, and record their departures, with these lines.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use jiff::Timestamp;

use crate::departures::Departure;
use crate::observation::{Containers, PodInfo};

/// Node label that names a node's zone (also read from the pod when
/// present).
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// A label set, shared by the records that carry the same one.
pub type Labels = Arc<BTreeMap<String, String>>;

/// One pod as the observe step reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodRecord {
    /// Name.
    pub name: String,
    /// Uid.
    pub uid: String,
    /// Every label (for pool selectors and the capacity label).
    pub labels: Labels,
    /// The annotations kept (shardring's), sorted by key.
    pub annotations: Vec<(String, String)>,
    /// `metadata.creationTimestamp`.
    pub created: Option<Timestamp>,
    /// `metadata.deletionTimestamp`.
    pub deletion_timestamp: Option<Timestamp>,
    /// `metadata.deletionGracePeriodSeconds`.
    pub deletion_grace_seconds: Option<i64>,
    /// Whether the name was generated from `metadata.generateName`.
    pub generated_name: bool,
    /// `spec.nodeName`.
    pub node_name: Option<String>,
    /// Whether the `Ready` condition is `True`.
    pub ready: bool,
    /// The `Ready` condition's `lastTransitionTime`.
    pub ready_since: Option<Timestamp>,
    /// What the container statuses say.
    pub containers: Containers,
    /// `status.podIP`, parsed.
    pub ip: Option<IpAddr>,
    /// The StatefulSet that controls it (its controller owner reference).
    pub stateful_set: Option<String>,
}

impl PodRecord {
    /// The value of annotation `key`, when the pod carries it.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Sets annotation `key` to `value`, or removes it (`None`): an
    /// annotation write as the API server applies it.
    pub fn set_annotation(&mut self, key: &str, value: Option<String>) {
        let at = self
            .annotations
            .binary_search_by(|(k, _)| k.as_str().cmp(key));
        match (at, value) {
            (Ok(i), Some(value)) => self.annotations[i].1 = value,
            (Ok(i), None) => {
                self.annotations.remove(i);
            }
            (Err(i), Some(value)) => self.annotations.insert(i, (key.to_owned(), value)),
            (Err(_), None) => {}
        }
    }

    /// The departure of this pod, its object gone at `at`, as the memory
    /// of departed pods keeps it: the final state its watch showed.
    pub fn departure(&self, at: Timestamp) -> Departure {
        Departure {
            uid: self.uid.clone(),
            at,
            containers: self.containers,
            scheduled: self.node_name.as_deref().is_some_and(|n| !n.is_empty()),
            created: self.created,
            generated_name: self.generated_name,
        }
    }

    /// What the plan step sees of this pod: `selected` by the pool, its
    /// group's `annotation`, of its labels only `capacity_label` (the one
    /// the plan reads: a copy of every pod's labels was a tenth of a large
    /// reconcile's peak memory), its zone from its own label or its node's
    /// (`zone_of`).
    fn info(
        &self,
        selected: bool,
        capacity_label: Option<&str>,
        annotation: Option<&str>,
        zone_of: &impl Fn(&str) -> Option<String>,
    ) -> PodInfo {
        let labels = capacity_label
            .and_then(|key| Some((key.to_owned(), self.labels.get(key)?.clone())))
            .into_iter()
            .collect();
        let zone = self
            .labels
            .get(ZONE_LABEL)
            .cloned()
            .or_else(|| self.node_name.as_deref().and_then(zone_of));
        PodInfo {
            name: self.name.clone(),
            uid: self.uid.clone(),
            labels,
            selected,
            ready: self.ready,
            ready_since: self.ready_since,
            deletion_timestamp: self.deletion_timestamp,
            deletion_grace_seconds: self.deletion_grace_seconds,
            node_name: self.node_name.clone(),
            zone,
            annotation: annotation.map(str::to_owned),
            containers: self.containers,
            created: self.created,
            generated_name: self.generated_name,
            ip: self.ip,
            stateful_set: self.stateful_set.clone(),
        }
    }
}

/// The pods of one group among a namespace's `pods`: those its pool
/// `selects` plus those carrying its `annotation_key`, as [`PodInfo`],
/// sorted by name.
pub fn collect_pods<'a>(
    pods: impl Iterator<Item = &'a PodRecord>,
    selects: impl Fn(&PodRecord) -> bool,
    capacity_label: Option<&str>,
    annotation_key: &str,
    zone_of: impl Fn(&str) -> Option<String>,
) -> Vec<PodInfo> {
    // Sorted as references, then read into infos in order: sorting the
    // infos themselves moved 5,000 structs of a few hundred bytes about,
    // for pods in no order nearly as long as reading them (4.6 ms against
    // 2.6). (The operator's pod cache hands them over in name order, which
    // either sort only checks.)
    let mut chosen: Vec<(&PodRecord, bool, Option<&str>)> = pods
        .filter_map(|pod| {
            let selected = selects(pod);
            let annotation = pod.annotation(annotation_key);
            (selected || annotation.is_some()).then_some((pod, selected, annotation))
        })
        .collect();
    chosen.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    chosen
        .into_iter()
        .map(|(pod, selected, annotation)| pod.info(selected, capacity_label, annotation, &zone_of))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).expect("valid")
    }

    fn record(name: &str, labels: &[(&str, &str)]) -> PodRecord {
        let labels = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        PodRecord {
            name: name.into(),
            uid: format!("uid-{name}"),
            labels: Arc::new(labels),
            node_name: Some("node-1".into()),
            created: Some(t(-10)),
            ..PodRecord::default()
        }
    }

    #[test]
    fn selected_or_annotated_pods_are_seen_in_name_order_with_the_capacity_label_only() {
        let mut annotated = record("a", &[("app", "other")]);
        annotated.set_annotation("k", Some("{}".into()));
        let pods = [
            record("c", &[("app", "x"), ("weight", "4"), (ZONE_LABEL, "z1")]),
            record("b", &[("app", "other")]),
            annotated,
        ];
        let seen = collect_pods(
            pods.iter(),
            |pod| pod.labels.get("app").is_some_and(|app| app == "x"),
            Some("weight"),
            "k",
            |node| (node == "node-1").then(|| "z-node".to_owned()),
        );
        let names: Vec<&str> = seen.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["a", "c"]);
        assert!(!seen[0].selected && seen[0].annotation.as_deref() == Some("{}"));
        assert_eq!(seen[0].zone.as_deref(), Some("z-node"), "from its node");
        assert!(seen[1].selected && seen[1].annotation.is_none());
        assert_eq!(seen[1].zone.as_deref(), Some("z1"), "its own label first");
        assert_eq!(
            seen[1].labels,
            BTreeMap::from([("weight".to_owned(), "4".to_owned())])
        );
    }

    #[test]
    fn annotations_are_set_and_removed_in_key_order() {
        let mut pod = record("a", &[]);
        pod.set_annotation("b", Some("1".into()));
        pod.set_annotation("a", Some("2".into()));
        pod.set_annotation("b", Some("3".into()));
        assert_eq!(
            pod.annotations,
            [
                ("a".to_owned(), "2".to_owned()),
                ("b".to_owned(), "3".to_owned())
            ]
        );
        pod.set_annotation("a", None);
        pod.set_annotation("z", None);
        assert_eq!(pod.annotation("b"), Some("3"));
        assert_eq!(pod.annotation("a"), None);
    }

    #[test]
    fn a_departure_keeps_the_final_state_and_whether_it_was_scheduled() {
        let mut pod = record("a", &[]);
        pod.containers = Containers::Stopped;
        let gone = pod.departure(t(5));
        assert_eq!(
            (
                gone.uid.as_str(),
                gone.at,
                gone.containers,
                gone.scheduled,
                gone.created
            ),
            ("uid-a", t(5), Containers::Stopped, true, Some(t(-10)))
        );
        pod.node_name = Some(String::new());
        assert!(!pod.departure(t(5)).scheduled, "an empty node name is none");
    }
}
