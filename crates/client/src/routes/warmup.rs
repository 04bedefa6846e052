//! The leaf of every route tree: the cluster's current membership view, with its warm-up and
//! shadowing during a change; the view's pool serves the request through its layers
//! (`failover`, `planner`, `gate`). The membership changes themselves (views, copies, purges)
//! are [`crate::cluster::Cluster`]'s.
//!
//! ```text
//!   request ─► enter(): the current view (in-flight += 1) ─► sampled hot-key tracking
//!     steady:  view.pool.read / write / multiget_each / broadcast
//!     shadow:  a write to a key whose owner differs takes the key's fence, writes at the
//!              routing owner and deletes at the shadow (and former) owners; during a fallback
//!              warm-up a miss of a moved key is copied from its previous owner (`add`) and the
//!              read repeated
//! ```

use std::sync::Arc;

use bytes::Bytes;
use futures_util::FutureExt;
use parking_lot::Mutex;
use tailtrim_policy::hotkeys::HotKeyTracker;
use tailtrim_proto::compose;

use crate::backend::Backend;
use crate::cluster::{copy_key, Cluster, CopyMode, ShadowRole, Tracked, View};
use crate::connection::{RawReply, ReplyShape};
use crate::error::ClientError;
use crate::pool::{KeyResult, MultigetKind};
use crate::routes::failover::call_each;
use crate::routes::route::{BroadcastFuture, MultigetFuture, Route, SingleFuture};

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

    fn read<'a>(&'a self, key: &'a [u8], bytes: Bytes, shape: ReplyShape) -> SingleFuture<'a> {
        self.cluster.read(key, bytes, shape).boxed()
    }

    fn write<'a>(&'a self, key: &'a [u8], bytes: Bytes, shape: ReplyShape) -> SingleFuture<'a> {
        self.cluster.write(key, bytes, shape).boxed()
    }

    fn multiget<'a>(&'a self, keys: &'a [Bytes], kind: MultigetKind) -> MultigetFuture<'a> {
        self.cluster.multiget_each(keys, kind).boxed()
    }

    fn broadcast<'a>(&'a self, bytes: Bytes, shape: ReplyShape) -> BroadcastFuture<'a> {
        self.cluster.broadcast(bytes, shape).boxed()
    }
}

impl Cluster {
    fn track(&self, view: &View, key: &[u8]) {
        if !self.sampler.sampled() {
            return;
        }
        let owner = view.pool.ring().server_for(key);
        let tracked = view.trackers[owner].get_or_init(|| {
            let address = view.pool.backends()[owner].address();
            let known = self.trackers.read().get(address).cloned();
            known.unwrap_or_else(|| {
                self.trackers
                    .write()
                    .entry(address.to_string())
                    .or_insert_with(|| {
                        Arc::new(Tracked {
                            tracker: Mutex::new(HotKeyTracker::new(self.tracker_config)),
                        })
                    })
                    .clone()
            })
        });
        tracked.tracker.lock().record(key, self.sampler.weight());
    }

    fn observe(&self, view: &View, key: &[u8], hit: bool) {
        if let Some(shadow) = &view.shadow {
            if let Some(progress) = &shadow.progress {
                let moved = shadow.pool.backends()[shadow.pool.ring().server_for(key)].address()
                    != view.owner(key).address();
                progress.lock().observe(moved, hit);
            }
        }
    }

    /// A single-key read on the current view; during a fallback warm-up a miss of a moved key
    /// is filled from its previous owner and the read repeated.
    pub async fn read(
        &self,
        key: &[u8],
        bytes: Bytes,
        shape: ReplyShape,
    ) -> Result<RawReply, ClientError> {
        let ticket = self.enter();
        let view = &ticket.0;
        self.track(view, key);
        if view.shadow.is_none() {
            // Steady state: no fallback, so no copy of the request kept for a second read.
            return view.pool.read(key, bytes, shape).await;
        }
        let reply = view.pool.read(key, bytes.clone(), shape).await?;
        let Some(shadow) = &view.shadow else {
            return Ok(reply);
        };
        let miss = is_miss(&reply, shape);
        if shape == ReplyShape::UntilEnd && !reply.error_line {
            self.observe(view, key, !miss);
        }
        if !miss || shadow.role != (ShadowRole::Previous { fallback: true }) {
            return Ok(reply);
        }
        let previous = view.shadow_owners(key);
        let Some(from) = previous.first() else {
            return Ok(reply);
        };
        if self.fallback_copy(key, from, view.owner(key)).await {
            return view.pool.read(key, bytes, shape).await;
        }
        Ok(reply)
    }

