//! The leaf of every route tree: the cluster's current membership view, with its warm-up and
//! shadowing during a change ([`crate::cluster::Cluster`]); the view's pool serves the request
//! through the fixed layers (`failover`, `planner`, `gate`).

use std::sync::Arc;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::FutureExt;

use crate::cluster::Cluster;
use crate::connection::{RawReply, ReplyShape};
use crate::error::ClientError;
use crate::pool::{KeyResult, MultigetKind};
use crate::routes::Route;

/// Requests on the cluster's current view.
pub struct WarmupRoute {
    cluster: Arc<Cluster>,
}

impl WarmupRoute {
    /// The leaf over `cluster`.
    pub fn new(cluster: Arc<Cluster>) -> Self {
        WarmupRoute { cluster }
    }
}

impl Route for WarmupRoute {
    fn name(&self) -> &'static str {
        "warmup"
    }

    fn read<'a>(
        &'a self,
        key: &'a [u8],
        bytes: Bytes,
        shape: ReplyShape,
    ) -> BoxFuture<'a, Result<RawReply, ClientError>> {
        self.cluster.read(key, bytes, shape).boxed()
    }

    fn write<'a>(
        &'a self,
        key: &'a [u8],
        bytes: Bytes,
        shape: ReplyShape,
    ) -> BoxFuture<'a, Result<RawReply, ClientError>> {
        self.cluster.write(key, bytes, shape).boxed()
    }

    fn multiget<'a>(
        &'a self,
        keys: &'a [Bytes],
        kind: MultigetKind,
    ) -> BoxFuture<'a, Vec<KeyResult>> {
        self.cluster.multiget_each(keys, kind).boxed()
    }

    fn broadcast<'a>(
        &'a self,
        bytes: Bytes,
        shape: ReplyShape,
    ) -> BoxFuture<'a, Vec<Result<RawReply, ClientError>>> {
        self.cluster.broadcast(bytes, shape).boxed()
    }
}
