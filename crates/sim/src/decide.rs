//! The simulator's dispatch decisions: each is a call into `tailtrim_policy` with the
//! simulated state in the form the server has it, so a simulated core decides what a server
//! worker would. The engine's strategies (`strategies/*.rs`) make every decision through here; the server's
//! `policies::same_decisions` test feeds one event sequence to these and to the server's
//! policy objects.
//!
//! ```text
//!  arrival ─► place(policy, reader, workers, key hash) ─► Inline | Worker(owner) | AnyWorker
//!  idle thief ─► steal_victim(policy, thief, backlogs) ─► first in thief+1, … with a backlog
//!  small core done ─► hands_off(decision, size) ─► the large queue
//!  shared queue (size-aware large queue, late-binding queue) ─► takes_shared_queue(core)?
//!      a job put in it ─► shared_queue_taker(idle cores) (the server: whichever wakes first)
//!  epoch ─► end_epoch(driver, merged histogram, busy) ─► EpochDriver::tick ─► PackedDecision
//! ```

use tailtrim_policy::dispatch::{self, DispatchPolicy, Placement};
use tailtrim_policy::sizeaware::{EpochDriver, PackedDecision, RoleBusy, SizeClass, SizeHistogram};

/// Where a request that core `reader` read runs ([`dispatch::place`]).
pub fn place(policy: DispatchPolicy, reader: usize, workers: usize, key_hash: u64) -> Placement {
    dispatch::place(policy, reader, workers, || Some(key_hash))
}

/// Stealing: the core the idle `thief` takes a connection from
/// ([`dispatch::steal_victim`]); a core has a ready connection when a request waits in its
/// queue (`backlogs`, indexed by core; the one it is serving does not count). `None` under
/// every other policy.
pub fn steal_victim(policy: DispatchPolicy, thief: usize, backlogs: &[usize]) -> Option<usize> {
    if policy != DispatchPolicy::Stealing {
        return None;
    }
    dispatch::steal_victim(thief, backlogs.len(), |victim| backlogs[victim] > 0)
}

/// Size-aware: whether a small core hands a request of `size` bytes to the large queue under
/// `decision` (`None`: not size-aware, never).
pub fn hands_off(decision: Option<PackedDecision>, size: u64, workers: usize) -> bool {
    decision.is_some_and(|decision| decision.class_of(size, workers) == SizeClass::Large)
}

/// Size-aware: ends an epoch whose cores recorded `merged` and were busy `busy` by role;
/// returns the decision to publish ([`EpochDriver::tick`]).
pub fn end_epoch(
    driver: &mut EpochDriver,
    merged: &SizeHistogram,
    busy: RoleBusy,
) -> PackedDecision {
    driver.tick(merged, busy);
    driver.published()
}

/// Whether core `core` takes from the policy's shared queue: every core under late binding,
/// the large cores (or every core while none is large) under size-aware.
pub fn takes_shared_queue(
    policy: DispatchPolicy,
    decision: Option<PackedDecision>,
    core: usize,
    workers: usize,
) -> bool {
    match (policy, decision) {
        (DispatchPolicy::LateBinding, _) => true,
        (DispatchPolicy::SizeAware, Some(decision)) => decision.takes_large_queue(core, workers),
        _ => false,
    }
}

/// The core that starts a job just put in the shared queue: an idle core that takes from it
/// ([`dispatch::idle_taker`]); `busy` is indexed by core.
pub fn shared_queue_taker(
    policy: DispatchPolicy,
    decision: Option<PackedDecision>,
    busy: &[bool],
    rotation: u64,
) -> Option<usize> {
    let workers = busy.len();
    dispatch::idle_taker(
        workers,
        |core| takes_shared_queue(policy, decision, core, workers),
        |core| !busy[core],
        rotation,
    )
}
