//! shardring's assignment engine: a pure, deterministic function from shards,
//! pods, the previous assignment and options to a balanced, sticky assignment.
//! No I/O, no clocks, no randomness: the same input gives the same output on
//! every machine and every release.

pub mod types;

pub use types::*;
