//! Command-line front ends: one module per `shardring` subcommand, each owning
//! its clap arguments and its `run` function.

pub mod crds;
pub mod run;
pub mod topology;
