//! `cost-sbf`: shortest estimated bottleneck first, by cost rather than by key count.
//!
//! ```text
//!   keys ─► opsets per backend (as batch; replica by C3)
//!        ─► opcost = T_L·N_L + T_S·(n − N_L)        (TailX's estimates: N_L from its Bloom
//!                                                      filter of large keys, T_S and T_L
//!                                                      from timed fetches; see `tailx`)
//!        ─► units = opcost / T_S  (a large value counts as T_L / T_S small keys)
//!           bottleneck B = max units; every opset gets Rein's class of B (SBF); with
//!           `slack_demotion` an opset of u < B units the class of B + (B − u) (SDS)
//!   Fetch{priority: class, not_before: None} ─► servers: Discipline::Aged (serverq):
//!        strict priority, ageing by arrivals so that no class starves; work-conserving
//! ```
//!
//! Rein's shortest-bottleneck-first counts keys, so a 20-key request with one 100 KB value
//! ranks with 20-key requests of 1 KB values, and its opset holding the large value ranks with
//! the opsets of one small key. Counting a large value as the `T_L / T_S` small keys it costs
//! puts the request whose slowest opset is cheap first, whatever makes it cheap. No opset is
//! held back at the client (delays cannot reduce a FIFO server's queueing: the servers order
//! the work instead), and the servers' ageing lets no class starve.

use crate::planner::base::{
    group_with, into_actions, Action, ClusterView, Fetch, Observation, PlanRequest, Planner,
};
use crate::rein::{class_of, sds_class};
use crate::serverq::Discipline;
use crate::spread::ReplicaChoice;
use crate::tailx::{TailxPlanner, TailxSettings, DEFAULT_LARGE_COST_RATIO};

/// Default ageing of the servers' order: later arrivals that may overtake an opset per class
/// between them (far above a busy period's arrivals at a server, so it orders as strict
/// priority does until an opset has waited that long).
pub const DEFAULT_OVERTAKES: u64 = 2_000;

/// Settings of `cost-sbf`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostSbfSettings {
    /// The estimates' settings (THR_L, the Bloom filter); its delay is never used.
    pub tailx: TailxSettings,
    /// The servers' ageing ([`Discipline::Aged`]).
    pub overtakes: u64,
    /// Demote the opsets that are not the bottleneck by their slack (Rein's SDS rule). Off by
    /// default: in the simulated rare-elephant mix it cost Rein 13 % of the p99 (rein-sds
    /// against rein-sbf), and cost-sbf with it made exactly rein-sds's decisions there.
    pub slack_demotion: bool,
}

impl Default for CostSbfSettings {
    fn default() -> Self {
        CostSbfSettings {
            tailx: TailxSettings::default(),
            overtakes: DEFAULT_OVERTAKES,
            slack_demotion: false,
        }
    }
}

/// The `cost-sbf` planner.
#[derive(Debug, Clone)]
pub struct CostSbfPlanner {
    settings: CostSbfSettings,
    /// TailX's filter, THR_L learner and cost model (its planning is not used).
    estimates: TailxPlanner,
    choice: ReplicaChoice,
    scratch: Vec<usize>,
}

impl Default for CostSbfPlanner {
    fn default() -> Self {
        CostSbfPlanner::new(CostSbfSettings::default())
    }
}

impl CostSbfPlanner {
    /// A planner with `settings`.
    pub fn new(settings: CostSbfSettings) -> Self {
        CostSbfPlanner {
            estimates: TailxPlanner::new(settings.tailx),
            settings,
            choice: ReplicaChoice::C3,
            scratch: Vec::new(),
        }
    }

    /// The planner with each key's replica picked by `choice` (C3's by default).
    pub fn with_replica_choice(mut self, choice: ReplicaChoice) -> Self {
        self.choice = choice;
        self
    }

    /// T_L / T_S now: learned from timed fetches (TailX's default ratio before any), at most
    /// the large values' mean bytes over the small ones'. The bound holds for any cost affine
    /// in a value's bytes (a part per key and a part per byte, both ≥ 0), and it is needed:
    /// the fetches are timed from send to reply, so under an order that demotes the fetches
    /// holding large values (`size-rel`) their waits count as their cost (T_L / T_S learned
    /// at 1 262 in a simulated run whose servers' real ratio was ~43, where the bytes say 128).
    pub fn large_cost_ratio(&self) -> f64 {
        let cost = self.estimates.cost();
        let learned = match (cost.small_nanos(), cost.large_nanos()) {
            (Some(small), Some(large)) if small > 0.0 => large / small,
            _ => DEFAULT_LARGE_COST_RATIO,
        };
        match self.estimates.value_bytes_ratio() {
            Some(bound) => learned.min(bound.max(1.0)),
            None => learned,
        }
    }

