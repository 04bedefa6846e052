//! Workloads: key pools (count, key-size and value-size distributions,
//! popularity), an operation mix (GET/multiget/SET with weights) and an
//! arrival process. Named presets reproduce the papers' workloads; any field
//! can be overridden from a TOML file or flags.
//!
//! Every key has a fixed key size and value size derived from a hash of
//! `(key_seed, pool, id)`, so the preload phase and the measured run agree
//! without storing a table, even for millions of keys.

use std::fmt;
use std::io::Write;

use serde::{Deserialize, Serialize};

use crate::class::ClassSet;
pub use crate::dist::{etc_key_size, etc_value_size};
use crate::dist::{Distribution, Zipf};
use crate::rng::{hash_unit, Rng};
use crate::BenchError;

/// The kind of an operation (defined beside the latency classes' inputs, in `op`; named
/// here too, where workloads are described).
pub use crate::op::OpKind;

/// Longest key memcached accepts.
pub const MAX_KEY_BYTES: usize = 250;
/// Default largest value written (memcached's default item size limit is 1 MiB
/// including the item header).
pub const DEFAULT_MAX_VALUE_BYTES: u64 = 1_000_000;
/// Default threshold separating small from large requests (bytes of the
/// largest value a request touches), just below Minos' large items.
pub const DEFAULT_LARGE_THRESHOLD_BYTES: u64 = 1_499;
/// Default number of keys from which a multiget is an elephant.
pub const DEFAULT_ELEPHANT_MIN_KEYS: u32 = 50;
/// Default number of keys in the main pool.
pub const DEFAULT_KEYS: u64 = 100_000;

/// Names of the built-in workloads.
pub const PRESET_NAMES: [&str; 6] = ["etc", "minos", "chisel", "tailx", "tailx-large", "uniform"];

/// How keys are chosen inside a pool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Popularity {
    /// Every key equally likely.
    Uniform,
    /// Zipf with the given exponent (rank 1 = key id 0).
    Zipf {
        /// The exponent `s` of `P(k) ∝ k^-s`.
        exponent: f64,
    },
}

impl std::str::FromStr for Popularity {
    type Err = BenchError;

    /// Parses `uniform`, `zipf` (exponent 0.99) or `zipf:S`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.split_once(':') {
            None if text == "uniform" => Ok(Self::Uniform),
            None if text == "zipf" => Ok(Self::Zipf { exponent: 0.99 }),
            Some(("zipf", exponent)) => exponent
                .parse()
                .map(|exponent| Self::Zipf { exponent })
                .map_err(|_| BenchError::Config(format!("bad zipf exponent in {text:?}"))),
            _ => Err(BenchError::Config(format!(
                "popularity must be uniform, zipf or zipf:S, got {text:?}"
            ))),
        }
    }
}

/// Arrival process of the open-loop schedule; always rescaled to the target rate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Arrival {
    /// Exponential inter-arrival gaps.
    Poisson,
    /// Generalized Pareto gaps with location 0 (Facebook ETC: scale 16.0292,
    /// shape 0.154971), rescaled so the mean gap is `1 / rate`.
    Gpd {
        /// Scale parameter.
        scale: f64,
        /// Shape parameter.
        shape: f64,
    },
}

/// A set of keys with common size distributions and popularity.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PoolSpec {
    /// Name (shown in errors; `large` is the pool `--large-share` adjusts).
    pub name: String,
    /// Number of keys.
    pub keys: u64,
    /// Probability that a key of a request is drawn from this pool.
    pub share: f64,
    /// Key length in bytes (clamped to what the key naming needs and 250).
    pub key_size: Distribution,
    /// Value length in bytes (clamped to `max_value_bytes`).
    pub value_size: Distribution,
    /// Popularity of keys inside the pool.
    pub popularity: Popularity,
}

/// One entry of the operation mix.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OperationSpec {
    /// GET or SET.
    pub kind: OpKind,
    /// Keys per request (a multiget when more than one; SETs use one).
    pub keys: u32,
    /// Relative weight in the mix.
    pub weight: f64,
}

