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
pub mod route;
pub mod timeout;
pub mod warmup;

use std::sync::Arc;

use crate::cluster::Cluster;
use crate::error::ClientError;

pub use route::{BuildContext, Route, RouteBuilder, RouteSpec};

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
