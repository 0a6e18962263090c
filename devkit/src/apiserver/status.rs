//! Failure answers as the real API server shapes them: a `v1` `Status` with
//! a message, a machine-readable reason and the HTTP code, built by one
//! constructor per reason.

use serde_json::{Value, json};

use super::resources::ResourceType;

/// A failed request: the HTTP code and the `Status` body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `Status.reason`.
    pub reason: &'static str,
    /// `Status.message`.
    pub message: String,
    /// `Status.details`, when the failure is about one object.
    pub details: Option<Value>,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.reason, self.message)
    }
}

fn details(rt: &ResourceType, name: &str) -> Value {
    let mut d = json!({ "name": name, "kind": rt.plural });
    if !rt.group.is_empty() {
        d["group"] = json!(rt.group);
    }
    d
}

impl ApiError {
    /// A failure with no details.
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    /// The `reason` the real server uses for an HTTP code.
    pub fn reason_for(code: u16) -> &'static str {
        match code {
            400 => "BadRequest",
            401 => "Unauthorized",
            403 => "Forbidden",
            404 => "NotFound",
            405 => "MethodNotAllowed",
            409 => "Conflict",
            410 => "Expired",
            415 => "UnsupportedMediaType",
            422 => "Invalid",
            429 => "TooManyRequests",
            503 => "ServiceUnavailable",
            504 => "Timeout",
            _ => "InternalError",
        }
    }

    /// A scripted failure with the usual reason for `code`.
    pub fn scripted(code: u16) -> Self {
        Self::new(
            code,
            Self::reason_for(code),
            format!("injected failure ({code})"),
        )
    }

    /// 404: the object does not exist.
    pub fn not_found(rt: &ResourceType, name: &str) -> Self {
        ApiError {
            details: Some(details(rt, name)),
            ..Self::new(
                404,
                "NotFound",
                format!("{} \"{name}\" not found", rt.qualified()),
            )
        }
    }

    /// 409: create of an existing object.
    pub fn already_exists(rt: &ResourceType, name: &str) -> Self {
        ApiError {
            details: Some(details(rt, name)),
            ..Self::new(
                409,
                "AlreadyExists",
                format!("{} \"{name}\" already exists", rt.qualified()),
            )
        }
    }

    /// 409: the resourceVersion precondition failed.
    pub fn conflict(rt: &ResourceType, name: &str) -> Self {
        ApiError {
            details: Some(details(rt, name)),
            ..Self::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; \
                     please apply your changes to the latest version and try again",
                    rt.qualified()
                ),
            )
        }
    }

    /// 409: a conflict with a custom message (uid preconditions, apply
    /// conflicts).
    pub fn conflict_with(rt: &ResourceType, name: &str, message: String) -> Self {
        ApiError {
            details: Some(details(rt, name)),
            ..Self::new(409, "Conflict", message)
        }
    }

    /// 422: the object is invalid.
    pub fn invalid(rt: &ResourceType, name: &str, cause: &str) -> Self {
        ApiError {
            details: Some(details(rt, name)),
            ..Self::new(
                422,
                "Invalid",
                format!("{} \"{name}\" is invalid: {cause}", rt.kind),
            )
        }
    }

    /// 400: a malformed request.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 410: a continue token or resourceVersion too old to serve.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 401: missing or wrong bearer token.
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// 404 for a path the server does not serve.
    pub fn no_route(path: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )
    }

    /// 405: the verb is not supported on this path.
    pub fn method_not_allowed(method: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource ({method})"),
        )
    }

    /// The `Status` object of this failure.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }
}

/// The `Status` the real server answers a completed delete with.
pub(crate) fn success_status(rt: &ResourceType, name: &str, uid: Option<&str>) -> Value {
    let mut details = details(rt, name);
    if let Some(uid) = uid {
        details["uid"] = json!(uid);
    }
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    })
}
