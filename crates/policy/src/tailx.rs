//! TailX: size- and task-aware multiget scheduling (Jaiman, Ben Mokhtar, Rivière: "TailX:
//! Scheduling heterogeneous multiget queries to improve tail latencies in key-value stores",
//! DAIS 2020).
//!
//! ```text
//!  replies ─► observe_value(key, bytes) ─► SizeLearner (THR_L) ─► bytes > THR_L?
//!                                                                   │ yes
//!                                                                   ▼
//!                                         LargeKeyFilter: [gen 0 (current)] [gen 1] … (Bloom)
//!                                              rotated when the current generation is full
//!  replies ─► observe(keys, large, latency) ─► CostModel: T_S (slope of small-only fetches),
//!                                                          T_L (per large value beyond that)
//!  plan: opsets per backend (as batch; replica by C3)
//!        N_L = keys of the opset in the filter; opcost = T_L·N_L + T_S·(n − N_L)
//!        T_w = max opcost − opcost;  T_w ≥ min_delay ─► Fetch{not_before: now + T_w}
//!                                    else            ─► at once (the bottleneck always)
//! ```
//!
//! The runtime holds fetches with a `not_before` in its delay queue; procrastinating the opsets
//! that would finish early leaves the backends to other requests' critical opsets. Delays
//! shorter than `min_delay` (the runtime's timer resolution) are not worth a timer and go at
//! once.

use fastbloom::BloomFilter;

use crate::planner::base::{
    group_by_backend, into_actions, Action, ClusterView, Observation, PlanRequest, Planner,
};

/// Default keys per Bloom filter generation before it is rotated.
pub const DEFAULT_FILTER_CAPACITY: usize = 100_000;
/// Default number of generations (the oldest is dropped at rotation).
pub const DEFAULT_FILTER_GENERATIONS: usize = 2;
/// Default false-positive rate of one full generation.
pub const DEFAULT_FILTER_FALSE_POSITIVE: f64 = 0.01;
/// When THR_L is learned: a value is large when it exceeds this multiple of the median
/// observed value size.
pub const LEARNED_THRESHOLD_MULTIPLE: u64 = 8;
/// Values observed before a learned THR_L is used (none is large before).
pub const LEARN_MIN_SAMPLES: u64 = 100;
/// Value-size samples after which the learner's counts are halved (ageing).
pub const LEARN_HALF_LIFE: u64 = 50_000;
/// Default smallest allowance worth delaying an opset for (1 ms: tokio's timer resolution).
pub const DEFAULT_MIN_DELAY_NANOS: u64 = 1_000_000;
/// Weight of a new sample in the cost model's decayed sums.
pub const COST_ALPHA: f64 = 0.02;
/// T_L / T_S assumed until a fetch with a large value has been timed.
pub const DEFAULT_LARGE_COST_RATIO: f64 = 10.0;

/// TailX's settings (`[pool]` keys `tailx_*` in the proxy).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TailxSettings {
    /// THR_L in bytes; `None` learns it from the observed value sizes.
    pub large_threshold_bytes: Option<u64>,
    /// Keys per filter generation.
    pub filter_capacity: usize,
    /// Filter generations (at least 2).
    pub filter_generations: usize,
    /// Target false-positive rate of a full generation.
    pub filter_false_positive: f64,
    /// Allowances below this are not delayed.
    pub min_delay_nanos: u64,
    /// Seed of the Bloom filters' hash.
    pub seed: u64,
}

impl Default for TailxSettings {
    fn default() -> Self {
        TailxSettings {
            large_threshold_bytes: None,
            filter_capacity: DEFAULT_FILTER_CAPACITY,
            filter_generations: DEFAULT_FILTER_GENERATIONS,
            filter_false_positive: DEFAULT_FILTER_FALSE_POSITIVE,
            min_delay_nanos: DEFAULT_MIN_DELAY_NANOS,
            seed: 0x7a11_5eed,
        }
    }
}

/// Keys whose values were large, in rotating Bloom filters: inserts go to the current
/// generation; a key is large if any generation holds it; when the current generation holds
/// `capacity` keys the oldest is dropped and a fresh one becomes current, so keys that stop
/// being large (or stop being read) are forgotten after `generations × capacity` inserts.
#[derive(Debug, Clone)]
pub struct LargeKeyFilter {
    generations: Vec<BloomFilter>,
    inserted: usize,
    capacity: usize,
    false_positive: f64,
    seed: u128,
    rotations: u64,
}

