//! Which pools are balanced together: a pod selected by two pools (or
//! groups of different pools on the same pods) serves the groups of both,
//! so the pools of one namespace that share a pod, directly or through
//! other pools, form one balance ([`domains`]). Each domain has one
//! [`super::PoolBook`], and its deals span all its pools' groups.

use std::collections::{BTreeMap, BTreeSet};

/// The pools of `selections` (pool name → the pods it selects) grouped
/// into balances: two pools that select a common pod are in one, and so
/// is every pool linked to them through others. Each balance is sorted,
/// and so is the list (by first name).
pub fn domains(selections: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let names: Vec<&String> = selections.keys().collect();
    let mut parent: Vec<usize> = (0..names.len()).collect();
    fn root(parent: &mut [usize], mut at: usize) -> usize {
        while parent[at] != at {
            parent[at] = parent[parent[at]];
            at = parent[at];
        }
        at
    }
    // The first pool seen to select each pod: a later pool selecting it
    // joins that pool's balance.
    let mut first: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, pods) in selections.values().enumerate() {
        for pod in pods {
            match first.get(pod.as_str()) {
                Some(&j) => {
                    let (a, b) = (root(&mut parent, i), root(&mut parent, j));
                    parent[a.max(b)] = a.min(b);
                }
                None => {
                    first.insert(pod, i);
                }
            }
        }
    }
    let mut groups: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for (i, name) in names.iter().enumerate() {
        let r = root(&mut parent, i);
        groups.entry(r).or_default().push((*name).clone());
    }
    groups.into_values().collect()
}

/// The balance of `domains` that holds `pool` (just `pool` when none does).
pub fn domain_of(domains: &[Vec<String>], pool: &str) -> Vec<String> {
    domains
        .iter()
        .find(|d| d.iter().any(|p| p == pool))
        .cloned()
        .unwrap_or_else(|| vec![pool.to_owned()])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selections(pools: &[(&str, &[&str])]) -> BTreeMap<String, BTreeSet<String>> {
        pools
            .iter()
            .map(|(name, pods)| {
                let pods = pods.iter().map(|p| (*p).to_owned()).collect();
                ((*name).to_owned(), pods)
            })
            .collect()
    }

    #[test]
    fn pools_linked_by_a_shared_pod_are_one_balance() {
        let found = domains(&selections(&[
            ("a", &["p-0", "p-1"]),
            ("b", &["p-1", "p-2"]),
            ("c", &["p-2", "p-3"]),
            ("d", &["q-0"]),
            ("e", &[]),
        ]));
        assert_eq!(
            found,
            vec![
                vec!["a".to_owned(), "b".into(), "c".into()],
                vec!["d".to_owned()],
                vec!["e".to_owned()],
            ]
        );
        assert_eq!(domain_of(&found, "c"), ["a", "b", "c"]);
        assert_eq!(domain_of(&found, "z"), ["z"]);
    }
}
