//! The AWS error codes that mean throttling or denied access (the same
//! across services), and an error's text with its whole source chain.

/// Error codes AWS uses for throttling across services.
const THROTTLE_CODES: &[&str] = &[
    "LimitExceededException",
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "Throttling",
    "ThrottledException",
    "RequestLimitExceeded",
    "TooManyRequestsException",
    "RequestThrottled",
    "RequestThrottledException",
    "SlowDown",
];

/// Error codes meaning the credentials may not make the call.
const ACCESS_CODES: &[&str] = &[
    "AccessDeniedException",
    "AccessDenied",
    "UnrecognizedClientException",
    "InvalidSignatureException",
    "ExpiredTokenException",
    "KMSAccessDeniedException",
    "MissingAuthenticationToken",
];

/// Whether `code` is an AWS throttling error code.
pub(crate) fn is_throttle_code(code: &str) -> bool {
    THROTTLE_CODES.contains(&code)
}

/// Whether `code` is an AWS access error code.
pub(crate) fn is_access_code(code: &str) -> bool {
    ACCESS_CODES.contains(&code)
}

/// An error and its sources joined with ": ", so logs show the root cause.
pub fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
