//! The shardring operator's library: the adapters around the pure crates
//! (the assignment engine and the controller core `shardring_core`, whose
//! modules [`controller`] re-exports): the Kubernetes observe and apply
//! steps, the shard sources (Kinesis, static) and the lease-table reader, the
//! runtime (metrics, health, leader election) and the
//! command-line front ends of the `shardring` binary. The developer tooling
//! (demo, simulation, `plan`, `hash-keys`) is the `shardring-dev` crate's.

// What is not part of the library's API (used by the binary, the tests,
// the benches or the e2e crate) is `pub(crate)`: a `pub` item no one outside
// can reach is flagged.
#![warn(unreachable_pub)]

pub use shardring_crds as crds;
pub use shardring_endpoint as endpoint;
pub use shardring_engine as engine;

pub mod aws;
pub mod cli;
pub mod clock;
pub mod controller;
pub mod lease_table;
pub mod runtime;
pub mod source;

pub use shardring_core::GroupKey;
