//! The lease manager: take, renew, checkpoint and release leases of one
//! worker with single-item conditional writes, KCL-style.
//!
//! Expiry is judged locally, as the KCL does: a lease owned by someone else
//! is expired once this worker has seen the same `leaseCounter` (and owner)
//! for the whole failover time. Our own hold is treated as valid only until
//! the failover time after the start of our last successful owner write
//! (minus a tenth for clock-rate drift), since that is the earliest another
//! worker could take it; past that, [`LeaseManager::is_valid`] turns false
//! and the worker stops reading even if DynamoDB was merely unreachable.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};

use super::record::Item;
use super::{Checkpoint, LeaseError, LeaseRecord};
use crate::view::AssignmentView;

/// What a lease manager needs to know.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    /// The lease table.
    pub table: String,
    /// This worker's id, written as `leaseOwner` (the pod name).
    pub worker_id: String,
    /// How long a lease's counter must stay unchanged before another worker
    /// may take it (the KCL's `failoverTimeMillis`).
    pub failover: Duration,
}

/// A lease row as read from the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The shard id (`leaseKey`).
    pub shard: String,
    /// `leaseOwner`, absent when free.
    pub owner: Option<String>,
    /// `leaseCounter`.
    pub counter: Option<u64>,
    /// `checkpoint`.
    pub checkpoint: Option<Checkpoint>,
    /// `ownerSwitchesSinceCheckpoint`.
    pub owner_switches_since_checkpoint: Option<u64>,
    /// `parentShardId`.
    pub parent_shard_ids: Vec<String>,
    /// `childShardIds`, written at shard end.
    pub child_shard_ids: Vec<String>,
}

impl Lease {
    /// The item of `shard`'s lease, parsed as the KCL lease record it is.
    fn from_item(shard: &str, item: &Item) -> Self {
        let record = LeaseRecord::with_key(shard.to_owned(), item);
        Self {
            owner: record.lease_owner,
            counter: record.lease_counter,
            // An `AT_TIMESTAMP` start keeps its timestamp in another
            // attribute: treated as no checkpoint (start at TRIM_HORIZON).
            checkpoint: record
                .checkpoint
                .filter(|checkpoint| *checkpoint != Checkpoint::AtTimestamp),
            owner_switches_since_checkpoint: record.owner_switches_since_checkpoint,
            parent_shard_ids: record.parent_shard_ids,
            child_shard_ids: record.child_shard_ids,
            shard: record.lease_key,
        }
    }
}

/// The result of [`LeaseManager::take`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TakeOutcome {
    /// The lease is ours now; read from its checkpoint.
    Taken(Lease),
    /// We already hold it.
    AlreadyHeld,
    /// Another worker holds it and it has not expired yet.
    HeldByOther {
        /// The current owner.
        owner: String,
        /// How much longer its counter must stay unchanged.
        expires_in: Duration,
    },
    /// The shard was read to its end (`SHARD_END`): nothing to take.
    Complete,
    /// The shard is not `active` for this pod at the newest epoch.
    NotAssigned,
}

/// One held lease. The counter's lock serialises owner writes; the write
/// time sits apart so validity can be read while a write is in flight.
#[derive(Debug)]
struct Held {
    counter: tokio::sync::Mutex<u64>,
    /// Start of the last successful owner write.
    written_at: Mutex<Instant>,
}

