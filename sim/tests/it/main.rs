//! The simulation's integration tests, in one test binary (run one module
//! with `cargo test -p shardring-sim --test it <module>::`): `seeds` (many
//! seeds, zero violations, determinism, a rolling deploy), `load` (balance
//! by throughput: seeds, noise, a load shift), `pool` (pools of several
//! groups: seeds of both kinds, the pool-wide balance), `fresh` (a new
//! range of seeds of every kind on every run), `regressions`
//! (seeds that once found a bug), `kubelet` (the kubelet's word as handoff
//! evidence) and `explore` (the exhaustive search of a small configuration).

mod acks;
mod explore;
mod fresh;
mod kubelet;
mod load;
mod pool;
mod regressions;
mod seeds;