impl LargeKeyFilter {
    /// An empty filter.
    pub fn new(capacity: usize, generations: usize, false_positive: f64, seed: u64) -> Self {
        let capacity = capacity.max(1);
        let false_positive = if false_positive > 0.0 && false_positive < 1.0 {
            false_positive
        } else {
            DEFAULT_FILTER_FALSE_POSITIVE
        };
        let seed = u128::from(seed);
        let generations = (0..generations.max(2))
            .map(|_| Self::fresh(capacity, false_positive, seed))
            .collect();
        LargeKeyFilter {
            generations,
            inserted: 0,
            capacity,
            false_positive,
            seed,
            rotations: 0,
        }
    }

    fn fresh(capacity: usize, false_positive: f64, seed: u128) -> BloomFilter {
        BloomFilter::with_false_pos(false_positive)
            .seed(&seed)
            .expected_items(capacity)
    }

    /// Records `key` as large.
    pub fn insert(&mut self, key: &[u8]) {
        if self.generations[0].contains(key) {
            return;
        }
        if self.inserted >= self.capacity {
            self.generations.pop();
            self.generations.insert(
                0,
                Self::fresh(self.capacity, self.false_positive, self.seed),
            );
            self.inserted = 0;
            self.rotations += 1;
        }
        self.generations[0].insert(key);
        self.inserted += 1;
    }

    /// True if `key` was recorded as large (or is a false positive).
    pub fn contains(&self, key: &[u8]) -> bool {
        self.generations.iter().any(|g| g.contains(key))
    }

    /// Keys in the current generation.
    pub fn current_keys(&self) -> usize {
        self.inserted
    }

    /// Rotations so far.
    pub fn rotations(&self) -> u64 {
        self.rotations
    }

    /// Fraction of bits set in the current generation.
    pub fn fill(&self) -> f64 {
        Self::fill_of(&self.generations[0])
    }

    fn fill_of(filter: &BloomFilter) -> f64 {
        let ones: u64 = filter
            .as_slice()
            .iter()
            .map(|w| u64::from(w.count_ones()))
            .sum();
        ones as f64 / filter.num_bits().max(1) as f64
    }

    /// Estimated false-positive rate of [`LargeKeyFilter::contains`]: each generation answers
    /// yes for a key it never saw with probability fill^k; the union with 1 − Π(1 − that).
    pub fn estimated_false_positive(&self) -> f64 {
        let miss_all: f64 = self
            .generations
            .iter()
            .map(|g| 1.0 - Self::fill_of(g).powi(g.num_hashes() as i32))
            .product();
        1.0 - miss_all
    }
}

/// Counts per bucket whose counts halve every `half_life` samples, so that its median follows
/// a changing workload: THR_L's value sizes here, `cost-rel`'s typical bottleneck.
#[derive(Debug, Clone)]
pub struct DecayingHistogram<const BUCKETS: usize> {
    counts: [u64; BUCKETS],
    /// The sum of `counts`, kept so that a quantile is read without summing every bucket
    /// (the proxy reads the median once per value it sees).
    total: u64,
    samples: u64,
    since_halving: u64,
    half_life: u64,
}

impl<const BUCKETS: usize> DecayingHistogram<BUCKETS> {
    /// An empty histogram whose counts halve every `half_life` samples.
    pub fn new(half_life: u64) -> Self {
        DecayingHistogram {
            counts: [0; BUCKETS],
            total: 0,
            samples: 0,
            since_halving: 0,
            half_life,
        }
    }

    /// Counts one sample in `bucket` (the last bucket if beyond it).
    pub fn observe(&mut self, bucket: usize) {
        self.counts[bucket.min(BUCKETS - 1)] += 1;
        self.total += 1;
        self.samples += 1;
        self.since_halving += 1;
        if self.since_halving >= self.half_life {
            self.since_halving = 0;
            for count in &mut self.counts {
                *count /= 2;
            }
            self.total = self.counts.iter().sum();
        }
    }

    /// The bucket holding the median, once `min_samples` samples were seen.
    pub fn median_bucket(&self, min_samples: u64) -> Option<usize> {
        self.quantile_bucket(0.5, min_samples)
    }

