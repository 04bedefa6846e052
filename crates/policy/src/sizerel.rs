//! `size-rel`: `cost-rel`'s classes relative to the typical request, and an opset holding a
//! large value served after the opsets without one (size-aware per opset: TailX's size
//! knowledge put to the servers' order).
//!
//! ```text
//!   keys ─► cost-rel: opsets per backend (as batch), class c of the request (its bottleneck
//!           relative to the typical one, within the demotion budget)
//!        ─► per opset: N_L = its keys the Bloom filter holds as large (THR_L learned from
//!           value sizes; told every size where the runtime knows them, as a server knows
//!           its own items)
//!           own(opset) = c                           if N_L = 0
//!                        min(c + 1, last class)      else
//!        ─► slack: an opset that can wait (cost-rel's slack class of U − u ≥ 1, U the
//!           request's costliest opset in small keys) joins its bottleneck's class:
//!           class(opset) = max(own(opset), min(own(opset) + its slack class, own(bottleneck)))
//!   replica choice (`+cover`) for a request holding no large value (its opsets first class):
//!        backlog(b) = outstanding_work − (1 − DEMOTED_WORK_WEIGHT) × demoted_work
//!        (the lower-class work it would overtake counted at half); a request holding
//!        one weighs every backend by its whole backlog
//!   Fetch{priority: class, not_before: None} ─► servers: Discipline::Aged{overtakes} (serverq),
//!        its own ageing (default 25, cost-rel's is 400): a demoted opset is overtaken by at
//!        most overtakes × (its class − theirs) later arrivals
//! ```
//!
//! An opset holds at most one large value: each further large value of the keys a backend was
//! given is a fetch of its own to that backend, in the demoted class. A server serves a fetch
//! without interruption, so a fetch holding two large values is a block twice as long that a
//! fetch arriving behind it cannot overtake; apart, a fetch of a higher class is served
//! between them. It costs one fixed per-fetch cost per large value split off.
//!
//! ```text
//!   opset {a, L1, b, L2, L3} at backend B ─► {a, L1, b} {L2} {L3}, all at B, class c + 1
//! ```
//!
//! Slack demotion never reaches below the request's bottleneck: a request without a large value
//! keeps every opset in its class c (its bottleneck's), and a request holding one moves the
//! opsets that can wait into its large opset's class c + 1, beside that opset rather than behind
//! everything. They then leave the requests without a large value alone (the median's wait)
//! and still finish before their request's large value does.
//!
//! A request without a large value is served in the first class: at a backend, it overtakes
//! the demoted fetches waiting there. Weighing backends by all their work in flight (as
//! `cover` does for every other planner) keeps such a request off a server whose queue is
//! mostly demoted large values it would pass anyway, and spreads its keys over more fetches
//! than needed. So `size-rel` shows the covering choice of such a request each backend's work
//! with the demoted part not in service counted at [`DEMOTED_WORK_WEIGHT`] (a
//! demoted fetch is overtaken at most `overtakes` times per class, so it is not weightless).
//! A request holding a large value waits in the demoted class and sees the whole backlog.
//!
//! Why per opset and not per request: a request with one large value among 20 keys has one
//! slow opset and a dozen ordinary ones. Demoting the whole request (`cost-rel --rel-by-cost`,
//! `cost-sbf`) puts its ordinary opsets behind everything, and they, not the large one, then
//! set its latency; demoting only the opset that holds the large value leaves the request's
//! other opsets in the requests' common class, and takes the large value's service time out
//! of the way of the requests without one. The large opset's wait grows (the servers' total
//! wait does not change with the order), but it was its request's slowest already.

use crate::costrel::{CostRelPlanner, CostRelSettings};
use crate::drr::CLASSES;
use crate::health::BackendLoad;
use crate::planner::base::{
    Action, ClusterView, Fetch, Observation, PlanRequest, Planner, RequestDone,
};
use crate::serverq::Discipline;
use crate::spread::ReplicaChoice;