    async fn fallback_copy(&self, key: &[u8], from: &Backend, to: &Backend) -> bool {
        self.stats.fallback_reads.incr();
        let _fence = self.fence(key).lock().await;
        let copied = matches!(copy_key(key, from, to, CopyMode::Add).await, Ok(true));
        if copied {
            self.stats.fallback_hits.incr();
        }
        copied
    }

    /// A single-key write on the current view; during a change a write to a moved key is
    /// fenced and also deletes the key at its shadow owner. Any time, it also deletes the key
    /// at members that owned it in one of the last `HISTORY` (8) routing pools: when a server
    /// leaves, its keys go back to their former owners, which must not answer with what they
    /// held before the keys moved away.
    pub async fn write(
        &self,
        key: &[u8],
        bytes: Bytes,
        shape: ReplyShape,
    ) -> Result<RawReply, ClientError> {
        let ticket = self.enter();
        let view = &ticket.0;
        let mut others = view.shadow_owners(key);
        let history = self.history.read().clone();
        for former in view.former_owners(&history, key) {
            if !others.iter().any(|b| b.address() == former.address()) {
                others.push(former);
            }
        }
        if others.is_empty() {
            return view.pool.write(key, bytes, shape).await;
        }
        let mut delete = Vec::with_capacity(key.len() + 10);
        compose::delete(&mut delete, key, false);
        let delete = Bytes::from(delete);
        if view.shadow.is_none() {
            // Steady state: nothing copies or falls back, so no fence; the former owners only
            // lose a copy that would be stale if the key came back to them.
            self.stats.former_owner_deletes.incr();
            let result = view.pool.write(key, bytes, shape).await;
            for other in others {
                let _ = other.call(delete.clone(), ReplyShape::Single).await;
            }
            return result;
        }
        self.stats.fenced_writes.incr();
        let _fence = self.fence(key).lock().await;
        let result = view.pool.write(key, bytes, shape).await;
        for other in others {
            // Best effort: a failed delete leaves a copy only the shadow pool could return,
            // and every path to it (fallback, copies) takes this key's fence and uses `add`.
            let _ = other.call(delete.clone(), ReplyShape::Single).await;
        }
        result
    }

    /// The same request to every backend of the current view (and of its shadow).
    pub async fn broadcast(
        &self,
        bytes: Bytes,
        shape: ReplyShape,
    ) -> Vec<Result<RawReply, ClientError>> {
        let ticket = self.enter();
        let view = &ticket.0;
        let mut results = view.pool.broadcast(bytes.clone(), shape).await;
        if let Some(shadow) = &view.shadow {
            let routing: Vec<&str> = view.pool.backends().iter().map(|b| b.address()).collect();
            let extra = shadow
                .pool
                .backends()
                .iter()
                .filter(|backend| !routing.contains(&backend.address()));
            results.extend(call_each(extra, bytes, shape).await);
        }
        results
    }

    /// Per-key outcomes ([`crate::Pool::multiget_each`]) on the current view, with fallback for the
    /// missed moved keys during a fallback warm-up.
    pub async fn multiget_each(&self, keys: &[Bytes], kind: MultigetKind) -> Vec<KeyResult> {
        let ticket = self.enter();
        let view = &ticket.0;
        for key in keys {
            self.track(view, key);
        }
        let mut results = view.pool.multiget_each(keys, kind).await;
        let Some(shadow) = &view.shadow else {
            return results;
        };
        for (key, result) in keys.iter().zip(&results) {
            if let Ok(item) = result {
                self.observe(view, key, item.is_some());
            }
        }
        if shadow.role != (ShadowRole::Previous { fallback: true }) {
            return results;
        }
        let mut refetch: Vec<usize> = Vec::new();
        for (index, key) in keys.iter().enumerate() {
            if !matches!(results[index], Ok(None)) {
                continue;
            }
            let previous = view.shadow_owners(key);
            if let Some(from) = previous.first() {
                if self.fallback_copy(key, from, view.owner(key)).await {
                    refetch.push(index);
                }
            }
        }
        if refetch.is_empty() {
            return results;
        }
        let again: Vec<Bytes> = refetch.iter().map(|&i| keys[i].clone()).collect();
        let fresh = view.pool.multiget_each(&again, kind).await;
        for (index, result) in refetch.into_iter().zip(fresh) {
            results[index] = result;
        }
        results
    }
}

/// True when a read reply found nothing.
fn is_miss(reply: &RawReply, shape: ReplyShape) -> bool {
    if reply.error_line {
        return false;
    }
    match shape {
        ReplyShape::UntilEnd => reply.values.is_empty(),
        ReplyShape::Single => reply.bytes.starts_with(b"EN\r\n"),
        ReplyShape::UntilMetaNoop => reply.bytes.is_empty(),
    }
}
