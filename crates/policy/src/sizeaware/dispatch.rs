//! Per-request dispatch decisions of the four policies, as pure functions of what the runtime
//! passes in (hashes, ids, queue lengths). Workers are numbered `0..workers`.
//!
//! ```text
//!  early-binding  key hash ─► early_binding_worker ─► that worker serves it
//!  stealing       same, and an idle worker asks StealPolicy::choose_victim(queue lengths)
//!                 ─► takes one whole ready connection from the victim (order preserved)
//!  late-binding   dispatcher ─► late_binding_worker(queue lengths) ─► an idle worker (or wait)
//!  size-aware     small worker ─► Decision::class_of(size) == Large
//!                 ─► large_worker_for(connection id) / least_loaded_large_worker(..) ─► queue
//! ```

use std::fmt;
use std::str::FromStr;

use super::controller::Decision;
use super::SizeAwareError;

/// Default backlog a victim must have before a thief takes from it (ZygOS steals whenever a
/// busy worker has anything ready).
pub const DEFAULT_MIN_VICTIM_BACKLOG: usize = 1;

/// The server's `--dispatch` policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DispatchPolicy {
    /// Minos: small and large requests on disjoint workers.
    #[default]
    SizeAware,
    /// MICA-like: key hash → worker.
    EarlyBinding,
    /// ZygOS-like: early binding plus connection stealing by idle workers.
    Stealing,
    /// RAMCloud-like: one dispatcher hands each request to an idle worker.
    LateBinding,
}

impl DispatchPolicy {
    /// Every policy's flag spelling, in declaration order.
    pub const NAMES: [&'static str; 4] =
        ["size-aware", "early-binding", "stealing", "late-binding"];

    /// Every policy, in the order of [`NAMES`](Self::NAMES).
    pub const ALL: [DispatchPolicy; 4] = [
        DispatchPolicy::SizeAware,
        DispatchPolicy::EarlyBinding,
        DispatchPolicy::Stealing,
        DispatchPolicy::LateBinding,
    ];

    /// The flag spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            DispatchPolicy::SizeAware => "size-aware",
            DispatchPolicy::EarlyBinding => "early-binding",
            DispatchPolicy::Stealing => "stealing",
            DispatchPolicy::LateBinding => "late-binding",
        }
    }
}

impl fmt::Display for DispatchPolicy {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}

impl FromStr for DispatchPolicy {
    type Err = SizeAwareError;

    /// Accepts the flag spellings, case-insensitively, with `_` for `-`.
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        let normalized = name.trim().to_ascii_lowercase().replace('_', "-");
        DispatchPolicy::ALL
            .into_iter()
            .find(|policy| policy.as_str() == normalized)
            .ok_or_else(|| SizeAwareError::UnknownDispatchPolicy(name.to_string()))
    }
}

/// Early binding: the worker that owns `key_hash`. Uses the high bits of the hash
/// (multiply-shift, `⌊hash × workers / 2^64⌋`), so it stays independent of any low-bit
/// sharding the store does with the same hash. `workers == 0` is treated as 1.
pub const fn early_binding_worker(key_hash: u64, workers: usize) -> usize {
    let workers = if workers == 0 { 1 } else { workers };
    ((key_hash as u128 * workers as u128) >> 64) as usize
}

/// The hash early binding partitions keys by: 64-bit FNV-1a of the key's bytes. The server
/// hashes the key it parsed; the simulator hashes the bytes the load generator would send for
/// the same key, so both route a key to the same worker ([`key_worker`]).
pub const fn key_hash(key: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut index = 0;
    while index < key.len() {
        hash ^= key[index] as u64;
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        index += 1;
    }
    hash
}

/// Early binding's owner of `key` among `workers`: [`early_binding_worker`] of [`key_hash`].
pub const fn key_worker(key: &[u8], workers: usize) -> usize {
    early_binding_worker(key_hash(key), workers)
}

/// A size-aware decision as the workers read it: threshold and split packed into one `u64`,
/// so a runtime publishes an epoch's decision with one atomic store and a worker never sees
/// one epoch's threshold with another epoch's split. The threshold keeps its low 48 bits
/// (thresholds of 256 TiB and more, and "none", read as [`PackedDecision::NO_THRESHOLD`]);
/// the split keeps 16 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackedDecision(pub u64);

