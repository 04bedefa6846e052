//! Stealing: a connection's requests queue on its home core; an idle core with an empty queue
//! takes every waiting request of one connection from the first core after it with one
//! ([`decide::steal_victim`]).

use std::collections::VecDeque;

use super::host::{Host, Job, Stage, Strategy};
use crate::decide;
use crate::policy::Policy;
use crate::time::Nanos;

/// Stealing: counts its steals.
#[derive(Debug, Default)]
pub struct Stealing {
    steals: u64,
}

impl Strategy for Stealing {
    const KIND: Policy = Policy::Stealing;

    fn arrive<H: Host<Strategy = Self>>(host: &mut H, req: u32) {
        let workers = host.workers();
        let home = host.request(req).conn as usize % workers;
        host.queue(home).push_back(Job::new(req, Stage::Full));
        host.try_start(home);
        if !host.queue(home).is_empty() {
            for core in 0..workers {
                host.try_start(core);
            }
        }
    }

    fn next_job<H: Host<Strategy = Self>>(host: &mut H, core: usize) -> Option<Job> {
        if host.queue(core).is_empty() {
            steal_into(host, core);
        }
        host.queue(core).pop_front()
    }

    fn steals(&self) -> u64 {
        self.steals
    }
}

/// The idle `thief` takes every waiting request of one connection from the first core after
/// it with a waiting request, in order; the first of them carries the steal's cost.
fn steal_into<H: Host<Strategy = Stealing>>(host: &mut H, thief: usize) {
    let lengths: Vec<usize> = (0..host.workers())
        .map(|core| host.queue(core).len())
        .collect();
    let Some(victim) = decide::steal_victim(Stealing::KIND, thief, &lengths) else {
        return;
    };
    let Some(front) = host.queue(victim).front().map(|job| job.req) else {
        return;
    };
    let conn = host.request(front).conn;
    let queue = std::mem::take(host.queue(victim));
    let (mut taken, kept): (VecDeque<Job>, VecDeque<Job>) = queue
        .into_iter()
        .partition(|job| host.request(job.req).conn == conn);
    *host.queue(victim) = kept;
    if let Some(first) = taken.front_mut() {
        first.extra_ns += Nanos::from_f64(host.cost().steal_ns).0;
    }
    host.queue(thief).extend(taken);
    host.strategy().steals += 1;
}
