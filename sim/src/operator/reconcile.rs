//! One reconcile's reach ([`Reconcile`]): what the observe and apply
//! halves run the core's cycle on (the operator, the group, the world and
//! the run's randomness), and what the observe half saw that the checks of
//! the decision need.

use std::collections::BTreeSet;

use super::process::Operator;
use crate::rng::Rng;
use crate::world::World;

/// One reconcile's reach: the operator, the group, the world it runs in
/// and the run's randomness, for the cycle's observe and apply halves; with
/// what the observe half saw that the checks of the decision need.
pub(super) struct Reconcile<'a> {
    pub(super) op: &'a mut Operator,
    /// The group reconciled (its index).
    pub(super) g: usize,
    pub(super) world: &'a mut World,
    pub(super) rng: &'a mut Rng,
    /// The topology read or the lease scan failed.
    pub(super) read_error: bool,
    /// The shards of the document the reconcile read.
    pub(super) before: BTreeSet<String>,
}