impl PackedDecision {
    const THRESHOLD_BITS: u32 = 48;
    const THRESHOLD_MASK: u64 = (1 << Self::THRESHOLD_BITS) - 1;
    /// The threshold read back when there is none (every request is small).
    pub const NO_THRESHOLD: u64 = u64::MAX;

    /// Packs `threshold` (`None`: no threshold) and `small_workers` (at most 65535).
    pub const fn new(threshold: Option<u64>, small_workers: usize) -> PackedDecision {
        let threshold = match threshold {
            Some(bytes) if bytes < Self::THRESHOLD_MASK => bytes,
            _ => Self::THRESHOLD_MASK,
        };
        let small = if small_workers > 0xffff {
            0xffff
        } else {
            small_workers as u64
        };
        PackedDecision((small << Self::THRESHOLD_BITS) | threshold)
    }

    /// The threshold in bytes ([`Self::NO_THRESHOLD`] when none).
    pub const fn threshold(self) -> u64 {
        let bits = self.0 & Self::THRESHOLD_MASK;
        if bits == Self::THRESHOLD_MASK {
            Self::NO_THRESHOLD
        } else {
            bits
        }
    }

    /// Workers `0..small_workers` are small.
    pub const fn small_workers(self) -> usize {
        (self.0 >> Self::THRESHOLD_BITS) as usize
    }

    /// This decision with another threshold.
    pub const fn with_threshold(self, threshold: Option<u64>) -> PackedDecision {
        PackedDecision::new(threshold, self.small_workers())
    }

    /// This decision with another split.
    pub const fn with_small_workers(self, small_workers: usize) -> PackedDecision {
        let threshold = self.threshold();
        let threshold = if threshold == Self::NO_THRESHOLD {
            None
        } else {
            Some(threshold)
        };
        PackedDecision::new(threshold, small_workers)
    }
}

/// The large worker for a handed-off request: round-robin over the large workers by `id`.
/// Pass a **connection** id to keep every large request of a connection on one large worker
/// (its queue is FIFO, which simplifies reply ordering); pass a request counter to spread them.
/// `None` when the decision has no large worker: serve the request in place.
pub const fn large_worker_for(id: u64, decision: &Decision) -> Option<usize> {
    if decision.large_workers == 0 {
        return None;
    }
    Some(decision.small_workers + (id % decision.large_workers as u64) as usize)
}

/// The large worker with the shortest queue (`queue_lengths` indexed by worker id; a missing
/// entry counts as empty). Ties go to the first one at or after the round-robin position of
/// `tie_break`, so equal queues still spread. `None` when there is no large worker.
pub fn least_loaded_large_worker(
    decision: &Decision,
    queue_lengths: &[usize],
    tie_break: u64,
) -> Option<usize> {
    let large = decision.large_workers;
    if large == 0 {
        return None;
    }
    let start = (tie_break % large as u64) as usize;
    (0..large)
        .map(|step| decision.small_workers + (start + step) % large)
        .min_by_key(|worker| queue_lengths.get(*worker).copied().unwrap_or(0))
}

/// Late binding: the first idle worker (queue length 0) scanning from `rotation % workers`,
/// or `None` when every worker is busy (the dispatcher keeps the request until one frees).
pub fn late_binding_worker(queue_lengths: &[usize], rotation: u64) -> Option<usize> {
    let workers = queue_lengths.len();
    if workers == 0 {
        return None;
    }
    let start = (rotation % workers as u64) as usize;
    (0..workers)
        .map(|step| (start + step) % workers)
        .find(|worker| queue_lengths.get(*worker).copied().unwrap_or(0) == 0)
}

/// The stealing baseline's choice of victim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StealPolicy {
    /// A worker is a victim only if at least this many ready connections wait in its queue
    /// (not counting the one it is serving). At least 1.
    pub min_victim_backlog: usize,
}

impl Default for StealPolicy {
    fn default() -> Self {
        StealPolicy {
            min_victim_backlog: DEFAULT_MIN_VICTIM_BACKLOG,
        }
    }
}

