//! The state that decides what the core sees of one group, kept between its
//! reconciles as core code fed by events, so that the operator, the
//! simulation and the demo run the same lines and keep only their I/O
//! (reading their stores or the API, sending writes), as kubert's indexes
//! are fed `apply` / `delete` / `reset`.
//!
//! What lives here, one concern per module: the last good topology with its
//! read error ([`topology`]); the pod facts, one pod as a small record
//! and its one translation into what the plan step and the memory of
//! departed pods see ([`pods`]); the published document as last read or
//! written at its version ([`document`]). The README's architecture section says what
//! the adapters feed it.

pub mod document;
pub mod pods;
pub mod topology;

pub use document::DocumentMemory;
pub use pods::{PodRecord, collect_pods};
pub use topology::{TopologyMemory, TopologyRead};
