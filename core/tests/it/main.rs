//! The core's integration tests, in one test binary: the plan step's rules
//! over whole observations ([`plan`]), the two-phase handoff protocol with
//! a lease table ([`handoff_protocol`]) and when a deleted pod's shards move
//! ([`pod_stopped_timing`]). They build their inputs with
//! `shardring_core::fixtures` and compile neither kube nor the AWS SDK:
//! `cargo test -p shardring-core --test it`.

mod handoff_protocol;
mod plan;
mod pod_stopped_timing;
