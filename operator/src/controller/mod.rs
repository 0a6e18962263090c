//! The ShardGroup controller: a reconcile pipeline of observe (I/O, from
//! reflector stores) → plan (pure) → apply (server-side apply) → status.
//! Each step lives in its own module; this one wires them to kube's
//! `Controller`.

pub mod codec;
pub mod conditions;
pub mod document;
pub mod events;
pub mod handoff;
pub mod observe;
pub mod plan;
pub mod status;

pub use document::AnnotationWrite;
pub use events::{EventKind, EventNote};
pub use observe::{Observation, PodInfo, Published, TopologyObservation};
pub use plan::{Decision, plan};