/// A complete workload description (the TOML format of `--workload-file`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkloadSpec {
    /// Name used in reports.
    pub name: String,
    /// Seed of per-key sizes; preload and run must use the same one.
    #[serde(default = "default_key_seed")]
    pub key_seed: u64,
    /// Requests whose largest value exceeds this are `large`, others `small`.
    #[serde(default = "default_large_threshold")]
    pub large_threshold_bytes: u64,
    /// Requests with at least this many keys are `elephant`, others `mice`.
    #[serde(default = "default_elephant_min_keys")]
    pub elephant_min_keys: u32,
    /// Largest value size written.
    #[serde(default = "default_max_value")]
    pub max_value_bytes: u64,
    /// Arrival process.
    pub arrival: Arrival,
    /// Key pools.
    pub pools: Vec<PoolSpec>,
    /// Operation mix.
    pub operations: Vec<OperationSpec>,
    /// Per operation (in the order of `operations`), how many of its keys come from each pool
    /// (in the order of `pools`), exactly; empty: every key is drawn by the pools' shares.
    /// E.g. `[[20, 0], [18, 2]]`: the first kind of request has 20 keys of pool 0, the second
    /// 18 of pool 0 and 2 of pool 1.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub operation_pools: Vec<Vec<u32>>,
}

fn default_key_seed() -> u64 {
    0x7a11_7a11
}
fn default_large_threshold() -> u64 {
    DEFAULT_LARGE_THRESHOLD_BYTES
}
fn default_elephant_min_keys() -> u32 {
    DEFAULT_ELEPHANT_MIN_KEYS
}
fn default_max_value() -> u64 {
    DEFAULT_MAX_VALUE_BYTES
}

/// Facebook ETC inter-arrival process.
#[must_use]
pub fn etc_arrival() -> Arrival {
    Arrival::Gpd {
        scale: 16.0292,
        shape: 0.154971,
    }
}

fn etc_pool(keys: u64, popularity: Popularity) -> PoolSpec {
    PoolSpec {
        name: "small".to_string(),
        keys,
        share: 1.0,
        key_size: etc_key_size(),
        value_size: etc_value_size(),
        popularity,
    }
}

/// Two pools: ETC's small values (truncated below the large threshold) drawn `1 - large_share`
/// of the time, and `large_keys` large values of `large_value_size` the rest, both keys
/// drawn by `popularity`.
fn small_and_large_pools(
    popularity: Popularity,
    large_share: f64,
    large_keys: u64,
    large_value_size: Distribution,
) -> Vec<PoolSpec> {
    let mut small = etc_pool(DEFAULT_KEYS, popularity.clone());
    small.share = 1.0 - large_share;
    small.value_size = Distribution::Truncated {
        inner: Box::new(etc_value_size()),
        max: DEFAULT_LARGE_THRESHOLD_BYTES as f64,
    };
    let large = PoolSpec {
        name: "large".to_string(),
        keys: large_keys,
        share: large_share,
        key_size: etc_key_size(),
        value_size: large_value_size,
        popularity,
    };
    vec![small, large]
}

fn get(keys: u32, weight: f64) -> OperationSpec {
    OperationSpec {
        kind: OpKind::Get,
        keys,
        weight,
    }
}

fn set(weight: f64) -> OperationSpec {
    OperationSpec {
        kind: OpKind::Set,
        keys: 1,
        weight,
    }
}

/// Knobs of the presets that flags can change (None = the preset's default).
#[derive(Clone, Debug, Default)]
pub struct WorkloadOverrides {
    /// Keys in the main (first) pool.
    pub keys: Option<u64>,
    /// Popularity of every pool.
    pub popularity: Option<Popularity>,
    /// Share of keys drawn from the `large` pool.
    pub large_share: Option<f64>,
    /// Keys in the `large` pool.
    pub large_keys: Option<u64>,
    /// Multiplier on the `large` pool's value sizes (e.g. 0.25 turns 2 MB into 512 KB).
    pub large_scale: Option<f64>,
    /// Keys per mice multiget (every non-elephant GET of more than one key).
    pub mice_keys: Option<u32>,
    /// Keys per elephant multiget.
    pub elephant_keys: Option<u32>,
    /// Mice requests per elephant request.
    pub mice_per_elephant: Option<f64>,
    /// Fixed key size for the main pool.
    pub key_size: Option<u32>,
    /// Fixed value size for the main pool.
    pub value_size: Option<u32>,
    /// Share of SETs in the mix (GET weights keep their proportions).
    pub set_share: Option<f64>,
    /// Arrival process.
    pub arrival: Option<Arrival>,
    /// Small/large threshold.
    pub large_threshold_bytes: Option<u64>,
    /// Mice/elephant threshold.
    pub elephant_min_keys: Option<u32>,
}

