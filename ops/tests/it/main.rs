//! The checks of the day-2 artifacts, in one test binary: each module runs
//! one artifact through its real tool.

mod alerts;
mod argocd;
mod dashboard;
mod docs;
