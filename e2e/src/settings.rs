//! The names and timings every scenario shares: the field manager, the
//! region, the stream, pool, ShardGroup and published ConfigMap names, the
//! suite's controller class, the step timeout and the group's drain, lease
//! failover and `minReadySeconds`.

use std::time::Duration;

/// Field manager of everything the harness applies.
pub const MANAGER: &str = "shardring-e2e";
/// Region every client uses (the emulators accept any).
pub const REGION: &str = "us-east-1";
/// The stream, lease table, pool and ShardGroup name in every scenario.
pub const NAME: &str = "orders";
/// The published ConfigMap (the operator's default name for [`NAME`]).
pub const CONFIG_MAP: &str = "orders-assignment";
/// The controller class of the suite's operators and ShardGroups (see
/// [`CONTROLLER_CLASS_LABEL`](shardring_crds::CONTROLLER_CLASS_LABEL)): an
/// operator installed in the cluster under test ignores the suite's groups,
/// and the suite's operators ignore every other group.
pub const CONTROLLER_CLASS: &str = "shardring-e2e";
/// Longest any one wait of a scenario may take (cold cluster, debug build).
pub const STEP_TIMEOUT: Duration = Duration::from_secs(120);
/// Drain timeout and lease failover of the ShardGroup, and how long a
/// SIGTERMed consumer keeps reading while it waits for its revoke.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Lease failover of the ShardGroup and the consumers.
pub const LEASE_FAILOVER: Duration = Duration::from_secs(4);
/// The pool's `minReadySeconds`: long enough for the pods a scenario adds
/// together to all report Ready before the first of them is eligible (the
/// group's first publish then waits for every one of them), short enough
/// not to slow a scenario down.
pub const MIN_READY: Duration = Duration::from_secs(2);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_map_is_the_operator_default_for_the_group() {
        assert_eq!(
            CONFIG_MAP,
            format!("{NAME}{}", shardring_crds::assignment::CONFIGMAP_SUFFIX)
        );
    }
}
