//! shardring's controller core: every decision the operator makes, as pure
//! functions of what it observed. It owns the observation types
//! ([`observation`], [`departures`], [`leases`], [`topology`]) and the
//! memory of departed pods that feeds them ([`departures::DepartureMemory`]), the plan
//! step ([`plan()`]: one [`Observation`] in, one [`Decision`] out), the
//! two-phase handoff rules ([`handoff`]), the building of the published
//! document and pod annotations (`document`, encoded by [`codec`]), of the
//! status, its conditions and the Events (`status`, [`conditions`],
//! `events`), the pacing of optional moves (`pacing`), the measured loads
//! of `balance: throughput` and the scaling signal ([`load`]), the one
//! reconcile cycle ([`cycle()`]: observe → plan → apply through the
//! [`Observe`] and [`Apply`] traits, writes in the contract's order) and
//! when a group is reconciled again after it ([`retry`]), the state
//! kept of each group between its reconciles, fed by events
//! ([`group_state`]: the last good topology), and which watch events are
//! the echoes of the operator's own writes ([`echoes`]), on the caller's
//! clock ([`moment`]). What only the
//! core itself uses is `pub(crate)`: the public items are what the operator,
//! the simulation, the demo and the tests call.
//!
//! It depends on the API and engine crates only: no Kubernetes client, no
//! AWS SDK, no async runtime, and it reads no clock (the observation carries
//! `now`). The operator's adapters, the simulation and the demo implement
//! the cycle's two halves; none of them runs a loop of its own.

// The API and engine crates under the names the operator gives them.
use shardring_crds as crds;
use shardring_engine as engine;

pub mod codec;
pub mod conditions;
mod containers;
pub mod cycle;
pub mod departures;
pub(crate) mod document;
pub mod echoes;
pub(crate) mod events;
#[cfg(feature = "fixtures")]
pub mod fixtures;
mod group_key;
pub mod group_state;
pub mod handoff;
pub mod identity;
pub mod leases;
pub mod load;
pub mod moment;
pub mod observation;
pub(crate) mod pacing;
pub mod plan;
pub mod pool;
pub mod pool_conditions;
pub mod retry;
pub(crate) mod sorted_cursor;
pub(crate) mod status;
pub mod topology;

pub use cycle::{Apply, Observe, Observed, cycle};
pub use document::AnnotationWrite;
pub use events::{EventKind, EventNote};
pub use group_key::GroupKey;
pub use leases::{LeaseSnapshot, LeaseTable};
pub use observation::{
    Containers, LeaseObservation, Observation, PodInfo, Published, PublishedVersion,
    TopologyObservation,
};
pub use plan::{Decision, Leftovers, PlanMemory, Shortcuts, plan, plan_with};
pub use topology::{SourceError, Topology};
