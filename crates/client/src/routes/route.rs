//! The contract every route implements ([`Route`]) and what building one receives; the
//! registry and the tree builder sit above it in `routes`, the routes beside each other.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::future::BoxFuture;

use crate::cluster::Cluster;
use crate::connection::{RawReply, ReplyShape};
use crate::error::ClientError;
use crate::pool::{KeyResult, MultigetKind};
use crate::routes::spec::RouteSpec;

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
