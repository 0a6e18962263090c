//! The outbox of release acknowledgements (pure): what the pod has released
//! and must tell the endpoint, and what the endpoint has been told.
//!
//! An entry lives exactly as long as the newest view lists its shard as
//! revoking. The leader keeps acknowledgements in memory only, so an entry
//! answered with 202/200 stays, and is sent again after a reconnect (a new
//! connection may reach a new leader; a duplicate costs a 200). A 409
//! (`NotRevoking`, `StaleEpoch`: the handoff completed another way, or the
//! view moved on) settles it too, until the view's epoch moves or a
//! reconnect happens. An entry not yet answered takes the epoch of each
//! newer view that still revokes the shard.

use std::collections::BTreeMap;

use shardring_crds::assignment::PodView;
use shardring_crds::endpoint::ReleaseRequest;

/// Where one acknowledgement stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckState {
    /// Not answered yet (or to be sent again).
    Pending,
    /// Recorded by the endpoint (202 or 200) at this reconnect generation.
    Acked {
        /// The client's reconnect generation after the answer.
        generation: u64,
    },
    /// Refused with a 409 at this generation: nothing to hand over (any
    /// more) at that epoch.
    Refused {
        /// The client's reconnect generation after the answer.
        generation: u64,
    },
}

/// One acknowledgement and its state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxEntry {
    /// What is (re)sent.
    pub request: ReleaseRequest,
    /// Whether it was answered.
    pub state: AckState,
}

/// The acknowledgements of shards still revoking in the newest view.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outbox {
    entries: BTreeMap<String, OutboxEntry>,
}

impl Outbox {
    /// Adds (or replaces) the acknowledgement of `request.shard`.
    pub fn add(&mut self, request: ReleaseRequest) {
        self.entries.insert(
            request.shard.clone(),
            OutboxEntry {
                request,
                state: AckState::Pending,
            },
        );
    }

    /// Follows the newest view: entries whose shard it no longer lists as
    /// revoking are dropped (returned); entries not acknowledged take its
    /// epoch, and a refused one is sent again at it.
    pub fn follow(&mut self, view: &PodView) -> Vec<String> {
        let mut dropped = Vec::new();
        self.entries.retain(|shard, entry| {
            if !view.revoking.iter().any(|s| s == shard) {
                dropped.push(shard.clone());
                return false;
            }
            if view.epoch > entry.request.epoch && !matches!(entry.state, AckState::Acked { .. }) {
                entry.request.epoch = view.epoch;
                entry.state = AckState::Pending;
            }
            true
        });
        dropped
    }

    /// What to send now, at reconnect generation `generation`: pending
    /// entries, and answered ones whose answer came before a reconnect.
    pub fn due(&self, generation: u64) -> Vec<ReleaseRequest> {
        self.entries
            .values()
            .filter(|entry| match entry.state {
                AckState::Pending => true,
                AckState::Acked { generation: at } | AckState::Refused { generation: at } => {
                    at < generation
                }
            })
            .map(|entry| entry.request.clone())
            .collect()
    }

    /// Records the answer to `request` (ignored when the entry changed
    /// meanwhile: a newer epoch or another release of the shard).
    pub fn settle(&mut self, request: &ReleaseRequest, state: AckState) {
        if let Some(entry) = self.entries.get_mut(&request.shard)
            && entry.request == *request
        {
            entry.state = state;
        }
    }

    /// Entries not answered yet.
    pub fn unsettled(&self) -> usize {
        self.entries
            .values()
            .filter(|entry| entry.state == AckState::Pending)
            .count()
    }

    /// Every entry, by shard.
    pub fn entries(&self) -> Vec<OutboxEntry> {
        self.entries.values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(shard: &str, epoch: u64) -> ReleaseRequest {
        ReleaseRequest {
            shard: shard.into(),
            epoch,
            checkpoint: Some("42".into()),
        }
    }

    fn view(epoch: u64, revoking: &[&str]) -> PodView {
        PodView {
            epoch,
            revoking: revoking.iter().map(|s| (*s).to_owned()).collect(),
            ..PodView::default()
        }
    }

    #[test]
    fn an_entry_lives_while_the_view_revokes_its_shard() {
        let mut outbox = Outbox::default();
        outbox.add(request("s1", 4));
        outbox.add(request("s2", 4));
        assert!(outbox.follow(&view(4, &["s1", "s2"])).is_empty());
        assert_eq!(outbox.due(0).len(), 2);
        assert_eq!(outbox.follow(&view(5, &["s2"])), vec!["s1"]);
        assert_eq!(
            outbox.due(0),
            vec![request("s2", 5)],
            "takes the newer epoch"
        );
    }

    #[test]
    fn an_acknowledged_entry_is_sent_again_only_after_a_reconnect() {
        let mut outbox = Outbox::default();
        outbox.add(request("s1", 4));
        outbox.settle(&request("s1", 4), AckState::Acked { generation: 2 });
        assert!(outbox.due(2).is_empty());
        assert_eq!(outbox.unsettled(), 0);
        outbox.follow(&view(6, &["s1"]));
        assert!(
            outbox.due(2).is_empty(),
            "acked: a newer view does not resend"
        );
        assert_eq!(outbox.due(3), vec![request("s1", 4)], "after a reconnect");
    }

    #[test]
    fn a_refused_entry_is_sent_again_at_a_newer_epoch() {
        let mut outbox = Outbox::default();
        outbox.add(request("s1", 4));
        outbox.settle(&request("s1", 4), AckState::Refused { generation: 0 });
        assert!(outbox.due(0).is_empty());
        outbox.follow(&view(4, &["s1"]));
        assert!(outbox.due(0).is_empty());
        outbox.follow(&view(7, &["s1"]));
        assert_eq!(outbox.due(0), vec![request("s1", 7)]);
    }

    #[test]
    fn a_stale_answer_does_not_settle_a_newer_entry() {
        let mut outbox = Outbox::default();
        outbox.add(request("s1", 4));
        outbox.follow(&view(5, &["s1"]));
        outbox.settle(&request("s1", 4), AckState::Acked { generation: 0 });
        assert_eq!(outbox.unsettled(), 1);
        assert_eq!(outbox.due(0), vec![request("s1", 5)]);
    }
}