impl WorkloadSpec {
    /// The built-in workload `name` (see [`PRESET_NAMES`]).
    pub fn preset(name: &str) -> Result<Self, BenchError> {
        let base = |name: &str, arrival, pools, operations| Self {
            name: name.to_string(),
            key_seed: default_key_seed(),
            large_threshold_bytes: DEFAULT_LARGE_THRESHOLD_BYTES,
            elephant_min_keys: DEFAULT_ELEPHANT_MIN_KEYS,
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
            arrival,
            pools,
            operations,
            operation_pools: Vec::new(),
        };
        let spec = match name {
            "etc" => base(
                "etc",
                etc_arrival(),
                vec![etc_pool(DEFAULT_KEYS, Popularity::Uniform)],
                vec![get(1, 30.0), set(1.0)],
            ),
            "minos" => base(
                "minos",
                Arrival::Poisson,
                small_and_large_pools(
                    Popularity::Zipf { exponent: 0.99 },
                    0.005,
                    200,
                    Distribution::Uniform {
                        min: 1_500.0,
                        max: 500_000.0,
                    },
                ),
                vec![get(1, 95.0), set(5.0)],
            ),
            "chisel" => base(
                "chisel",
                Arrival::Poisson,
                vec![etc_pool(DEFAULT_KEYS, Popularity::Uniform)],
                vec![get(5, 9.0), get(100, 1.0)],
            ),
            "tailx" => base(
                "tailx",
                Arrival::Poisson,
                vec![etc_pool(DEFAULT_KEYS, Popularity::Uniform)],
                vec![get(5, 80.0), get(100, 20.0)],
            ),
            "tailx-large" => base(
                "tailx-large",
                Arrival::Poisson,
                // 2 MB items of the paper, scaled down by 4 for this machine (memcached's
                // default item limit is 1 MiB).
                small_and_large_pools(
                    Popularity::Uniform,
                    0.1,
                    100,
                    Distribution::Fixed { value: 500_000.0 },
                ),
                vec![get(20, 1.0)],
            ),
            "uniform" => base(
                "uniform",
                Arrival::Poisson,
                vec![PoolSpec {
                    name: "small".to_string(),
                    keys: DEFAULT_KEYS,
                    share: 1.0,
                    key_size: Distribution::Fixed { value: 32.0 },
                    value_size: Distribution::Fixed { value: 100.0 },
                    popularity: Popularity::Uniform,
                }],
                vec![get(1, 9.0), set(1.0)],
            ),
            other => {
                return Err(BenchError::Config(format!(
                    "unknown workload {other:?}; built-in: {}",
                    PRESET_NAMES.join(", ")
                )))
            }
        };
        Ok(spec)
    }

    /// Parses a workload from TOML (the format [`WorkloadSpec::to_toml`] prints).
    pub fn from_toml(text: &str) -> Result<Self, BenchError> {
        let spec: Self =
            toml::from_str(text).map_err(|error| BenchError::Config(error.to_string()))?;
        spec.validate()?;
        Ok(spec)
    }

    /// Serializes the workload as TOML.
    pub fn to_toml(&self) -> Result<String, BenchError> {
        toml::to_string_pretty(self).map_err(|error| BenchError::Config(error.to_string()))
    }