impl StealPolicy {
    /// Which worker the idle `thief` steals one ready connection from: the one with the
    /// longest queue among the others, if that is at least `min_victim_backlog` (and at least
    /// 1). Ties go to the first worker after the thief in cyclic order, so thieves spread
    /// over equally loaded victims. `None` if the thief has work of its own (it is not idle)
    /// or no worker qualifies. `queue_lengths` is indexed by worker id.
    pub fn choose_victim(&self, thief: usize, queue_lengths: &[usize]) -> Option<usize> {
        let workers = queue_lengths.len();
        if queue_lengths.get(thief).copied().unwrap_or(0) > 0 {
            return None;
        }
        let minimum = self.min_victim_backlog.max(1);
        let mut best: Option<(usize, usize)> = None;
        for step in 1..=workers {
            let worker = (thief.wrapping_add(step)) % workers;
            if worker == thief {
                continue;
            }
            let backlog = queue_lengths.get(worker).copied().unwrap_or(0);
            let better = match best {
                None => true,
                Some((_, best_backlog)) => backlog > best_backlog,
            };
            if backlog >= minimum && better {
                best = Some((worker, backlog));
            }
        }
        best.map(|(worker, _)| worker)
    }
}

#[cfg(test)]
mod tests {
    use super::{
        early_binding_worker, key_hash, key_worker, large_worker_for, late_binding_worker,
        least_loaded_large_worker, DispatchPolicy, PackedDecision, StealPolicy,
    };
    use crate::sizeaware::{SizeAwareConfig, SizeAwareController, SizeAwareError};
    use proptest::prelude::{prop_assert, prop_assert_eq, proptest};

    fn decision(workers: usize, small: usize) -> crate::sizeaware::Decision {
        let config = SizeAwareConfig {
            fixed_small_workers: Some(small),
            ..SizeAwareConfig::with_workers(workers)
        };
        match SizeAwareController::new(config) {
            Ok(controller) => *controller.decision(),
            Err(error) => panic!("{error}"),
        }
    }

    #[test]
    fn dispatch_policy_names_round_trip() {
        for (policy, name) in DispatchPolicy::ALL.into_iter().zip(DispatchPolicy::NAMES) {
            assert_eq!(policy.as_str(), name);
            assert_eq!(name.parse::<DispatchPolicy>(), Ok(policy));
            assert_eq!(policy.to_string(), name);
        }
        assert_eq!(
            "Size_Aware".parse::<DispatchPolicy>(),
            Ok(DispatchPolicy::SizeAware)
        );
        assert_eq!(
            "minos".parse::<DispatchPolicy>(),
            Err(SizeAwareError::UnknownDispatchPolicy("minos".to_string()))
        );
    }

    #[test]
    fn packed_decision_round_trips_threshold_and_split() {
        let packed = PackedDecision::new(Some(1499), 3);
        assert_eq!((packed.threshold(), packed.small_workers()), (1499, 3));
        let none = PackedDecision::new(None, 4);
        assert_eq!(none.threshold(), PackedDecision::NO_THRESHOLD);
        assert_eq!(none.small_workers(), 4);
        assert_eq!(packed.with_small_workers(1).threshold(), 1499);
        assert_eq!(none.with_threshold(Some(0)).threshold(), 0);
        assert_eq!(none.with_threshold(Some(0)).small_workers(), 4);
        assert_eq!(
            PackedDecision::new(Some(u64::MAX - 1), 1).threshold(),
            PackedDecision::NO_THRESHOLD
        );
    }

