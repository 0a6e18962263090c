//! The state that decides what the core sees of one group, kept between its
//! reconciles as core code fed by events, so that the operator, the
//! simulation and the demo run the same lines and keep only their I/O
//! (reading their stores or the API, sending writes), as kubert's indexes
//! are fed `apply` / `delete` / `reset`.
//!
//! What lives here, one concern per module: the last good topology with its
//! read error ([`topology`]). The README's architecture section says what
//! the adapters feed it.

pub mod topology;

pub use topology::{TopologyMemory, TopologyRead};
