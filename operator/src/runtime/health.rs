//! Liveness and readiness of the operator process, shared (cheaply cloned)
//! between the controller, which reports its progress, and the HTTP server,
//! which answers `/healthz` and `/readyz` from it.
//!
//! Live: always, once the process serves HTTP (a wedged runtime cannot answer
//! at all). Ready: once the CRDs are established *and* the controller's caches
//! have completed their first full sync. Leadership does not count: a
//! standby replica is ready too (it would take over with warm caches), it
//! merely does not write.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Shared health state. Clone it freely; all clones see the same flags.
#[derive(Debug, Clone, Default)]
pub struct Health {
    inner: Arc<Flags>,
}

#[derive(Debug, Default)]
struct Flags {
    crds_established: AtomicBool,
    caches_synced: AtomicBool,
}

/// A readiness check that has not passed yet, as listed by `/readyz`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pending {
    /// `wait_for_crds_established` has not returned yet.
    CrdsEstablished,
    /// The controller's watches have not completed their first full list.
    CachesSynced,
}

impl Pending {
    /// Short reason shown in the `/readyz` body.
    pub fn as_str(self) -> &'static str {
        match self {
            Pending::CrdsEstablished => "waiting for the shardring CRDs to be established",
            Pending::CachesSynced => "waiting for the controller caches to sync",
        }
    }
}

impl Health {
    /// New state: live, not ready.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that the CRDs are established (call after
    /// [`wait_for_crds_established`](super::crd_wait::wait_for_crds_established)).
    pub fn set_crds_established(&self) {
        self.inner.crds_established.store(true, Ordering::Release);
    }

    /// Records that every controller cache has completed its first full sync.
    /// Readiness does not go back to false on later relists: the reflector
    /// keeps serving the last complete state while it reconnects.
    pub fn set_caches_synced(&self) {
        self.inner.caches_synced.store(true, Ordering::Release);
    }

    /// Liveness: true whenever the process can answer.
    pub(crate) fn is_live(&self) -> bool {
        true
    }

    /// Readiness: CRDs established and caches synced.
    pub fn is_ready(&self) -> bool {
        self.pending().is_empty()
    }

    /// The readiness checks still pending, in the order they normally pass.
    pub fn pending(&self) -> Vec<Pending> {
        let mut pending = Vec::new();
        if !self.inner.crds_established.load(Ordering::Acquire) {
            pending.push(Pending::CrdsEstablished);
        }
        if !self.inner.caches_synced.load(Ordering::Acquire) {
            pending.push(Pending::CachesSynced);
        }
        pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_after_both_checks() {
        let health = Health::new();
        let shared = health.clone();
        assert!(health.is_live());
        assert_eq!(
            health.pending(),
            vec![Pending::CrdsEstablished, Pending::CachesSynced]
        );
        shared.set_caches_synced();
        assert!(!health.is_ready());
        assert_eq!(health.pending(), vec![Pending::CrdsEstablished]);
        shared.set_crds_established();
        assert!(health.is_ready());
    }
}
