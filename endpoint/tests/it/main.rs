//! The consumer endpoint's HTTPS server, in one test binary, against a mock API server that
//! answers TokenReviews (and counts them), with the directory and the
//! releases filled by the tests as the controller fills them: views and
//! long-polls, authentication and identity checks, releases, load reports, rate limits
//! and connection limits, leadership and certificates. That `shardring run`
//! serves it all (the self-signed Secret, the leader label on its pod) is
//! checked on the real control plane (the e2e crate's `endpoint_run`).

mod auth;
mod corpus;
mod limits;
mod loads;
mod releases;
mod serving;
mod support;
mod views;
