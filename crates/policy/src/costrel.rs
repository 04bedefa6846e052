//! `cost-rel`: priority by a request's bottleneck *relative to the workload's typical
//! bottleneck*, ageing at the servers, and (optionally) slack demotion by estimated cost.
//!
//! ```text
//!   keys ─► opsets per backend (as batch; replica by C3)
//!        ─► keys per opset n, estimated cost per opset u (cost-sbf's units: a large value
//!           counts as T_L / T_S small keys)
//!        ─► K = max n (Rein's bottleneck), U = max u; typical T = median of K over recent
//!           requests (quarter-octave histogram, halved every 8192 requests)
//!        ─► rel(x) = 0                              if x ≤ spread × T
//!                    1 + ⌊log2(x / (spread × T))⌋   else, at most 4
//!           class(opset) = rel(K) if K lies above the bucket of recent K's (1 − budget)
//!           quantile (a rare bottleneck), else 0; with `by_cost`, U in place of K; with
//!           `slack_demotion`, max(that, rel(U − u))
//!   Fetch{priority: class, not_before: None} ─► servers: Discipline::Aged{overtakes} (serverq):
//!        an opset is overtaken by at most overtakes × (its class − theirs) later arrivals
//! ```
//!
//! Rein's classes have fixed bounds (1, 5, 25, 125 keys), so a 20-key multiget over 16 servers
//! (bottleneck 2–6 keys) falls on either side of the bound at 5 and nearly equal requests
//! wait behind each other by strict priority; `cost-sbf` inherits the bounds. Anchoring the
//! classes at the typical bottleneck keeps every request within `spread` of it in one class,
//! served first come first served, and demotes a request whose bottleneck has several times
//! the typical keys (an elephant), one class per doubling, as Rein's SBF does.
//!
//! The demotion budget (1 % by default) keeps the demoted requests fewer than the 1 % beyond
//! the p99: when a class boundary fell where ~2 % of the requests were (20-key multigets whose
//! bottleneck was 7 keys against a typical 2.8), the demoted ones waited behind everything and
//! the overall p99 lay among them (experiments/tailx, `sim-v4-tuning`).
//!
//! Slack demotion (off by default) keeps the class of the opset holding a large value and
//! demotes its siblings by their estimated slack `U − u`. The slack is estimated from mean
//! costs; with variable service the holder is often not the last opset to finish, and the
//! demoted siblings then set the request's latency: in the simulator it cost the requests
//! with large values 1.2–3.2 × strict Rein-SBF's p99, where without it they are within a few
//! per cent of Rein-SBF's (experiments/tailx, `sim-v3-*`). Without a signal it can trust,
//! `cost-rel` orders those requests by their key counts, as Rein does.
//!
//! Ageing bounds how long a demoted opset waits, counted in arrivals, so that no class starves
//! when a closed loop saturates the servers. It is loose enough not to bind in an open loop at
//! load 0.9: at 100 overtakes per class it did bind there and cost the elephants 15 % of their
//! p99 (strict priority did not).

use crate::costsbf::{CostSbfPlanner, CostSbfSettings};
use crate::drr::CLASSES;
use crate::planner::base::{
    into_actions, Action, ClusterView, Fetch, Observation, PlanRequest, Planner,
};
use crate::serverq::Discipline;
use crate::spread::ReplicaChoice;
use crate::tailx::{DecayingHistogram, TailxSettings};

/// Default ageing: later arrivals that may overtake an opset per class between them.
pub const DEFAULT_REL_OVERTAKES: u64 = 400;
/// Default spread: bottlenecks up to this many times the typical one share class 0.
pub const DEFAULT_SPREAD: f64 = 2.0;
/// Default demotion budget: only requests whose bottleneck is rarer than this share of recent
/// requests (above the bucket holding their `1 − budget` quantile) are demoted.
pub const DEFAULT_DEMOTION_BUDGET: f64 = 0.01;
/// Requests seen before the typical bottleneck is trusted (until then, every opset is class 0).
pub const TYPICAL_MIN_SAMPLES: u64 = 256;
/// Requests between two halvings of the bottleneck histogram (it follows a changing mix).
pub const TYPICAL_HALF_LIFE: u64 = 8_192;

