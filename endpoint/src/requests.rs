//! [`ReconcileRequests`]: how the endpoint asks the controller to reconcile
//! a group now (a release was accepted, so the new owner can be activated;
//! a pod asked for a view the leader does not serve yet).
//!
//! A broadcast, not a channel with one receiver: every controller that
//! listens hears every request made after it started listening, so a
//! controller started again on the same endpoint state (a new leadership, a
//! test, the demo) is never left deaf by an earlier one having taken the
//! receiver. A listener that falls behind by more than the buffer hears
//! [`Requested::Every`] instead of the requests it missed: reconciling every
//! group is what they could have asked, and nothing is lost.

use futures::Stream;
use tokio::sync::broadcast;

use shardring_core::GroupKey;

/// Requests buffered per listener before it is told to reconcile every
/// group instead: far more than the groups one release burst touches.
const BUFFERED: usize = 1024;

/// What a listener hears.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requested {
    /// Reconcile this group.
    Group(GroupKey),
    /// Requests were missed: reconcile every group.
    Every,
}

/// The sending side, cloned into whatever asks (releases, the directory).
#[derive(Debug, Clone)]
pub struct ReconcileRequests {
    sender: broadcast::Sender<GroupKey>,
}

impl Default for ReconcileRequests {
    fn default() -> Self {
        Self {
            sender: broadcast::channel(BUFFERED).0,
        }
    }
}

impl ReconcileRequests {
    /// Asks every listener to reconcile `group`. Without a listener (no
    /// controller running, e.g. while shutting down) the request is dropped:
    /// a controller reconciles every group when it starts.
    pub fn request(&self, group: &GroupKey) {
        let _ = self.sender.send(group.clone());
    }

    /// The requests made from now on, until every sender is gone.
    pub fn listen(&self) -> impl Stream<Item = Requested> + Send + use<> {
        futures::stream::unfold(self.sender.subscribe(), |mut receiver| async move {
            let heard = match receiver.recv().await {
                Ok(group) => Requested::Group(group),
                Err(broadcast::error::RecvError::Lagged(_)) => Requested::Every,
                Err(broadcast::error::RecvError::Closed) => return None,
            };
            Some((heard, receiver))
        })
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;

    #[tokio::test]
    async fn every_listener_hears_every_request_made_after_it_listened() {
        let requests = ReconcileRequests::default();
        let key = GroupKey::new("ns", "g");
        requests.request(&key); // nobody listens yet: dropped
        let first = requests.listen();
        let second = requests.listen();
        requests.request(&key);
        drop(requests);
        assert_eq!(
            first.collect::<Vec<_>>().await,
            vec![Requested::Group(key.clone())]
        );
        assert_eq!(
            second.collect::<Vec<_>>().await,
            vec![Requested::Group(key)]
        );
    }

    #[tokio::test]
    async fn a_listener_that_fell_behind_hears_every_group() {
        let requests = ReconcileRequests::default();
        let listener = requests.listen();
        for i in 0..=BUFFERED {
            requests.request(&GroupKey::new("ns", format!("g-{i}")));
        }
        drop(requests);
        let heard: Vec<Requested> = listener.collect().await;
        assert_eq!(heard[0], Requested::Every);
        // What it still holds follows, the newest last.
        assert_eq!(heard.len(), 1 + BUFFERED);
        assert_eq!(
            heard.last(),
            Some(&Requested::Group(GroupKey::new(
                "ns",
                format!("g-{BUFFERED}")
            )))
        );
    }
}
