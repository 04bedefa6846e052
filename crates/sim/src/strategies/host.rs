//! What a simulated dispatch policy needs from the engine that runs it ([`Host`]), the
//! contract every policy implements ([`Strategy`]), and the small types both speak: a core's
//! [`Job`] and its [`Stage`], the engine's [`Event`]s.
//!
//! A strategy keeps the state only its policy has (queues, dispatcher, controller, read
//! batches) in itself; the engine keeps what every policy has (cores with their own queue,
//! connections' sequencers, the clock, the measurements). Its hooks are associated functions
//! taking the host, so a strategy can start cores (`Host::try_start`), which ask it for their
//! next job, without holding a borrow of itself across the call.

use std::collections::VecDeque;

use tailtrim_policy::sizeaware::PackedDecision;

use crate::cost::CostModel;
use crate::decide;
use crate::policy::Policy;
use crate::settings::RunConfig;
use crate::time::Nanos;
use crate::workload::TraceRequest;

/// A stage of work a core runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// The whole request on one core.
    Full,
    /// Size-aware small core: read, parse, look up; then serve (small) or hand off (large).
    Front {
        /// Handed off to a large core once this stage is done.
        large: bool,
    },
    /// Size-aware large core: the transfer of a handed-off request.
    Back,
    /// Late binding (and software-steered early binding): a worker's part after the
    /// dispatcher (or home core) parsed the request.
    LateWork,
    /// Software-steered early binding: the home core reads, parses, hands off (or, owning
    /// the key with nothing else of the connection in flight, serves it in place).
    Steer,
}

/// A request's stage, queued for or running on a core.
#[derive(Debug, Clone, Copy)]
pub struct Job {
    /// Index of the request in the trace.
    pub req: u32,
    /// What the core does of it.
    pub stage: Stage,
    /// Extra cost charged to this stage (a steal).
    pub extra_ns: u64,
}

impl Job {
    /// Stage `stage` of request `req`, nothing extra.
    pub const fn new(req: u32, stage: Stage) -> Job {
        Job {
            req,
            stage,
            extra_ns: 0,
        }
    }
}

/// An event of the simulation.
#[derive(Debug, Clone, Copy)]
pub enum Event {
    /// Request `.0` is sent.
    Arrival(u32),
    /// Core `.0` finished its current stage.
    Done(usize),
    /// Late binding: the dispatcher finished parsing its current request.
    DispatchDone,
    /// Size-aware: the controller's epoch ends.
    Epoch,
}

/// The engine as a strategy sees it.
pub trait Host {
    /// The policy running.
    type Strategy: Strategy;

    /// The policy's own state.
    fn strategy(&mut self) -> &mut Self::Strategy;
    /// The run's settings.
    fn config(&self) -> &RunConfig;
    /// Worker cores.
    fn workers(&self) -> usize;
    /// Request `req` of the trace.
    fn request(&self, req: u32) -> TraceRequest;
    /// The simulated time.
    fn now(&self) -> Nanos;
    /// Core `core`'s own job queue.
    fn queue(&mut self, core: usize) -> &mut VecDeque<Job>;
    /// Which cores are running a job, by core.
    fn busy(&self) -> Vec<bool>;
    /// Core `core`'s busy time so far.
    fn busy_ns(&self, core: usize) -> u64;
    /// Gives core `core` its next job ([`Strategy::next_job`]) if it is idle.
    fn try_start(&mut self, core: usize);
    /// Hands a parsed request to its core ([`Strategy::release`]), behind its connection's
    /// executing request when the policy serializes connections.
    fn submit(&mut self, job: Job);
    /// Request `req`'s last stage ended on `core`: its reply goes to the sequencer.
    fn finish(&mut self, req: u32, core: usize);
    /// Schedules `event` at `at`.
    fn push_event(&mut self, at: Nanos, event: Event);
    /// Request `req` was started now (by the dispatcher).
    fn set_started(&mut self, req: u32);
    /// Request `req` was handed from a small to a large core.
    fn mark_handed_off(&mut self, req: u32);
    /// A size-aware decision came in force.
    fn note_decision(&mut self, decision: PackedDecision);
    /// The hand-off, steal and dispatch costs.
    fn cost(&self) -> &CostModel {
        &self.config().cost
    }
}

