//! A seeded key trace for miss-ratio measurements: zipf popularity over a fixed key space,
//! every key with a fixed ETC-like key size and value size.
//!
//! ```text
//!  TraceSpec { keys, exponent, seed, max_value_bytes }
//!     │ Rng(seed) ─► Zipf(keys, exponent) ─► rank (1 = most popular)
//!     ▼
//!  TraceRequest { rank, key, value_bytes }
//!     key:   "t<rank>" padded with '.' to an ETC key size (hash of seed and rank)
//!     value: an ETC value size (hash of seed and rank), capped at max_value_bytes
//! ```
//!
//! The same spec always yields the same sequence (no clock, no thread RNG), and a key's
//! sizes depend only on the seed and its rank, so a key keeps its size across the trace as
//! a real object does.

use crate::dist::{etc_key_size, etc_value_size, Distribution, Zipf};
use crate::rng::{hash_unit, Rng};

/// The longest key memcached accepts.
const MAX_KEY_BYTES: usize = 250;
/// Domain separators of the per-key hashes.
const KEY_SIZE_STREAM: u64 = 1;
const VALUE_SIZE_STREAM: u64 = 2;

/// What a trace is drawn from.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceSpec {
    /// Distinct keys (ranks `1..=keys`).
    pub keys: u64,
    /// Zipf exponent of the popularity (0.99 in the ETC-like trace).
    pub exponent: f64,
    /// Seed of the whole trace.
    pub seed: u64,
    /// Largest value written (ETC's size tail is cut here).
    pub max_value_bytes: usize,
}

/// One request of the trace: a `get` of `key`, and on a miss a `set` of `value_bytes`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceRequest {
    /// Popularity rank of the key (1 = most popular).
    pub rank: u64,
    /// The key as sent.
    pub key: String,
    /// Length of the value set on a miss.
    pub value_bytes: usize,
}

/// An endless iterator over a [`TraceSpec`]'s requests.
#[derive(Clone, Debug)]
pub struct Trace {
    spec: TraceSpec,
    rng: Rng,
    zipf: Zipf,
    key_size: Distribution,
    value_size: Distribution,
}

impl Trace {
    /// The trace of `spec`, from its first request.
    #[must_use]
    pub fn new(spec: TraceSpec) -> Trace {
        Trace {
            rng: Rng::new(spec.seed),
            zipf: Zipf::new(spec.keys, spec.exponent),
            key_size: etc_key_size(),
            value_size: etc_value_size(),
            spec,
        }
    }

    /// The request for the key of `rank` (its key and value size).
    #[must_use]
    pub fn request(&self, rank: u64) -> TraceRequest {
        let seed = self.spec.seed;
        let stem = format!("t{rank}");
        let wanted = self
            .key_size
            .quantile(hash_unit(seed, rank, KEY_SIZE_STREAM, 0))
            .round();
        let key_bytes = (wanted.max(0.0) as usize).clamp(stem.len(), MAX_KEY_BYTES);
        let key = format!("{stem:.<key_bytes$}");
        let value = self
            .value_size
            .quantile(hash_unit(seed, rank, VALUE_SIZE_STREAM, 0))
            .round();
        let value_bytes = (value.max(0.0) as usize).min(self.spec.max_value_bytes);
        TraceRequest {
            rank,
            key,
            value_bytes,
        }
    }
}

impl Iterator for Trace {
    type Item = TraceRequest;

    fn next(&mut self) -> Option<TraceRequest> {
        let rank = self.zipf.sample(&mut self.rng);
        Some(self.request(rank))
    }
}

#[cfg(test)]
mod tests {
    use super::{Trace, TraceSpec};

    fn spec(seed: u64) -> TraceSpec {
        TraceSpec {
            keys: 10_000,
            exponent: 0.99,
            seed,
            max_value_bytes: 100_000,
        }
    }

    #[test]
    fn same_seed_same_trace() {
        let first: Vec<_> = Trace::new(spec(7)).take(5_000).collect();
        let second: Vec<_> = Trace::new(spec(7)).take(5_000).collect();
        assert_eq!(first, second);
        let other: Vec<_> = Trace::new(spec(8)).take(5_000).collect();
        assert_ne!(first, other);
    }

    #[test]
    fn a_key_keeps_its_sizes_and_the_head_is_popular() {
        let trace: Vec<_> = Trace::new(spec(7)).take(20_000).collect();
        for request in &trace {
            assert_eq!(*request, Trace::new(spec(7)).request(request.rank));
            assert!(request.key.len() <= 250 && !request.key.contains(' '));
            assert!(request.value_bytes <= 100_000);
        }
        let top = trace.iter().filter(|r| r.rank == 1).count();
        // zipf(0.99) over 10k keys gives rank 1 about 10 % of the requests.
        assert!((1_000..3_000).contains(&top), "rank 1 drawn {top} times");
    }
}