    /// The cost of an opset of `keys` keys, `large` of them large, in small keys.
    pub fn units(&self, keys: u64, large: u64) -> f64 {
        let large = large.min(keys);
        (keys - large) as f64 + large as f64 * self.large_cost_ratio()
    }

    /// Batch's opsets of `request` (one per backend, replicas by the planner's choice, C3's by
    /// default) and the keys no replica can serve.
    pub fn group(
        &mut self,
        request: &PlanRequest<'_>,
        view: &dyn ClusterView,
    ) -> (Vec<Fetch>, Vec<u32>) {
        group_with(request, view, self.choice, &mut self.scratch)
    }

    /// The estimated cost of each of `fetches` in small keys ([`CostSbfPlanner::units`], the
    /// large keys counted by the Bloom filter).
    pub fn opset_units(&self, request: &PlanRequest<'_>, fetches: &[Fetch]) -> Vec<f64> {
        fetches
            .iter()
            .map(|fetch| self.units(fetch.keys.len() as u64, self.large_keys(request, fetch)))
            .collect()
    }

    /// True if the Bloom filter holds `key` as large.
    pub fn is_large(&self, key: &[u8]) -> bool {
        self.estimates.filter().contains(key)
    }

    /// The estimated cost of `fetch` in small keys ([`CostSbfPlanner::units`]).
    pub fn fetch_units(&self, request: &PlanRequest<'_>, fetch: &Fetch) -> f64 {
        self.units(fetch.keys.len() as u64, self.large_keys(request, fetch))
    }

    /// Keys of `fetch` the Bloom filter holds as large.
    pub fn large_keys(&self, request: &PlanRequest<'_>, fetch: &Fetch) -> u64 {
        let filter = self.estimates.filter();
        fetch
            .keys
            .iter()
            .filter(|&&i| filter.contains(request.keys[i as usize]))
            .count() as u64
    }
}

/// The class of an opset of `units` in a request whose bottleneck has `bottleneck` units.
pub fn opset_class(bottleneck: f64, units: f64, slack_demotion: bool) -> u8 {
    let bottleneck_keys = bottleneck.round() as u64;
    if slack_demotion {
        sds_class(bottleneck_keys, units.round() as u64)
    } else {
        class_of(bottleneck_keys)
    }
}