/// Buckets per octave of the bottleneck histogram.
const BUCKETS_PER_OCTAVE: f64 = 4.0;
/// Bucket of a bottleneck of one unit.
const UNIT_BUCKET: usize = 16;
/// Buckets: from 1/16 unit to 2^20 units.
const BUCKETS: usize = UNIT_BUCKET + 20 * BUCKETS_PER_OCTAVE as usize;

/// Settings of `cost-rel`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostRelSettings {
    /// The estimates' settings (THR_L, the Bloom filter); its delay is never used.
    pub tailx: TailxSettings,
    /// The servers' ageing ([`Discipline::Aged`]).
    pub overtakes: u64,
    /// Bottlenecks up to `spread` × the typical one are class 0.
    pub spread: f64,
    /// Demote the opsets that are not the bottleneck by their estimated slack (off by
    /// default: see the module's docs).
    pub slack_demotion: bool,
    /// Rank a request by its costliest opset's estimated cost (a large value counting as
    /// `T_L / T_S` small keys) instead of its largest opset's key count (off by default: see
    /// the module's docs).
    pub by_cost: bool,
    /// Share of requests that may be demoted: a request is demoted only if its bottleneck lies
    /// above the bucket of recent bottlenecks' `1 − budget` quantile (1: no limit).
    pub demotion_budget: f64,
}

impl Default for CostRelSettings {
    fn default() -> Self {
        CostRelSettings {
            tailx: TailxSettings::default(),
            overtakes: DEFAULT_REL_OVERTAKES,
            spread: DEFAULT_SPREAD,
            slack_demotion: false,
            by_cost: false,
            demotion_budget: DEFAULT_DEMOTION_BUDGET,
        }
    }
}

/// The median of recent bottlenecks, from a decaying log-bucket histogram.
#[derive(Debug, Clone)]
pub struct TypicalBottleneck {
    buckets: DecayingHistogram<BUCKETS>,
}

impl Default for TypicalBottleneck {
    fn default() -> Self {
        TypicalBottleneck {
            buckets: DecayingHistogram::new(TYPICAL_HALF_LIFE),
        }
    }
}

impl TypicalBottleneck {
    fn bucket(units: f64) -> usize {
        let octaves = units.max(f64::MIN_POSITIVE).log2() * BUCKETS_PER_OCTAVE;
        (octaves.round() + UNIT_BUCKET as f64).clamp(0.0, (BUCKETS - 1) as f64) as usize
    }

    /// Records one request's bottleneck (units).
    pub fn observe(&mut self, units: f64) {
        self.buckets.observe(Self::bucket(units));
    }

    /// True if a bottleneck of `units` lies above the bucket holding recent bottlenecks'
    /// `1 − budget` quantile (rarer than `budget` of the requests), once
    /// [`TYPICAL_MIN_SAMPLES`] were seen; a budget of 1 or more admits every bottleneck.
    pub fn is_rare(&self, units: f64, budget: f64) -> bool {
        if budget >= 1.0 {
            return true;
        }
        self.buckets
            .quantile_bucket(1.0 - budget.max(0.0), TYPICAL_MIN_SAMPLES)
            .is_some_and(|bucket| Self::bucket(units) > bucket)
    }

    /// The median bottleneck (a bucket's centre), once [`TYPICAL_MIN_SAMPLES`] were seen.
    pub fn median(&self) -> Option<f64> {
        self.buckets
            .median_bucket(TYPICAL_MIN_SAMPLES)
            .map(|bucket| ((bucket as f64 - UNIT_BUCKET as f64) / BUCKETS_PER_OCTAVE).exp2())
    }
}

