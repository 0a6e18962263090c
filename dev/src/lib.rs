//! shardring's developer tooling, kept out of the operator's binary and
//! image: the [`demo`] (the whole system on local AWS emulators, with real
//! consumer processes and the checker's verdict), and the [`cli`] front ends
//! of the `shardring-dev` binary (`demo`, `simulate` over the simulation
//! crate, and the assignment engine's `plan` and `hash-keys`). It depends on
//! the operator's library for the adapters the demo runs around the core's
//! cycle; the operator depends on none of this.

// What is not part of the library's API (used by the binary, the tests or
// the e2e crate) is `pub(crate)`: a `pub` item no one outside can reach is
// flagged.
#![warn(unreachable_pub)]

pub mod cli;
pub mod demo;
