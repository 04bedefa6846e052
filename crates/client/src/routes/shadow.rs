//! `shadow`: mirrors a sampled share of requests to a second pool (its own `servers`) and
//! discards the mirror's replies, in the spirit of mcrouter's `ShadowRoute`: a new cluster
//! sees production traffic before it serves any.
//!
//! ```text
//!   request ─► next (the reply the client gets)
//!      └─ one in sample_every ─► spawned: the shadow pool's read / write / multiget /
//!                               broadcast of the same bytes; reply or error dropped
//! ```
//!
//! The mirror never delays the request: it runs on its own task, after the request was handed
//! to `next`, and a slow or dead shadow server only fails mirrors (its own timeouts bound
//! them). Requests not sampled cost one atomic increment.

use std::sync::Arc;

use bytes::Bytes;
use tailtrim_policy::hotkeys::Sampler;
use tailtrim_policy::planner::PlannerKind;

use crate::config::PoolConfig;
use crate::connection::ReplyShape;
use crate::error::ClientError;
use crate::pool::{MultigetKind, Pool};
use crate::routes::route::{BroadcastFuture, BuildContext, MultigetFuture, Route, SingleFuture};

/// Hands every request to `next`, and a sampled share of them to `mirror` as well.
pub struct ShadowRoute {
    next: Arc<dyn Route>,
    mirror: Arc<Pool>,
    sampler: Sampler,
}

/// The registry's constructor: needs `servers`; `sample_every` (≥ 1, default 1) picks one
/// request in that many. The shadow pool takes the cluster's ring, timeouts, connections and
/// backend login, with one copy per key and no planner or gate of its own.
pub fn build(context: BuildContext<'_>) -> Result<Arc<dyn Route>, ClientError> {
    let spec = context.spec;
    if spec.servers.is_empty() {
        return Err(ClientError::Config(
            "route shadow: servers is empty: list the pool to mirror to".to_string(),
        ));
    }
    let every = spec.sample_every.unwrap_or(1);
    if every == 0 {
        return Err(ClientError::Config(
            "route shadow: sample_every must be at least 1".to_string(),
        ));
    }
    let current = context.cluster.current();
    let primary = current.config();
    let mut config = PoolConfig::new(&format!("{}-shadow", primary.name), spec.servers.clone());
    config.ring = primary.ring;
    config.timeout = primary.timeout;
    config.connect_timeout = primary.connect_timeout;
    config.connections_per_backend = primary.connections_per_backend;
    config.queue_limit = primary.queue_limit;
    config.health = primary.health;
    config.dialer = primary.dialer.clone();
    config.planner = PlannerKind::Batch;
    config.window = Some(0);
    Ok(Arc::new(ShadowRoute {
        next: context.next,
        mirror: Arc::new(Pool::new(config)?),
        sampler: Sampler::new(every),
    }))
}

impl ShadowRoute {
    /// Runs `request` on the shadow pool in the background when this request is sampled.
    fn mirror<F, T>(&self, request: impl FnOnce(Arc<Pool>) -> F)
    where
        F: std::future::Future<Output = T> + Send + 'static,
    {
        if !self.sampler.sampled() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mirrored = request(self.mirror.clone());
        runtime.spawn(async move {
            let _ = mirrored.await;
        });
    }
}

/// Which single-key request a mirror repeats.
#[derive(Clone, Copy)]
enum Access {
    Read,
    Write,
}

impl ShadowRoute {
    fn mirror_single(&self, access: Access, key: &[u8], bytes: &Bytes, shape: ReplyShape) {
        self.mirror(|pool| {
            let (key, bytes) = (Bytes::copy_from_slice(key), bytes.clone());
            async move {
                match access {
                    Access::Read => pool.read(&key, bytes, shape).await,
                    Access::Write => pool.write(&key, bytes, shape).await,
                }
                .map(drop)
            }
        });
    }
}

impl Route for ShadowRoute {
    fn name(&self) -> &'static str {
        "shadow"
    }

    fn read<'a>(&'a self, key: &'a [u8], bytes: Bytes, shape: ReplyShape) -> SingleFuture<'a> {
        self.mirror_single(Access::Read, key, &bytes, shape);
        self.next.read(key, bytes, shape)
    }

    fn write<'a>(&'a self, key: &'a [u8], bytes: Bytes, shape: ReplyShape) -> SingleFuture<'a> {
        self.mirror_single(Access::Write, key, &bytes, shape);
        self.next.write(key, bytes, shape)
    }

    fn multiget<'a>(&'a self, keys: &'a [Bytes], kind: MultigetKind) -> MultigetFuture<'a> {
        self.mirror(|pool| {
            let keys = keys.to_vec();
            async move { pool.multiget_each(&keys, kind).await.len() }
        });
        self.next.multiget(keys, kind)
    }

    fn broadcast<'a>(&'a self, bytes: Bytes, shape: ReplyShape) -> BroadcastFuture<'a> {
        self.mirror(|pool| {
            let bytes = bytes.clone();
            async move { pool.broadcast(bytes, shape).await.len() }
        });
        self.next.broadcast(bytes, shape)
    }
}
