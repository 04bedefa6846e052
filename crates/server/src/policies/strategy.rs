//! The dispatch policy's contract ([`Policy`]) and what it decides with: the layout of
//! epolls, what an inline execution reports ([`Executed`]), the policy's `stats`. A policy
//! drives the runtime only through [`WorkerHost`].

use std::sync::Arc;

use tailtrim_policy::dispatch::{self, key_hash};
use tailtrim_proto::reply::ReplyBuf;

use super::host::{Charge, Completion, FlushMode, WorkerHost};
use crate::config::DispatchPolicy;
use crate::session::{Conn, Job, ReadSide};

/// How long a blocked thread sleeps before re-checking roles and shutdown.
pub(crate) const IDLE_WAIT_MS: i32 = 5;

/// Class boundary for latency statistics of policies without a threshold.
pub(crate) const STATS_CLASS_THRESHOLD: u64 = 16 * 1024;

/// How connections are spread over epoll instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EpollLayout {
    /// One epoll per worker; a connection's home is one of them.
    PerWorker,
    /// One epoll every reader waits on.
    Shared,
}

/// How a connection is registered in its epoll, and so what keeps one reader at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registration {
    /// Level-triggered one-shot: an event disarms the connection until its reader re-arms
    /// it (an `epoll_ctl` per request); works whoever waits on the epoll.
    OneShot,
    /// Level-triggered and armed until the interest changes: only the connection's home
    /// worker ever waits on its epoll and reads it (no re-arm per request).
    Armed,
    /// Edge-triggered and armed until the interest changes, on an epoll several workers
    /// wait on: the connection's `ReadOwner` keeps one reader at a time
    /// (no re-arm per request; `crate::epoll`).
    EdgeTriggered,
}

/// Where a parsed request runs (the policy crate's, shared with the simulator; a
/// [`Placement::Worker`] runs in order with the connection's other requests through
/// [`crate::session::ExecQueue`]).
pub use tailtrim_policy::dispatch::Placement;

/// What the runtime knows about a request it executed inline.
#[derive(Debug, Clone, Copy)]
pub struct Executed {
    /// Size the request is classified by: the declared value length of a
    /// storage command, else the reply length.
    pub size: u64,
    /// It accessed an item (a stored value or a hit), so its size is a sample.
    pub accessed: bool,
    /// A storage command (its value was received with the request).
    pub storage: bool,
    /// Its emulated service cost, charged by whoever completes it.
    pub charge: Charge,
}

/// A request executed inline by its reader, its reply not yet queued.
#[derive(Debug)]
pub struct InlineReply {
    /// The request's place in its connection's reply order.
    pub seq: u64,
    /// The reply's bytes.
    pub reply: ReplyBuf,
    /// What executing it found.
    pub executed: Executed,
    /// A large worker took the connection over to receive a value.
    pub receiving: bool,
    /// When the request arrived (and whether its latency is sampled).
    pub arrived_at: crate::rxtime::Arrival,
    /// The worker that executed it.
    pub worker: usize,
}

/// A dispatch policy.
pub trait Policy: Send + Sync {
    /// Which one.
    fn kind(&self) -> DispatchPolicy;

    /// How connections are spread over epolls.
    fn layout(&self) -> EpollLayout;

    /// Most ready connections one `epoll_wait` hands a worker: more than one
    /// only where the epoll is the worker's alone.
    fn events_per_wait(&self) -> usize {
        1
    }

    /// How connections are registered in their epoll ([`Registration`]).
    fn registration(&self) -> Registration {
        Registration::OneShot
    }

    /// Workers the policy dispatches over.
    fn workers(&self) -> usize;

    /// Where a request runs ([`dispatch::place`]). `key` is its key when it has exactly one
    /// (`None` for multi-key and keyless requests and for error replies); `reader` is the
    /// worker that parsed it.
    fn place(&self, key: Option<&[u8]>, reader: usize) -> Placement {
        dispatch::place(self.kind(), reader, self.workers(), || key.map(key_hash))
    }

