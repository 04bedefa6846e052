//! Rein's multiget priorities (Reda, Canini, Suresh, Kostić, Braithwaite: "Rein: Taming tail
//! latency in key-value stores via multiget scheduling", EuroSys 2017).
//!
//! ```text
//!   keys ─► opsets per backend (as batch) ─► bottleneck B = max keys of an opset
//!     SBF: every opset gets class(B)                    class(n): n ≤ 1 → 0, ≤ 5 → 1, ≤ 25 → 2,
//!     SDS: B > 20: a non-bottleneck opset of n keys            ≤ 125 → 3, else 4 (lowest)
//!          gets class(B + (B − n)): demoted by its slack
//!   Fetch{priority: Some(class)} ─► served in strict priority order (`serverq`), as the
//!                                   paper does, at the backend or in the proxy for stock
//!                                   memcached; `rein-drr`: SBF's classes by deficit round
//!                                   robin (weights 5..1, see `drr`) instead
//! ```
//!
//! Shortest bottleneck first (SBF) serves the requests whose slowest opset is small before
//! those whose slowest opset is large, so a request of 5 keys does not queue behind the opsets
//! of a 100-key request. Slack-driven scheduling (SDS) also lets the non-bottleneck opsets of a
//! large request wait: they would finish early and then wait for the bottleneck anyway.

use crate::drr::CLASSES;
use crate::planner::base::{group_with, into_actions, Action, ClusterView, PlanRequest, Planner};
use crate::serverq::Discipline;
use crate::spread::ReplicaChoice;

/// Upper bounds (keys) of the classes 0..=3; larger opsets are class 4.
pub const CLASS_BOUNDS: [u64; CLASSES - 1] = [1, 5, 25, 125];
/// SDS demotes non-bottleneck opsets only when the bottleneck has more keys than this.
pub const SDS_MIN_BOTTLENECK: u64 = 20;

/// The priority class of an opset cost of `keys` keys (0 = highest priority).
pub fn class_of(keys: u64) -> u8 {
    CLASS_BOUNDS
        .iter()
        .position(|&bound| keys <= bound)
        .unwrap_or(CLASSES - 1) as u8
}

/// Which of Rein's two policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReinPolicy {
    /// Shortest bottleneck first.
    Sbf,
    /// Shortest bottleneck first plus slack-driven demotion.
    Sds,
    /// Shortest bottleneck first's classes, served by deficit round robin (`rein-drr`).
    SbfDrr,
}

/// Rein's planner: batch's opsets, each tagged with a priority class.
#[derive(Debug, Clone)]
pub struct ReinPlanner {
    policy: ReinPolicy,
    choice: ReplicaChoice,
    scratch: Vec<usize>,
}

impl ReinPlanner {
    /// A planner applying `policy`.
    pub fn new(policy: ReinPolicy) -> Self {
        ReinPlanner {
            policy,
            choice: ReplicaChoice::C3,
            scratch: Vec::new(),
        }
    }

    /// The planner with each key's replica picked by `choice` (C3's by default).
    pub fn with_replica_choice(mut self, choice: ReplicaChoice) -> Self {
        self.choice = choice;
        self
    }
}

/// The class SDS gives an opset of `keys` keys in a request whose bottleneck has `bottleneck`.
pub fn sds_class(bottleneck: u64, keys: u64) -> u8 {
    if bottleneck > SDS_MIN_BOTTLENECK && keys < bottleneck {
        class_of(bottleneck + (bottleneck - keys))
    } else {
        class_of(bottleneck)
    }
}

