//! Pinned (memcached-like): a connection's requests run on its home core, in its queue.

use super::host::{Host, Job, Stage, Strategy};
use crate::policy::Policy;

/// Pinned: no state of its own.
#[derive(Debug, Default)]
pub struct Pinned;

impl Strategy for Pinned {
    const KIND: Policy = Policy::Pinned;

    fn arrive<H: Host<Strategy = Self>>(host: &mut H, req: u32) {
        let core = host.request(req).conn as usize % host.workers();
        host.queue(core).push_back(Job::new(req, Stage::Full));
        host.try_start(core);
    }

    fn next_job<H: Host<Strategy = Self>>(host: &mut H, core: usize) -> Option<Job> {
        host.queue(core).pop_front()
    }
}