/// Default ageing of `size-rel`: later arrivals that may overtake an opset per class between
/// them. Tighter than `cost-rel`'s ([`crate::costrel::DEFAULT_REL_OVERTAKES`]): size-rel
/// demotes every opset holding a large value, and in a saturated closed loop class 0 never
/// drains, so a demoted opset waits as long as the ageing lets it (at 400 the 20-key mixes'
/// p99 was 2–4x batch's at 128–512 clients, at 25 0.81–1.00x, open-loop lines unchanged:
/// `experiments/tailx/sim-v12-ageing/`).
pub const DEFAULT_SIZE_REL_OVERTAKES: u64 = 25;

/// Default share of a backend's demoted work not in service ([`BackendLoad::demoted_work`])
/// that the covering replica choice counts for a request without a large value (whose fetches
/// overtake it). Not 0: a demoted fetch overtaken `overtakes` times per class is served
/// ahead. In the paper-like model (`experiments/tailx`, `sim-v13-first-class/`, seeds 1–3)
/// 0.25 and 0.5 both met every open-loop line; 0.5 kept more of the closed loop (the lowest
/// p99 in 21 of 27 cells against 17); 0 cost the 20-key mixes' p99 the most (seed 4).
pub const DEMOTED_WORK_WEIGHT: f64 = 0.5;

/// The cluster as a request without a large value sees it: each backend's work in flight
/// with the demoted part not in service counted at `weight` ([`DEMOTED_WORK_WEIGHT`] by
/// default).
struct FirstClassView<'a> {
    inner: &'a dyn ClusterView,
    weight: f64,
}

impl ClusterView for FirstClassView<'_> {
    fn backend_count(&self) -> usize {
        self.inner.backend_count()
    }

    fn replicas(&self, key: &[u8], out: &mut Vec<usize>) {
        self.inner.replicas(key, out);
    }

    fn load(&self, backend: usize) -> BackendLoad {
        first_class_load(self.inner.load(backend), self.weight)
    }

    fn fetch_work(&self) -> Option<f64> {
        self.inner.fetch_work()
    }
}

/// `load` as a first-class fetch sees it: its work in flight less the demoted work it would
/// overtake, that work counted at `weight` (1: whole, as any other fetch sees it).
pub fn first_class_load(mut load: BackendLoad, weight: f64) -> BackendLoad {
    if let (Some(work), Some(demoted)) = (load.outstanding_work, load.demoted_work) {
        load.outstanding_work = Some((work - (1.0 - weight) * demoted).max(0.0));
    }
    load
}

/// The class of an opset of a request of class `request_class` that holds `large_keys` large
/// values: one class lower if it holds any (at most the last class).
pub fn opset_class(request_class: u8, large_keys: u64) -> u8 {
    if large_keys == 0 {
        request_class
    } else {
        request_class.saturating_add(1).min((CLASSES - 1) as u8)
    }
}

/// The class of an opset whose own class (its request's, one lower if it holds a large value)
/// is `own`, `slacked` with its slack demotion, in a request whose bottleneck opset's class
/// is `bottleneck`: demoted by its slack, but never below its bottleneck nor above its own.
pub fn joined_class(own: u8, slacked: u8, bottleneck: u8) -> u8 {
    own.max(slacked.min(bottleneck))
}

/// Leaves `fetch` with its first large key (by `is_large`, given each key's index) and
/// returns a fetch to the same backend, at the same time and class, for each further one: no
/// fetch holds two large values.
pub fn split_large_values(fetch: &mut Fetch, mut is_large: impl FnMut(u32) -> bool) -> Vec<Fetch> {
    let mut seen_large = false;
    let mut apart = Vec::new();
    fetch.keys.retain(|&index| {
        if !is_large(index) {
            return true;
        }
        let keep = !seen_large;
        seen_large = true;
        if !keep {
            apart.push(index);
        }
        keep
    });
    apart
        .into_iter()
        .map(|index| Fetch {
            backend: fetch.backend,
            keys: vec![index],
            not_before: fetch.not_before,
            priority: fetch.priority,
        })
        .collect()
}

