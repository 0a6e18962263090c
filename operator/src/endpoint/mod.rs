//! The consumer endpoint: the HTTPS API the leader serves to consumer pods
//! (wire contract in [`shardring_crds::endpoint`], documented in
//! `docs/api.md`). It is an adapter over the pure core: the controller
//! publishes each pod's view into the [`Directory`] after every cycle, the
//! endpoint answers long-polls from it, and release acknowledgements go into
//! the [`Releases`] store, which the controller's observe step reads as
//! handoff evidence (`Evidence::ReleaseAcked` in the core).
//!
//! `directory` owns the served views and who may see them, `releases` the
//! acknowledged releases and their validation.

pub mod directory;
pub mod releases;

pub use directory::{Caller, Directory, GroupKey, Lookup, PodSync, ServedView};
pub use releases::{ReleaseRejection, Releases};
