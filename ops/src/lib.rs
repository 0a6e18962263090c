//! The day-2 artifacts shardring ships beside the operator, and the
//! harnesses that run them through the tools their users run them with:
//! the alert rules through `promtool test rules`, the Argo CD health checks
//! through Debian's `lua5.4`, the dashboard's queries through a real
//! Prometheus. The artifacts themselves live where users find them
//! (`config/monitoring/`, `config/argocd/`, copied into the chart by
//! `scripts/generate.sh`); this crate only finds and checks them.

pub mod argocd;
pub mod dashboard;
pub mod docs;
pub mod kstatus;
pub mod lua_sandbox;
pub mod prometheus;
pub mod promtool;
pub mod tools;
