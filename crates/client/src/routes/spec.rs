//! What a configuration says of one route ([`RouteSpec`]) and how a pool layer takes it
//! ([`PoolLayerConfigure`]); it names neither the routes nor the pool, so the pool's layers
//! (the gate among them, which the backends use) can read it.

use std::time::Duration;

use tailtrim_policy::planner::PlannerKind;
use tailtrim_policy::serverq::Discipline;

use crate::config::{PoolConfig, ServerSpec};
use crate::error::ClientError;

/// One configured route: its `type` and the settings routes may take.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RouteSpec {
    /// The route's name in `routes::REGISTRY`.
    pub kind: String,
    /// `timeout`: the bound on a whole request.
    pub timeout: Option<Duration>,
    /// `failover`: copies of each key (default: the pool's `replicas`).
    pub replicas: Option<usize>,
    /// `planner`: the multiget planner (default: the pool's `planner`).
    pub planner: Option<PlannerKind>,
    /// `gate`: requests in flight per backend (default: the pool's window).
    pub window: Option<usize>,
    /// `gate`: the order the queue serves the classes in (default: the pool's).
    pub priority_order: Option<Discipline>,
    /// `shadow`: the servers requests are mirrored to.
    pub servers: Vec<ServerSpec>,
    /// `shadow`: one request in this many is mirrored (default 1: every request).
    pub sample_every: Option<u32>,
}

/// What a pool layer's `configure` receives: its settings (`None` when the configuration
/// lists pool layers but not this one, which turns its concern off) and the pool's
/// configuration built from the `[pool]` keys, which it completes.
pub type PoolLayerConfigure = fn(Option<&RouteSpec>, &mut PoolConfig) -> Result<(), ClientError>;
