//! The dispatch policies and their per-request decisions, as pure functions of what the caller
//! passes in (hashes, worker ids, "is there work" probes). The server's policy objects and the
//! simulator's engine both call these, so both make the same decisions. Workers are numbered
//! `0..workers`.
//!
//! ```text
//!  parsed request ─► place(policy, reader, workers, key hash) ─► Inline | Worker | AnyWorker
//!                      early-binding: owner = early_binding_worker(key_hash(key), workers)
//!  stealing       idle thief ─► steal_victim(thief, workers, ready?) ─► first ready after it
//!  late-binding   AnyWorker ─► one queue ─► taken by whichever worker is idle first
//!  size-aware     sizeaware::PackedDecision::class_of(size) == Large ─► the large queue
//!                 ─► taken by the large workers (sizeaware::PackedDecision::takes_large_queue)
//!  epoch tick     sizeaware::EpochDriver::tick ─► one Decision, published as one PackedDecision
//! ```
//!
//! A job in a queue several workers take from goes to whichever of them is idle first; the
//! server leaves that to the kernel (every idle taker is blocked on the queue), the simulator
//! names one with [`idle_taker`]. Workers are alike, so that choice moves no request earlier
//! or later.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::sizeaware::error::SizeAwareError;

/// How requests reach workers: the server's `--dispatch` and the simulator's policies.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum DispatchPolicy {
    /// Minos: small workers share the incoming requests and serve small ones in place; large
    /// ones go to the large workers' queue; the controller learns threshold and split per epoch.
    SizeAware,
    /// MICA-like: each request runs on the worker that owns its key's hash.
    EarlyBinding,
    /// ZygOS-like: connection → home worker; an idle worker takes a whole ready connection
    /// from another worker ([`steal_victim`]).
    Stealing,
    /// RAMCloud-like: one dispatcher reads every request and hands each to an idle worker.
    LateBinding,
    /// memcached's model: each connection is pinned to one worker (round robin at accept),
    /// which serves all its requests; no stealing.
    #[default]
    Pinned,
}

impl DispatchPolicy {
    /// Every policy, in report order.
    pub const ALL: [DispatchPolicy; 5] = [
        DispatchPolicy::SizeAware,
        DispatchPolicy::EarlyBinding,
        DispatchPolicy::Stealing,
        DispatchPolicy::LateBinding,
        DispatchPolicy::Pinned,
    ];

    /// Every policy's flag spelling, in the order of [`ALL`](Self::ALL).
    pub const NAMES: [&'static str; 5] = [
        "size-aware",
        "early-binding",
        "stealing",
        "late-binding",
        "pinned",
    ];

    /// The flag spelling, as used on command lines and in `stats`.
    pub const fn name(self) -> &'static str {
        match self {
            DispatchPolicy::SizeAware => "size-aware",
            DispatchPolicy::EarlyBinding => "early-binding",
            DispatchPolicy::Stealing => "stealing",
            DispatchPolicy::LateBinding => "late-binding",
            DispatchPolicy::Pinned => "pinned",
        }
    }

    /// Workers that serve requests out of `cores` cores when the dispatcher needs a core of
    /// its own (late binding gives it one).
    pub const fn worker_cores(self, cores: usize) -> usize {
        match self {
            DispatchPolicy::LateBinding => cores.saturating_sub(1),
            _ => cores,
        }
    }
}

impl fmt::Display for DispatchPolicy {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.name())
    }
}

impl FromStr for DispatchPolicy {
    type Err = SizeAwareError;

    /// The flag spellings, case-insensitively, with `_` for `-`; `memcached` means `pinned`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let name = text.trim().to_ascii_lowercase().replace('_', "-");
        if name == "memcached" {
            return Ok(DispatchPolicy::Pinned);
        }
        DispatchPolicy::ALL
            .into_iter()
            .find(|policy| policy.name() == name)
            .ok_or_else(|| SizeAwareError::UnknownDispatchPolicy {
                name: text.to_string(),
                known: &DispatchPolicy::NAMES,
            })
    }
}