    /// Applies flag overrides.
    pub fn apply(&mut self, overrides: &WorkloadOverrides) -> Result<(), BenchError> {
        if let Some(threshold) = overrides.large_threshold_bytes {
            self.large_threshold_bytes = threshold;
        }
        if let Some(min_keys) = overrides.elephant_min_keys {
            self.elephant_min_keys = min_keys;
        }
        if let Some(arrival) = &overrides.arrival {
            self.arrival = arrival.clone();
        }
        if let Some(main) = self.pools.first_mut() {
            if let Some(keys) = overrides.keys {
                main.keys = keys;
            }
            if let Some(size) = overrides.key_size {
                main.key_size = Distribution::Fixed {
                    value: f64::from(size),
                };
            }
            if let Some(size) = overrides.value_size {
                main.value_size = Distribution::Fixed {
                    value: f64::from(size),
                };
            }
        }
        if let Some(popularity) = &overrides.popularity {
            for pool in &mut self.pools {
                pool.popularity = popularity.clone();
            }
        }
        let large_index = self.pools.iter().position(|pool| pool.name == "large");
        if let Some(share) = overrides.large_share {
            let Some(large_index) = large_index else {
                return Err(BenchError::Config(format!(
                    "workload {} has no pool named \"large\"",
                    self.name
                )));
            };
            if !(0.0..=1.0).contains(&share) {
                return Err(BenchError::Config("--large-share must be in [0, 1]".into()));
            }
            let others: f64 = self
                .pools
                .iter()
                .enumerate()
                .filter(|(index, _)| *index != large_index)
                .map(|(_, pool)| pool.share)
                .sum();
            for (index, pool) in self.pools.iter_mut().enumerate() {
                if index == large_index {
                    pool.share = share;
                } else if others > 0.0 {
                    pool.share *= (1.0 - share) / others;
                }
            }
        }
        if let Some(large_index) = large_index {
            let large = &mut self.pools[large_index];
            if let Some(keys) = overrides.large_keys {
                large.keys = keys;
            }
            if let Some(scale) = overrides.large_scale {
                large.value_size = scale_distribution(&large.value_size, scale);
            }
        }
        let elephant_min = self.elephant_min_keys;
        for operation in &mut self.operations {
            if operation.kind != OpKind::Get {
                continue;
            }
            if operation.keys >= elephant_min {
                if let Some(keys) = overrides.elephant_keys {
                    operation.keys = keys;
                }
            } else if operation.keys > 1 {
                if let Some(keys) = overrides.mice_keys {
                    operation.keys = keys;
                }
            }
        }
        if let Some(ratio) = overrides.mice_per_elephant {
            let elephant_weight: f64 = self
                .operations
                .iter()
                .filter(|operation| operation.keys >= elephant_min)
                .map(|operation| operation.weight)
                .sum();
            let mice_weight: f64 = self
                .operations
                .iter()
                .filter(|operation| operation.keys < elephant_min)
                .map(|operation| operation.weight)
                .sum();
            if elephant_weight > 0.0 && mice_weight > 0.0 {
                for operation in &mut self.operations {
                    if operation.keys < elephant_min {
                        operation.weight *= ratio * elephant_weight / mice_weight;
                    }
                }
            }
        }
        if let Some(set_share) = overrides.set_share {
            if !(0.0..1.0).contains(&set_share) {
                return Err(BenchError::Config("--set-share must be in [0, 1)".into()));
            }
            self.operations
                .retain(|operation| operation.kind != OpKind::Set);
            let get_weight: f64 = self.operations.iter().map(|op| op.weight).sum();
            if set_share > 0.0 {
                self.operations
                    .push(set(get_weight * set_share / (1.0 - set_share)));
            }
        }
        self.validate()
    }