    /// The bucket holding the `quantile` (0 to 1), once `min_samples` samples were seen.
    pub fn quantile_bucket(&self, quantile: f64, min_samples: u64) -> Option<usize> {
        if self.samples < min_samples {
            return None;
        }
        let total = self.total;
        let wanted = quantile.clamp(0.0, 1.0) * total as f64;
        let mut seen = 0;
        for (bucket, &count) in self.counts.iter().enumerate() {
            seen += count;
            if total > 0 && seen as f64 >= wanted && seen > 0 {
                return Some(bucket);
            }
        }
        None
    }
}

/// Learns THR_L from observed value sizes: [`LEARNED_THRESHOLD_MULTIPLE`] × the median, the
/// median read from power-of-two buckets whose counts halve every [`LEARN_HALF_LIFE`] samples.
#[derive(Debug, Clone)]
pub struct SizeLearner {
    buckets: DecayingHistogram<65>,
}

impl Default for SizeLearner {
    fn default() -> Self {
        SizeLearner {
            buckets: DecayingHistogram::new(LEARN_HALF_LIFE),
        }
    }
}

impl SizeLearner {
    /// Counts one value of `bytes` bytes.
    pub fn observe(&mut self, bytes: u64) {
        self.buckets
            .observe((u64::BITS - bytes.leading_zeros()) as usize);
    }

    /// Upper bound of the bucket holding the median, once enough samples were seen.
    pub fn median(&self) -> Option<u64> {
        self.buckets
            .median_bucket(LEARN_MIN_SAMPLES)
            .map(|bucket| match bucket {
                0 => 0,
                _ => (1u64 << (bucket - 1)).saturating_mul(2) - 1,
            })
    }

    /// The learned THR_L.
    pub fn threshold(&self) -> Option<u64> {
        self.median()
            .map(|median| median.max(1).saturating_mul(LEARNED_THRESHOLD_MULTIPLE))
    }
}

/// T_S and T_L from timed fetches. Small-only fetches feed a decayed least-squares fit
/// `latency = c + T_S·n` (c absorbs the round trip, which cancels in allowances); a fetch with
/// `N_L` large values gives the sample `(latency − c − T_S·(n − N_L)) / N_L` of T_L.
#[derive(Debug, Clone, Default)]
pub struct CostModel {
    weight: f64,
    sum_n: f64,
    sum_y: f64,
    sum_nn: f64,
    sum_ny: f64,
    large: Option<f64>,
}

impl CostModel {
    /// Adds a fetch of `keys` keys, `large` of them large, that took `latency_nanos`.
    pub fn observe(&mut self, keys: u32, large: u32, latency_nanos: u64) {
        if keys == 0 {
            return;
        }
        let y = latency_nanos as f64;
        if large == 0 {
            let n = f64::from(keys);
            let keep = 1.0 - COST_ALPHA;
            self.weight = self.weight * keep + 1.0;
            self.sum_n = self.sum_n * keep + n;
            self.sum_y = self.sum_y * keep + y;
            self.sum_nn = self.sum_nn * keep + n * n;
            self.sum_ny = self.sum_ny * keep + n * y;
            return;
        }
        let Some((intercept, small)) = self.fit() else {
            return;
        };
        let rest = y - intercept - small * f64::from(keys - large.min(keys));
        let sample = (rest / f64::from(large)).max(small);
        self.large = Some(match self.large {
            None => sample,
            Some(old) => old + COST_ALPHA.max(0.1) * (sample - old),
        });
    }

    /// (c, T_S) in nanoseconds, once a small-only fetch was seen.
    fn fit(&self) -> Option<(f64, f64)> {
        if self.weight <= 0.0 {
            return None;
        }
        let mean_n = self.sum_n / self.weight;
        let mean_y = self.sum_y / self.weight;
        let variance = self.sum_nn / self.weight - mean_n * mean_n;
        if variance > 0.25 {
            let slope = (self.sum_ny / self.weight - mean_n * mean_y) / variance;
            if slope > 0.0 {
                return Some((mean_y - slope * mean_n, slope));
            }
        }
        // One opset size only (or no positive slope): no intercept can be told apart.
        Some((0.0, (mean_y / mean_n.max(1.0)).max(1.0)))
    }

    /// T_S in nanoseconds.
    pub fn small_nanos(&self) -> Option<f64> {
        self.fit().map(|(_, slope)| slope.max(1.0))
    }