impl Planner for ReinPlanner {
    fn name(&self) -> &'static str {
        match self.policy {
            ReinPolicy::Sbf => "rein-sbf",
            ReinPolicy::Sds => "rein-sds",
            ReinPolicy::SbfDrr => "rein-drr",
        }
    }

    fn discipline(&self) -> Discipline {
        match self.policy {
            ReinPolicy::Sbf | ReinPolicy::Sds => Discipline::Strict,
            ReinPolicy::SbfDrr => Discipline::Drr,
        }
    }

    fn plan(&mut self, request: &PlanRequest<'_>, view: &dyn ClusterView) -> Vec<Action> {
        let (mut fetches, unavailable) = group_with(request, view, self.choice, &mut self.scratch);
        let bottleneck = fetches
            .iter()
            .map(|f| f.keys.len() as u64)
            .max()
            .unwrap_or(0);
        for fetch in &mut fetches {
            let keys = fetch.keys.len() as u64;
            fetch.priority = Some(match self.policy {
                ReinPolicy::Sbf | ReinPolicy::SbfDrr => class_of(bottleneck),
                ReinPolicy::Sds => sds_class(bottleneck, keys),
            });
        }
        into_actions(fetches, unavailable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::base::tests::{keys, plan_with, view};

    #[test]
    fn classes_have_geometric_bounds() {
        let got: Vec<u8> = [0, 1, 2, 5, 6, 25, 26, 125, 126, 625, 626, 100_000]
            .iter()
            .map(|&n| class_of(n))
            .collect();
        assert_eq!(got, vec![0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 4, 4]);
    }

    #[test]
    fn sbf_gives_every_opset_the_class_of_the_bottleneck() {
        let view = view(4, 1);
        let owned = keys(60);
        let mut planner = ReinPlanner::new(ReinPolicy::Sbf);
        let actions = plan_with(&mut planner, &view, &owned);
        let fetches: Vec<_> = actions
            .iter()
            .filter_map(|a| match a {
                Action::Fetch(f) => Some(f),
                Action::Unavailable { .. } => None,
            })
            .collect();
        let bottleneck = fetches.iter().map(|f| f.keys.len()).max().unwrap() as u64;
        assert!(
            bottleneck > 5 && bottleneck <= 25,
            "bottleneck {bottleneck}"
        );
        assert!(fetches.iter().all(|f| f.priority == Some(2)));
        // A one-key request is class 0, a five-key request no worse than class 1.
        let one = plan_with(&mut planner, &view, &keys(1));
        assert!(matches!(&one[0], Action::Fetch(f) if f.priority == Some(0)));
        let five = plan_with(&mut planner, &view, &keys(5));
        assert!(five
            .iter()
            .all(|a| matches!(a, Action::Fetch(f) if f.priority <= Some(1))));
    }

    /// The backends of a plan's fetches and their priorities.
    fn fetched(actions: &[Action]) -> Vec<(usize, Option<u8>)> {
        actions
            .iter()
            .map(|a| match a {
                Action::Fetch(f) => (f.backend, f.priority),
                Action::Unavailable { .. } => panic!("unexpected {a:?}"),
            })
            .collect()
    }

    #[test]
    fn spreading_splits_a_two_key_request_that_c3_puts_on_one_server() {
        // 16 servers, 3 copies of each key, equal loads: C3 sends each key to its owner, so two
        // keys with one owner make one 2-key opset (class 1 under SBF).
        let view = view(16, 3);
        let candidates = keys(200);
        let owner = |key: &Vec<u8>| view.ring.server_for(key);
        let second = candidates[1..]
            .iter()
            .find(|key| owner(key) == owner(&candidates[0]))
            .expect("two keys with one owner among 200");
        let pair = vec![candidates[0].clone(), second.clone()];
        let mut c3 = ReinPlanner::new(ReinPolicy::Sbf);
        assert_eq!(
            fetched(&plan_with(&mut c3, &view, &pair)),
            vec![(owner(&pair[0]), Some(1))]
        );
        let mut spread =
            ReinPlanner::new(ReinPolicy::Sbf).with_replica_choice(ReplicaChoice::Spread);
        let got = fetched(&plan_with(&mut spread, &view, &pair));
        assert_eq!(got.len(), 2, "{got:?}");
        assert_ne!(got[0].0, got[1].0);
        assert!(got.iter().all(|&(_, class)| class == Some(0)), "{got:?}");
        let mut replicas = Vec::new();
        view.ring.replicas_for(&pair[1], 3, &mut replicas);
        assert!(replicas.contains(&got[1].0));
    }

    #[test]
    fn spreading_evens_out_a_large_requests_opsets() {
        let view = view(16, 3);
        let owned = keys(500);
        let largest = |choice| {
            let mut planner = ReinPlanner::new(ReinPolicy::Sbf).with_replica_choice(choice);
            plan_with(&mut planner, &view, &owned)
                .iter()
                .map(|a| match a {
                    Action::Fetch(f) => f.keys.len(),
                    Action::Unavailable { .. } => 0,
                })
                .max()
                .unwrap()
        };
        // 500 keys over 16 servers: at least 32 on one; C3 with equal loads sends every key
        // to its owner (ketama's shares), spreading stays near the even share.
        let (c3, spread) = (largest(ReplicaChoice::C3), largest(ReplicaChoice::Spread));
        assert!(spread <= 34, "spread {spread}");
        assert!(spread < c3, "spread {spread}, c3 {c3}");
    }

    #[test]
    fn sds_demotes_non_bottleneck_opsets_by_their_slack_above_twenty_keys() {
        // Bottleneck of 20 keys or fewer: SDS is SBF.
        assert_eq!(sds_class(20, 1), class_of(20));
        // Bottleneck 25 (class 2): an opset of 1 key has slack 24 → cost 49 → class 3;
        // an opset of 24 keys has slack 1 → 26 → class 3; the bottleneck itself stays class 2.
        assert_eq!(sds_class(25, 25), 2);
        assert_eq!(sds_class(25, 24), 3);
        assert_eq!(sds_class(25, 1), 3);
        // Bottleneck 100 (class 3): 90 keys → 110, still class 3; 10 keys → 190, class 4.
        assert_eq!(sds_class(100, 90), 3);
        assert_eq!(sds_class(100, 10), 4);
        // Through the planner: 2 backends, 200 keys → both opsets ≈ 100 keys; the smaller one is
        // never of a higher priority than the bottleneck.
        let view = view(2, 1);
        let owned = keys(200);
        let mut planner = ReinPlanner::new(ReinPolicy::Sds);
        let actions = plan_with(&mut planner, &view, &owned);
        let mut by_size: Vec<(usize, u8)> = actions
            .iter()
            .filter_map(|a| match a {
                Action::Fetch(f) => Some((f.keys.len(), f.priority.unwrap())),
                Action::Unavailable { .. } => None,
            })
            .collect();
        by_size.sort_unstable();
        let (small, large) = (by_size[0], by_size[1]);
        assert!(small.0 < large.0);
        assert_eq!(large.1, class_of(large.0 as u64));
        assert_eq!(
            small.1,
            class_of(large.0 as u64 + (large.0 - small.0) as u64)
        );
    }
}