    #[test]
    fn key_worker_is_early_binding_of_fnv() {
        assert_eq!(key_hash(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(key_hash(b"a"), 0xaf63_dc4c_8601_ec8c);
        for key in [&b"key:1"[..], b"x", b"another key"] {
            assert_eq!(key_worker(key, 4), early_binding_worker(key_hash(key), 4));
        }
    }

    #[test]
    fn early_binding_spreads_hashes_evenly() {
        let workers = 4;
        let mut counts = [0usize; 4];
        // Evenly spaced hashes over the whole u64 range land evenly.
        let step = u64::MAX / 4000;
        for i in 0..4000u64 {
            counts[early_binding_worker(i * step, workers)] += 1;
        }
        assert!(
            counts.iter().all(|count| count.abs_diff(1000) <= 1),
            "{counts:?}"
        );
        assert_eq!(early_binding_worker(u64::MAX, 4), 3);
        assert_eq!(early_binding_worker(12345, 0), 0);
        assert_eq!(early_binding_worker(u64::MAX, 1), 0);
    }

    #[test]
    fn large_worker_round_robin_stays_in_the_large_range() {
        let split = decision(5, 2);
        let chosen: Vec<Option<usize>> = (0..6).map(|id| large_worker_for(id, &split)).collect();
        assert_eq!(
            chosen,
            [Some(2), Some(3), Some(4), Some(2), Some(3), Some(4)]
        );
        assert_eq!(large_worker_for(7, &decision(3, 3)), None);
    }

    #[test]
    fn least_loaded_large_worker_prefers_short_queues_and_spreads_ties() {
        let split = decision(5, 2);
        assert_eq!(
            least_loaded_large_worker(&split, &[9, 9, 4, 1, 3], 0),
            Some(3)
        );
        // Small workers' queues are ignored even if shorter.
        assert_eq!(
            least_loaded_large_worker(&split, &[0, 0, 2, 2, 2], 0),
            Some(2)
        );
        assert_eq!(
            least_loaded_large_worker(&split, &[0, 0, 2, 2, 2], 1),
            Some(3)
        );
        assert_eq!(
            least_loaded_large_worker(&split, &[0, 0, 2, 2, 2], 5),
            Some(4)
        );
        assert_eq!(least_loaded_large_worker(&decision(2, 2), &[0, 0], 0), None);
    }

    #[test]
    fn late_binding_picks_an_idle_worker_or_waits() {
        assert_eq!(late_binding_worker(&[1, 0, 0], 0), Some(1));
        assert_eq!(late_binding_worker(&[1, 0, 0], 2), Some(2));
        assert_eq!(late_binding_worker(&[1, 3, 2], 0), None);
        assert_eq!(late_binding_worker(&[], 0), None);
    }

    #[test]
    fn steal_victims() {
        let policy = StealPolicy::default();
        assert_eq!(policy.choose_victim(0, &[0, 2, 5, 1]), Some(2));
        assert_eq!(policy.choose_victim(0, &[1, 2, 5, 1]), None); // thief is not idle
        assert_eq!(policy.choose_victim(1, &[0, 0, 0]), None); // nothing to steal
        assert_eq!(policy.choose_victim(1, &[3, 0, 3]), Some(2)); // tie: first after thief
        assert_eq!(policy.choose_victim(2, &[3, 0, 0, 3]), Some(3));
        assert_eq!(policy.choose_victim(0, &[0]), None);
        let picky = StealPolicy {
            min_victim_backlog: 3,
        };
        assert_eq!(picky.choose_victim(0, &[0, 2, 2]), None);
        assert_eq!(picky.choose_victim(0, &[0, 2, 3]), Some(2));
    }

    proptest! {
        #[test]
        fn steal_victim_is_a_longest_other_queue(
            queues in proptest::collection::vec(0usize..6, 1..9),
            thief_seed in 0usize..64,
        ) {
            let thief = thief_seed % queues.len();
            let mut queues = queues;
            queues[thief] = 0;
            let longest_other = queues
                .iter()
                .enumerate()
                .filter(|(worker, _)| *worker != thief)
                .map(|(_, backlog)| *backlog)
                .max()
                .unwrap_or(0);
            match StealPolicy::default().choose_victim(thief, &queues) {
                Some(victim) => {
                    prop_assert!(victim != thief);
                    prop_assert_eq!(queues[victim], longest_other);
                    prop_assert!(longest_other >= 1);
                }
                None => prop_assert_eq!(longest_other, 0),
            }
        }

        #[test]
        fn early_binding_is_in_range(hash in proptest::num::u64::ANY, workers in 1usize..64) {
            prop_assert!(early_binding_worker(hash, workers) < workers);
        }
    }
}
