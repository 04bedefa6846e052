//! `timeout`: a bound on a whole request — its failovers, its wait in a backend's priority
//! gate, a warm-up's fallback read — on top of the per-backend-request `timeout` of the pool.
//! A request past it fails with [`ClientError::RouteTimeout`]; what it left in flight is
//! dropped (a backend request dropped mid-flight is settled by its connection, and a gate
//! waiter that goes away passes its slot on).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::FutureExt;

use crate::connection::ReplyShape;
use crate::error::ClientError;
use crate::pool::MultigetKind;
use crate::routes::route::{BroadcastFuture, BuildContext, MultigetFuture, Route, SingleFuture};

/// Bounds every request handed to `next` by `limit`.
pub struct TimeoutRoute {
    next: Arc<dyn Route>,
    limit: Duration,
}

/// The registry's constructor: needs `timeout` (at least 1 ms).
pub fn build(context: BuildContext<'_>) -> Result<Arc<dyn Route>, ClientError> {
    let limit = context
        .spec
        .timeout
        .filter(|limit| *limit >= Duration::from_millis(1))
        .ok_or_else(|| {
            ClientError::Config("route timeout: timeout_ms must be at least 1".to_string())
        })?;
    Ok(Arc::new(TimeoutRoute {
        next: context.next,
        limit,
    }))
}

impl TimeoutRoute {
    fn expired(&self) -> ClientError {
        ClientError::RouteTimeout {
            after_ms: u64::try_from(self.limit.as_millis()).unwrap_or(u64::MAX),
        }
    }

    async fn bounded<T>(&self, request: impl Future<Output = T>, expired: impl FnOnce() -> T) -> T {
        match tokio::time::timeout(self.limit, request).await {
            Ok(result) => result,
            Err(_) => expired(),
        }
    }
}

impl Route for TimeoutRoute {
    fn name(&self) -> &'static str {
        "timeout"
    }

    fn read<'a>(&'a self, key: &'a [u8], bytes: Bytes, shape: ReplyShape) -> SingleFuture<'a> {
        let request = self.next.read(key, bytes, shape);
        self.bounded(request, || Err(self.expired())).boxed()
    }

    fn write<'a>(&'a self, key: &'a [u8], bytes: Bytes, shape: ReplyShape) -> SingleFuture<'a> {
        let request = self.next.write(key, bytes, shape);
        self.bounded(request, || Err(self.expired())).boxed()
    }

    fn multiget<'a>(&'a self, keys: &'a [Bytes], kind: MultigetKind) -> MultigetFuture<'a> {
        let request = self.next.multiget(keys, kind);
        self.bounded(request, move || {
            keys.iter().map(|_| Err(self.expired())).collect()
        })
        .boxed()
    }

    fn broadcast<'a>(&'a self, bytes: Bytes, shape: ReplyShape) -> BroadcastFuture<'a> {
        let request = self.next.broadcast(bytes, shape);
        self.bounded(request, || vec![Err(self.expired())]).boxed()
    }
}
