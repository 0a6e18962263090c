//! The consumer endpoint's HTTPS server against a mock API server that
//! answers TokenReviews (and counts them), with the directory and the
//! releases filled by the tests as the controller fills them: views and
//! long-polls, authentication and identity checks, releases, load reports, rate limits
//! and connection limits, leadership, certificates, and `shardring run`
//! serving it all.

mod auth;
mod corpus;
mod limits;
mod loads;
mod releases;
mod run_cli;
mod serving;
mod support;
mod views;
