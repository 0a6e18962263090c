//! Command-line front ends: one module per `shardring-dev` subcommand, each
//! owning its clap arguments and its `run` function.

pub mod demo;
pub mod hash_keys;
pub mod plan;
pub mod simulate;