    /// Checks that the workload can generate requests.
    pub fn validate(&self) -> Result<(), BenchError> {
        let fail = |message: String| Err(BenchError::Config(message));
        if self.pools.is_empty() {
            return fail("a workload needs at least one pool".into());
        }
        if self.operations.is_empty() {
            return fail("a workload needs at least one operation".into());
        }
        if self.pools.len() > 1000 {
            return fail("at most 1000 pools".into());
        }
        for pool in &self.pools {
            if pool.keys == 0 || pool.share < 0.0 {
                return fail(format!("pool {}: keys must be > 0, share >= 0", pool.name));
            }
            if let Popularity::Zipf { exponent } = pool.popularity {
                if !(0.0..=10.0).contains(&exponent) {
                    return fail(format!("pool {}: zipf exponent out of range", pool.name));
                }
            }
        }
        if self.pools.iter().map(|pool| pool.share).sum::<f64>() <= 0.0 {
            return fail("pool shares sum to zero".into());
        }
        for operation in &self.operations {
            if operation.weight < 0.0 || operation.keys == 0 || operation.keys > 10_000 {
                return fail("operations need weight >= 0 and 1..=10000 keys".into());
            }
        }
        if self.operations.iter().map(|op| op.weight).sum::<f64>() <= 0.0 {
            return fail("operation weights sum to zero".into());
        }
        if !self.operation_pools.is_empty() {
            if self.operation_pools.len() != self.operations.len() {
                return fail("operation_pools needs one entry per operation".into());
            }
            for (counts, operation) in self.operation_pools.iter().zip(&self.operations) {
                let wanted = if operation.kind == OpKind::Set {
                    1
                } else {
                    operation.keys
                };
                if counts.len() != self.pools.len()
                    || counts.iter().map(|&c| u64::from(c)).sum::<u64>() != u64::from(wanted)
                {
                    return fail(format!(
                        "operation_pools {counts:?}: one count per pool, summing to the \
                         operation's {wanted} keys"
                    ));
                }
            }
        }
        if let Arrival::Gpd { scale, shape } = self.arrival {
            if scale <= 0.0 || shape >= 1.0 {
                return fail("gpd arrival needs scale > 0 and shape < 1".into());
            }
        }
        Ok(())
    }

    /// Total number of keys over all pools.
    #[must_use]
    pub fn total_keys(&self) -> u64 {
        self.pools.iter().map(|pool| pool.keys).sum()
    }

    /// Length in bytes of the key `key`.
    #[must_use]
    pub fn key_len(&self, key: KeyRef) -> usize {
        let minimum = key_prefix_len(key);
        let Some(pool) = self.pools.get(key.pool as usize) else {
            return minimum;
        };
        let drawn = pool
            .key_size
            .quantile(hash_unit(self.key_seed, u64::from(key.pool), key.id, 0))
            .round();
        (drawn.max(0.0) as usize).clamp(minimum, MAX_KEY_BYTES)
    }

    /// Length in bytes of the value of `key`.
    #[must_use]
    pub fn value_len(&self, key: KeyRef) -> u64 {
        let Some(pool) = self.pools.get(key.pool as usize) else {
            return 0;
        };
        let drawn = pool
            .value_size
            .quantile(hash_unit(self.key_seed, u64::from(key.pool), key.id, 1))
            .round();
        (drawn.max(0.0) as u64).min(self.max_value_bytes)
    }

    /// Appends the bytes of `key` to `out`.
    pub fn write_key(&self, key: KeyRef, out: &mut Vec<u8>) {
        let length = self.key_len(key);
        let start = out.len();
        // Writing to a Vec cannot fail.
        let _ = write!(out, "t{}:{}:", key.pool, key.id);
        out.resize(start + length, b'k');
    }

    /// Every key of every pool, in order (for the preload phase).
    pub fn all_keys(&self) -> impl Iterator<Item = KeyRef> + '_ {
        self.pools.iter().enumerate().flat_map(|(pool, spec)| {
            (0..spec.keys).map(move |id| KeyRef {
                pool: pool as u32,
                id,
            })
        })
    }

    /// Mean of `share`-weighted value sizes over keys, estimated from `samples` keys.
    #[must_use]
    pub fn estimated_bytes(&self) -> u64 {
        self.pools
            .iter()
            .enumerate()
            .map(|(pool_index, pool)| {
                let samples = pool.keys.min(2_000);
                let total: u64 = (0..samples)
                    .map(|id| {
                        let key = KeyRef {
                            pool: pool_index as u32,
                            id: id * (pool.keys / samples),
                        };
                        self.value_len(key) + self.key_len(key) as u64 + 50
                    })
                    .sum();
                total / samples.max(1) * pool.keys
            })
            .sum()
    }
}

