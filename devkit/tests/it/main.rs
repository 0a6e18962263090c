//! Integration tests of the mock API server, through a real `kube::Client`
//! built from its kubeconfig (TLS, bearer token) and kube's runtime watcher.

mod apply;
mod auth;
mod crud;
mod delete;
mod faults;
mod kinds;
mod list;
mod patch;
mod support;
mod watch;