impl Held {
    fn written_at(&self) -> Instant {
        *self.written_at.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[derive(Debug, Clone)]
struct Observation {
    owner: Option<String>,
    counter: Option<u64>,
    since: Instant,
}

/// One worker's leases.
#[derive(Debug)]
pub struct LeaseManager {
    client: Client,
    config: LeaseConfig,
    held: Mutex<HashMap<String, Arc<Held>>>,
    observed: Mutex<HashMap<String, Observation>>,
}

fn s(text: &str) -> AttributeValue {
    AttributeValue::S(text.to_owned())
}

fn n(value: u64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

impl LeaseManager {
    /// A manager writing to `config.table` as `config.worker_id`.
    pub fn new(client: Client, config: LeaseConfig) -> Self {
        Self {
            client,
            config,
            held: Mutex::new(HashMap::new()),
            observed: Mutex::new(HashMap::new()),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    /// Shards whose leases this worker holds, sorted.
    pub fn held(&self) -> Vec<String> {
        let mut shards: Vec<String> = self.lock_held().keys().cloned().collect();
        shards.sort();
        shards
    }

    /// Whether we hold `shard` and our hold cannot have expired for others yet.
    pub fn is_valid(&self, shard: &str) -> bool {
        let Some(entry) = self.entry(shard) else {
            return false;
        };
        let validity = self
            .config
            .failover
            .saturating_sub(self.config.failover / 10);
        entry.written_at().elapsed() < validity
    }

    fn lock_held(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Held>>> {
        self.held
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    fn entry(&self, shard: &str) -> Option<Arc<Held>> {
        self.lock_held().get(shard).cloned()
    }

    /// Reads `shard`'s lease row (consistent read); `None` when absent.
    pub async fn fetch(&self, shard: &str) -> Result<Option<Lease>, LeaseError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.config.table)
            .key("leaseKey", s(shard))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| LeaseError::from_sdk(shard, "GetItem", e))?;
        Ok(out.item().map(|item| Lease::from_item(shard, item)))
    }

    /// Creates or takes `shard`'s lease, only while `view` lets this pod
    /// acquire it and the lease is free, ours, or expired. A conditional
    /// write that loses a race returns [`LeaseError::Conflict`]. If the view
    /// changed while the write was in flight, the lease is released again at
    /// once and [`TakeOutcome::NotAssigned`] returned.
    pub async fn take(
        &self,
        shard: &str,
        view: &AssignmentView,
    ) -> Result<TakeOutcome, LeaseError> {
        let (outcome, _) = self.take_preparing(shard, view, |_| async {}).await?;
        Ok(outcome)
    }

    /// [`Self::take`], running `prepare` with the checkpoint the lease holds
    /// (as read before the write) while the taking write is in flight, so a
    /// reader can get its shard iterator meanwhile instead of after it.
    /// `prepare` runs only when the lease is free, ours or expired; its
    /// output is returned beside the outcome (`None` when it did not run). It
    /// must not read the shard: the lease is not ours until the outcome says
    /// [`TakeOutcome::Taken`].
    pub async fn take_preparing<F, Fut, T>(
        &self,
        shard: &str,
        view: &AssignmentView,
        prepare: F,
    ) -> Result<(TakeOutcome, Option<T>), LeaseError>
    where
        F: FnOnce(Option<Checkpoint>) -> Fut,
        Fut: Future<Output = T>,
    {
        if !view.can_acquire(shard) {
            return Ok((TakeOutcome::NotAssigned, None));
        }
        if self.entry(shard).is_some() {
            return Ok((TakeOutcome::AlreadyHeld, None));
        }
        let started = Instant::now();
        let (lease, prepared) = match self.fetch(shard).await? {
            None => {
                let (lease, prepared) =
                    tokio::join!(self.create(shard), prepare(Some(Checkpoint::TrimHorizon)));
                (lease?, prepared)
            }
            Some(current) => {
                if current.checkpoint == Some(Checkpoint::ShardEnd) {
                    return Ok((TakeOutcome::Complete, None));
                }
                let observed_for = self.observe(&current);
                if let Some(owner) = current.owner.as_ref()
                    && *owner != self.config.worker_id
                    && observed_for < self.config.failover
                {
                    return Ok((
                        TakeOutcome::HeldByOther {
                            owner: owner.clone(),
                            expires_in: self.config.failover.saturating_sub(observed_for),
                        },
                        None,
                    ));
                }
                let (lease, prepared) = tokio::join!(
                    self.take_over(&current),
                    prepare(current.checkpoint.clone())
                );
                (lease?, prepared)
            }
        };
        let counter = lease.counter.unwrap_or(1);
        self.lock_held().insert(
            shard.to_owned(),
            Arc::new(Held {
                counter: tokio::sync::Mutex::new(counter),
                written_at: Mutex::new(started),
            }),
        );
        if !view.can_acquire(shard) {
            // Revoked while we were writing: never hold an unassigned shard.
            self.release(shard).await?;
            return Ok((TakeOutcome::NotAssigned, None));
        }
        Ok((TakeOutcome::Taken(lease), Some(prepared)))
    }

    /// Records what we saw of `lease` and returns how long its owner and
    /// counter have been unchanged in our observation.
    fn observe(&self, lease: &Lease) -> Duration {
        let mut observed = self
            .observed
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let now = Instant::now();
        let entry = observed
            .entry(lease.shard.clone())
            .or_insert_with(|| Observation {
                owner: lease.owner.clone(),
                counter: lease.counter,
                since: now,
            });
        if entry.owner != lease.owner || entry.counter != lease.counter {
            *entry = Observation {
                owner: lease.owner.clone(),
                counter: lease.counter,
                since: now,
            };
        }
        now - entry.since
    }

    async fn create(&self, shard: &str) -> Result<Lease, LeaseError> {
        let item = LeaseRecord {
            lease_owner: Some(self.config.worker_id.clone()),
            lease_counter: Some(1),
            checkpoint: Some(Checkpoint::TrimHorizon),
            checkpoint_sub_sequence_number: Some(0),
            owner_switches_since_checkpoint: Some(0),
            ..LeaseRecord::new(shard)
        }
        .to_item();
        self.client
            .put_item()
            .table_name(&self.config.table)
            .set_item(Some(item.clone()))
            .condition_expression("attribute_not_exists(leaseKey)")
            .send()
            .await
            .map_err(|e| LeaseError::from_sdk(shard, "create", e))?;
        Ok(Lease::from_item(shard, &item))
    }

    async fn take_over(&self, current: &Lease) -> Result<Lease, LeaseError> {
        let shard = &current.shard;
        let switch = u64::from(current.owner.as_deref() != Some(&self.config.worker_id));
        let mut update = self
            .client
            .update_item()
            .table_name(&self.config.table)
            .key("leaseKey", s(shard))
            .update_expression(
                "SET leaseOwner = :me, leaseCounter = :next, \
                 ownerSwitchesSinceCheckpoint = if_not_exists(ownerSwitchesSinceCheckpoint, :zero) + :switch",
            )
            .expression_attribute_values(":me", s(&self.config.worker_id))
            .expression_attribute_values(":next", n(current.counter.unwrap_or(0) + 1))
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":switch", n(switch))
            .return_values(ReturnValue::AllNew);
        let counter_condition = match current.counter {
            Some(counter) => {
                update = update.expression_attribute_values(":counter", n(counter));
                "leaseCounter = :counter"
            }
            None => "attribute_not_exists(leaseCounter)",
        };
        let owner_condition = match &current.owner {
            Some(owner) => {
                update = update.expression_attribute_values(":owner", s(owner));
                "leaseOwner = :owner"
            }
            None => "(attribute_not_exists(leaseOwner) OR leaseOwner = :empty)",
        };
        if current.owner.is_none() {
            update = update.expression_attribute_values(":empty", s(""));
        }
        let out = update
            .condition_expression(format!("{counter_condition} AND {owner_condition}"))
            .send()
            .await
            .map_err(|e| LeaseError::from_sdk(shard, "take", e))?;
        Ok(out
            .attributes()
            .map(|item| Lease::from_item(shard, item))
            .unwrap_or_else(|| current.clone()))
    }

    /// Renews a held lease (bumps `leaseCounter`, conditional on owner and
    /// counter). On [`LeaseError::Conflict`] the lease is lost and forgotten:
    /// stop reading the shard at once.
    pub async fn renew(&self, shard: &str) -> Result<(), LeaseError> {
        self.owner_write(shard, "renew", "SET leaseCounter = :next", Vec::new())
            .await
    }

    /// Checkpoints a held lease (conditional on owner and counter): a
    /// sequence number, or `SHARD_END` (use [`Self::checkpoint_shard_end`] to
    /// record the children too). Counts as a renewal.
    pub async fn checkpoint(&self, shard: &str, checkpoint: &Checkpoint) -> Result<(), LeaseError> {
        self.owner_write(
            shard,
            "checkpoint",
            "SET leaseCounter = :next, checkpoint = :checkpoint, \
             checkpointSubSequenceNumber = :zero, ownerSwitchesSinceCheckpoint = :zero",
            vec![(":checkpoint", s(checkpoint.as_str())), (":zero", n(0))],
        )
        .await
    }

    /// Checkpoints `SHARD_END` and records the child shards, as KCL 2.x does.
    pub async fn checkpoint_shard_end(
        &self,
        shard: &str,
        children: &[String],
    ) -> Result<(), LeaseError> {
        if children.is_empty() {
            return self.checkpoint(shard, &Checkpoint::ShardEnd).await;
        }
        self.owner_write(
            shard,
            "checkpoint",
            "SET leaseCounter = :next, checkpoint = :checkpoint, \
             checkpointSubSequenceNumber = :zero, ownerSwitchesSinceCheckpoint = :zero, \
             childShardIds = :children",
            vec![
                (":checkpoint", s(Checkpoint::ShardEnd.as_str())),
                (":zero", n(0)),
                (":children", AttributeValue::Ss(children.to_vec())),
            ],
        )
        .await
    }

    async fn owner_write(
        &self,
        shard: &str,
        action: &'static str,
        expression: &str,
        values: Vec<(&str, AttributeValue)>,
    ) -> Result<(), LeaseError> {
        let entry = self
            .entry(shard)
            .ok_or_else(|| LeaseError::NotHeld(shard.to_owned()))?;
        let mut counter = entry.counter.lock().await;
        // Released while we waited for the lock.
        if self
            .entry(shard)
            .is_none_or(|current| !Arc::ptr_eq(&current, &entry))
        {
            return Err(LeaseError::NotHeld(shard.to_owned()));
        }
        let started = Instant::now();
        let mut update = self
            .client
            .update_item()
            .table_name(&self.config.table)
            .key("leaseKey", s(shard))
            .update_expression(expression)
            .condition_expression("leaseOwner = :me AND leaseCounter = :counter")
            .expression_attribute_values(":me", s(&self.config.worker_id))
            .expression_attribute_values(":counter", n(*counter))
            .expression_attribute_values(":next", n(*counter + 1));
        for (name, value) in values {
            update = update.expression_attribute_values(name, value);
        }
        match update.send().await {
            Ok(_) => {
                *counter += 1;
                *entry.written_at.lock().unwrap_or_else(|p| p.into_inner()) = started;
                Ok(())
            }
            Err(error) => {
                let error = LeaseError::from_sdk(shard, action, error);
                if matches!(error, LeaseError::Conflict { .. }) {
                    self.forget(shard, &entry);
                }
                Err(error)
            }
        }
    }

    fn forget(&self, shard: &str, entry: &Arc<Held>) {
        let mut held = self.lock_held();
        if held
            .get(shard)
            .is_some_and(|current| Arc::ptr_eq(current, entry))
        {
            held.remove(shard);
        }
    }

    /// Releases a held lease at once: clears `leaseOwner` (conditional on us
    /// still owning it) and bumps the counter, so the operator sees the
    /// shard let go. Already lost to someone else counts as released.
    pub async fn release(&self, shard: &str) -> Result<(), LeaseError> {
        let Some(entry) = self.entry(shard) else {
            return Ok(());
        };
        // Wait for an in-flight renew or checkpoint, then stop holding.
        let _counter = entry.counter.lock().await;
        self.forget(shard, &entry);
        let result = self
            .client
            .update_item()
            .table_name(&self.config.table)
            .key("leaseKey", s(shard))
            .update_expression("REMOVE leaseOwner SET leaseCounter = leaseCounter + :one")
            .condition_expression("leaseOwner = :me")
            .expression_attribute_values(":me", s(&self.config.worker_id))
            .expression_attribute_values(":one", n(1))
            .send()
            .await;
        match result.map_err(|e| LeaseError::from_sdk(shard, "release", e)) {
            Ok(_) | Err(LeaseError::Conflict { .. }) => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// Releases every held lease whose shard `view` no longer lets this pod
    /// acquire; returns the shards released. Stop their readers first.
    pub async fn release_unassigned(&self, view: &AssignmentView) -> Vec<String> {
        let mut released = Vec::new();
        for shard in self.held() {
            if !view.can_acquire(&shard) {
                match self.release(&shard).await {
                    Ok(()) => released.push(shard),
                    Err(error) => tracing::warn!(%error, "release failed; retrying later"),
                }
            }
        }
        released
    }
}
