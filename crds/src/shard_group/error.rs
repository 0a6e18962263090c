//! The error of a typed spec accessor: which field under `spec` held text
//! that is not a valid duration.

use std::time::Duration;

use crate::duration::{DurationError, parse_positive_duration};

/// A spec field whose text could not be turned into a value. The CEL rules
/// refuse such specs at admission; this guards objects stored before a rule
/// existed, so the controller reports them instead of guessing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("spec.{field}: {source}")]
pub struct SpecError {
    /// JSON path of the field below `spec`, e.g. `handoff.drainTimeout`.
    pub field: &'static str,
    /// What was wrong with its value.
    pub source: DurationError,
}

/// `text` as a positive duration, or the error naming `field`.
pub(super) fn positive(field: &'static str, text: &str) -> Result<Duration, SpecError> {
    parse_positive_duration(text).map_err(|source| SpecError { field, source })
}
