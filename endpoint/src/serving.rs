//! Whether this replica serves the endpoint, read straight from the
//! leader-election flag and the server's stop token at every request, never
//! from a copy a task keeps up to date: a replica answers 503 `NotLeader`
//! from the moment its election says it no longer leads, which is before
//! it releases the Lease and before the controller forgets its views (a
//! copy lagging behind let a request find the views gone and get 404).

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Whether this replica serves: it leads (always, without election) and is
/// not shutting down.
#[derive(Debug, Clone)]
pub(crate) struct Serving {
    leader: Option<watch::Receiver<bool>>,
    stop: CancellationToken,
}

impl Serving {
    /// Serving while `leader` says so (`None`: always) until `stop`.
    pub(crate) fn new(leader: Option<watch::Receiver<bool>>, stop: CancellationToken) -> Self {
        Self { leader, stop }
    }

    /// Whether this replica serves now. A lost election (its sender gone)
    /// cannot tell that this replica leads.
    pub(crate) fn now(&self) -> bool {
        !self.stop.is_cancelled()
            && self
                .leader
                .as_ref()
                .is_none_or(|l| l.has_changed().is_ok() && *l.borrow())
    }

    /// Resolves once this replica no longer serves (at once if it does not).
    pub(crate) async fn ended(&self) {
        let leader = async {
            match self.leader.clone() {
                Some(mut leader) => {
                    let _ = leader.wait_for(|leads| !*leads).await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = self.stop.cancelled() => {}
            () = leader => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// The flag is the election's own: no task in between whose lag would
    /// leave a window where the replica still serves.
    #[tokio::test]
    async fn stops_serving_the_moment_the_election_says_so() {
        let (leader, receiver) = watch::channel(true);
        let stop = CancellationToken::new();
        let serving = Serving::new(Some(receiver), stop.clone());
        assert!(serving.now());
        leader.send_replace(false);
        assert!(!serving.now(), "still serving after the election flipped");
        tokio::time::timeout(Duration::from_secs(5), serving.ended())
            .await
            .expect("ended resolves once not leading");

        leader.send_replace(true);
        assert!(serving.now());
        drop(leader);
        assert!(!serving.now());
        tokio::time::timeout(Duration::from_secs(5), serving.ended())
            .await
            .expect("a gone election ends serving");

        let always = Serving::new(None, stop.clone());
        assert!(always.now());
        stop.cancel();
        assert!(!always.now());
        always.ended().await;
    }
}
