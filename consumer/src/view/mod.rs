//! The pod's view of the published assignment: where it comes from (a
//! mounted ConfigMap file, a downward-API annotations file, a watch on the
//! ConfigMap through the API, or the operator's consumer endpoint) and the
//! one rule every consumer follows — read
//! a shard only while it is `active` at the newest epoch seen, never going
//! back to an older epoch.
//!
//! [`channel`] gives a publisher/reader pair: sources [`ViewPublisher::offer`]
//! views; everyone else holds an [`AssignmentView`] (cheap to clone) with the
//! current [`PodView`], a change stream ([`AssignmentView::changed`]) and
//! [`AssignmentView::can_acquire`].
//!
//! Several sources may feed one publisher ([`Sources`]): the newest epoch
//! wins, so a fast source (the endpoint, the watch) runs beside a slow but
//! dependable one (a mounted file), and losing either loses nothing.

pub mod endpoint;
pub mod file;
#[cfg(feature = "kube")]
pub mod kube;
pub mod parse;

use shardring_crds::assignment::PodView;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A publisher and a view, starting with no view seen (nothing may be
/// acquired until a source delivers the first view).
pub fn channel() -> (ViewPublisher, AssignmentView) {
    let (sender, receiver) = watch::channel(Snapshot::default());
    (ViewPublisher { sender }, AssignmentView { receiver })
}

/// The newest view seen, or none yet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// `None` until a source delivered the first view.
    pub view: Option<PodView>,
}

/// The writing side: sources offer views; older epochs are ignored.
#[derive(Debug, Clone)]
pub struct ViewPublisher {
    sender: watch::Sender<Snapshot>,
}

impl ViewPublisher {
    /// Offers a view: accepted (and announced to watchers) when it is the
    /// first one or its epoch is newer than the newest seen, or the same
    /// epoch with different lists (a richer source, e.g. the ConfigMap after
    /// the annotation, can never contradict an epoch; the newer delivery
    /// wins). Returns whether the view changed. An older epoch is ignored:
    /// a consumer never goes backwards.
    pub fn offer(&self, view: PodView) -> bool {
        self.sender
            .send_if_modified(|snapshot| match &snapshot.view {
                Some(current) if view.epoch < current.epoch => false,
                Some(current) if *current == view => false,
                _ => {
                    snapshot.view = Some(view);
                    true
                }
            })
    }

    /// Withdraws every shard: the pod's annotation is gone. The operator
    /// removes it only from pods that hold nothing, not even a revoke, so an
    /// absent annotation after a view means "no shards" — keeping the last
    /// view instead would let a consumer that missed the revoke keep reading
    /// a shard that has moved on. Nothing changes before the first view.
    /// Returns whether the view changed.
    pub fn withdraw(&self) -> bool {
        self.sender
            .send_if_modified(|snapshot| match &snapshot.view {
                Some(current)
                    if !(current.active.is_empty()
                        && current.standby.is_empty()
                        && current.revoking.is_empty()) =>
                {
                    snapshot.view = Some(PodView {
                        epoch: current.epoch,
                        ..PodView::default()
                    });
                    true
                }
                _ => false,
            })
    }

    /// Withdraws every shard as [`Self::withdraw`] does, but only when no
    /// view newer than `epoch` was offered: a source whose last view was at
    /// `epoch` saw its annotation disappear. When another source already
    /// delivered a newer epoch, that source's view is newer than anything
    /// this one knows, so it stands (a kubelet-refreshed file lags behind
    /// the endpoint or a watch). Returns whether the view changed.
    pub fn withdraw_if_newest(&self, epoch: u64) -> bool {
        let newer = self
            .sender
            .borrow()
            .view
            .as_ref()
            .is_some_and(|current| current.epoch > epoch);
        !newer && self.withdraw()
    }

    /// A new reader of this publisher's views.
    pub fn subscribe(&self) -> AssignmentView {
        AssignmentView {
            receiver: self.sender.subscribe(),
        }
    }

    /// Whether every reader is gone (a source task may stop then).
    pub fn is_closed(&self) -> bool {
        self.sender.is_closed()
    }
}

/// The view sources of one pod, all feeding one [`ViewPublisher`] (newest
/// epoch wins); their tasks stop when this is dropped.
#[derive(Debug)]
pub struct Sources {
    publisher: ViewPublisher,
    tasks: Vec<JoinHandle<()>>,
}

impl Sources {
    /// No sources yet, feeding `publisher`.
    pub fn new(publisher: ViewPublisher) -> Self {
        Self {
            publisher,
            tasks: Vec::new(),
        }
    }

    /// The publisher every source offers to (clone it into a source).
    pub fn publisher(&self) -> &ViewPublisher {
        &self.publisher
    }

    /// Adds a running source's task.
    pub fn add(&mut self, task: JoinHandle<()>) -> &mut Self {
        self.tasks.push(task);
        self
    }

    /// Starts a source on the shared publisher.
    pub fn start(&mut self, source: impl FnOnce(ViewPublisher) -> JoinHandle<()>) -> &mut Self {
        let task = source(self.publisher.clone());
        self.add(task)
    }

    /// How many sources run.
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Whether none runs.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }
}

