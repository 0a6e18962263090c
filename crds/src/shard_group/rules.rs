//! The CEL rules the schema of several fields shares.

/// CEL: a positive Go-style duration (`30s`, `1m30s`, `250ms`).
pub(super) const POSITIVE_DURATION: &str =
    "self.matches('^([0-9]+(ms|s|m|h))+$') && duration(self) > duration('0s')";
/// CEL: a Go-style duration that may be zero.
pub(super) const DURATION: &str = "self.matches('^([0-9]+(ms|s|m|h))+$')";
/// CEL: an endpoint URL.
pub(super) const ENDPOINT_URL: &str = "self.matches('^https?://[^\\\\s/]+(/.*)?$')";
/// CEL: an AWS region name.
pub(super) const REGION: &str = "self.matches('^[a-z]{2}(-[a-z]+)+-[0-9]+$')";
