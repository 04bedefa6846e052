//! Early binding: a request runs on the core that owns its key ([`decide::place`]). The NIC
//! steers it there (MICA), or, in software, the connection's home core reads and parses it
//! and hands it over, as the server's early-binding worker does.
//!
//! [`decide::place`]: crate::decide::place

use std::collections::VecDeque;

use super::host::{owner, Host, Job, Stage, Strategy};
use crate::policy::Policy;
use crate::settings::Steering;

/// Software-steered early binding: connections one read batch takes, as the server's
/// early-binding worker asks `epoll_wait` for 16 events.
pub const EVENTS_PER_WAIT: usize = 16;

/// A core's reading under software steering.
#[derive(Debug, Default)]
struct CoreReads {
    /// Connections homed here with requests not read yet, in the order they became readable
    /// (the epoll ready list).
    readable: VecDeque<u32>,
    /// The read batch in progress (one `epoll_wait`'s connections), not yet reached.
    batch: VecDeque<u32>,
    /// The connection being read and how many of its requests that read took.
    reading: Option<(u32, usize)>,
    /// Requests sent on connections homed here and not read yet.
    unread: usize,
    /// Jobs left in the queue turn in progress (the jobs queued when the turn started).
    turn: usize,
    /// A read batch was taken: when it ends, the next worker step starts with a queue turn.
    turn_due: bool,
}

/// A connection's reading under software steering.
#[derive(Debug, Default)]
struct ConnReads {
    /// Requests sent and not read yet, in order.
    unread: VecDeque<u32>,
    /// In its home core's readable list or read batch.
    listed: bool,
    /// Requests read and not finished (the server's per-connection `in_flight`).
    released: u32,
}

/// Early binding: its steering and, in software, the reading state.
#[derive(Debug)]
pub struct EarlyBinding {
    steering: Steering,
    cores: Vec<CoreReads>,
    conns: Vec<ConnReads>,
}

impl EarlyBinding {
    /// Early binding on `workers` cores serving `connections` connections.
    pub fn new(steering: Steering, workers: usize, connections: u32) -> EarlyBinding {
        EarlyBinding {
            steering,
            cores: (0..workers).map(|_| CoreReads::default()).collect(),
            conns: (0..connections).map(|_| ConnReads::default()).collect(),
        }
    }
}

impl Strategy for EarlyBinding {
    const KIND: Policy = Policy::EarlyBinding;

    fn arrive<H: Host<Strategy = Self>>(host: &mut H, req: u32) {
        match host.strategy().steering {
            Steering::Nic => host.submit(Job::new(req, Stage::Full)),
            Steering::Software => {
                let request = host.request(req);
                let home = request.conn as usize % host.workers();
                let state = host.strategy();
                let conn = &mut state.conns[request.conn as usize];
                conn.unread.push_back(req);
                state.cores[home].unread += 1;
                if !conn.listed {
                    conn.listed = true;
                    state.cores[home].readable.push_back(request.conn);
                }
                host.try_start(home);
            }
        }
    }

    fn next_job<H: Host<Strategy = Self>>(host: &mut H, core: usize) -> Option<Job> {
        match host.strategy().steering {
            Steering::Nic => host.queue(core).pop_front(),
            Steering::Software => next_software_job(host, core),
        }
    }

    fn steer<H: Host<Strategy = Self>>(host: &mut H, req: u32, core: usize) -> (bool, bool) {
        let request = host.request(req);
        let owner = owner(Self::KIND, request.key_hash, core, host.workers());
        let conn = &mut host.strategy().conns[request.conn as usize];
        let alone = conn.released == 0;
        conn.released += 1;
        (owner == core, alone)
    }

    fn finished(&mut self, conn: u32) {
        if self.steering == Steering::Software {
            let conn = &mut self.conns[conn as usize];
            conn.released = conn.released.saturating_sub(1);
        }
    }

    fn unread(&self, core: usize) -> usize {
        self.cores[core].unread
    }
}

/// Software-steered early binding: the next job of core `core`, in the order of the
/// server's early-binding worker loop (`run_queued`, then `poll_and_serve`): the read
/// batch in progress goes on to its end (each connection read once, taking the requests
/// it has when its turn comes); between batches a turn of the queue runs (the jobs
/// queued when the turn starts, not those arriving during it); then the next batch takes
/// up to [`EVENTS_PER_WAIT`] readable connections. With nothing readable, the queue's
/// wake-up starts another turn.
fn next_software_job<H: Host<Strategy = EarlyBinding>>(host: &mut H, core: usize) -> Option<Job> {
    loop {
        let state = host.strategy();
        if let Some((conn, left)) = state.cores[core].reading {
            if left > 0 {
                if let Some(req) = state.conns[conn as usize].unread.pop_front() {
                    state.cores[core].reading = Some((conn, left - 1));
                    state.cores[core].unread -= 1;
                    return Some(Job::new(req, Stage::Steer));
                }
            }
            // Re-armed: readable again if more arrived while it was being read.
            state.cores[core].reading = None;
            let reads = &mut state.conns[conn as usize];
            if reads.unread.is_empty() {
                reads.listed = false;
            } else {
                state.cores[core].readable.push_back(conn);
            }
            continue;
        }
        if let Some(conn) = state.cores[core].batch.pop_front() {
            let left = state.conns[conn as usize].unread.len();
            state.cores[core].reading = Some((conn, left));
            continue;
        }
        let queued = host.queue(core).len();
        let reads = &mut host.strategy().cores[core];
        if reads.turn_due {
            reads.turn_due = false;
            reads.turn = queued;
        }
        if reads.turn > 0 {
            reads.turn -= 1;
            if let Some(job) = host.queue(core).pop_front() {
                return Some(job);
            }
            host.strategy().cores[core].turn = 0;
        }
        let reads = &mut host.strategy().cores[core];
        if reads.readable.is_empty() {
            if queued == 0 {
                return None;
            }
            reads.turn = queued;
            continue;
        }
        let take = reads.readable.len().min(EVENTS_PER_WAIT);
        let batch: Vec<u32> = reads.readable.drain(..take).collect();
        reads.batch.extend(batch);
        reads.turn_due = true;
    }
}
