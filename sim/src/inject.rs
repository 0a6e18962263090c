//! The random faults and events of one step of the faulty phase: pods
//! join, are deleted gracefully, killed, force-deleted, recreated; nodes are
//! partitioned; a stream's shards split and merge; the operator crashes and
//! its pod watch relists.

use crate::sim::Sim;

impl Sim {
    /// Injects random faults and events.
    pub(crate) fn inject(&mut self) {
        let rng = &mut self.rng;
        let w = &mut self.world;
        let live: Vec<usize> = (0..w.pods.len())
            .filter(|&i| w.pods[i].object && w.pods[i].deletion.is_none())
            .collect();
        if live.len() < 6 && rng.chance(0.02) {
            let n = self.next_pod;
            self.next_pod += 1;
            let start = self.random_start();
            self.spawn_pod(format!("pod-{n:02}"), start);
            return;
        }
        let rng = &mut self.rng;
        if live.len() >= 2 && rng.chance(0.012) {
            let i = *rng.pick(&live).expect("live");
            let grace = rng.range(5, 30);
            self.delete_gracefully(i, grace);
            return;
        }
        let w = &mut self.world;
        if rng.chance(0.006) {
            let running: Vec<usize> = (0..w.pods.len())
                .filter(|&i| w.pods[i].process.is_some())
                .collect();
            if let Some(&i) = rng.pick(&running) {
                w.pods[i].kill_at = Some(w.now);
                self.events.kills += 1;
            }
        }
        if rng.chance(0.004) {
            let objects: Vec<usize> = (0..w.pods.len()).filter(|&i| w.pods[i].object).collect();
            if objects.len() >= 2
                && let Some(&i) = rng.pick(&objects)
            {
                // Its kubelet notices the deletion and kills the process
                // within a second or two, or, slow, after up to 10 s.
                let linger = if rng.chance(0.3) {
                    rng.range(2_000, 10_000)
                } else {
                    rng.range(0, 2_000)
                };
                self.force_delete(i, linger);
            }
        }
        let rng = &mut self.rng;
        let w = &mut self.world;
        // The scheduler finds room for an unscheduled pod.
        let now = w.now;
        for pod in w.pods.iter_mut().filter(|p| p.object && !p.scheduled) {
            if pod.deletion.is_none() && rng.chance(0.01) {
                pod.scheduled = true;
                pod.start_at = Some(now + rng.range(200, 2_000));
            }
        }
        if rng.chance(0.003) {
            let until = now + rng.range(1_000, 20_000);
            self.op.watch_gap(now, until);
        }
        let rng = &mut self.rng;
        let w = &mut self.world;
        // Only where every group's consumers are fenced by a lease table: a
        // cut-off consumer of static partitions would read on past its
        // revoke (the contract cannot stop a consumer that cannot see it).
        if w.sources.iter().all(|s| s.lease_table) && rng.chance(0.004) {
            let n = rng.index(w.nodes.len());
            w.nodes[n] = Some(w.now + rng.range(5_000, 60_000));
            self.events.partitions += 1;
        }
        let streams: Vec<usize> = (0..w.sources.len())
            .filter(|&g| w.sources[g].lease_table)
            .collect();
        if !streams.is_empty() && rng.chance(0.006) {
            // Which group's stream reshards (from the pool's own draws).
            let g = *self.pool_rng.pick(&streams).expect("a stream");
            let open: Vec<usize> = (0..w.stream.len())
                .filter(|&i| w.stream[i].open && w.stream[i].group == g)
                .collect();
            if open.len() >= 2 && (open.len() >= 10 || rng.chance(0.5)) {
                let a = open[rng.index(open.len())];
                let b = open[(open.iter().position(|&x| x == a).expect("in") + 1) % open.len()];
                w.stream[a].open = false;
                w.stream[b].open = false;
                let parents = vec![w.stream[a].id.clone(), w.stream[b].id.clone()];
                w.add_shard(g, parents);
                self.events.merges += 1;
            } else if let Some(&a) = rng.pick(&open) {
                w.stream[a].open = false;
                let parent = vec![w.stream[a].id.clone()];
                w.add_shard(g, parent.clone());
                w.add_shard(g, parent);
                self.events.splits += 1;
            }
        }
        if self.rng.chance(0.004) {
            let down = self.rng.range(1_000, 15_000);
            self.op.crash(self.world.now, down);
        }
    }
}
