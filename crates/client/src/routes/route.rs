//! The contract every route implements ([`Route`]) and what building one receives; the
//! registry and the tree builder sit above it in `routes`, the routes beside each other.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;

use tailtrim_policy::planner::PlannerKind;
use tailtrim_policy::serverq::Discipline;

use crate::cluster::Cluster;
use crate::config::{PoolConfig, ServerSpec};
use crate::connection::{RawReply, ReplyShape};
use crate::error::ClientError;
use crate::pool::{KeyResult, MultigetKind};

/// A single-key request's reply on its way through the tree.
pub type SingleFuture<'a> = BoxFuture<'a, Result<RawReply, ClientError>>;
/// A multiget's per-key outcomes on their way through the tree.
pub type MultigetFuture<'a> = BoxFuture<'a, Vec<KeyResult>>;
/// A broadcast's per-backend results on their way through the tree.
pub type BroadcastFuture<'a> = BoxFuture<'a, Vec<Result<RawReply, ClientError>>>;

/// One layer of the request path. Every request kind goes through every route of the tree;
/// a route that has nothing to do for a kind passes it to its next route.
pub trait Route: Send + Sync {
    /// The name in configurations and logs.
    fn name(&self) -> &'static str;

    /// A single-key read (`get k`, `mg`, `me`): the backend's reply.
    fn read<'a>(&'a self, key: &'a [u8], bytes: Bytes, shape: ReplyShape) -> SingleFuture<'a>;

    /// A single-key write (storage, delete, arithmetic, touch, `ms`, `md`, `ma`).
    fn write<'a>(&'a self, key: &'a [u8], bytes: Bytes, shape: ReplyShape) -> SingleFuture<'a>;

    /// A multi-key read: one outcome per key, in `keys` order.
    fn multiget<'a>(&'a self, keys: &'a [Bytes], kind: MultigetKind) -> MultigetFuture<'a>;

    /// The same request to every backend (`flush_all`); results in backend order.
    fn broadcast<'a>(&'a self, bytes: Bytes, shape: ReplyShape) -> BroadcastFuture<'a>;
}

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

/// What a route's `build` receives: its settings, the route it hands requests to, and the
/// cluster at the leaf (for routes that report what the leaf will decide).
pub struct BuildContext<'a> {
    /// The route's settings.
    pub spec: &'a RouteSpec,
    /// The next route.
    pub next: Arc<dyn Route>,
    /// The membership the tree ends in.
    pub cluster: &'a Arc<Cluster>,
}

/// Builds one route over the next.
pub type RouteBuilder = fn(BuildContext<'_>) -> Result<Arc<dyn Route>, ClientError>;
