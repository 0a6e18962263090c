//! Classification of Kinesis SDK failures into [`SourceError`] with constant
//! reasons, plus whether a retry with backoff may help, for the topology
//! reader. The error codes come from [`crate::aws`], which the lease-table
//! reader classifies DynamoDB failures with too.

use aws_sdk_kinesis::config::http::HttpResponse;
use aws_sdk_kinesis::error::{ProvideErrorMetadata, SdkError};

use crate::aws::{chain, is_access_code, is_throttle_code};
use shardring_core::topology::SourceError;

/// Reason of a read that found no AWS credentials (the default chain
/// exhausted).
pub const NO_CREDENTIALS: &str = "NoCredentials";

/// What a failed call means for the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Give up now with this error.
    Fatal(SourceError),
    /// Retry with backoff; this error is returned once attempts run out.
    Retry(SourceError),
    /// A paging token expired (after 300 s): restart the listing.
    RestartListing(SourceError),
}

/// Classifies a service error by its code, message and HTTP status.
pub(crate) fn classify_service(
    code: Option<&str>,
    message: Option<&str>,
    status: u16,
    stream: &str,
) -> Failure {
    let detail = match (code, message) {
        (Some(code), Some(message)) => format!("{stream}: {code}: {message}"),
        (Some(code), None) => format!("{stream}: {code}"),
        (None, Some(message)) => format!("{stream}: HTTP {status}: {message}"),
        (None, None) => format!("{stream}: HTTP {status}"),
    };
    match code {
        Some("ResourceNotFoundException") => Failure::Fatal(SourceError::StreamNotFound(detail)),
        Some(code) if is_access_code(code) => Failure::Fatal(SourceError::AccessDenied(detail)),
        Some(code) if is_throttle_code(code) => Failure::Retry(SourceError::Throttled(detail)),
        Some("ExpiredNextTokenException") => Failure::RestartListing(SourceError::Other(detail)),
        // ResourceInUse: the stream is being created or deleted; it settles.
        Some(
            "ResourceInUseException"
            | "InternalFailureException"
            | "ServiceUnavailable"
            | "InternalServerError",
        ) => Failure::Retry(SourceError::Other(detail)),
        _ if status == 429 => Failure::Retry(SourceError::Throttled(detail)),
        _ if status == 403 => Failure::Fatal(SourceError::AccessDenied(detail)),
        _ if status >= 500 => Failure::Retry(SourceError::Other(detail)),
        _ => Failure::Fatal(SourceError::Other(detail)),
    }
}

/// Classifies any SDK error: service errors by code, transport failures
/// (timeouts, refused connections, garbled responses) as retryable.
pub(crate) fn classify<E>(error: &SdkError<E, HttpResponse>, stream: &str) -> Failure
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    if let Some(missing) = credentials_error(error) {
        // The default chain found nothing (no IRSA token, no Pod Identity,
        // no instance profile, no environment): say so plainly.
        return Failure::Fatal(SourceError::Named {
            reason: NO_CREDENTIALS,
            message: format!(
                "no AWS credentials: {stream}: {}; give the operator's pod AWS credentials \
                 (IRSA, EKS Pod Identity, or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY in its \
                 environment)",
                chain(missing)
            ),
        });
    }
    match error {
        SdkError::ServiceError(service) => {
            let err = service.err();
            let status = service.raw().status().as_u16();
            classify_service(err.code(), err.message(), status, stream)
        }
        SdkError::TimeoutError(_) => {
            Failure::Retry(SourceError::Other(format!("{stream}: request timed out")))
        }
        SdkError::DispatchFailure(_) => Failure::Retry(SourceError::Other(format!(
            "{stream}: could not reach the endpoint: {}",
            chain(error)
        ))),
        SdkError::ResponseError(_) => Failure::Retry(SourceError::Other(format!(
            "{stream}: unreadable response: {}",
            chain(error)
        ))),
        other => Failure::Fatal(SourceError::Other(format!("{stream}: {}", chain(other)))),
    }
}

/// The credentials failure somewhere in `error`'s source chain, if any.
fn credentials_error<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> Option<&'a (dyn std::error::Error + 'static)> {
    let mut current = Some(error);
    while let Some(cause) = current {
        if cause
            .downcast_ref::<aws_credential_types::provider::error::CredentialsError>()
            .is_some()
        {
            return Some(cause);
        }
        current = cause.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_constant_reasons() {
        let reason = |code: &str, status: u16| match classify_service(Some(code), None, status, "s")
        {
            Failure::Fatal(e) | Failure::Retry(e) | Failure::RestartListing(e) => e.reason(),
        };
        assert_eq!(reason("ResourceNotFoundException", 400), "StreamNotFound");
        assert_eq!(reason("AccessDeniedException", 400), "AccessDenied");
        assert_eq!(reason("LimitExceededException", 400), "Throttled");
        assert_eq!(
            reason("ProvisionedThroughputExceededException", 400),
            "Throttled"
        );
        assert_eq!(reason("ThrottlingException", 400), "Throttled");
        assert_eq!(reason("InvalidArgumentException", 400), "SourceError");
        assert_eq!(reason("Weird", 503), "SourceError");
    }

    #[test]
    fn throttles_and_server_errors_are_retried_but_not_missing_streams() {
        assert!(matches!(
            classify_service(Some("LimitExceededException"), None, 400, "s"),
            Failure::Retry(_)
        ));
        assert!(matches!(
            classify_service(None, None, 429, "s"),
            Failure::Retry(SourceError::Throttled(_))
        ));
        assert!(matches!(
            classify_service(None, None, 502, "s"),
            Failure::Retry(_)
        ));
        assert!(matches!(
            classify_service(Some("ResourceNotFoundException"), None, 400, "s"),
            Failure::Fatal(_)
        ));
        assert!(matches!(
            classify_service(Some("ExpiredNextTokenException"), None, 400, "s"),
            Failure::RestartListing(_)
        ));
    }
}
