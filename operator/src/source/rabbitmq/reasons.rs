//! The constant reasons of a RabbitMQ source's failures (status
//! conditions, Events and metrics).

/// Reason: the management API did not answer (connection refused, a
/// timeout, a 5xx).
pub const BROKER_UNREACHABLE: &str = "BrokerUnreachable";
/// Reason: the vhost does not exist (or the URL is not the management
/// API's).
pub const VHOST_NOT_FOUND: &str = "VhostNotFound";
/// Reason: the credentials Secret is missing, unreadable or incomplete.
pub const CREDENTIALS_UNAVAILABLE: &str = "CredentialsUnavailable";