    /// T_L in nanoseconds (T_S × [`DEFAULT_LARGE_COST_RATIO`] until measured).
    pub fn large_nanos(&self) -> Option<f64> {
        let small = self.small_nanos()?;
        Some(
            self.large
                .unwrap_or(small * DEFAULT_LARGE_COST_RATIO)
                .max(small),
        )
    }
}

/// The `tailx` planner.
#[derive(Debug, Clone)]
pub struct TailxPlanner {
    settings: TailxSettings,
    filter: LargeKeyFilter,
    learner: SizeLearner,
    cost: CostModel,
    /// Large values among the `observe_value` calls since the last `observe`.
    pending_large: u32,
    /// Decayed mean bytes of the values seen at or below THR_L and above it.
    small_value_bytes: Option<f64>,
    large_value_bytes: Option<f64>,
    delayed: u64,
    delay_granted_nanos: u64,
    scratch: Vec<usize>,
}

impl TailxPlanner {
    /// A planner with `settings`.
    pub fn new(settings: TailxSettings) -> Self {
        TailxPlanner {
            filter: LargeKeyFilter::new(
                settings.filter_capacity,
                settings.filter_generations,
                settings.filter_false_positive,
                settings.seed,
            ),
            settings,
            learner: SizeLearner::default(),
            cost: CostModel::default(),
            pending_large: 0,
            small_value_bytes: None,
            large_value_bytes: None,
            delayed: 0,
            delay_granted_nanos: 0,
            scratch: Vec::new(),
        }
    }

    /// THR_L now (configured or learned; `None` while learning).
    pub fn large_threshold(&self) -> Option<u64> {
        self.settings
            .large_threshold_bytes
            .or_else(|| self.learner.threshold())
    }

    /// The large-key filter.
    pub fn filter(&self) -> &LargeKeyFilter {
        &self.filter
    }

    /// The cost model.
    pub fn cost(&self) -> &CostModel {
        &self.cost
    }

    /// The mean bytes of the large values seen over those of the small ones (decayed means,
    /// both sides of THR_L), once both were seen.
    pub fn value_bytes_ratio(&self) -> Option<f64> {
        match (self.small_value_bytes, self.large_value_bytes) {
            (Some(small), Some(large)) if small >= 1.0 => Some(large / small),
            _ => None,
        }
    }

    /// opcost of an opset of `keys` keys, `large` of them large, or `None` before any timing.
    pub fn opcost(&self, keys: u64, large: u64) -> Option<f64> {
        let small = self.cost.small_nanos()?;
        let big = self.cost.large_nanos()?;
        Some(big * large as f64 + small * keys.saturating_sub(large) as f64)
    }
}