/// The `size-rel` planner.
#[derive(Debug, Clone)]
pub struct SizeRelPlanner {
    rel: CostRelPlanner,
    /// Opsets planned, and those demoted for holding a large value.
    opsets: u64,
    large_opsets: u64,
    /// Large values sent as fetches of their own (an opset's second and further ones).
    apart: u64,
    /// The covering choice's weight of demoted work for a request without a large value.
    demoted_weight: f64,
    /// The replica choice is `cover` (the only one that weighs work in flight).
    covers: bool,
}

impl Default for SizeRelPlanner {
    fn default() -> Self {
        SizeRelPlanner::new(CostRelSettings {
            overtakes: DEFAULT_SIZE_REL_OVERTAKES,
            ..CostRelSettings::default()
        })
    }
}

impl SizeRelPlanner {
    /// A planner with `cost-rel`'s `settings`; slack demotion is size-rel's own rule (always
    /// on, never below the bottleneck's class), whatever `settings.slack_demotion` says.
    pub fn new(settings: CostRelSettings) -> Self {
        SizeRelPlanner {
            rel: CostRelPlanner::new(CostRelSettings {
                slack_demotion: true,
                ..settings
            }),
            opsets: 0,
            large_opsets: 0,
            apart: 0,
            demoted_weight: DEMOTED_WORK_WEIGHT,
            covers: false,
        }
    }

    /// The planner with the covering choice counting a backend's demoted work not in service
    /// at `weight` for a request without a large value (default [`DEMOTED_WORK_WEIGHT`]; 1
    /// counts it whole, as for every other request).
    pub fn with_demoted_weight(mut self, weight: f64) -> Self {
        self.demoted_weight = weight;
        self
    }

    /// The planner with each key's replica picked by `choice` (C3's by default).
    pub fn with_replica_choice(mut self, choice: ReplicaChoice) -> Self {
        self.rel = self.rel.with_replica_choice(choice);
        self.covers = choice == ReplicaChoice::Cover;
        self
    }

    /// Whether `request` is planned in the first-class view: the choice weighs work in flight,
    /// the runtime reports demoted work (the simulator's oracle; not the client or the proxy),
    /// the weight changes something, and no key of the request is known to be large.
    fn first_class(&self, request: &PlanRequest<'_>, view: &dyn ClusterView) -> bool {
        self.covers
            && self.demoted_weight != 1.0
            && view.backend_count() > 0
            && view.load(0).demoted_work.is_some()
            && !request
                .keys
                .iter()
                .any(|key| self.rel.estimates().is_large(key))
    }
}

