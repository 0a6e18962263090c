//! The pool's balance in the simulated operator (pool mode): before a
//! group's plan, its share of the balance from the real
//! [`PoolBook`](shardring_core::pool::PoolBook), asked as the operator's
//! pools ask it (`deal_into` of the operator's controller): every other
//! group of the pool as a [`Peer`] from what the operator knows of it (its
//! freshest document, of the operator's document table and ConfigMap
//! cache; its readable shards, from that document, else its static
//! partition count; its measured loads, from its endpoint's book), the
//! group itself from its observation ([`Peer::of`]), and the pods away
//! that the pool waits for from every group's document
//! ([`identities`]). The groups a new deal changed are woken and go first:
//! the operator's own precedence bookkeeping
//! ([`Precedence`](shardring_core::pool::precedence::Precedence)) defers
//! the pool's other groups' reconciles until they are done or its window
//! closes. When the reconcile ends, its turn is given back and whom that
//! concerns is woken.

use std::collections::BTreeMap;

use super::clock::ts;
use super::group::{Group, NAMESPACE};
use super::process::Operator;
use crate::crds::AssignmentDocument;
use crate::rng::Rng;
use crate::world::{Ms, World};
use shardring_core::GroupKey;
use shardring_core::Observation;
use shardring_core::identity::identities;
use shardring_core::plan::Decision;
use shardring_core::pool::precedence::BookKey;
use shardring_core::pool::{Peer, PoolBook, PoolPods, measured_loads_of, readable_in};

/// Longest a wake-up the pool's balance asks for takes to start a
/// reconcile (ms): the operator's reconcile requests.
const WAKE_LATENCY_MS: Ms = 300;

/// Which book of the pool's balance a plan at rest deals from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BookAtRest {
    /// The operator's own (a copy: the plan changes nothing of the run).
    Kept,
    /// An empty one, as a new leader's (a restart, a leader change).
    Lost,
}

impl Operator {
    /// Sets `obs.pool_share` to group `g`'s share of the pool's balance,
    /// and wakes the groups whose rows a new deal changed.
    /// As the operator's pools do, the groups a new deal concerns go first
    /// ([`Precedence`](shardring_core::pool::precedence::Precedence)), and
    /// the share this reconcile took is numbered for its end.
    pub(super) fn deal_into(&mut self, g: usize, obs: &mut Observation, now: Ms, rng: &mut Rng) {
        let mut book = std::mem::take(&mut self.book);
        let changed = self.share(&mut book, g, obs);
        self.book = book;
        self.shares_taken += 1;
        let seq = self.shares_taken;
        let key = self.book_key();
        self.precedence.first_in_line(&key, &changed, seq, ts(now));
        self.precedence.started(&key, &self.groups[g].name(), seq);
        self.ticket = Some(seq);
        self.wake_named(&changed, now, rng);
    }

    /// Whether group `g` defers the reconcile it starts at `now`, as the
    /// operator's reconcile does: a window of groups first in line is open
    /// and it is not one of them. Its next reconcile is then when the
    /// window closes at the latest; the last group first in line to be done
    /// wakes it sooner.
    pub fn defers(&mut self, g: usize, now: Ms) -> bool {
        if !self.pooled() {
            return false;
        }
        let group = &self.groups[g].shard_group;
        let key = GroupKey::of(group);
        let Some(wait) = self
            .precedence
            .defer(&key, &group.spec.pool_ref.name, ts(now))
        else {
            return false;
        };
        let wait = Ms::try_from(wait.as_millis()).unwrap_or(Ms::MAX / 4);
        self.groups[g].next_reconcile = now + wait.max(1);
        true
    }

    /// The balance's key in the precedence's book: the namespace and the
    /// one pool.
    fn book_key(&self) -> BookKey {
        let pool = self.pool.metadata.name.clone().unwrap_or_default();
        (NAMESPACE.to_owned(), pool)
    }

