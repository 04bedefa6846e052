//! The request path as a tree of routes, one concern per file, in the spirit of mcrouter's
//! route handles: each route does one job and hands the request to the next.
//!
//! ```text
//!   configured routes, outermost first ([[routes]] in the proxy's TOML; none by default)
//!     logging   logs each request's route decision (owner, outcome, time) at debug level
//!     timeout   bounds a whole request: failovers, the gate's queue, warm-up fallbacks
//!        │
//!        ▼
//!   warmup    the leaf every tree ends in: membership views, warm-up and shadowing
//!        │    (crate::cluster::Cluster; the view's pool serves the request)
//!        ▼
//!   failover  replica choice (C3) and failover of single-key requests   (Pool::read/write)
//!   planner   the multiget planner's plans, fetches and their retries   (Pool::multiget_each;
//!             batch/Chisel/Rein/TailX/cost-sbf decide in tailtrim_policy::planner)
//!   gate      the priority gate in front of a backend's window          (Backend::call_*)
//! ```
//!
//! The routes below `warmup` are fixed layers chosen by the pool's settings (`replicas`,
//! `planner`, `backend_window`, `priority_order`), so a tree built from today's keys alone is
//! the leaf: the request path of a proxy without `[[routes]]`. A new route is a file with a
//! type implementing [`Route`] and a `build` function, plus one line in [`REGISTRY`].

pub mod failover;
pub mod gate;
pub mod logging;
pub mod planner;
pub mod timeout;
pub mod warmup;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;

use crate::cluster::Cluster;
use crate::connection::{RawReply, ReplyShape};
use crate::error::ClientError;
use crate::pool::{KeyResult, MultigetKind};

/// One layer of the request path. Every request kind goes through every route of the tree;
/// a route that has nothing to do for a kind passes it to its next route.
pub trait Route: Send + Sync {
    /// The name in configurations and logs.
    fn name(&self) -> &'static str;

    /// A single-key read (`get k`, `mg`, `me`): the backend's reply.
    fn read<'a>(
        &'a self,
        key: &'a [u8],
        bytes: Bytes,
        shape: ReplyShape,
    ) -> BoxFuture<'a, Result<RawReply, ClientError>>;

    /// A single-key write (storage, delete, arithmetic, touch, `ms`, `md`, `ma`).
    fn write<'a>(
        &'a self,
        key: &'a [u8],
        bytes: Bytes,
        shape: ReplyShape,
    ) -> BoxFuture<'a, Result<RawReply, ClientError>>;

    /// A multi-key read: one outcome per key, in `keys` order.
    fn multiget<'a>(
        &'a self,
        keys: &'a [Bytes],
        kind: MultigetKind,
    ) -> BoxFuture<'a, Vec<KeyResult>>;

    /// The same request to every backend (`flush_all`); results in backend order.
    fn broadcast<'a>(
        &'a self,
        bytes: Bytes,
        shape: ReplyShape,
    ) -> BoxFuture<'a, Vec<Result<RawReply, ClientError>>>;
}

/// One configured route: its `type` and the settings routes may take.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RouteSpec {
    /// The route's name in [`REGISTRY`].
    pub kind: String,
    /// `timeout`: the bound on a whole request.
    pub timeout: Option<Duration>,
}

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

/// Every route a configuration may name (the leaf, `warmup`, is always there).
pub const REGISTRY: &[(&str, RouteBuilder)] =
    &[("logging", logging::build), ("timeout", timeout::build)];

/// The names a configuration may use in `[[routes]]`.
pub fn route_names() -> Vec<&'static str> {
    REGISTRY.iter().map(|(name, _)| *name).collect()
}

/// Builds the tree: `specs` outermost first, ending in the `warmup` leaf over `cluster`.
pub fn build_tree(
    cluster: &Arc<Cluster>,
    specs: &[RouteSpec],
) -> Result<Arc<dyn Route>, ClientError> {
    let mut route: Arc<dyn Route> = Arc::new(warmup::WarmupRoute::new(cluster.clone()));
    for spec in specs.iter().rev() {
        let builder = REGISTRY
            .iter()
            .find(|(name, _)| *name == spec.kind)
            .map(|(_, builder)| *builder)
            .ok_or_else(|| {
                ClientError::Config(format!(
                    "route type {:?}: expected one of {}",
                    spec.kind,
                    route_names().join(", ")
                ))
            })?;
        route = builder(BuildContext {
            spec,
            next: route,
            cluster,
        })?;
    }
    Ok(route)
}