impl Planner for SizeRelPlanner {
    fn name(&self) -> &'static str {
        "size-rel"
    }

    fn plan(&mut self, request: &PlanRequest<'_>, view: &dyn ClusterView) -> Vec<Action> {
        let mut actions = if self.first_class(request, view) {
            let first_class = FirstClassView {
                inner: view,
                weight: self.demoted_weight,
            };
            self.rel.plan(request, &first_class)
        } else {
            self.rel.plan(request, view)
        };
        let estimates = self.rel.estimates();
        let mut apart = Vec::new();
        for action in &mut actions {
            if let Action::Fetch(fetch) = action {
                let split = split_large_values(fetch, |index| {
                    estimates.is_large(request.keys[index as usize])
                });
                self.apart += split.len() as u64;
                apart.extend(split.into_iter().map(Action::Fetch));
            }
        }
        actions.extend(apart);
        // Each fetch's large values, counted once.
        let large: Vec<u64> = actions
            .iter()
            .map(|action| match action {
                Action::Fetch(fetch) => estimates.large_keys(request, fetch),
                Action::Unavailable { .. } => 0,
            })
            .collect();
        let fetches = || {
            actions
                .iter()
                .zip(&large)
                .filter_map(|(action, &large)| match action {
                    Action::Fetch(fetch) => Some((fetch, large)),
                    Action::Unavailable { .. } => None,
                })
        };
        // The request's class is its bottleneck's, which has no slack: the lowest class number
        // among its opsets.
        let request_class = fetches()
            .filter_map(|(fetch, _)| fetch.priority)
            .min()
            .unwrap_or(0);
        let bottleneck_class = fetches()
            .map(|(fetch, large)| (estimates.units(fetch.keys.len() as u64, large), large))
            .reduce(|most, next| if next.0 > most.0 { next } else { most })
            .map_or(request_class, |(_, large)| {
                opset_class(request_class, large)
            });
        for (action, &large) in actions.iter_mut().zip(&large) {
            if let Action::Fetch(fetch) = action {
                self.opsets += 1;
                self.large_opsets += u64::from(large > 0);
                fetch.priority = Some(joined_class(
                    opset_class(request_class, large),
                    opset_class(fetch.priority.unwrap_or(request_class), large),
                    bottleneck_class,
                ));
            }
        }
        actions
    }

    fn wants_values(&self) -> bool {
        true
    }

    fn observe_value(&mut self, key: &[u8], value_bytes: u64) {
        self.rel.observe_value(key, value_bytes);
    }

    fn observe(&mut self, observation: &Observation) {
        self.rel.observe(observation);
    }

    fn observe_request(&mut self, done: &RequestDone) {
        self.rel.observe_request(done);
    }

    fn fetch_work_keys(&self, request: &PlanRequest<'_>, fetch: &Fetch) -> f64 {
        self.rel.fetch_work_keys(request, fetch)
    }

    fn discipline(&self) -> Discipline {
        self.rel.discipline()
    }

    fn gauges(&self) -> Vec<(&'static str, f64)> {
        let mut gauges = self.rel.gauges();
        gauges.push((
            "size_rel_large_opset_share",
            self.large_opsets as f64 / self.opsets.max(1) as f64,
        ));
        gauges.push(("size_rel_large_values_apart", self.apart as f64));
        gauges
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::costrel::tests::plan;
    use crate::costrel::TYPICAL_MIN_SAMPLES;
    use crate::planner::base::tests::keys;
    use crate::tailx::tests::observation;
    use crate::tailx::LEARN_MIN_SAMPLES;

    /// A planner that has seen 1 KB values (THR_L learned) and knows `large` holds 100 KB.
    fn knowing_one_large_key(mut planner: impl Planner, large: &[u8]) -> impl Planner {
        let seen = keys(LEARN_MIN_SAMPLES as usize * 2);
        for key in &seen {
            planner.observe_value(key, 1_000);
        }
        planner.observe_value(large, 100_000);
        planner
    }

    #[test]
    fn the_opset_holding_a_large_value_is_served_after_the_others() {
        let owned = keys(20);
        let mut planner = knowing_one_large_key(SizeRelPlanner::default(), &owned[0]);
        let fetches = plan(&mut planner, &owned);
        let (holder, others): (Vec<_>, Vec<_>) = fetches.iter().partition(|f| f.keys.contains(&0));
        assert_eq!(holder.len(), 1);
        assert_eq!(holder[0].priority, Some(1));
        assert!(!others.is_empty());
        assert!(others.iter().all(|f| f.priority == Some(0)), "{others:?}");
        // cost-rel, knowing the same, serves the whole request in one class.
        let mut rel = knowing_one_large_key(CostRelPlanner::default(), &owned[0]);
        assert!(plan(&mut rel, &owned).iter().all(|f| f.priority == Some(0)));
    }

    #[test]
    fn a_request_without_a_large_value_weighs_demoted_work_lightly() {
        use crate::planner::base::tests::view;
        // Every key on each of 3 backends: covering sends a request's keys to one of them.
        let mut cluster = view(3, 3);
        cluster.fetch_work = Some(10.0);
        // Backend 0: 1 000 of work in flight, 900 of it demoted and not in service (a first-
        // class fetch sees 100 + 0.5 × 900 = 550); backends 1 and 2: 600 and 700, none of
        // it demoted.
        for (load, (work, demoted)) in
            cluster
                .loads
                .iter_mut()
                .zip([(1_000.0, 900.0), (600.0, 0.0), (700.0, 0.0)])
        {
            load.outstanding_work = Some(work);
            load.demoted_work = Some(demoted);
        }
        let owned = keys(6);
        let slices: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
        let request = PlanRequest {
            keys: &slices,
            now: crate::health::Timestamp(0),
        };
        let backends = |planner: &mut dyn Planner| -> Vec<usize> {
            planner
                .plan(&request, &cluster)
                .iter()
                .filter_map(|action| match action {
                    Action::Fetch(fetch) => Some(fetch.backend),
                    Action::Unavailable { .. } => None,
                })
                .collect()
        };
        let covering = || SizeRelPlanner::default().with_replica_choice(ReplicaChoice::Cover);
        assert_eq!(
            backends(&mut covering()),
            vec![0],
            "all small: it overtakes the demoted work at backend 0"
        );
        // Holding a large value, the request waits in the demoted class: the whole backlog.
        let mut holding = knowing_one_large_key(covering(), &owned[2]);
        let chosen = backends(&mut holding);
        assert!(
            !chosen.is_empty() && chosen.iter().all(|&b| b == 1),
            "{chosen:?}"
        );
        assert_eq!(
            first_class_load(cluster.loads[0], DEMOTED_WORK_WEIGHT).outstanding_work,
            Some(100.0 + DEMOTED_WORK_WEIGHT * 900.0)
        );
        // Weighed whole, the request goes where there is least work in all, as before the rule.
        let mut whole = covering().with_demoted_weight(1.0);
        assert_eq!(backends(&mut whole), vec![1]);
        // Without an estimate of the demoted work (the client and the proxy), nothing changes.
        let mut unknown = cluster.loads[0];
        unknown.demoted_work = None;
        assert_eq!(first_class_load(unknown, DEMOTED_WORK_WEIGHT), unknown);
    }

    #[test]
    fn split_keeps_the_first_large_value_and_sends_each_further_one_apart() {
        let mut fetch = Fetch {
            backend: 7,
            keys: vec![0, 1, 2, 3, 4],
            not_before: None,
            priority: Some(2),
        };
        let apart = split_large_values(&mut fetch, |index| [1, 3, 4].contains(&index));
        assert_eq!(fetch.keys, vec![0, 1, 2]);
        let apart: Vec<_> = apart.iter().map(|f| (f.backend, f.keys.clone())).collect();
        assert_eq!(apart, vec![(7, vec![3]), (7, vec![4])]);
        let mut small = fetch.clone();
        assert!(split_large_values(&mut small, |_| false).is_empty());
        assert_eq!(small, fetch);
    }

    #[test]
    fn a_fetch_never_holds_two_large_values() {
        let owned = keys(20);
        let shared = plan(&mut SizeRelPlanner::default(), &owned)
            .into_iter()
            .find(|f| f.keys.len() >= 2)
            .expect("20 keys over 16 backends: one backend holds two");
        let (first, second) = (shared.keys[0] as usize, shared.keys[1] as usize);
        let mut planner = knowing_one_large_key(SizeRelPlanner::default(), &owned[first]);
        planner.observe_value(&owned[second], 100_000);
        let fetches = plan(&mut planner, &owned);
        let at_shared: Vec<&Fetch> = fetches
            .iter()
            .filter(|f| f.backend == shared.backend)
            .collect();
        assert_eq!(at_shared.len(), 2, "{at_shared:?}");
        for fetch in &at_shared {
            let large = fetch
                .keys
                .iter()
                .filter(|&&i| i as usize == first || i as usize == second)
                .count();
            assert_eq!(large, 1, "{fetch:?}");
            assert_eq!(fetch.priority, Some(1), "both demoted");
        }
        let mut planned: Vec<u32> = fetches.iter().flat_map(|f| f.keys.clone()).collect();
        planned.sort_unstable();
        assert_eq!(planned, (0..20).collect::<Vec<u32>>(), "every key once");
    }

    #[test]
    fn a_fetch_counts_its_large_value_as_t_l_over_t_s_small_keys() {
        let owned = keys(20);
        let mut planner = knowing_one_large_key(SizeRelPlanner::default(), &owned[0]);
        let fetches = plan(&mut planner, &owned);
        let slices: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
        let request = PlanRequest {
            keys: &slices,
            now: crate::health::Timestamp(0),
        };
        // No fetch timed yet: TailX's default T_L / T_S.
        let ratio = crate::tailx::DEFAULT_LARGE_COST_RATIO;
        for fetch in &fetches {
            let keys = fetch.keys.len() as f64;
            let expected = if fetch.keys.contains(&0) {
                keys - 1.0 + ratio
            } else {
                keys
            };
            assert_eq!(
                planner.fetch_work_keys(&request, fetch),
                expected,
                "{fetch:?}"
            );
        }
    }

    #[test]
    fn slack_never_demotes_below_the_bottleneck_nor_promotes_above_the_own_class() {
        assert_eq!(joined_class(0, 3, 1), 1, "joins its bottleneck's class");
        assert_eq!(
            joined_class(0, 3, 0),
            0,
            "a request without a large value keeps its class"
        );
        assert_eq!(joined_class(1, 1, 0), 1, "a large value stays demoted");
        assert_eq!(joined_class(0, 0, 1), 0, "no slack, no demotion");
    }

    #[test]
    fn the_opsets_that_can_wait_join_their_large_values_class() {
        let owned = keys(20);
        let mut planner = knowing_one_large_key(SizeRelPlanner::default(), &owned[0]);
        // Timed fetches: 1 µs + 1 µs a small key, the large value 100 µs (T_L / T_S = 100).
        for n in 1..=8u32 {
            planner.observe(&observation(n, 1_000 + u64::from(n) * 1_000));
        }
        planner.observe_value(&owned[0], 100_000);
        planner.observe(&Observation {
            value_bytes: 100_000,
            ..observation(1, 101_000)
        });
        // The typical bottleneck learned from requests like this one without a large value:
        // one or two keys an opset.
        for round in 0..TYPICAL_MIN_SAMPLES {
            let others = keys(20 + round as usize * 20);
            plan(&mut planner, &others[others.len() - 20..]);
        }
        let fetches = plan(&mut planner, &owned);
        let (holder, others): (Vec<_>, Vec<_>) = fetches.iter().partition(|f| f.keys.contains(&0));
        assert_eq!(holder[0].priority, Some(1));
        // A 100-unit large value against opsets of one to three keys: every other opset can
        // wait, and joins class 1 (slack alone would put them in the last class).
        assert!(!others.is_empty());
        assert!(others.iter().all(|f| f.priority == Some(1)), "{others:?}");
        // A request without a large value keeps every opset in class 0.
        let small = keys(40);
        let fetches = plan(&mut planner, &small[20..]);
        assert!(fetches.iter().all(|f| f.priority == Some(0)), "{fetches:?}");
    }

    #[test]
    fn opset_classes_keep_the_requests_order_and_stop_at_the_last_class() {
        assert_eq!(opset_class(0, 0), 0);
        assert_eq!(opset_class(0, 1), 1);
        assert_eq!(opset_class(2, 3), 3);
        assert_eq!(opset_class((CLASSES - 1) as u8, 1), (CLASSES - 1) as u8);
    }

    #[test]
    fn size_rel_ages_by_its_own_overtakes_not_cost_rels() {
        // Aged strict priority: the lowest class completes under a steady stream of class 0
        // (`serverq`'s and `costrel`'s starvation tests), here within 25 overtakes per class.
        assert_eq!(
            SizeRelPlanner::default().discipline(),
            Discipline::Aged {
                overtakes: DEFAULT_SIZE_REL_OVERTAKES
            }
        );
        assert_ne!(
            SizeRelPlanner::default().discipline(),
            CostRelPlanner::default().discipline()
        );
        let own = SizeRelPlanner::new(CostRelSettings {
            overtakes: 7,
            ..CostRelSettings::default()
        });
        assert_eq!(own.discipline(), Discipline::Aged { overtakes: 7 });
    }
}