    /// A plan of group `g` now, as its next reconcile would make it with no
    /// fault, its share of the pool's balance dealt from `book`: at rest it
    /// must change nothing.
    pub fn plan_at_rest(
        &mut self,
        g: usize,
        book: BookAtRest,
        world: &World,
        rng: &mut Rng,
    ) -> Decision {
        let mut obs = self.observe(g, world, rng);
        if self.pooled() {
            let mut book = match book {
                BookAtRest::Kept => self.book.clone(),
                BookAtRest::Lost => PoolBook::default(),
            };
            self.share(&mut book, g, &mut obs);
        }
        shardring_core::plan(&obs)
    }

    /// Sets `obs.pool_share` to group `g`'s share of the pool's balance
    /// in `book`; the groups whose rows a new deal changed.
    fn share(&self, book: &mut PoolBook, g: usize, obs: &mut Observation) -> Vec<String> {
        let mut documents = Vec::new();
        let mut peers = Vec::with_capacity(self.groups.len());
        for (h, group) in self.groups.iter().enumerate() {
            if h != g {
                let peer = peer_of(group);
                documents.extend(peer.document.iter().cloned());
                peers.push(peer);
            }
        }
        let own = Peer::of(obs);
        documents.extend(own.document.iter().cloned());
        peers.push(own);
        // Pods away that the pool waits for are dealt to as if they were
        // here, from what every group of the balance holds for them.
        let all_documents: Vec<&AssignmentDocument> = documents.iter().map(|d| &**d).collect();
        let pods: Vec<_> = obs.pods.iter().filter(|p| p.selected).cloned().collect();
        let returning = identities(
            &self.pool,
            &pods,
            &obs.stateful_sets,
            &obs.departed,
            &all_documents,
            obs.now,
        )
        .returning;
        let pools = [PoolPods {
            pool: &self.pool,
            pods: &pods,
            returning: &returning,
        }];
        let shared = book.share(&self.groups[g].name(), &pools, peers, obs.now);
        obs.pool_share = shared.share;
        shared.changed
    }

    /// Group `g`'s reconcile ended with `decision`: gives its turn back
    /// (with whether it moved shards) and wakes whom that concerns.
    pub(super) fn pool_done(&mut self, g: usize, decision: &Decision, now: Ms, rng: &mut Rng) {
        let moved = decision.moves.required + decision.moves.optional > 0;
        let name = self.groups[g].name();
        let wake = self.book.done(&name, moved);
        self.wake_named(&wake, now, rng);
        // Its document is out (or it has none to write: the reconciles of
        // the simulation never overlap, so none waits for another's), and
        // the last group first in line to be done wakes the deferred ones.
        if let Some(seq) = self.ticket.take() {
            let deferred: Vec<String> = self
                .precedence
                .done(&self.book_key(), &name, seq)
                .iter()
                .map(ToString::to_string)
                .collect();
            self.wake_named(&deferred, now, rng);
        }
    }

    /// Wakes each group of `names` (`namespace/name`) within a reconcile
    /// request's latency.
    fn wake_named(&mut self, names: &[String], now: Ms, rng: &mut Rng) {
        for name in names {
            if let Some(h) = self.groups.iter().position(|group| group.name() == *name) {
                let latency = rng.range(10, WAKE_LATENCY_MS);
                self.wake(h, now, latency);
            }
        }
    }
}

/// Group `group` as the pool's balance sees it from another group's
/// reconcile: what the operator knows of it.
fn peer_of(group: &Group) -> Peer {
    let spec = &group.shard_group.spec;
    let document = group.freshest();
    // A peer that has published nothing holds nothing yet, but it is dealt
    // its share from the start: with its static count, or what its own
    // reconcile reported to the book (0 until then).
    let readable = document.as_deref().map_or_else(
        || spec.source.named_partition_count().map_or(0, u64::from),
        readable_in,
    );
    let loads = if spec.balance.weighs_load() {
        measured_loads_of(&group.loads.observe())
    } else {
        BTreeMap::new()
    };
    Peer {
        group: group.name(),
        pool: spec.pool_ref.name.clone(),
        balance: spec.balance,
        standbys: spec.standbys,
        readable,
        document,
        loads,
    }
}