/// A simulated dispatch policy: where an arriving request goes and what an idle core takes
/// next, the decisions being the policy crate's (through [`crate::decide`]).
pub trait Strategy: Sized {
    /// Which policy.
    const KIND: Policy;

    /// The first events, before the first arrival.
    fn start<H: Host<Strategy = Self>>(_host: &mut H) {}

    /// Request `req` arrives.
    fn arrive<H: Host<Strategy = Self>>(host: &mut H, req: u32);

    /// The next job of idle core `core`, if it has one.
    fn next_job<H: Host<Strategy = Self>>(host: &mut H, core: usize) -> Option<Job>;

    /// Puts a parsed request on the core that owns its key (the home core of its connection
    /// reads it, [`decide::place`]) and starts that core.
    fn release<H: Host<Strategy = Self>>(host: &mut H, job: Job) {
        let request = host.request(job.req);
        let workers = host.workers();
        let home = request.conn as usize % workers;
        let owner = owner(Self::KIND, request.key_hash, home, workers);
        host.queue(owner).push_back(job);
        host.try_start(owner);
    }

    /// Whether a connection's requests execute one at a time.
    fn serializes(&self) -> bool {
        false
    }

    /// Size-aware: whether a request of `size` bytes is handed to a large core after its
    /// front stage.
    fn front_is_large(&self, _size: u64, _workers: usize) -> bool {
        false
    }

    /// Software-steered early binding: core `core` read request `req`; returns whether the
    /// core owns its key and whether nothing else of its connection is in flight.
    fn steer<H: Host<Strategy = Self>>(_host: &mut H, _req: u32, _core: usize) -> (bool, bool) {
        (false, false)
    }

    /// Size-aware: the front stage of `req` ended on `core` (`large`: it is handed off).
    fn front_done<H: Host<Strategy = Self>>(host: &mut H, core: usize, req: u32, _large: bool) {
        host.finish(req, core);
    }

    /// Size-aware: a large core finished a handed-off request.
    fn back_done(&mut self) {}

    /// A request of connection `conn` finished.
    fn finished(&mut self, _conn: u32) {}

    /// Size-aware: the controller's epoch.
    fn on_epoch<H: Host<Strategy = Self>>(_host: &mut H) {}

    /// Late binding: the dispatcher finished a request.
    fn on_dispatch_done<H: Host<Strategy = Self>>(_host: &mut H) {}

    /// Requests waiting for core `core` that are not in its job queue (not read yet).
    fn unread(&self, _core: usize) -> usize {
        0
    }

    /// Requests waiting in the policy's shared queue, the dispatcher's input and the large
    /// queue.
    fn queue_lengths(&self) -> [usize; 3] {
        [0; 3]
    }

    /// Busy time of a core the policy adds to the workers (the dispatcher), if any.
    fn extra_busy_ns(&self) -> Option<u64> {
        None
    }

    /// Size-aware hand-offs.
    fn handoffs(&self) -> u64 {
        0
    }

    /// Connections stolen.
    fn steals(&self) -> u64 {
        0
    }

    /// Controller epochs run.
    fn epochs(&self) -> u64 {
        0
    }
}

/// The core that owns a request's key when core `reader` read it ([`decide::place`]).
pub fn owner(policy: Policy, key_hash: u64, reader: usize, workers: usize) -> usize {
    match decide::place(policy, reader, workers, key_hash) {
        tailtrim_policy::dispatch::Placement::Worker { target, .. } => target,
        tailtrim_policy::dispatch::Placement::Inline
        | tailtrim_policy::dispatch::Placement::AnyWorker => reader,
    }
}
