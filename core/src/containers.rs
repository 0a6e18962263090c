//! [`Containers`]: what a pod's status says of its containers, the one fact
//! of a pod both the observation ([`crate::observation::PodInfo`]) and the
//! departed pods' record ([`crate::departures::Departure`]) carry.

/// What a pod's status says of its containers, as far as a handoff cares:
/// whether a process of this pod may be running. Read from the status the
/// kubelet reports (by the operator's observe step).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Containers {
    /// A container runs, or ran and may run again, or the status says too
    /// little to tell: nothing is concluded. The default.
    #[default]
    Running,
    /// Every container (init and ephemeral ones included) is `terminated`
    /// and the pod will not start them again: it is terminating (has a
    /// deletion timestamp) or in a terminal phase (`Succeeded`, `Failed`).
    /// The kubelet reports this after it stopped them.
    Stopped,
    /// Phase `Pending` and no container has ever been `running` or
    /// `terminated` (no `lastState` either): as far as the kubelet reported,
    /// nothing of this pod ever started.
    NeverRan,
}
