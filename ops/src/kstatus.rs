//! What Flux's kstatus computes for a shardring object: the rules kstatus
//! applies to a custom resource it has no built-in rules for, transcribed
//! from sigs.k8s.io/cli-utils `pkg/kstatus/status` — `generic.go`
//! (`checkGenericProperties`, `checkGeneration`) and `status.go`
//! (`Compute`, `checkReadyCondition`). Flux (kustomize-controller's health
//! checks, `flux` CLI) evaluates health with its fork of that package,
//! github.com/fluxcd/cli-utils, which started from the same code. Used to
//! compare with the Argo CD health checks, so that the docs can state where
//! the two agree and where Argo CD knows more.
//!
//! The rules, first match wins:
//! 1. `metadata.deletionTimestamp` set: Terminating;
//! 2. `metadata.generation` differs from `status.observedGeneration` (only
//!    when both are present): InProgress;
//! 3. a condition `Reconciling=True`: InProgress; `Stalled=True`: Failed
//!    (the first of the two in the list decides);
//! 4. the first `Ready` condition that is True: Current; False or Unknown:
//!    InProgress;
//! 5. otherwise (no status, no conditions, no Ready): Current.

use std::fmt;

use serde_json::Value;

/// kstatus's verdict on an object (the statuses `Compute` returns).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Status {
    /// Not reconciled yet.
    InProgress,
    /// Reconciled, and the controller says it failed (`Stalled=True`).
    Failed,
    /// Reconciled.
    Current,
    /// Being deleted.
    Terminating,
}

impl Status {
    /// kstatus's name for the status.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::InProgress => "InProgress",
            Status::Failed => "Failed",
            Status::Current => "Current",
            Status::Terminating => "Terminating",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// kstatus's `Result`: the status and the message it gives with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The status.
    pub status: Status,
    /// kstatus's message (a condition's message, or its fixed text).
    pub message: String,
}

/// Where kstatus itself returns an error: a field of the wrong type (its
/// `unstructured.Nested*` lookups and the conversion of the conditions).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("kstatus cannot read {field}: {why}")]
pub struct KstatusError {
    /// The field, as a path.
    pub field: String,
    /// What is wrong with it.
    pub why: &'static str,
}

/// kstatus's `Compute` for `obj`, a custom resource of a kind without
/// built-in rules.
///
/// # Errors
/// Where kstatus errors: `metadata.deletionTimestamp` not a string,
/// `metadata.generation` or `status.observedGeneration` not an integer,
/// `status.conditions` not a list of conditions with string fields.
pub fn compute(obj: &Value) -> Result<Verdict, KstatusError> {
    let verdict = |status, message: &str| Verdict {
        status,
        message: message.to_owned(),
    };
    // generic.go, checkGenericProperties.
    match obj.pointer("/metadata/deletionTimestamp") {
        None | Some(Value::Null) => {}
        Some(Value::String(at)) if at.is_empty() => {}
        Some(Value::String(_)) => {
            return Ok(verdict(
                Status::Terminating,
                "Resource scheduled for deletion",
            ));
        }
        Some(_) => return Err(not_a("metadata.deletionTimestamp", "not a string")),
    }
    if let Some(in_progress) = check_generation(obj)? {
        return Ok(in_progress);
    }
    let conditions = conditions(obj)?;
    for condition in &conditions {
        if condition.type_ == "Reconciling" && condition.status == "True" {
            return Ok(verdict(Status::InProgress, &condition.message));
        }
        if condition.type_ == "Stalled" && condition.status == "True" {
            return Ok(verdict(Status::Failed, &condition.message));
        }
    }
    // status.go, checkReadyCondition: a kind without built-in rules.
    for condition in conditions.iter().filter(|c| c.type_ == "Ready") {
        match condition.status.as_str() {
            "True" => return Ok(verdict(Status::Current, "Resource is Ready")),
            "False" | "Unknown" => return Ok(verdict(Status::InProgress, &condition.message)),
            // Any other value: kstatus looks on.
            _ => {}
        }
    }
    // status.go, Compute: no known condition means current.
    Ok(verdict(Status::Current, "Resource is current"))
}

/// generic.go, `checkGeneration`: InProgress when both generations are
/// present and differ (in either direction).
fn check_generation(obj: &Value) -> Result<Option<Verdict>, KstatusError> {
    let Some(generation) = integer(obj, "/metadata/generation", "metadata.generation")? else {
        return Ok(None);
    };
    let Some(observed) = integer(
        obj,
        "/status/observedGeneration",
        "status.observedGeneration",
    )?
    else {
        return Ok(None);
    };
    if observed == generation {
        return Ok(None);
    }
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default();
    Ok(Some(Verdict {
        status: Status::InProgress,
        message: format!(
            "{kind} generation is {generation}, but latest observed generation is {observed}"
        ),
    }))
}

/// `unstructured.NestedInt64`: absent (or null) is `None`, a value that is
/// not an integer is an error.
fn integer(obj: &Value, pointer: &str, field: &str) -> Result<Option<i64>, KstatusError> {
    match obj.pointer(pointer) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_i64()
            .map(Some)
            .ok_or_else(|| not_a(field, "not an integer")),
    }
}

/// The fields of a condition kstatus reads (`BasicCondition`).
struct Condition {
    type_: String,
    status: String,
    message: String,
}

/// `GetObjectWithConditions`: `status.conditions` converted to conditions
/// (absent: none).
fn conditions(obj: &Value) -> Result<Vec<Condition>, KstatusError> {
    let list = match obj.pointer("/status/conditions") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(list)) => list,
        Some(_) => return Err(not_a("status.conditions", "not a list")),
    };
    list.iter()
        .map(|item| {
            let Value::Object(fields) = item else {
                return Err(not_a("status.conditions[]", "not an object"));
            };
            let text = |name: &str| match fields.get(name) {
                None | Some(Value::Null) => Ok(String::new()),
                Some(Value::String(text)) => Ok(text.clone()),
                Some(_) => Err(not_a("status.conditions[] field", "not a string")),
            };
            // kstatus converts the reason too, so a malformed one fails it.
            text("reason")?;
            Ok(Condition {
                type_: text("type")?,
                status: text("status")?,
                message: text("message")?,
            })
        })
        .collect()
}

fn not_a(field: &str, why: &'static str) -> KstatusError {
    KstatusError {
        field: field.to_owned(),
        why,
    }
}