fn scale_distribution(distribution: &Distribution, scale: f64) -> Distribution {
    match distribution {
        Distribution::Fixed { value } => Distribution::Fixed {
            value: value * scale,
        },
        Distribution::Uniform { min, max } => Distribution::Uniform {
            min: min * scale,
            max: max * scale,
        },
        other => Distribution::Truncated {
            inner: Box::new(other.clone()),
            max: other.quantile(0.999_999) * scale,
        },
    }
}

fn key_prefix_len(key: KeyRef) -> usize {
    3 + decimal_digits(u64::from(key.pool)) + decimal_digits(key.id)
}

fn decimal_digits(mut value: u64) -> usize {
    let mut digits = 1;
    while value >= 10 {
        value /= 10;
        digits += 1;
    }
    digits
}

/// Identity of one key: pool index and id inside the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KeyRef {
    /// Index into [`WorkloadSpec::pools`].
    pub pool: u32,
    /// Id inside the pool, `0..keys`.
    pub id: u64,
}

/// One request drawn from a workload.
#[derive(Clone, Debug, PartialEq)]
pub struct Operation {
    /// GET or SET.
    pub kind: OpKind,
    /// Keys (distinct), one for a SET.
    pub keys: Vec<KeyRef>,
    /// Classes the request belongs to.
    pub classes: ClassSet,
}

impl fmt::Display for Operation {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{:?} of {} keys", self.kind, self.keys.len())
    }
}

/// Draws operations from a workload with a seeded generator.
#[derive(Clone, Debug)]
pub struct RequestGenerator {
    spec: std::sync::Arc<WorkloadSpec>,
    pool_cumulative: Vec<f64>,
    operation_cumulative: Vec<f64>,
    zipf: Vec<Option<Zipf>>,
    rng: Rng,
}

fn cumulative(weights: impl Iterator<Item = f64>) -> Vec<f64> {
    let mut running = 0.0;
    let mut values: Vec<f64> = weights
        .map(|weight| {
            running += weight;
            running
        })
        .collect();
    for value in &mut values {
        *value /= running;
    }
    values
}

fn pick(cumulative: &[f64], u: f64) -> usize {
    cumulative
        .iter()
        .position(|bound| u < *bound)
        .unwrap_or(cumulative.len().saturating_sub(1))
}

impl RequestGenerator {
    /// Generator over `spec` with its own random stream.
    #[must_use]
    pub fn new(spec: std::sync::Arc<WorkloadSpec>, rng: Rng) -> Self {
        let pool_cumulative = cumulative(spec.pools.iter().map(|pool| pool.share));
        let operation_cumulative = cumulative(spec.operations.iter().map(|op| op.weight));
        let zipf = spec
            .pools
            .iter()
            .map(|pool| match pool.popularity {
                Popularity::Uniform => None,
                Popularity::Zipf { exponent } => Some(Zipf::new(pool.keys, exponent)),
            })
            .collect();
        Self {
            spec,
            pool_cumulative,
            operation_cumulative,
            zipf,
            rng,
        }
    }

    /// The workload.
    #[must_use]
    pub fn spec(&self) -> &WorkloadSpec {
        &self.spec
    }

    fn draw_key(&mut self) -> KeyRef {
        let pool_index = pick(&self.pool_cumulative, self.rng.unit());
        self.draw_key_in(pool_index)
    }

    fn draw_key_in(&mut self, pool_index: usize) -> KeyRef {
        let keys = self.spec.pools[pool_index].keys;
        let id = match &self.zipf[pool_index] {
            Some(zipf) => zipf.sample(&mut self.rng) - 1,
            None => self.rng.below(keys),
        };
        KeyRef {
            pool: pool_index as u32,
            id,
        }
    }

    /// Adds distinct keys (from `pool`, or by the pools' shares) until `keys` holds `wanted`;
    /// with heavy skew, accepts duplicates after many tries.
    fn draw_distinct(&mut self, keys: &mut Vec<KeyRef>, wanted: usize, pool: Option<usize>) {
        let mut attempts = 0usize;
        while keys.len() < wanted {
            let key = match pool {
                Some(pool) => self.draw_key_in(pool),
                None => self.draw_key(),
            };
            attempts += 1;
            if !keys.contains(&key) || attempts > wanted * 20 {
                keys.push(key);
            }
        }
    }

