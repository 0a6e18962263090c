//! What a request to the endpoint can end in: an [`EndpointError`] (local
//! files, the connection, or an error answer with the server's reason,
//! message and retry headers), classified for the retry policy, and a
//! whole [`Reply`] as read from the connection.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use shardring_crds::endpoint::ErrorBody;

use super::retry::{Failure, RateLimit, retry_after};

/// Why a request to the endpoint failed.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// `url` is not `https://host[:port]`.
    #[error("invalid endpoint URL {url:?}: {detail}")]
    Url {
        /// The URL given.
        url: String,
        /// What is wrong.
        detail: String,
    },
    /// The token file could not be read or is empty.
    #[error("cannot read the endpoint token {path}: {detail}")]
    Token {
        /// The token file.
        path: String,
        /// What is wrong.
        detail: String,
    },
    /// The CA file could not be read or holds no certificate.
    #[error("cannot load the endpoint CA {path}: {detail}")]
    Ca {
        /// The CA file.
        path: String,
        /// What is wrong.
        detail: String,
    },
    /// No TCP connection.
    #[error("cannot connect to the endpoint {authority}: {detail}")]
    Connect {
        /// `host:port`.
        authority: String,
        /// What happened.
        detail: String,
    },
    /// The TLS handshake failed: most often the server's certificate is not
    /// signed by the CA in the CA file.
    #[error(
        "TLS handshake with the endpoint {authority} failed (is {ca_file} the endpoint's CA, \
         and the URL's host in its certificate?): {detail}"
    )]
    Tls {
        /// `host:port`.
        authority: String,
        /// The CA file trusted.
        ca_file: String,
        /// rustls' reason.
        detail: String,
    },
    /// The connection broke or timed out before a whole answer came back
    /// (the request may or may not have been processed).
    #[error("no answer from the endpoint {authority}: {detail}")]
    Io {
        /// `host:port`.
        authority: String,
        /// What happened.
        detail: String,
    },
    /// The server answered with an error status.
    #[error("endpoint answered {status} {reason}: {message}", reason = reason.as_deref().unwrap_or("-"))]
    Status {
        /// The status.
        status: u16,
        /// `ErrorBody.reason`, when the body is one.
        reason: Option<String>,
        /// `ErrorBody.message`, or the body's text.
        message: String,
        /// `Retry-After`.
        retry_after: Option<Duration>,
        /// The rate-limit headers.
        rate: RateLimit,
    },
    /// A success answer whose body is not what the contract says.
    #[error("endpoint answer is not valid: {0}")]
    Decode(String),
}

impl EndpointError {
    /// The retry policy's view of this error.
    pub fn failure(&self) -> Failure {
        match self {
            Self::Status {
                status: 429,
                retry_after,
                ..
            } => Failure::RateLimited(*retry_after),
            Self::Status {
                status: 503,
                reason: Some(reason),
                ..
            } if reason == "NotLeader" => Failure::NotLeader,
            Self::Status {
                status: 403,
                reason: Some(reason),
                ..
            } if reason == "IpMismatch" || reason == "NotMember" => Failure::NotYetKnown,
            Self::Status {
                status: 409,
                reason: Some(reason),
                ..
            } if reason == "FutureEpoch" => Failure::NotYetPublished,
            Self::Status { status: 401, .. } => Failure::Unauthorized,
            Self::Status { status, .. } if *status >= 500 => Failure::Transient,
            Self::Status { .. } | Self::Url { .. } | Self::Ca { .. } | Self::Token { .. } => {
                Failure::Refused
            }
            Self::Connect { .. } | Self::Tls { .. } | Self::Io { .. } | Self::Decode(_) => {
                Failure::Transient
            }
        }
    }

    /// The `ErrorBody.reason` of an error answer.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Self::Status { reason, .. } => reason.as_deref(),
            _ => None,
        }
    }

    /// The HTTP status of an error answer.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// A whole answer.
#[derive(Debug)]
pub struct Reply {
    /// The status.
    pub status: StatusCode,
    /// The headers.
    pub headers: HeaderMap,
    /// The body.
    pub body: Bytes,
}

impl Reply {
    /// The rate-limit headers.
    pub fn rate(&self) -> RateLimit {
        RateLimit::from_headers(&self.headers)
    }

    pub(super) fn into_error(self) -> EndpointError {
        let (reason, message) = match serde_json::from_slice::<ErrorBody>(&self.body) {
            Ok(body) => (Some(body.reason), body.message),
            Err(_) => (None, String::from_utf8_lossy(&self.body).trim().to_owned()),
        };
        EndpointError::Status {
            status: self.status.as_u16(),
            reason,
            message,
            retry_after: retry_after(&self.headers),
            rate: RateLimit::from_headers(&self.headers),
        }
    }
}
