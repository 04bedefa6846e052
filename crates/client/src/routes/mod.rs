//! The request path as a tree of routes, one concern per file, in the spirit of mcrouter's
//! route handles: each route does one job and hands the request to the next. The tree is
//! composed from the configuration's routes, outermost first, in three tiers:
//!
//! ```text
//!   above the membership view: route objects over the next one   (Layer::Above)
//!     logging   logs each request's route decision (owner, outcome, time) at debug level
//!     timeout   bounds a whole request: failovers, the gate's queue, warm-up fallbacks
//!     shadow    mirrors a sampled share of requests to a second pool, replies dropped
//!        │
//!        ▼
//!   warmup    the leaf every tree ends in: membership views, warm-up and shadowing   (Membership)
//!        │    (crate::cluster::Cluster; the view's pool serves the request)
//!        ▼
//!   the pool's layers, in this order, dispatched statically inside each view's pool (Pool)
//!   failover  replica choice (C3) and failover of single-key requests   (Pool::read/write)
//!   planner   the multiget planner's plans, fetches and their retries   (Pool::multiget_each;
//!             batch/Chisel/Rein/TailX/cost-sbf decide in tailtrim_policy::planner)
//!   gate      the priority gate in front of a backend's window          (Backend::call_*)
//! ```
//!
//! A configuration that names no pool layer leaves them to the pool's settings (`replicas`,
//! `planner`, `backend_window`, `priority_order`), so a tree built from today's keys alone is
//! the one a proxy without `[[routes]]` always had; one that names any names all it wants
//! ([`configure_pool`]). The pool's layers are not route objects: a view's pool is rebuilt on
//! every membership change and its layers share the view's ring, the planner's reservations
//! and the backends' load, and dispatching them statically costs no boxed future per layer.
//! A new route above the view is a file with a type implementing [`Route`] and a `build`
//! function, plus one line in [`REGISTRY`] (`shadow` is one).

pub mod failover;
pub mod gate;
pub mod logging;
pub mod planner;
pub mod route;
pub mod shadow;
pub mod spec;
pub mod timeout;
pub mod warmup;

use std::sync::Arc;

use crate::cluster::Cluster;
use crate::config::PoolConfig;
use crate::error::ClientError;

pub use route::{BroadcastFuture, BuildContext, MultigetFuture, Route, RouteBuilder, SingleFuture};
pub use spec::{PoolLayerConfigure, RouteSpec};

/// Where a route sits in the tree and how it is made.
#[derive(Clone, Copy)]
pub enum Layer {
    /// Above the membership view: a route object over the next route, built per tree.
    Above(RouteBuilder),
    /// The membership view (`warmup`): the leaf of the route objects.
    Membership,
    /// A layer of every view's pool, dispatched statically inside the pool; it completes the
    /// pool's configuration. Pool layers go in their registry order.
    Pool(PoolLayerConfigure),
}

/// Every route a configuration may name, the pool's layers in their order.
pub const REGISTRY: &[(&str, Layer)] = &[
    ("logging", Layer::Above(logging::build)),
    ("timeout", Layer::Above(timeout::build)),
    ("shadow", Layer::Above(shadow::build)),
    ("warmup", Layer::Membership),
    ("failover", Layer::Pool(failover::configure)),
    ("planner", Layer::Pool(planner::configure)),
    ("gate", Layer::Pool(gate::configure)),
];

/// The names a configuration may use in `[[routes]]`.
pub fn route_names() -> Vec<&'static str> {
    REGISTRY.iter().map(|(name, _)| *name).collect()
}