impl Planner for CostSbfPlanner {
    fn name(&self) -> &'static str {
        "cost-sbf"
    }

    fn plan(&mut self, request: &PlanRequest<'_>, view: &dyn ClusterView) -> Vec<Action> {
        let (mut fetches, unavailable) = self.group(request, view);
        let units = self.opset_units(request, &fetches);
        let bottleneck = units.iter().copied().fold(0.0f64, f64::max);
        for (fetch, units) in fetches.iter_mut().zip(units) {
            fetch.priority = Some(opset_class(bottleneck, units, self.settings.slack_demotion));
        }
        into_actions(fetches, unavailable)
    }

    fn wants_values(&self) -> bool {
        true
    }

    fn observe_value(&mut self, key: &[u8], value_bytes: u64) {
        self.estimates.observe_value(key, value_bytes);
    }

    fn observe(&mut self, observation: &Observation) {
        self.estimates.observe(observation);
    }

    fn fetch_work_keys(&self, request: &PlanRequest<'_>, fetch: &Fetch) -> f64 {
        self.fetch_units(request, fetch)
    }

    fn discipline(&self) -> Discipline {
        Discipline::Aged {
            overtakes: self.settings.overtakes,
        }
    }

    fn gauges(&self) -> Vec<(&'static str, f64)> {
        vec![
            (
                "cost_sbf_large_threshold_bytes",
                self.estimates.large_threshold().map_or(0.0, |t| t as f64),
            ),
            ("cost_sbf_large_cost_ratio", self.large_cost_ratio()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::Timestamp;
    use crate::planner::base::tests::{keys, view};
    use crate::tailx::tests::observation;

    fn fetches(actions: &[Action]) -> Vec<&crate::planner::base::Fetch> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Fetch(f) => Some(f),
                Action::Unavailable { .. } => None,
            })
            .collect()
    }

    fn plan(planner: &mut CostSbfPlanner, owned: &[Vec<u8>]) -> Vec<Action> {
        let view = view(4, 1);
        let slices: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
        planner.plan(
            &PlanRequest {
                keys: &slices,
                now: Timestamp(0),
            },
            &view,
        )
    }

    #[test]
    fn a_large_value_counts_as_the_small_keys_it_costs() {
        let mut planner = CostSbfPlanner::new(CostSbfSettings {
            tailx: TailxSettings {
                large_threshold_bytes: Some(10_000),
                ..TailxSettings::default()
            },
            slack_demotion: true,
            ..CostSbfSettings::default()
        });
        // Train: small-only fetches of 1..8 keys at 1 µs + 1 µs a key.
        for n in 1..=8u32 {
            planner.observe(&observation(n, 1_000 + u64::from(n) * 1_000));
        }
        // Eight small keys over four backends: the class of the largest opset, as Rein's.
        let owned = keys(8);
        let small = plan(&mut planner, &owned);
        let most = fetches(&small).iter().map(|f| f.keys.len()).max().unwrap() as u64;
        assert!(fetches(&small)
            .iter()
            .all(|f| f.priority == Some(class_of(most))));
        // One of them turns out to hold 100 KB that takes 50 µs more: T_L / T_S ≈ 50.
        planner.observe_value(&owned[0], 100_000);
        planner.observe(&Observation {
            value_bytes: 100_000,
            ..observation(1, 51_000)
        });
        assert!(
            planner.large_cost_ratio() > 40.0,
            "{}",
            planner.large_cost_ratio()
        );
        let large = plan(&mut planner, &owned);
        let large_fetches = fetches(&large);
        // The opset holding it is the bottleneck (≈ 50 units: class 3); the others, with their
        // slack, are demoted below it; none is delayed.
        let holder = large_fetches
            .iter()
            .find(|f| f.keys.contains(&0))
            .and_then(|f| f.priority);
        assert_eq!(holder, Some(3));
        assert!(large_fetches
            .iter()
            .filter(|f| !f.keys.contains(&0))
            .all(|f| f.priority >= holder));
        assert!(large_fetches.iter().all(|f| f.not_before.is_none()));
    }

    #[test]
    fn a_large_value_costs_at_most_its_bytes_in_small_values() {
        let mut planner = CostSbfPlanner::new(CostSbfSettings {
            tailx: TailxSettings {
                large_threshold_bytes: Some(10_000),
                ..TailxSettings::default()
            },
            ..CostSbfSettings::default()
        });
        for n in 1..=8u32 {
            planner.observe(&observation(n, 1_000 + u64::from(n) * 1_000));
        }
        let owned = keys(8);
        planner.observe_value(&owned[1], 1_000);
        // 20 KB that took 50 µs more than a small key, as a fetch that waited behind others
        // would: its bytes say it costs at most 20 small ones.
        planner.observe_value(&owned[0], 20_000);
        planner.observe(&Observation {
            value_bytes: 20_000,
            ..observation(1, 51_000)
        });
        assert_eq!(planner.large_cost_ratio(), 20.0);
        assert_eq!(planner.units(2, 1), 21.0);
    }

    #[test]
    fn untrained_classes_are_reins_and_the_servers_age_them() {
        let mut planner = CostSbfPlanner::default();
        let one = plan(&mut planner, &keys(1));
        assert_eq!(fetches(&one)[0].priority, Some(0));
        let many = plan(&mut planner, &keys(200));
        let bottleneck = fetches(&many).iter().map(|f| f.keys.len()).max().unwrap() as u64;
        assert!(fetches(&many)
            .iter()
            .all(|f| f.priority == Some(class_of(bottleneck))));
        assert_eq!(
            planner.discipline(),
            Discipline::Aged {
                overtakes: DEFAULT_OVERTAKES
            }
        );
        assert_eq!(opset_class(100.0, 10.0, true), sds_class(100, 10));
        assert_eq!(opset_class(100.0, 10.0, false), class_of(100));
    }
}
