//! The shardring operator's library: the assignment engine (re-exported from
//! its own dependency-free crate), the controller core, the shard sources, the
//! Kubernetes adapter, the runtime (metrics, health, leader election) and the
//! command-line front ends.

pub use shardring_crds as crds;
pub use shardring_engine as engine;

pub mod aws;
pub mod cli;
pub mod controller;
pub mod demo;
pub use shardring_devkit::emulators;
pub mod lease;
pub mod runtime;
pub mod sim;
pub mod source;