    /// Draws the next operation.
    pub fn next_operation(&mut self) -> Operation {
        let operation_index = pick(&self.operation_cumulative, self.rng.unit());
        let (kind, wanted) = {
            let spec = &self.spec.operations[operation_index];
            (
                spec.kind,
                if spec.kind == OpKind::Set {
                    1
                } else {
                    spec.keys
                },
            )
        };
        let total_keys = self.spec.total_keys();
        let wanted = (wanted as usize).min(total_keys as usize);
        let mut keys: Vec<KeyRef> = Vec::with_capacity(wanted);
        let per_pool = self.spec.operation_pools.get(operation_index).cloned();
        let mut drawn = 0usize;
        for (pool_index, count) in per_pool.unwrap_or_default().into_iter().enumerate() {
            drawn += count as usize;
            self.draw_distinct(&mut keys, drawn, Some(pool_index));
        }
        self.draw_distinct(&mut keys, wanted, None);
        let largest_value = keys
            .iter()
            .map(|key| self.spec.value_len(*key))
            .max()
            .unwrap_or(0);
        let classes = ClassSet::for_request(
            kind,
            keys.len(),
            largest_value,
            self.spec.large_threshold_bytes,
            self.spec.elephant_min_keys,
        );
        Operation {
            kind,
            keys,
            classes,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{KeyRef, OpKind, RequestGenerator, WorkloadOverrides, WorkloadSpec, PRESET_NAMES};
    use crate::class::Class;
    use crate::rng::Rng;

    #[test]
    fn operation_pools_draw_exact_counts_per_pool() {
        let mut spec =
            WorkloadSpec::preset("tailx-large").unwrap_or_else(|error| panic!("{error}"));
        spec.operations = vec![super::get(20, 4.0), super::get(20, 1.0)];
        spec.operation_pools = vec![vec![20, 0], vec![18, 2]];
        spec.validate().unwrap_or_else(|error| panic!("{error}"));
        let text = spec.to_toml().unwrap_or_default();
        assert_eq!(WorkloadSpec::from_toml(&text).ok(), Some(spec.clone()));
        let mut generator = RequestGenerator::new(Arc::new(spec.clone()), Rng::new(3));
        let mut with_large = 0;
        for _ in 0..2_000 {
            let operation = generator.next_operation();
            assert_eq!(operation.keys.len(), 20);
            let large = operation.keys.iter().filter(|key| key.pool == 1).count();
            assert!(large == 0 || large == 2, "{large} large keys");
            with_large += usize::from(large == 2);
        }
        // One request in five carries the two large keys.
        assert!((300..500).contains(&with_large), "{with_large}");
        spec.operation_pools = vec![vec![20, 0], vec![18, 1]];
        assert!(spec.validate().is_err());
        spec.operation_pools = vec![vec![20, 0]];
        assert!(spec.validate().is_err());
    }

    #[test]
    fn every_preset_validates_and_round_trips_through_toml() {
        for name in PRESET_NAMES {
            let spec = WorkloadSpec::preset(name).unwrap_or_else(|error| panic!("{name}: {error}"));
            spec.validate()
                .unwrap_or_else(|error| panic!("{name}: {error}"));
            let text = spec.to_toml().unwrap_or_default();
            let parsed = WorkloadSpec::from_toml(&text).unwrap_or_else(|error| panic!("{error}"));
            assert_eq!(parsed, spec, "{name}");
        }
    }

    #[test]
    fn keys_have_stable_sizes_and_valid_bytes() {
        let spec = WorkloadSpec::preset("etc").unwrap_or_else(|error| panic!("{error}"));
        let mut total = 0usize;
        for id in 0..5_000 {
            let key = KeyRef { pool: 0, id };
            let mut bytes = Vec::new();
            spec.write_key(key, &mut bytes);
            assert_eq!(bytes.len(), spec.key_len(key));
            assert!(bytes.len() <= 250);
            assert!(bytes.iter().all(|byte| byte.is_ascii_graphic()));
            assert_eq!(spec.value_len(key), spec.value_len(key));
            total += bytes.len();
        }
        let mean = total as f64 / 5_000.0;
        // GEV mean 36.22 bytes (rounded, clamped to the 7-byte prefix minimum).
        assert!((mean - 36.22).abs() < 0.5, "mean key length {mean}");
    }

    #[test]
    fn etc_mix_is_one_set_per_thirty_gets() {
        let spec = Arc::new(WorkloadSpec::preset("etc").unwrap_or_else(|error| panic!("{error}")));
        let mut generator = RequestGenerator::new(spec, Rng::new(3));
        let draws = 310_000;
        let sets = (0..draws)
            .filter(|_| generator.next_operation().kind == OpKind::Set)
            .count();
        let share = sets as f64 / f64::from(draws);
        assert!((share - 1.0 / 31.0).abs() < 0.002, "set share {share}");
    }

    #[test]
    fn minos_large_share_and_classes() {
        let mut spec = WorkloadSpec::preset("minos").unwrap_or_else(|error| panic!("{error}"));
        spec.apply(&WorkloadOverrides {
            large_share: Some(0.02),
            ..WorkloadOverrides::default()
        })
        .unwrap_or_else(|error| panic!("{error}"));
        let mut generator = RequestGenerator::new(Arc::new(spec), Rng::new(4));
        let draws = 200_000;
        let mut large = 0;
        for _ in 0..draws {
            let operation = generator.next_operation();
            let is_large = operation.classes.contains(Class::Large);
            assert_ne!(is_large, operation.classes.contains(Class::Small));
            let from_large_pool = operation.keys[0].pool == 1;
            assert_eq!(is_large, from_large_pool, "large class iff large pool");
            if is_large {
                large += 1;
            }
        }
        let share = f64::from(large) / f64::from(draws);
        assert!((share - 0.02).abs() < 0.002, "large share {share}");
    }

    #[test]
    fn chisel_mice_and_elephants_follow_overrides() {
        let mut spec = WorkloadSpec::preset("chisel").unwrap_or_else(|error| panic!("{error}"));
        spec.apply(&WorkloadOverrides {
            mice_keys: Some(10),
            mice_per_elephant: Some(5.0),
            ..WorkloadOverrides::default()
        })
        .unwrap_or_else(|error| panic!("{error}"));
        let mut generator = RequestGenerator::new(Arc::new(spec), Rng::new(5));
        let draws = 60_000;
        let mut elephants = 0;
        for _ in 0..draws {
            let operation = generator.next_operation();
            let mut ids: Vec<u64> = operation.keys.iter().map(|key| key.id).collect();
            ids.sort_unstable();
            ids.dedup();
            assert_eq!(
                ids.len(),
                operation.keys.len(),
                "multiget keys are distinct"
            );
            if operation.classes.contains(Class::Elephant) {
                assert_eq!(operation.keys.len(), 100);
                elephants += 1;
            } else {
                assert_eq!(operation.keys.len(), 10);
                assert!(operation.classes.contains(Class::Mice));
            }
        }
        let share = f64::from(elephants) / f64::from(draws);
        assert!((share - 1.0 / 6.0).abs() < 0.01, "elephant share {share}");
    }
}

#[cfg(test)]
mod example_file_tests {
    use std::sync::Arc;

    use super::{OpKind, RequestGenerator, WorkloadSpec};
    use crate::rng::Rng;

    #[test]
    fn the_documented_example_mix_parses_and_generates() {
        let text = include_str!("../../../experiments/bench/mix-example.toml");
        let spec = WorkloadSpec::from_toml(text).unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(spec.name, "session-store");
        assert_eq!(spec.pools.len(), 2);
        let mut generator = RequestGenerator::new(Arc::new(spec), Rng::new(8));
        let draws = 20_000;
        let multigets = (0..draws)
            .map(|_| generator.next_operation())
            .filter(|operation| operation.kind == OpKind::Get && operation.keys.len() == 10)
            .count();
        let share = multigets as f64 / f64::from(draws);
        assert!((share - 0.1).abs() < 0.01, "multiget share {share}");
    }
}