fn names_where(keep: fn(&Layer) -> bool) -> String {
    REGISTRY
        .iter()
        .filter(|(_, layer)| keep(layer))
        .map(|(name, _)| *name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A spec's entry in the registry: its position and layer.
fn lookup(spec: &RouteSpec) -> Result<(usize, Layer), ClientError> {
    REGISTRY
        .iter()
        .position(|(name, _)| *name == spec.kind)
        .map(|at| (at, REGISTRY[at].1))
        .ok_or_else(|| {
            ClientError::Config(format!(
                "route type {:?}: expected one of {}",
                spec.kind,
                route_names().join(", ")
            ))
        })
}

/// Checks the order of `specs` (outermost first): the routes above the membership view, then
/// `warmup` (optional), then the pool's layers, each once and in registry order. Returns each
/// spec's layer.
fn checked(specs: &[RouteSpec]) -> Result<Vec<Layer>, ClientError> {
    let order = |message: String| ClientError::Config(format!("route order: {message}"));
    let mut layers = Vec::with_capacity(specs.len());
    // The registry position of the last membership or pool layer seen, and its name.
    let mut below: Option<(usize, &str)> = None;
    for spec in specs {
        let (at, layer) = lookup(spec)?;
        match (layer, below) {
            (Layer::Above(_), Some((_, under))) => {
                return Err(order(format!(
                    "{:?} cannot follow {under:?}: the routes above the membership view ({}) \
                     come before warmup and the pool's layers",
                    spec.kind,
                    names_where(|layer| matches!(layer, Layer::Above(_)))
                )))
            }
            (Layer::Membership | Layer::Pool(_), Some((previous, under))) if at <= previous => {
                return Err(order(format!(
                    "{:?} cannot follow {under:?}: below the routes go {} in this order, each once \
                     (the gate sits in front of each backend's connections)",
                    spec.kind,
                    names_where(|layer| !matches!(layer, Layer::Above(_)))
                )))
            }
            (Layer::Membership | Layer::Pool(_), _) => below = Some((at, &spec.kind)),
            (Layer::Above(_), None) => {}
        }
        layers.push(layer);
    }
    Ok(layers)
}

/// Completes `config`, built from the `[pool]` keys, with the pool layers `specs` name. When
/// they name none, `config` is left as it is: the `[pool]` keys alone choose the layers, as
/// they always did. When they name any, they name all there are: a layer left out is turned
/// off, and a `[pool]` key that needs it is refused.
pub fn configure_pool(config: &mut PoolConfig, specs: &[RouteSpec]) -> Result<(), ClientError> {
    let layers = checked(specs)?;
    if !layers.iter().any(|layer| matches!(layer, Layer::Pool(_))) {
        return Ok(());
    }
    for (name, layer) in REGISTRY {
        if let Layer::Pool(configure) = layer {
            let spec = specs.iter().find(|spec| spec.kind == *name);
            configure(spec, config)?;
        }
    }
    Ok(())
}

/// The pool layers `config` turns on, in order: `failover` with replicas, `planner` with a
/// planner other than batch (one fetch per owning backend), `gate` with an in-flight window.
pub fn pool_layers(config: &PoolConfig) -> Vec<&'static str> {
    let mut layers = Vec::with_capacity(3);
    if config.replicas > 1 {
        layers.push("failover");
    }
    if config.planner != tailtrim_policy::planner::PlannerKind::Batch {
        layers.push("planner");
    }
    if config.effective_window() > 0 {
        layers.push("gate");
    }
    layers
}

/// Builds the tree: the routes above the membership view in `specs`, outermost first, ending
/// in the `warmup` leaf over `cluster`. The pool layers of `specs` were applied to the
/// cluster's configuration by [`configure_pool`]; here only their order is checked.
pub fn build_tree(
    cluster: &Arc<Cluster>,
    specs: &[RouteSpec],
) -> Result<Arc<dyn Route>, ClientError> {
    let layers = checked(specs)?;
    let mut route: Arc<dyn Route> = Arc::new(warmup::WarmupRoute::new(cluster.clone()));
    for (spec, layer) in specs.iter().zip(layers).rev() {
        if let Layer::Above(builder) = layer {
            route = builder(BuildContext {
                spec,
                next: route,
                cluster,
            })?;
        }
    }
    Ok(route)
}
