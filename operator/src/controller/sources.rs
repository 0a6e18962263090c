//! Per-ShardGroup source state kept in memory between reconciles: the source
//! built from the spec (rebuilt when `spec.source` or `spec.leaseTable`
//! changes) and the last topology read successfully, with the time it was
//! first seen. A failed read keeps the last good topology and reports the
//! error, so the plan step never mistakes a failure for "no shards".

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use jiff::Timestamp;
use kube::ResourceExt;

use super::observe::TopologyObservation;
use crate::crds::shard_group::{LeaseTableSpec, ShardSource as SourceSpec};
use crate::crds::{ShardGroup, ShardGroupSpec};
use crate::source::{self, ShardSource, SourceError, Topology};

/// Builds a source from a spec ([`source::for_spec`] unless replaced in tests).
pub type SourceFactory =
    Arc<dyn Fn(&ShardGroupSpec) -> Result<Box<dyn ShardSource>, SourceError> + Send + Sync>;

struct GroupSource {
    spec: (SourceSpec, Option<LeaseTableSpec>),
    source: Result<Arc<dyn ShardSource>, SourceError>,
    last_good: Option<Topology>,
    read_at: Option<Timestamp>,
}

/// Sources and last good topologies of every ShardGroup, keyed by uid.
pub struct Sources {
    factory: SourceFactory,
    groups: Mutex<HashMap<String, GroupSource>>,
}

impl Default for Sources {
    fn default() -> Self {
        Self::new(Arc::new(source::for_spec))
    }
}

impl Sources {
    /// Sources built by `factory`.
    pub fn new(factory: SourceFactory) -> Self {
        Self {
            factory,
            groups: Mutex::default(),
        }
    }

    /// Reads `group`'s topology now, keeping the last good one on failure.
    pub async fn read(&self, group: &ShardGroup, now: Timestamp) -> TopologyObservation {
        let key = key(group);
        let wanted = (group.spec.source.clone(), group.spec.lease_table.clone());
        let source = {
            let mut groups = self.groups.lock().expect("source map poisoned");
            let entry = groups
                .entry(key.clone())
                .or_insert_with(|| self.build(&group.spec, wanted.clone()));
            if entry.spec != wanted {
                // A different source: the old topology says nothing about it.
                *entry = self.build(&group.spec, wanted);
            }
            entry.source.clone()
        };
        let (describe, result) = match source {
            Ok(source) => (source.describe(), source.read().await),
            Err(error) => (group.spec.source.summary(), Err(error)),
        };
        let mut groups = self.groups.lock().expect("source map poisoned");
        let Some(entry) = groups.get_mut(&key) else {
            // Forgotten while reading (the group was deleted).
            return TopologyObservation {
                source: describe,
                error: result.err(),
                ..Default::default()
            };
        };
        let error = match result {
            Ok(topology) => {
                if entry.last_good.as_ref() != Some(&topology) {
                    entry.read_at = Some(now);
                    entry.last_good = Some(topology);
                }
                None
            }
            Err(error) => Some(error),
        };
        TopologyObservation {
            source: describe,
            last_good: entry.last_good.clone(),
            read_at: entry.read_at,
            error,
        }
    }

    /// Drops the state of a deleted group.
    pub fn forget(&self, group: &ShardGroup) {
        self.groups
            .lock()
            .expect("source map poisoned")
            .remove(&key(group));
    }

    fn build(
        &self,
        spec: &ShardGroupSpec,
        wanted: (SourceSpec, Option<LeaseTableSpec>),
    ) -> GroupSource {
        GroupSource {
            spec: wanted,
            source: (self.factory)(spec).map(Arc::from),
            last_good: None,
            read_at: None,
        }
    }
}

fn key(group: &ShardGroup) -> String {
    group.uid().unwrap_or_else(|| {
        format!(
            "{}/{}",
            group.namespace().unwrap_or_default(),
            group.name_any()
        )
    })
}