impl Planner for TailxPlanner {
    fn name(&self) -> &'static str {
        "tailx"
    }

    fn plan(&mut self, request: &PlanRequest<'_>, view: &dyn ClusterView) -> Vec<Action> {
        let (mut fetches, unavailable) = group_by_backend(request, view, &mut self.scratch);
        let costs: Vec<Option<f64>> = fetches
            .iter()
            .map(|fetch| {
                let large = fetch
                    .keys
                    .iter()
                    .filter(|&&i| self.filter.contains(request.keys[i as usize]))
                    .count() as u64;
                self.opcost(fetch.keys.len() as u64, large)
            })
            .collect();
        let max = costs.iter().flatten().fold(0.0f64, |a, &b| a.max(b));
        for (fetch, cost) in fetches.iter_mut().zip(costs) {
            let Some(cost) = cost else { continue };
            let allowance = (max - cost).max(0.0) as u64;
            if allowance > 0 && allowance >= self.settings.min_delay_nanos {
                fetch.not_before = Some(request.now.plus_nanos(allowance));
                self.delayed += 1;
                self.delay_granted_nanos = self.delay_granted_nanos.saturating_add(allowance);
            }
        }
        into_actions(fetches, unavailable)
    }

    fn wants_values(&self) -> bool {
        true
    }

    fn observe_value(&mut self, key: &[u8], value_bytes: u64) {
        self.learner.observe(value_bytes);
        if let Some(threshold) = self.large_threshold() {
            let large = value_bytes > threshold;
            if large {
                self.filter.insert(key);
                self.pending_large += 1;
            }
            let mean = if large {
                &mut self.large_value_bytes
            } else {
                &mut self.small_value_bytes
            };
            let bytes = value_bytes as f64;
            *mean = Some(mean.map_or(bytes, |old| old + COST_ALPHA * (bytes - old)));
        }
    }

    fn observe(&mut self, observation: &Observation) {
        let large = std::mem::take(&mut self.pending_large);
        self.cost
            .observe(observation.keys, large, observation.latency_nanos);
    }

    fn gauges(&self) -> Vec<(&'static str, f64)> {
        let nanos = |v: Option<f64>| v.unwrap_or(0.0);
        vec![
            (
                "tailx_large_threshold_bytes",
                self.large_threshold().map_or(0.0, |t| t as f64),
            ),
            ("tailx_filter_keys", self.filter.current_keys() as f64),
            ("tailx_filter_fill", self.filter.fill()),
            (
                "tailx_filter_false_positive",
                self.filter.estimated_false_positive(),
            ),
            ("tailx_filter_rotations", self.filter.rotations() as f64),
            ("tailx_t_small_nanos", nanos(self.cost.small_nanos())),
            ("tailx_t_large_nanos", nanos(self.cost.large_nanos())),
            ("tailx_opsets_delayed", self.delayed as f64),
            (
                "tailx_allowance_granted_nanos",
                self.delay_granted_nanos as f64,
            ),
        ]
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::health::Timestamp;
    use crate::planner::base::tests::{keys, view};

    /// The kept total is the sum of the counts through halvings, so the quantiles read from
    /// it are those of the counts.
    #[test]
    fn a_decaying_histograms_total_follows_its_counts_through_halvings() {
        let mut histogram = DecayingHistogram::<8>::new(7);
        for sample in 0..100usize {
            histogram.observe(sample * 7 % 11);
            assert_eq!(histogram.total, histogram.counts.iter().sum::<u64>());
        }
        // 100 samples, halved every 7: far fewer counted than seen.
        assert!(histogram.total < 20);
        let counts = histogram.counts;
        let total: u64 = counts.iter().sum();
        let median = (0..counts.len()).find(|&b| 2 * counts[..=b].iter().sum::<u64>() >= total);
        assert_eq!(histogram.median_bucket(1), median);
        assert!(histogram.median_bucket(101).is_none());
    }

    /// A timed fetch of `keys` small keys from backend 0, shared with cost-sbf's tests.
    pub(crate) fn observation(keys: u32, latency_nanos: u64) -> Observation {
        Observation {
            backend: 0,
            keys,
            hits: keys,
            value_bytes: 0,
            latency_nanos,
            at: Timestamp(0),
        }
    }

    #[test]
    fn filter_remembers_large_keys_and_forgets_after_rotations() {
        let mut filter = LargeKeyFilter::new(100, 2, 0.01, 1);
        filter.insert(b"big-0");
        assert!(filter.contains(b"big-0"));
        let false_positives = (0..10_000)
            .filter(|i| filter.contains(format!("small-{i}").as_bytes()))
            .count();
        assert!(false_positives < 50, "{false_positives} false positives");
        // 100 more keys fill generation 0; the next insert rotates: big-0 survives in the
        // older generation; another 100 inserts rotate again and it is gone.
        for i in 0..100 {
            filter.insert(format!("a-{i}").as_bytes());
        }
        assert_eq!(filter.rotations(), 1);
        assert!(filter.contains(b"big-0"));
        for i in 0..100 {
            filter.insert(format!("b-{i}").as_bytes());
        }
        assert_eq!(filter.rotations(), 2);
        assert!(!filter.contains(b"big-0"));
        assert!(filter.fill() > 0.0 && filter.fill() < 1.0);
        let fp = filter.estimated_false_positive();
        assert!(fp > 0.0 && fp < 0.1, "estimated fp {fp}");
    }

    #[test]
    fn threshold_is_learned_from_value_sizes_or_configured() {
        let mut learner = SizeLearner::default();
        assert_eq!(learner.threshold(), None);
        for i in 0..1000 {
            learner.observe(if i % 10 == 0 { 500_000 } else { 1000 });
        }
        // Median 1000 lies in [512, 1023]: THR_L = 8 × 1023.
        assert_eq!(learner.threshold(), Some(8 * 1023));
        let mut planner = TailxPlanner::new(TailxSettings::default());
        for _ in 0..200 {
            planner.observe_value(b"small", 1000);
        }
        planner.observe_value(b"big", 500_000);
        planner.observe(&observation(201, 1000));
        assert!(planner.filter().contains(b"big"));
        assert!(!planner.filter().contains(b"small"));
        let fixed = TailxPlanner::new(TailxSettings {
            large_threshold_bytes: Some(10),
            ..TailxSettings::default()
        });
        assert_eq!(fixed.large_threshold(), Some(10));
    }

    #[test]
    fn cost_model_fits_small_and_large_service_times() {
        let mut model = CostModel::default();
        assert_eq!(model.small_nanos(), None);
        // latency = 50 µs + 2 µs per key.
        for n in [1u32, 3, 6, 10, 2, 8] {
            for _ in 0..20 {
                model.observe(n, 0, 50_000 + 2_000 * u64::from(n));
            }
        }
        let small = model.small_nanos().unwrap();
        assert!((small - 2_000.0).abs() < 1.0, "T_S {small}");
        assert_eq!(model.large_nanos(), Some(small * DEFAULT_LARGE_COST_RATIO));
        // A 5-key fetch with 2 large values at 300 µs each.
        for _ in 0..100 {
            model.observe(5, 2, 50_000 + 3 * 2_000 + 2 * 300_000);
        }
        let large = model.large_nanos().unwrap();
        assert!((large - 300_000.0).abs() < 1_000.0, "T_L {large}");
    }

    fn trained(min_delay_nanos: u64) -> TailxPlanner {
        let mut planner = TailxPlanner::new(TailxSettings {
            large_threshold_bytes: Some(10_000),
            min_delay_nanos,
            ..TailxSettings::default()
        });
        for n in [1u32, 2, 4, 8] {
            for _ in 0..10 {
                planner.observe(&observation(n, 10_000 + 1_000 * u64::from(n)));
            }
        }
        for _ in 0..10 {
            planner.observe_value(b"big", 1_000_000);
            planner.observe(&observation(1, 10_000 + 500_000));
        }
        planner
    }

    #[test]
    fn opcost_counts_large_keys_and_allowance_delays_all_but_the_bottleneck() {
        let planner = trained(0);
        let small = planner.cost().small_nanos().unwrap();
        let large = planner.cost().large_nanos().unwrap();
        assert!((small - 1_000.0).abs() < 1.0);
        assert!((large - 500_000.0).abs() < 1_000.0, "T_L {large}");
        assert_eq!(planner.opcost(5, 2), Some(2.0 * large + 3.0 * small));
        let mut planner = planner;
        let view = view(4, 1);
        let mut owned = keys(40);
        owned.push(b"big".to_vec());
        let borrowed: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
        let now = Timestamp(1_000_000_000);
        let actions = planner.plan(
            &PlanRequest {
                keys: &borrowed,
                now,
            },
            &view,
        );
        let big_index = (owned.len() - 1) as u32;
        let mut costs = Vec::new();
        for action in &actions {
            let Action::Fetch(fetch) = action else {
                panic!("{action:?}")
            };
            assert_eq!(fetch.priority, None);
            let has_big = fetch.keys.contains(&big_index);
            let n = fetch.keys.len() as u64;
            let cost = planner.opcost(n, u64::from(has_big)).unwrap();
            costs.push((cost, fetch.not_before));
            if has_big {
                assert_eq!(fetch.not_before, None, "the bottleneck goes at once");
            }
        }
        let max = costs.iter().map(|c| c.0).fold(0.0f64, f64::max);
        for (cost, not_before) in costs {
            let allowance = (max - cost) as u64;
            let expected = (allowance > 0).then(|| now.plus_nanos(allowance));
            assert_eq!(not_before, expected);
        }
    }

    #[test]
    fn allowances_below_the_minimum_delay_go_at_once_and_untrained_never_waits() {
        let mut planner = trained(u64::MAX);
        let view = view(4, 1);
        let mut owned = keys(40);
        owned.push(b"big".to_vec());
        let borrowed: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
        let request = PlanRequest {
            keys: &borrowed,
            now: Timestamp(5),
        };
        let all_at_once = |actions: Vec<Action>| {
            actions
                .iter()
                .all(|a| matches!(a, Action::Fetch(f) if f.not_before.is_none()))
        };
        assert!(all_at_once(planner.plan(&request, &view)));
        let mut fresh = TailxPlanner::new(TailxSettings {
            min_delay_nanos: 0,
            ..TailxSettings::default()
        });
        assert!(all_at_once(fresh.plan(&request, &view)));
    }
}
