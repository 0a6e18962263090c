//! The consumer endpoint: the HTTPS API the leader serves to consumer pods
//! (wire contract in [`shardring_crds::endpoint`], documented in
//! `docs/api.md`). It is an adapter over the pure core: the controller
//! publishes each pod's view into the [`Directory`] after every cycle, the
//! endpoint answers long-polls from it, and release acknowledgements go into
//! the [`Releases`] store, which the controller's observe step reads as
//! handoff evidence (`Evidence::ReleaseAcked` in the core).
//!
//! `state` owns [`EndpointState`], what the controller and the server
//! share; `directory` owns the served views and who may see them, `releases` the
//! acknowledged releases and their validation, `loads` the measured loads
//! (consumers' reports and the lease table's throughput, checked and
//! smoothed by the core). The HTTPS server is
//! [`server`]'s: `http1` runs hyper's HTTP/1 server on each connection,
//! `conn` times connections out, hands hyper only the request heads `head`
//! accepts (the endpoint answers the others itself) and closes connections
//! lingering, `routes` answers requests
//! (`request_body` reads their bodies, `answers` builds the answers), `auth`
//! checks tokens (TokenReviews, or [`LocalTokens`] in the embedded mode),
//! `ratelimit` counts requests, `serving` says whether this replica serves,
//! `tls` and `selfsigned` provide the certificate, `leader_label` marks the
//! serving pod, and `metrics` counts it all.

mod answers;
mod auth;
mod conn;
pub mod directory;
mod head;
mod http1;
mod leader_label;
pub mod loads;
pub mod metrics;
mod ratelimit;
pub mod releases;
mod request_body;
mod requests;
mod routes;
mod selfsigned;
pub mod server;
mod serving;
mod state;
mod tls;

pub use auth::LocalTokens;
pub use directory::{Caller, Directory, FreshPod, Lookup, PodCache, PodSync, ServedView};
pub use loads::{LoadRefusal, Loads};
pub use metrics::EndpointMetrics;
pub use releases::{ReleaseRejection, Releases};
pub use requests::{ReconcileRequests, Requested};
pub use server::{EndpointServer, EndpointServerConfig, EndpointServerError};
pub use state::EndpointState;