    /// Stealing: the worker the idle `thief` takes a ready connection from
    /// ([`dispatch::steal_victim`]); `ready` probes a victim (and serves what it finds).
    fn steal_victim(&self, _thief: usize, _ready: &mut dyn FnMut(usize) -> bool) -> Option<usize> {
        None
    }

    /// Size-aware: whether a request of `size` bytes executed inline moves to the large
    /// queue under the decision in force.
    fn hands_off(&self, _size: u64) -> bool {
        false
    }

    /// Whether worker `worker` takes jobs from the policy's one shared queue (late binding:
    /// every worker; size-aware: the large workers, see `PackedDecision::takes_large_queue`).
    fn takes_shared_queue(&self, _worker: usize) -> bool {
        false
    }

    /// Hands `job` to worker `target` (or to the policy's shared queue).
    fn release(&self, _rt: &dyn WorkerHost, _target: usize, _job: Job) {}

    /// One turn of worker `worker`'s loop.
    fn worker_step(&self, rt: &dyn WorkerHost, worker: usize, tokens: &mut Vec<u64>);

    /// Worker `worker` took `events` ready events off epoll `index` and serves them now
    /// (size-aware: a small worker counts itself busy, [`Policy::worker_step`] uncounts it).
    fn took_events(&self, _index: usize, _worker: usize, _events: usize) {}

    /// A wake-up descriptor per epoll (`index`), for policies that hand jobs
    /// to a worker blocked in `epoll_wait`.
    fn wake_fd(&self, _index: usize) -> Option<std::os::fd::RawFd> {
        None
    }

    /// The wake-up descriptor of epoll `index` fired on `worker`.
    fn on_wake(&self, _rt: &dyn WorkerHost, _index: usize, _worker: usize) {}

    /// Name of the policy's extra thread (dispatcher, controller), if any.
    fn helper_thread(&self) -> Option<&'static str> {
        None
    }

    /// Body of that thread.
    fn run_helper(&self, _rt: &dyn WorkerHost) {}

    /// True when the buffer starts with a large value still arriving that a
    /// large worker should receive (size-aware).
    fn wants_large_receive(&self, _read: &ReadSide) -> bool {
        false
    }

    /// Moves the receive of a large value to a large worker (size-aware).
    fn hand_off_receive(&self, _rt: &dyn WorkerHost, _conn: &Arc<Conn>) {}

    /// The size above which a request counts as large in latency statistics.
    fn class_threshold(&self) -> u64;

    /// Queues the reply of a request executed inline: by default in place,
    /// written after the reader's batch.
    fn finish_inline(&self, rt: &dyn WorkerHost, conn: &Arc<Conn>, done: InlineReply) {
        let (worker, large) = (done.worker, done.executed.size > self.class_threshold());
        let completion = Completion {
            seq: done.seq,
            reply: done.reply,
            mode: FlushMode::Deferred,
            charge: Some(done.executed.charge),
        };
        rt.complete(conn, worker, completion);
        rt.record_latency(worker, large, done.arrived_at);
    }

    /// `stats sizeaware` entries of the policy's own state.
    fn stats(&self, workers: usize) -> PolicyStats {
        PolicyStats {
            small_workers: workers,
            threshold: None,
            ..PolicyStats::default()
        }
    }

    /// Zeroes the policy's counters (`stats reset`).
    fn reset_stats(&self) {}

    /// Moves the size-aware split to `small` small workers now, as an epoch
    /// decision would (tests and experiments); other policies ignore it.
    fn set_split(&self, _small: usize) {}
}

/// The policy's state as `stats sizeaware` shows it.
#[derive(Debug, Clone, Default)]
pub struct PolicyStats {
    /// Workers that read requests (size-aware: small workers).
    pub small_workers: usize,
    /// Size-aware threshold, if any.
    pub threshold: Option<u64>,
    /// Requests handed from a small to a large worker.
    pub handoffs: u64,
    /// Connections taken from another worker's epoll.
    pub steals: u64,
    /// Controller epochs run.
    pub epochs: u64,
    /// The controller's last decision, rendered.
    pub decision: Vec<(&'static str, String)>,
}
