//! Command-line front ends: one module per `shardring` subcommand, each owning
//! its clap arguments and its `run` function.

pub mod crds;
pub mod demo;
pub mod hash_keys;
pub mod plan;
pub mod run;
pub mod simulate;
pub mod topology;
