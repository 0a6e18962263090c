//! Exhaustive check of the handoff protocol on a small configuration: two
//! pods, two shards, a lease table, one operator restart, and API writes
//! that are delivered in any order or lost. A breadth-first search over every
//! interleaving of the operator (the REAL plan step), both consumers, the
//! API server, the lease table, the clock and the pods' lifecycle visits
//! each reachable state once and checks in each that no shard is read by two
//! consumers at once.
//!
//! Pod B joins (becomes Ready), pod A is deleted gracefully or killed with
//! SIGKILL; time moves in ticks of 5 s, up to a bound, so drain timeouts and
//! lease expiries happen; a lease release may lag (delivered later, in any
//! order). A deleted pod A's kubelet reports its container terminated once
//! the consumer exited, then removes the object; the operator's memory of
//! departed pods sees the removal unless the restart wiped it.

use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};

use super::operator::{Operator, ts};
use crate::crds::{AssignmentDocument, PodView, ShardGroupStatus};
use crate::engine::{Shard, ShardState};
use shardring_core::departures::{Departure, Departures};
use shardring_core::leases::{LeaseSnapshot, LeaseTable};
use shardring_core::observation::{
    Containers, LeaseObservation, Observation, PodInfo, Published, TopologyObservation,
};
use shardring_core::plan;
use shardring_core::topology::Topology;

const PODS: [&str; 2] = ["pod-a", "pod-b"];
const SHARDS: [&str; 2] = ["shard-0", "shard-1"];
const TICK_MS: i64 = 5_000;
const FAILOVER_MS: i64 = 6_000;

/// Bounds of the search.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Clock ticks (5 s each).
    pub ticks: u8,
    /// Most API writes in flight at once.
    pub in_flight: usize,
    /// Stop after this many states (the result says whether it was reached).
    pub max_states: usize,
}

