//! Events the plan step asks to publish: what changed (a new epoch) and what
//! went wrong (a condition turning bad), each with a constant reason. They are
//! derived from transitions only, so a steady state emits none (an Event is a
//! write too).

/// Severity of an Event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// Something worth knowing happened.
    Normal,
    /// Something needs attention.
    Warning,
}

/// One Event to publish on the ShardGroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventNote {
    /// Severity.
    pub kind: EventKind,
    /// Constant PascalCase reason.
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
}

impl EventNote {
    /// A `Normal` event.
    pub(crate) fn normal(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            kind: EventKind::Normal,
            reason,
            message: message.into(),
        }
    }

    /// A `Warning` event.
    pub fn warning(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            kind: EventKind::Warning,
            reason,
            message: message.into(),
        }
    }
}
