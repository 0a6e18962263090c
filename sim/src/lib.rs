//! Deterministic simulation of the whole handoff protocol around the REAL
//! controller core. One seed drives an in-process model ([`world`]) of pods
//! (join, become ready, graceful termination, kill -9, force deletion, node
//! partitions), the stream (records, splits, merges), the lease table
//! (lagging writes, expiries) and consumers that follow the contract with
//! random delays, plus the operator ([`operator`]) with crashes, failed and
//! late writes (a late document write lands at any later time, only while
//! its resourceVersion precondition holds), failed and stale topology reads
//! and failed lease scans, pod watch gaps. The
//! operator runs the controller core's reconcile cycle
//! ([`shardring_core::cycle()`]) with in-memory observe and apply
//! implementations, exactly the cycle and the plan step `shardring run`
//! executes.
//!
//! Checked at every step: never two consumers reading one shard, never a
//! child read before its parents completed, no record skipped, never a
//! document shrunk by a read error, never a published epoch that does not
//! increase, and every revoke ends by `drainTimeout` plus one reconcile
//! unless the operator was kept from acting ([`revokes`]: the simulated
//! operator reconciles when the operator's runtime would, on its requeue
//! and retry rule and its watch events). After the faults stop and the system goes
//! quiet: every readable shard has exactly one owner that reads it, the load
//! is balanced within one shard, no handoff is in flight and planning again
//! changes nothing.
//!
//! Seeds balanced by throughput ([`load`]) add load: noisy consumer reports
//! through the real load book, load shifts, and two more checks once quiet
//! (no flapping, the band holds).
//!
//! Pool seeds ([`pool`]) run several ShardGroups on one ConsumerPool, each
//! reconcile taking its share of the pool's balance from the real pool
//! book, and check, beyond every group's invariants, the balance over the
//! pool once quiet (shards over the count groups, standby slots, whole
//! loads) and that a further quiet period writes nothing.
//!
//! Time only moves in the simulation; the same seed replays the same run.
//!
//! The crate: [`run`] (one seed, many seeds, their summary), [`sim`] (the
//! simulated system and its step), `counts` (what a run counts of itself:
//! events injected, pool mode's notes), `inject` (the random faults and events
//! of a step), `quiet` (the checks once the system went quiet), [`pool`]
//! (pool seeds and their checks), [`standbys`] (what the pool checks hold
//! standbys to), [`revokes`] (the bound on a revoke),
//! [`world`] (pods, stream, lease table, consumers), [`operator`] (the
//! operator process and the API objects), [`scenario`] (planned-event
//! measurements), [`explore`] (an exhaustive search of a small
//! configuration) and [`rng`].

// The API and engine crates under the names the operator gives them.
use shardring_crds as crds;
use shardring_engine as engine;

pub mod band_reachable;
mod counts;
pub mod explore;
mod inject;
pub mod load;
pub mod operator;
pub mod pool;
mod quiet;
pub mod revokes;
pub mod rng;
pub mod run;
pub mod scenario;
pub mod sim;
pub mod standbys;
pub mod world;

pub use load::{run_load_seed, run_load_seeds};
pub use pool::{run_pool_load_seed, run_pool_load_seeds, run_pool_seed, run_pool_seeds};
pub use run::{EventCounts, SeedOutcome, SimConfig, Summary, percentile, run_seed, run_seeds};
pub use scenario::{RollingDeploy, rolling_deploy};
pub use sim::{PodStart, Sim};