/// The class of a request whose bottleneck costs `bottleneck` units when the typical one
/// costs `typical` (`None`: not known yet, class 0).
pub fn relative_class(bottleneck: f64, typical: Option<f64>, spread: f64) -> u8 {
    let Some(typical) = typical.filter(|t| *t > 0.0) else {
        return 0;
    };
    let ratio = bottleneck / (spread.max(1.0) * typical);
    if ratio <= 1.0 {
        return 0;
    }
    (1.0 + ratio.log2().floor()).min((CLASSES - 1) as f64) as u8
}

/// The `cost-rel` planner.
#[derive(Debug, Clone)]
pub struct CostRelPlanner {
    settings: CostRelSettings,
    /// cost-sbf's opsets and cost estimates (its classes are not used).
    costs: CostSbfPlanner,
    typical: TypicalBottleneck,
}

impl Default for CostRelPlanner {
    fn default() -> Self {
        CostRelPlanner::new(CostRelSettings::default())
    }
}

impl CostRelPlanner {
    /// A planner with `settings`.
    pub fn new(settings: CostRelSettings) -> Self {
        CostRelPlanner {
            costs: CostSbfPlanner::new(CostSbfSettings {
                tailx: settings.tailx,
                ..CostSbfSettings::default()
            }),
            settings,
            typical: TypicalBottleneck::default(),
        }
    }

    /// The planner with each key's replica picked by `choice` (C3's by default).
    pub fn with_replica_choice(mut self, choice: ReplicaChoice) -> Self {
        self.costs = self.costs.with_replica_choice(choice);
        self
    }

    /// The typical bottleneck now (keys), once known.
    pub fn typical_bottleneck(&self) -> Option<f64> {
        self.typical.median()
    }

    /// The cost estimates (THR_L, the Bloom filter of large keys, T_L / T_S).
    pub fn estimates(&self) -> &CostSbfPlanner {
        &self.costs
    }
}