/// Where a parsed request runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// On the worker that read it, now.
    Inline,
    /// On worker `target`, in order with the connection's other requests; a `barrier` waits
    /// for every earlier one.
    Worker {
        /// The executing worker.
        target: usize,
        /// Waits for and blocks the connection's other requests.
        barrier: bool,
    },
    /// On whichever worker is idle first, one request of the connection at a time.
    AnyWorker,
}

/// Where a request that worker `reader` parsed runs under `policy`. `key_hash` is asked only
/// when the policy routes by key (early binding); it gives the hash of the request's key when
/// it has exactly one (`None`: multi-key, keyless, or an error reply, which run on the reader
/// as a barrier).
pub fn place(
    policy: DispatchPolicy,
    reader: usize,
    workers: usize,
    key_hash: impl FnOnce() -> Option<u64>,
) -> Placement {
    match policy {
        DispatchPolicy::Pinned | DispatchPolicy::SizeAware | DispatchPolicy::Stealing => {
            Placement::Inline
        }
        DispatchPolicy::LateBinding => Placement::AnyWorker,
        DispatchPolicy::EarlyBinding => match key_hash() {
            Some(hash) => Placement::Worker {
                target: early_binding_worker(hash, workers),
                barrier: false,
            },
            None => Placement::Worker {
                target: reader,
                barrier: true,
            },
        },
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

/// Stealing: the worker the idle `thief` takes a ready connection from. The other workers are
/// probed in cyclic order from `thief + 1`; the first for which `ready` says it has a
/// connection ready (and, for the server, serves it) is the victim. `None`: nobody had one.
///
/// The probe does not look for the longest backlog: the server cannot see how much another
/// worker's epoll holds without a wait per epoll, only whether it holds anything.
pub fn steal_victim(
    thief: usize,
    workers: usize,
    mut ready: impl FnMut(usize) -> bool,
) -> Option<usize> {
    (1..workers)
        .map(|offset| (thief + offset) % workers)
        .find(|&victim| ready(victim))
}

/// The worker that starts a job just put in a queue that the workers `can_take` take from:
/// the first idle taker among `0..workers` scanning from `rotation % workers` (so equal
/// workers share the work), or `None` when every taker is busy (the job waits for the first
/// to free). Only the simulator needs this: in the server every idle taker waits on the queue
/// and the kernel wakes one.
pub fn idle_taker(
    workers: usize,
    can_take: impl Fn(usize) -> bool,
    idle: impl Fn(usize) -> bool,
    rotation: u64,
) -> Option<usize> {
    if workers == 0 {
        return None;
    }
    let start = (rotation % workers as u64) as usize;
    (0..workers)
        .map(|step| (start + step) % workers)
        .find(|&worker| can_take(worker) && idle(worker))
}

#[cfg(test)]
mod tests {
    use super::{
        early_binding_worker, idle_taker, key_hash, key_worker, place, steal_victim,
        DispatchPolicy, Placement,
    };
    use crate::sizeaware::error::SizeAwareError;
    use proptest::prelude::{prop_assert, prop_assert_eq, proptest};

    #[test]
    fn dispatch_policy_names_round_trip() {
        for (policy, name) in DispatchPolicy::ALL.into_iter().zip(DispatchPolicy::NAMES) {
            assert_eq!(policy.name(), name);
            assert_eq!(name.parse::<DispatchPolicy>(), Ok(policy));
            assert_eq!(policy.to_string(), name);
        }
        assert_eq!(
            "Size_Aware".parse::<DispatchPolicy>(),
            Ok(DispatchPolicy::SizeAware)
        );
        assert_eq!(
            "MEMCACHED".parse::<DispatchPolicy>(),
            Ok(DispatchPolicy::Pinned)
        );
        assert_eq!(
            "minos".parse::<DispatchPolicy>(),
            Err(SizeAwareError::UnknownDispatchPolicy {
                name: "minos".to_string(),
                known: &DispatchPolicy::NAMES,
            })
        );
        assert_eq!(DispatchPolicy::LateBinding.worker_cores(8), 7);
        assert_eq!(DispatchPolicy::SizeAware.worker_cores(8), 8);
        assert_eq!(DispatchPolicy::default(), DispatchPolicy::Pinned);
    }

    #[test]
    fn placement_by_policy() {
        let hash = key_hash(b"key:1");
        let owner = early_binding_worker(hash, 4);
        let no_key = || -> Option<u64> { panic!("only early binding asks for the key") };
        for policy in [
            DispatchPolicy::Pinned,
            DispatchPolicy::SizeAware,
            DispatchPolicy::Stealing,
        ] {
            assert_eq!(place(policy, 2, 4, no_key), Placement::Inline);
        }
        assert_eq!(
            place(DispatchPolicy::LateBinding, 2, 4, no_key),
            Placement::AnyWorker
        );
        assert_eq!(
            place(DispatchPolicy::EarlyBinding, 2, 4, || Some(hash)),
            Placement::Worker {
                target: owner,
                barrier: false
            }
        );
        assert_eq!(
            place(DispatchPolicy::EarlyBinding, 2, 4, || None),
            Placement::Worker {
                target: 2,
                barrier: true
            }
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
    fn steal_victim_is_the_first_ready_after_the_thief() {
        let ready = |set: &'static [usize]| move |worker: usize| set.contains(&worker);
        assert_eq!(steal_victim(0, 4, ready(&[2, 3])), Some(2));
        assert_eq!(steal_victim(2, 4, ready(&[0, 1])), Some(0));
        assert_eq!(steal_victim(3, 4, ready(&[1, 2])), Some(1));
        // The thief itself is never probed.
        assert_eq!(steal_victim(1, 3, ready(&[1])), None);
        assert_eq!(steal_victim(0, 1, ready(&[0])), None);
        let mut probed = Vec::new();
        let _ = steal_victim(1, 4, |worker| {
            probed.push(worker);
            false
        });
        assert_eq!(probed, [2, 3, 0]);
    }

    #[test]
    fn idle_taker_takes_the_first_idle_from_the_rotation() {
        let set = |set: &'static [usize]| move |worker: usize| set.contains(&worker);
        let all = |_: usize| true;
        assert_eq!(idle_taker(3, all, set(&[1, 2]), 0), Some(1));
        assert_eq!(idle_taker(3, all, set(&[1, 2]), 2), Some(2));
        assert_eq!(idle_taker(3, all, set(&[]), 0), None);
        assert_eq!(idle_taker(5, set(&[2, 3, 4]), set(&[0, 1, 3]), 0), Some(3));
        assert_eq!(idle_taker(5, set(&[2, 3, 4]), set(&[2, 3, 4]), 4), Some(4));
        assert_eq!(idle_taker(5, set(&[2, 3, 4]), set(&[2, 3]), 4), Some(2));
        assert_eq!(idle_taker(0, all, all, 0), None);
    }

    proptest! {
        #[test]
        fn steal_victim_is_ready_and_nearest(
            ready in proptest::collection::vec(proptest::bool::ANY, 1..9),
            thief_seed in 0usize..64,
        ) {
            let workers = ready.len();
            let thief = thief_seed % workers;
            let nearest = (1..workers)
                .map(|offset| (thief + offset) % workers)
                .find(|worker| ready[*worker]);
            let victim = steal_victim(thief, workers, |worker| ready[worker]);
            prop_assert_eq!(victim, nearest);
            if let Some(victim) = victim {
                prop_assert!(victim != thief && ready[victim]);
            }
        }

        #[test]
        fn early_binding_is_in_range(hash in proptest::num::u64::ANY, workers in 1usize..64) {
            prop_assert!(early_binding_worker(hash, workers) < workers);
        }
    }
}
