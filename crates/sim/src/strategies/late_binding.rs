//! Late binding: one core is the dispatcher (it reads and parses every request), the others
//! take parsed requests from one central queue as they become idle
//! ([`decide::shared_queue_taker`]); with `serialize_connections`, a connection's next
//! request waits for its previous one.

use std::collections::VecDeque;

use super::host::{Event, Host, Job, Stage, Strategy};
use crate::decide;
use crate::policy::Policy;
use crate::time::Nanos;

/// Late binding: the dispatcher and the central queue.
#[derive(Debug, Default)]
pub struct LateBinding {
    /// Requests the dispatcher has not parsed yet.
    input: VecDeque<u32>,
    /// The request it is parsing.
    current: Option<u32>,
    busy_ns: u64,
    /// Parsed requests waiting for a worker.
    central: VecDeque<Job>,
    rotation: u64,
    serialize_connections: bool,
}

impl LateBinding {
    /// A dispatcher with nothing to do; `serialize_connections` as
    /// [`RunConfig::serialize_connections`](crate::settings::RunConfig::serialize_connections).
    pub fn new(serialize_connections: bool) -> LateBinding {
        LateBinding {
            serialize_connections,
            ..LateBinding::default()
        }
    }
}

impl Strategy for LateBinding {
    const KIND: Policy = Policy::LateBinding;

    fn arrive<H: Host<Strategy = Self>>(host: &mut H, req: u32) {
        host.strategy().input.push_back(req);
        try_dispatch(host);
    }

    fn next_job<H: Host<Strategy = Self>>(host: &mut H, _core: usize) -> Option<Job> {
        host.strategy().central.pop_front()
    }

    fn release<H: Host<Strategy = Self>>(host: &mut H, job: Job) {
        host.strategy().central.push_back(job);
        let busy = host.busy();
        let rotation = host.strategy().rotation;
        let taker = decide::shared_queue_taker(Self::KIND, None, &busy, rotation);
        if let Some(core) = taker {
            let state = host.strategy();
            state.rotation = state.rotation.wrapping_add(1);
            host.try_start(core);
        }
    }

    fn serializes(&self) -> bool {
        self.serialize_connections
    }

    fn on_dispatch_done<H: Host<Strategy = Self>>(host: &mut H) {
        if let Some(req) = host.strategy().current.take() {
            host.submit(Job::new(req, Stage::LateWork));
        }
        try_dispatch(host);
    }

    fn queue_lengths(&self) -> [usize; 3] {
        [self.central.len(), self.input.len(), 0]
    }

    fn extra_busy_ns(&self) -> Option<u64> {
        Some(self.busy_ns)
    }
}

/// The idle dispatcher starts parsing its next request.
fn try_dispatch<H: Host<Strategy = LateBinding>>(host: &mut H) {
    if host.strategy().current.is_some() {
        return;
    }
    let Some(req) = host.strategy().input.pop_front() else {
        return;
    };
    let request = host.request(req);
    let cost = host.cost();
    let fixed = (request.work_ns - request.transfer_ns) as f64;
    let duration = Nanos::from_f64(cost.parse_share * fixed + cost.dispatch_ns).0;
    host.set_started(req);
    let state = host.strategy();
    state.current = Some(req);
    state.busy_ns += duration;
    let at = host.now() + Nanos(duration);
    host.push_event(at, Event::DispatchDone);
}