impl Planner for CostRelPlanner {
    fn name(&self) -> &'static str {
        "cost-rel"
    }

    fn plan(&mut self, request: &PlanRequest<'_>, view: &dyn ClusterView) -> Vec<Action> {
        let (mut fetches, unavailable) = self.costs.group(request, view);
        let units = self.costs.opset_units(request, &fetches);
        let costliest = units.iter().copied().fold(0.0f64, f64::max);
        let most_keys = fetches.iter().map(|f| f.keys.len()).max().unwrap_or(0) as f64;
        let bottleneck = if self.settings.by_cost {
            costliest
        } else {
            most_keys
        };
        let (typical, spread) = (self.typical.median(), self.settings.spread);
        let request_class = if self
            .typical
            .is_rare(bottleneck, self.settings.demotion_budget)
        {
            relative_class(bottleneck, typical, spread)
        } else {
            0
        };
        if !fetches.is_empty() {
            self.typical.observe(bottleneck);
        }
        for (fetch, units) in fetches.iter_mut().zip(units) {
            let slack_class = if self.settings.slack_demotion {
                relative_class(costliest - units, typical, spread)
            } else {
                0
            };
            fetch.priority = Some(request_class.max(slack_class));
        }
        into_actions(fetches, unavailable)
    }

    fn wants_values(&self) -> bool {
        true
    }

    fn observe_value(&mut self, key: &[u8], value_bytes: u64) {
        self.costs.observe_value(key, value_bytes);
    }

    fn observe(&mut self, observation: &Observation) {
        self.costs.observe(observation);
    }

    fn fetch_work_keys(&self, request: &PlanRequest<'_>, fetch: &Fetch) -> f64 {
        self.costs.fetch_units(request, fetch)
    }

    fn discipline(&self) -> Discipline {
        Discipline::Aged {
            overtakes: self.settings.overtakes,
        }
    }

    fn gauges(&self) -> Vec<(&'static str, f64)> {
        vec![
            (
                "cost_rel_typical_bottleneck_keys",
                self.typical.median().unwrap_or(0.0),
            ),
            ("cost_rel_large_cost_ratio", self.costs.large_cost_ratio()),
        ]
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::health::Timestamp;
    use crate::planner::base::tests::{keys, view};
    use crate::planner::base::Fetch;
    use crate::serverq::PriorityQueue;

    /// `planner`'s fetches for the keys `owned`, over 16 backends of one copy.
    pub(crate) fn plan(planner: &mut impl Planner, owned: &[Vec<u8>]) -> Vec<Fetch> {
        let view = view(16, 1);
        let slices: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
        planner
            .plan(
                &PlanRequest {
                    keys: &slices,
                    now: Timestamp(0),
                },
                &view,
            )
            .into_iter()
            .filter_map(|action| match action {
                Action::Fetch(fetch) => Some(fetch),
                Action::Unavailable { .. } => None,
            })
            .collect()
    }

    /// A planner that has seen enough 20-key requests to know their typical bottleneck.
    fn trained() -> CostRelPlanner {
        trained_with(CostRelSettings::default())
    }

    fn trained_with(settings: CostRelSettings) -> CostRelPlanner {
        let mut planner = CostRelPlanner::new(settings);
        let owned = keys(20);
        for _ in 0..TYPICAL_MIN_SAMPLES {
            plan(&mut planner, &owned);
        }
        planner
    }

    #[test]
    fn classes_are_anchored_at_the_typical_bottleneck() {
        assert_eq!(relative_class(50.0, None, 2.0), 0);
        assert_eq!(relative_class(6.0, Some(3.0), 2.0), 0);
        assert_eq!(relative_class(6.1, Some(3.0), 2.0), 1);
        assert_eq!(relative_class(12.1, Some(3.0), 2.0), 2);
        assert_eq!(relative_class(24.1, Some(3.0), 2.0), 3);
        assert_eq!(relative_class(1e6, Some(3.0), 2.0), 4);
        let mut typical = TypicalBottleneck::default();
        for i in 0..1_000u32 {
            typical.observe(if i % 4 == 0 { 40.0 } else { 3.0 });
        }
        let median = typical.median().unwrap();
        assert!((median - 3.0).abs() < 0.3, "{median}");
    }

    #[test]
    fn requests_near_the_typical_cost_share_class_zero_and_costlier_ones_are_demoted() {
        let mut planner = trained();
        let typical = planner.typical_bottleneck().unwrap();
        assert!((1.0..=6.0).contains(&typical), "{typical}");
        // Other 20-key requests (bottlenecks 2–6 keys, which Rein splits at its bound of 5):
        // one class, served first come first served.
        for first in 0..20 {
            let owned: Vec<Vec<u8>> = keys(40)[first..first + 20].to_vec();
            assert!(plan(&mut planner, &owned)
                .iter()
                .all(|f| f.priority == Some(0)));
        }
        // A 400-key request (bottleneck ≈ 25 keys, ≈ 8 × typical) is demoted, all its opsets
        // alike, none delayed.
        let large = plan(&mut planner, &keys(400));
        let class = large[0].priority;
        assert!(class >= Some(2), "{class:?}");
        assert!(large
            .iter()
            .all(|f| f.priority == class && f.not_before.is_none()));
    }

    #[test]
    fn a_bottleneck_more_common_than_the_budget_is_not_demoted() {
        // 20-key requests, and 3 % of 64-key ones (bottleneck ≈ 2.5–3 × the typical one).
        let mut planner = CostRelPlanner::default();
        let (typical, common) = (keys(20), keys(64));
        for i in 0..2_000 {
            plan(&mut planner, if i % 33 == 0 { &common } else { &typical });
        }
        let typical_keys = planner.typical_bottleneck().unwrap();
        let common_keys = plan(&mut planner, &common)
            .iter()
            .map(|f| f.keys.len())
            .max()
            .unwrap() as f64;
        assert!(common_keys > DEFAULT_SPREAD * typical_keys, "{common_keys}");
        // Above twice the typical bottleneck, but 3 % of the requests: class 0.
        assert!(plan(&mut planner, &common)
            .iter()
            .all(|f| f.priority == Some(0)));
        // An elephant, rarer than the budget, is still demoted.
        assert!(plan(&mut planner, &keys(400))
            .iter()
            .all(|f| f.priority >= Some(2)));
        // Without a budget the 64-key requests are demoted.
        let mut unlimited = CostRelPlanner::new(CostRelSettings {
            demotion_budget: 1.0,
            ..CostRelSettings::default()
        });
        for i in 0..2_000 {
            plan(&mut unlimited, if i % 33 == 0 { &common } else { &typical });
        }
        assert!(plan(&mut unlimited, &common)
            .iter()
            .all(|f| f.priority >= Some(1)));
    }

    #[test]
    fn the_opset_holding_a_large_value_keeps_the_class_and_its_siblings_are_demoted() {
        let large_threshold = TailxSettings {
            large_threshold_bytes: Some(10_000),
            ..TailxSettings::default()
        };
        let mut planner = trained_with(CostRelSettings {
            tailx: large_threshold,
            slack_demotion: true,
            ..CostRelSettings::default()
        });
        let owned = keys(20);
        // The first key turns out to be large and to cost T_L / T_S ≈ 50 small keys.
        for n in 1..=8u32 {
            planner.observe(&Observation {
                backend: 0,
                keys: n,
                hits: n,
                value_bytes: 0,
                latency_nanos: 1_000 + u64::from(n) * 1_000,
                at: Timestamp(0),
            });
        }
        planner.observe_value(&owned[0], 100_000);
        planner.observe(&Observation {
            backend: 0,
            keys: 1,
            hits: 1,
            value_bytes: 100_000,
            latency_nanos: 51_000,
            at: Timestamp(0),
        });
        let fetches = plan(&mut planner, &owned);
        let holder = fetches.iter().find(|f| f.keys.contains(&0)).unwrap();
        assert_eq!(holder.priority, Some(0));
        let siblings: Vec<_> = fetches.iter().filter(|f| !f.keys.contains(&0)).collect();
        assert!(!siblings.is_empty());
        assert!(
            siblings.iter().all(|f| f.priority >= Some(2)),
            "{siblings:?}"
        );
        // Without slack demotion the request is one class, as its key count says.
        let mut plain = trained_with(CostRelSettings {
            slack_demotion: false,
            ..CostRelSettings::default()
        });
        assert!(plan(&mut plain, &owned)
            .iter()
            .all(|f| f.priority == Some(0)));
    }

    /// A demoted opset queued behind a backlog, then a steady stream of class-0 opsets (one
    /// arrival per service, so the stream alone keeps the server busy): pops until the
    /// demoted one is served, if within `limit`.
    fn pops_until_the_demoted_opset_is_served(
        planner: &mut CostRelPlanner,
        discipline: Discipline,
        limit: u64,
    ) -> Option<u64> {
        let demoted = plan(planner, &keys(400))[0].priority.unwrap_or(0);
        let typical_class = plan(planner, &keys(20))[0].priority.unwrap_or(0);
        assert!(demoted > typical_class);
        let mut queue = PriorityQueue::new(discipline);
        for _ in 0..10 {
            queue.push(typical_class, false);
        }
        queue.push(demoted, true);
        for pops in 1..=limit {
            queue.push(typical_class, false);
            if queue.pop()? {
                return Some(pops);
            }
        }
        None
    }

    #[test]
    fn the_lowest_class_completes_under_a_steady_stream_of_typical_requests() {
        let mut planner = trained();
        let discipline = planner.discipline();
        let served = pops_until_the_demoted_opset_is_served(&mut planner, discipline, 100_000);
        // Overtaken by at most (CLASSES − 1) × overtakes later arrivals, plus the backlog.
        let bound = (CLASSES as u64 - 1) * DEFAULT_REL_OVERTAKES + 11;
        assert!(
            served.is_some_and(|pops| pops <= bound),
            "served after {served:?} pops (bound {bound})"
        );
        // Without the ageing bound (strict priority) it never is.
        assert_eq!(
            pops_until_the_demoted_opset_is_served(&mut planner, Discipline::Strict, 100_000),
            None
        );
    }
}