impl Drop for Sources {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// The reading side: the current view, its changes, and the acquisition rule.
#[derive(Debug, Clone)]
pub struct AssignmentView {
    receiver: watch::Receiver<Snapshot>,
}

impl AssignmentView {
    /// The newest view seen, `None` before the first one.
    pub fn current(&self) -> Option<PodView> {
        self.receiver.borrow().view.clone()
    }

    /// The newest epoch seen (0 before the first view).
    pub fn epoch(&self) -> u64 {
        self.receiver
            .borrow()
            .view
            .as_ref()
            .map_or(0, |view| view.epoch)
    }

    /// True only while `shard` is in this pod's `active` list at the newest
    /// epoch seen. Standby and revoking shards, and every shard before the
    /// first view arrives, may not be acquired.
    pub fn can_acquire(&self, shard: &str) -> bool {
        self.receiver
            .borrow()
            .view
            .as_ref()
            .is_some_and(|view| view.active.iter().any(|s| s == shard))
    }

    /// Whether `shard` is in this pod's `revoking` list at the newest epoch.
    pub fn is_revoking(&self, shard: &str) -> bool {
        self.receiver
            .borrow()
            .view
            .as_ref()
            .is_some_and(|view| view.revoking.iter().any(|s| s == shard))
    }

    /// Waits for the next accepted view; `Err` when the publisher is gone.
    pub async fn changed(&mut self) -> Result<PodView, watch::error::RecvError> {
        loop {
            self.receiver.changed().await?;
            if let Some(view) = self.receiver.borrow_and_update().view.clone() {
                return Ok(view);
            }
        }
    }

    /// Waits until a view is present and returns it.
    pub async fn first(&mut self) -> Result<PodView, watch::error::RecvError> {
        if let Some(view) = self.receiver.borrow_and_update().view.clone() {
            return Ok(view);
        }
        self.changed().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(epoch: u64, active: &[&str], revoking: &[&str]) -> PodView {
        PodView {
            epoch,
            active: active.iter().map(|s| (*s).to_owned()).collect(),
            standby: vec!["s9".into()],
            revoking: revoking.iter().map(|s| (*s).to_owned()).collect(),
            held: Vec::new(),
        }
    }

    #[test]
    fn a_withdrawn_annotation_means_no_shards() {
        let (publisher, assignment) = channel();
        assert!(!publisher.withdraw(), "nothing to withdraw before a view");
        assert!(publisher.offer(view(5, &["s1"], &[])));
        assert!(publisher.withdraw());
        assert!(!assignment.can_acquire("s1"));
        assert_eq!(assignment.epoch(), 5, "the epoch never goes back");
        assert!(!publisher.withdraw(), "already empty");
        assert!(
            publisher.offer(view(6, &["s2"], &[])),
            "a newer view still lands"
        );
        assert!(assignment.can_acquire("s2"));
    }

    #[test]
    fn a_lagging_source_does_not_withdraw_a_newer_view() {
        let (publisher, assignment) = channel();
        assert!(publisher.offer(view(5, &["s1"], &[])));
        assert!(
            publisher.offer(view(7, &["s2"], &[])),
            "another source, newer"
        );
        assert!(
            !publisher.withdraw_if_newest(5),
            "the file last saw epoch 5"
        );
        assert!(assignment.can_acquire("s2"));
        assert!(publisher.withdraw_if_newest(7));
        assert!(!assignment.can_acquire("s2"));
    }

    #[test]
    fn nothing_is_acquirable_before_the_first_view() {
        let (_publisher, assignment) = channel();
        assert_eq!(assignment.current(), None);
        assert_eq!(assignment.epoch(), 0);
        assert!(!assignment.can_acquire("s1"));
    }

    #[test]
    fn can_acquire_only_active_shards_of_the_newest_epoch() {
        let (publisher, assignment) = channel();
        assert!(publisher.offer(view(3, &["s1", "s2"], &[])));
        assert!(assignment.can_acquire("s1"));
        assert!(!assignment.can_acquire("s9"), "standby is not acquirable");
        assert!(!assignment.can_acquire("s3"));
        assert!(publisher.offer(view(4, &["s2"], &["s1"])));
        assert!(!assignment.can_acquire("s1"), "revoked at the newer epoch");
        assert!(assignment.is_revoking("s1"));
        assert!(assignment.can_acquire("s2"));
    }

    #[test]
    fn older_epochs_are_ignored() {
        let (publisher, assignment) = channel();
        assert!(publisher.offer(view(10, &["s2"], &["s1"])));
        assert!(!publisher.offer(view(9, &["s1"], &[])), "older epoch");
        assert!(!assignment.can_acquire("s1"));
        assert_eq!(assignment.epoch(), 10);
        assert!(!publisher.offer(view(10, &["s2"], &["s1"])), "same view");
        assert!(publisher.offer(view(11, &["s1", "s2"], &[])));
        assert!(assignment.can_acquire("s1"));
    }

    #[tokio::test]
    async fn watchers_see_each_accepted_change() {
        let (publisher, mut assignment) = channel();
        let waiter = tokio::spawn(async move {
            let first = assignment.first().await.unwrap();
            let second = assignment.changed().await.unwrap();
            (first.epoch, second.epoch)
        });
        publisher.offer(view(1, &["s1"], &[]));
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        publisher.offer(view(0, &[], &[]));
        publisher.offer(view(2, &[], &["s1"]));
        let (first, second) = waiter.await.unwrap();
        assert_eq!(first, 1);
        assert_eq!(second, 2);
    }
}
