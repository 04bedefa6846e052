//! tailtrim-client: an async memcached client over a pool of backends.
//!
//! ```text
//!  application / tailtrim-proxy
//!        │ read(key) · write(key) · multiget(keys) · broadcast
//!        ▼
//!  routes::Route tree ── configured routes (logging, timeout …), outermost first
//!        ▼
//!  cluster::Cluster ── the tree's leaf (routes::warmup) · versioned view (add/remove/re-weight
//!        │            at runtime) · hot-key trackers · warm-up: preemptive copies, fallback
//!        │            reads, write fences
//!        ▼
//!  pool::Pool ── ring (policy::ring) ── planner (policy::planner) ── health (policy::health)
//!        │ single keys: routes::failover (replica choice, failover); multigets: routes::planner
//!        │ multiget fetches: shaping (query slots, injected setup, Chisel's merging of mice,
//!        │                   the online analyzer retuning B and L: model::chisel_online)
//!        │ one per server
//!        ▼
//!        │ tailx: not_before ─► sched::DelayQueue (runtime timer) ─┐
//!        ▼                                                           ▼
//!  backend::Backend ── TKO tracker · EWMA · outstanding · stats · routes::gate (window +
//!        │             policy::serverq: strict by default, drr as configured)
//!        │ round-robin over N lazily opened connections (dial: connect, then the `-Y`
//!        ▼  login when the pool has credentials)
//!  connection::Connection ── writer task ─► socket ─► reader task (replies in order)
//! ```
//!
//! Every decision (which server, which replica, how to split a multiget, when a server is down)
//! is made by the pure `tailtrim-policy` crate; this crate owns the sockets, timers and clock.
//! Requests are bounded by a timeout; a timeout closes the connection so a late reply can never
//! be taken for another request's. A backend that failed `failure_limit` times in a row is
//! skipped (requests for it fail fast or go to a replica) until a probe succeeds.

pub mod backend;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod connection;
pub mod dial;
pub mod dump;
pub mod error;
pub mod pool;
pub mod routes;
pub mod sched;
pub mod shaping;
pub mod stats;
#[cfg(feature = "testkit")]
pub mod testkit;

pub use cluster::{ChangeReport, Cluster, ClusterStatus};
pub use config::{PoolConfig, ServerSpec};
pub use connection::{RawReply, ReplyShape, ValueItem};
pub use dial::{BackendLogin, BackendTls, Dialer};
pub use error::ClientError;
pub use pool::{KeyResult, MultigetKind, Pool, Value};
pub use routes::{build_tree, configure_pool, Route, RouteSpec};
