//! What a dispatch policy needs from the runtime that runs it, and no more: the host trait
//! a policy drives workers through ([`WorkerHost`], which `runtime::Runtime` implements), and
//! the small types its calls take ([`Charge`], [`FlushMode`]). Policies never see the
//! runtime's sessions, epolls or emulators.

use std::sync::Arc;
use std::time::Instant;

use tailtrim_policy::costspec::Units;
use tailtrim_proto::reply::ReplyBuf;

use crate::rxtime::Arrival;
use crate::session::{Conn, Job};

/// What a request costs in emulated service time: its units, from the
/// instant the completing worker started on it.
#[derive(Debug, Clone, Copy)]
pub struct Charge {
    /// Keys and bytes of the request.
    pub units: Units,
    /// When the worker that completes it started on it.
    pub started: Instant,
    /// The request is a quiet meta command (`mg … q`): its connection's batch goes on after
    /// it, and the next request pays no fixed cost ([`crate::emulate::BatchDraw`]).
    pub quiet_meta: bool,
}

impl Charge {
    /// A request of `keys` keys and `bytes` bytes, started at `started`, not a quiet meta
    /// command.
    pub fn new(started: Instant, keys: usize, bytes: u64) -> Charge {
        Charge {
            units: Units {
                keys: keys as u64,
                bytes,
            },
            started,
            quiet_meta: false,
        }
    }

    /// The same charge, for a quiet meta command if `quiet_meta`.
    pub fn quiet_meta(self, quiet_meta: bool) -> Charge {
        Charge { quiet_meta, ..self }
    }
}

/// A request's finished reply, as handed to [`WorkerHost::complete`].
#[derive(Debug)]
pub struct Completion {
    /// The request's place in its connection's reply order.
    pub seq: u64,
    /// The reply's bytes.
    pub reply: ReplyBuf,
    /// When the reply is written out.
    pub mode: FlushMode,
    /// The emulated service cost the completing worker is first held for, if any.
    pub charge: Option<Charge>,
}

/// When the runtime writes a completed reply out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushMode {
    /// Queue only: the reader flushes after its batch (pipelined replies
    /// share one `writev`).
    Deferred,
    /// Write what the socket takes now.
    NonBlocking,
    /// Wait for the socket (large workers do the costly send).
    Blocking,
}

/// The runtime as a policy sees it.
pub trait WorkerHost: Sync {
    /// True once shutdown has begun.
    fn stopping(&self) -> bool;

    /// Waits up to `timeout_ms` on epoll `index` and serves what is ready on worker
    /// `worker` (as many connections as the policy takes per wait). True if it served
    /// something.
    fn poll_and_serve(
        &self,
        index: usize,
        worker: usize,
        tokens: &mut Vec<u64>,
        timeout_ms: i32,
    ) -> bool;

    /// Runs a job handed to worker `worker`.
    fn run_job(&self, job: Job, worker: usize);

    /// Fills the reply slot `done.seq` of `conn` and writes whatever is now in order
    /// (`done.mode`), the worker first held for the `done.charge`d emulated cost, if any.
    fn complete(&self, conn: &Arc<Conn>, worker: usize, done: Completion);

    /// Counts a request in its class and, if its read was sampled, records its
    /// server-side latency (since `since.at`).
    fn record_latency(&self, worker: usize, large: bool, since: Arrival);
}
