//! The integration tests of the API crate, in one test binary (one link of
//! the crate and its dependencies instead of one per file): each module was
//! a test file of its own. Run one with
//! `cargo test -p shardring-crds --test it <module>::`, e.g. `generated::`.
//!
//! The committed files they compare with stay where they were: the golden
//! documents in `crds/tests/golden/`, the CRDs in `config/crd/bases/`, the
//! samples in `config/samples/`.

mod cel;
mod common;
mod encoding;
mod generated;
mod golden;
mod samples;