/// The result of a search.
#[derive(Debug, Clone)]
pub struct Explored {
    /// Distinct states visited.
    pub states: usize,
    /// Transitions taken.
    pub transitions: usize,
    /// Whether `max_states` cut the search short.
    pub truncated: bool,
    /// The first state (as a trace of actions) violating the invariant.
    pub violation: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Write {
    Doc(String),
    Annotation(usize, Option<String>),
    Status(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
struct ConsumerState {
    alive: bool,
    terminating: bool,
    epoch: u64,
    active: Vec<String>,
    reading: BTreeSet<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
struct Lease {
    owner: Option<usize>,
    counter: u64,
    changed: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
struct State {
    now: i64,
    ticks: u8,
    doc: Option<String>,
    status: Option<String>,
    annotations: [Option<String>; 2],
    ready: [bool; 2],
    deleting: [bool; 2],
    object: [bool; 2],
    consumers: [ConsumerState; 2],
    leases: [Lease; 2],
    releases: Vec<(usize, usize)>,
    writes: Vec<Write>,
    /// Operator memory: when it first saw each lease's (owner, counter).
    seen: Option<[(Option<usize>, u64, i64); 2]>,
    restarted: bool,
    a_deleted: bool,
    a_killed: bool,
    /// Pod A's status shows its container terminated.
    a_stopped: bool,
    /// The operator's memory holds A's departure (its final state).
    a_departure_seen: bool,
}

/// Runs the search.
pub fn explore(bounds: Bounds) -> Explored {
    let template = Operator::new(true, "10s", "6s", "0s", 0);
    let alive = ConsumerState {
        alive: true,
        ..Default::default()
    };
    let start = State {
        ready: [true, false],
        object: [true, true],
        consumers: [alive.clone(), alive],
        ..Default::default()
    };
    let mut visited: HashSet<State> = HashSet::new();
    let mut queue: VecDeque<(State, u32)> = VecDeque::new();
    visited.insert(start.clone());
    queue.push_back((start, 0));
    let mut transitions = 0;
    while let Some((state, depth)) = queue.pop_front() {
        for (action, next) in successors(&state, &template, bounds) {
            transitions += 1;
            if let Some(what) = two_readers(&next) {
                return Explored {
                    states: visited.len(),
                    transitions,
                    truncated: false,
                    violation: Some(format!("after {action} at depth {}: {what}", depth + 1)),
                };
            }
            if visited.len() >= bounds.max_states {
                return Explored {
                    states: visited.len(),
                    transitions,
                    truncated: true,
                    violation: None,
                };
            }
            if visited.insert(next.clone()) {
                queue.push_back((next, depth + 1));
            }
        }
    }
    Explored {
        states: visited.len(),
        transitions,
        truncated: false,
        violation: None,
    }
}

fn two_readers(s: &State) -> Option<String> {
    (0..2).find_map(|shard| {
        let readers = s
            .consumers
            .iter()
            .filter(|c| c.alive && c.reading.contains(&shard))
            .count();
        (readers > 1).then(|| format!("{} read by both pods", SHARDS[shard]))
    })
}

fn successors(s: &State, template: &Operator, b: Bounds) -> Vec<(&'static str, State)> {
    let mut out = Vec::new();
    if s.writes.len() < b.in_flight {
        out.push(("reconcile", reconcile(s, template)));
    }
    for i in 0..s.writes.len() {
        let mut n = s.clone();
        let w = n.writes.remove(i);
        out.push(("drop a write", n.clone()));
        apply_write(&mut n, w);
        out.push(("deliver a write", n));
    }
    if !s.restarted {
        let mut n = s.clone();
        n.restarted = true;
        n.seen = None;
        n.a_departure_seen = false;
        out.push(("operator restart", n));
    }
    for p in 0..2 {
        if !s.consumers[p].alive {
            continue;
        }
        let mut n = s.clone();
        if refresh(&mut n, p) {
            out.push(("consumer refresh", n));
        }
        let mut n = s.clone();
        if act(&mut n, p) {
            out.push(("consumer act", n));
        }
    }
    for i in 0..s.releases.len() {
        let mut n = s.clone();
        let (p, shard) = n.releases.remove(i);
        if n.leases[shard].owner == Some(p) {
            n.leases[shard].owner = None;
            n.leases[shard].counter += 1;
            n.leases[shard].changed = n.now;
        }
        out.push(("lease release lands", n));
    }
    if s.ticks < b.ticks {
        let mut n = s.clone();
        n.ticks += 1;
        n.now += TICK_MS;
        for p in 0..2 {
            let c = &n.consumers[p];
            if !c.alive {
                continue;
            }
            for &shard in &c.reading.clone() {
                if n.leases[shard].owner == Some(p) {
                    n.leases[shard].counter += 1;
                    n.leases[shard].changed = n.now;
                }
            }
        }
        out.push(("tick", n));
    }
    if !s.ready[1] {
        let mut n = s.clone();
        n.ready[1] = true;
        out.push(("pod-b ready", n));
    }
    if !s.a_deleted && !s.a_killed {
        let mut n = s.clone();
        n.a_deleted = true;
        n.deleting[0] = true;
        n.consumers[0].terminating = true;
        out.push(("pod-a deleted gracefully", n));
        let mut n = s.clone();
        n.a_killed = true;
        n.consumers[0] = ConsumerState::default();
        n.ready[0] = false;
        out.push(("pod-a kill -9", n));
    }
    // The kubelet reports a deleted pod's container terminated once its
    // process exited (at once when it holds nothing), then removes it.
    let a = &s.consumers[0];
    if s.deleting[0]
        && s.object[0]
        && !s.a_stopped
        && (!a.alive || (a.reading.is_empty() && a.active.is_empty()))
    {
        let mut n = s.clone();
        n.consumers[0] = ConsumerState::default();
        n.a_stopped = true;
        out.push(("pod-a container terminated", n));
    }
    if s.deleting[0] && s.object[0] && s.a_stopped {
        let mut n = s.clone();
        n.object[0] = false;
        n.a_departure_seen = true;
        out.push(("pod-a gone", n));
    }
    out
}

fn refresh(s: &mut State, p: usize) -> bool {
    let Some(view) = s.annotations[p]
        .as_deref()
        .and_then(|a| PodView::from_annotation(a).ok())
    else {
        return false;
    };
    let c = &mut s.consumers[p];
    if view.epoch <= c.epoch {
        return false;
    }
    c.epoch = view.epoch;
    c.active = view.active;
    true
}

fn act(s: &mut State, p: usize) -> bool {
    let mut changed = false;
    let active: Vec<usize> = (0..2)
        .filter(|&i| s.consumers[p].active.iter().any(|a| a == SHARDS[i]))
        .collect();
    for shard in s.consumers[p].reading.clone() {
        if !active.contains(&shard) {
            s.consumers[p].reading.remove(&shard);
            s.releases.push((p, shard));
            changed = true;
        }
    }
    for shard in active {
        if s.consumers[p].reading.contains(&shard) {
            continue;
        }
        let lease = &mut s.leases[shard];
        let free =
            lease.owner.is_none() || lease.owner == Some(p) || s.now - lease.changed >= FAILOVER_MS;
        if free {
            lease.owner = Some(p);
            lease.counter += 1;
            lease.changed = s.now;
            s.consumers[p].reading.insert(shard);
            changed = true;
        }
    }
    changed
}

fn apply_write(s: &mut State, w: Write) {
    match w {
        Write::Doc(doc) => s.doc = Some(doc),
        Write::Annotation(p, value) => {
            if s.object[p] {
                s.annotations[p] = value;
            }
        }
        Write::Status(status) => s.status = Some(status),
    }
}

fn reconcile(s: &State, template: &Operator) -> State {
    let mut n = s.clone();
    let now = ts(s.now);
    let mut seen = s.seen.unwrap_or([(None, 0, s.now); 2]);
    let mut leases = BTreeMap::new();
    for i in 0..2 {
        let l = &s.leases[i];
        if seen[i].0 != l.owner || seen[i].1 != l.counter || s.seen.is_none() {
            seen[i] = (l.owner, l.counter, s.now);
        }
        leases.insert(
            SHARDS[i].to_owned(),
            LeaseSnapshot {
                shard_id: SHARDS[i].to_owned(),
                owner: l.owner.map(|p| PODS[p].to_owned()),
                counter: l.counter,
                counter_changed_at: ts(seen[i].2),
                checkpoint: None,
                sequence_number: None,
                complete: false,
                parents: Vec::new(),
                children: Vec::new(),
                checkpoint_owner: None,
                throughput_kbps: None,
            },
        );
    }
    n.seen = Some(seen);
    let mut group = template.groups[0].shard_group.clone();
    group.status = s
        .status
        .as_deref()
        .map(|j| serde_json::from_str::<ShardGroupStatus>(j).expect("status"));
    let pods = (0..2)
        .filter(|&p| s.object[p])
        .map(|p| PodInfo {
            name: PODS[p].to_owned(),
            uid: format!("uid-{p}"),
            selected: true,
            ready: s.ready[p],
            ready_since: s.ready[p].then(|| ts(-3_600_000)),
            deletion_timestamp: s.deleting[p].then_some(now),
            deletion_grace_seconds: s.deleting[p].then_some(30),
            annotation: s.annotations[p].clone(),
            containers: if p == 0 && s.a_stopped {
                Containers::Stopped
            } else {
                Containers::Running
            },
            node_name: Some(format!("node-{p}")),
            created: Some(ts(-3_600_000)),
            generated_name: true,
            ..Default::default()
        })
        .collect();
    let mut departed = Departures {
        watched_since: Some(ts(0)),
        ..Default::default()
    };
    if s.a_departure_seen {
        let departure = Departure {
            uid: "uid-0".into(),
            at: now,
            containers: Containers::Stopped,
            scheduled: true,
            created: Some(ts(-3_600_000)),
            generated_name: true,
        };
        departed.pods.insert(PODS[0].to_owned(), vec![departure]);
    }
    let shards = SHARDS
        .iter()
        .map(|id| Shard {
            id: (*id).to_owned(),
            hash_key_range: None,
            parents: Vec::new(),
            state: ShardState::Open,
        })
        .collect::<Vec<_>>()
        .into();
    let obs = Observation {
        group,
        pool: Some(template.pool.clone()),
        pods,
        topology: TopologyObservation {
            source: "explore".into(),
            last_good: Some(std::sync::Arc::new(Topology { shards })),
            read_at: Some(ts(0)),
            error: None,
            ..Default::default()
        },
        published: s.doc.as_deref().map_or(Published::Missing, |j| {
            Published::from(serde_json::from_str::<AssignmentDocument>(j).expect("doc"))
        }),
        leases: LeaseObservation::Read(LeaseTable {
            leases,
            scanned_at: Some(now),
            items: 2,
        }),
        departed,
        releases: Default::default(),
        loads: Default::default(),
        now,
        pool_share: Default::default(),
        stateful_sets: Default::default(),
    };
    let d = plan(&obs);
    if let Some(write) = &d.document_write {
        n.writes.push(Write::Doc(
            serde_json::to_string(&*write.document).expect("doc"),
        ));
    }
    for w in &d.annotation_writes {
        let p = PODS.iter().position(|x| *x == w.pod).expect("pod");
        n.writes.push(Write::Annotation(
            p,
            w.view.as_ref().map(|v| v.to_annotation()),
        ));
    }
    if let Some(status) = d.status.write() {
        n.writes.push(Write::Status(
            serde_json::to_string(status).expect("status"),
        ));
    }
    n
}
