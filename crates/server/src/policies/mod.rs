//! The dispatch policies as strategies of the one runtime ([`crate::runtime`]).
//!
//! Each policy is a small object that answers two questions, and holds the
//! state only it needs (queues, controller, counters):
//! - **where does this request run** ([`Policy::place`], which is
//!   `tailtrim_policy::dispatch::place`, as in the simulator): inline on the
//!   worker that read it, on worker *i*, or on any idle worker; size-aware
//!   also decides after executing whether a large reply (or the receive of a
//!   large value) moves to a large worker ([`Policy::hands_off`],
//!   [`Policy::finish_inline`], [`Policy::wants_large_receive`]);
//! - **what does a worker do** when it comes round ([`Policy::worker_step`]):
//!   wait on its own epoll, on the shared one, on a job queue
//!   ([`Policy::takes_shared_queue`]), or steal ([`Policy::steal_victim`]).
//!
//! The decisions are calls into `tailtrim_policy` (`dispatch`, `sizeaware`), the same the
//! simulator makes; `same_decisions` (a test) feeds both one event sequence.
//!
//! A policy sees the runtime through a narrow host trait ([`host::WorkerHost`]: serve a
//! ready epoll, run a job, complete a reply, record a latency, shutdown), so dependencies
//! run one way: `runtime` → `policies` (this module, the factory [`build`]) → each policy →
//! `strategy` (the [`Policy`] trait) → `host`.
//!
//! ```text
//!            ┌─────────── Runtime (sessions, epolls, sequencing, flush) ───────────┐
//!   worker i ─► policy.worker_step(host, i) ─► host.poll_and_serve / host.run_job │
//!   reader   ─► parse ─► policy.place(key, reader) ─► Inline | Worker(i) | Any     │
//!            └──────────────── implements host::WorkerHost ────────────────────────┘
//!   build(config) ─► pinned.rs  size_aware.rs (+ measure.rs)  early_binding.rs  stealing.rs
//!                    late_binding.rs   ──► strategy.rs (Policy, Executed, …) ──► host.rs
//! ```

mod early_binding;
mod help_bell;
pub mod host;
mod late_binding;
mod measure;
mod pinned;
mod size_aware;
mod stealing;
pub mod strategy;

#[cfg(test)]
mod same_decisions;

pub use host::{Charge, Completion, FlushMode, WorkerHost};
pub(crate) use strategy::IDLE_WAIT_MS;
pub use strategy::{
    EpollLayout, Executed, InlineReply, Placement, Policy, PolicyStats, Registration,
};

use crate::config::{DispatchPolicy, ServerConfig};

/// Builds the configured policy.
pub fn build(config: &ServerConfig) -> std::io::Result<Box<dyn Policy>> {
    let workers = config.workers.threads;
    Ok(match config.workers.dispatch {
        DispatchPolicy::Pinned => Box::new(pinned::Pinned { workers }),
        DispatchPolicy::SizeAware => Box::new(size_aware::SizeAware::new(config)),
        DispatchPolicy::EarlyBinding => Box::new(early_binding::EarlyBinding::new(
            workers,
            config.workers.queue_discipline(),
        )?),
        DispatchPolicy::Stealing => Box::new(stealing::Stealing::new(workers)),
        DispatchPolicy::LateBinding => Box::new(late_binding::LateBinding::new(
            workers,
            config.workers.queue_discipline(),
        )),
    })
}
