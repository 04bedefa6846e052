//! `logging`: logs each request's route decision at debug level — the operation, the key (or
//! key count), the backend that owns it in the current view, the outcome and the time taken —
//! then passes the request on. With debug logging off it costs one level check.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::FutureExt;

use crate::cluster::Cluster;
use crate::connection::{RawReply, ReplyShape};
use crate::error::ClientError;
use crate::pool::MultigetKind;
use crate::routes::route::{BroadcastFuture, BuildContext, MultigetFuture, Route, SingleFuture};

/// Logs, then hands the request to `next`.
pub struct LoggingRoute {
    next: Arc<dyn Route>,
    cluster: Arc<Cluster>,
}

/// The registry's constructor.
pub fn build(context: BuildContext<'_>) -> Result<Arc<dyn Route>, ClientError> {
    Ok(Arc::new(LoggingRoute {
        next: context.next,
        cluster: context.cluster.clone(),
    }))
}

fn enabled() -> bool {
    tracing::enabled!(target: "tailtrim_client::routes", tracing::Level::DEBUG)
}

fn micros(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX)
}

fn single_outcome(result: &Result<RawReply, ClientError>) -> String {
    match result {
        Ok(reply) if reply.error_line => "error-reply".to_string(),
        Ok(_) => "ok".to_string(),
        Err(error) => format!("failed: {error}"),
    }
}

impl LoggingRoute {
    /// The owner of `key` in the current view (its first replica).
    fn owner(&self, key: &[u8]) -> String {
        let pool = self.cluster.current();
        let owner = pool.ring().server_for(key);
        pool.backends()
            .get(owner)
            .map(|backend| backend.address().to_string())
            .unwrap_or_default()
    }

    async fn single(
        &self,
        op: &'static str,
        key: &[u8],
        request: BoxFuture<'_, Result<RawReply, ClientError>>,
    ) -> Result<RawReply, ClientError> {
        let owner = self.owner(key);
        let started = Instant::now();
        let result = request.await;
        tracing::debug!(
            target: "tailtrim_client::routes",
            route = "logging",
            op,
            key = %String::from_utf8_lossy(key),
            owner = %owner,
            next = self.next.name(),
            outcome = %single_outcome(&result),
            micros = micros(started),
            "route decision"
        );
        result
    }
}

impl Route for LoggingRoute {
    fn name(&self) -> &'static str {
        "logging"
    }

    fn read<'a>(&'a self, key: &'a [u8], bytes: Bytes, shape: ReplyShape) -> SingleFuture<'a> {
        let request = self.next.read(key, bytes, shape);
        if !enabled() {
            return request;
        }
        self.single("read", key, request).boxed()
    }

    fn write<'a>(&'a self, key: &'a [u8], bytes: Bytes, shape: ReplyShape) -> SingleFuture<'a> {
        let request = self.next.write(key, bytes, shape);
        if !enabled() {
            return request;
        }
        self.single("write", key, request).boxed()
    }

    fn multiget<'a>(&'a self, keys: &'a [Bytes], kind: MultigetKind) -> MultigetFuture<'a> {
        let request = self.next.multiget(keys, kind);
        if !enabled() {
            return request;
        }
        async move {
            let owners: Vec<String> = {
                let mut owners: Vec<String> = keys.iter().map(|key| self.owner(key)).collect();
                owners.sort_unstable();
                owners.dedup();
                owners
            };
            let started = Instant::now();
            let results = request.await;
            let hits = results.iter().filter(|r| matches!(r, Ok(Some(_)))).count();
            let failed = results.iter().filter(|r| r.is_err()).count();
            tracing::debug!(
                target: "tailtrim_client::routes",
                route = "logging",
                op = "multiget",
                keys = keys.len(),
                owners = %owners.join(","),
                next = self.next.name(),
                hits,
                failed,
                micros = micros(started),
                "route decision"
            );
            results
        }
        .boxed()
    }

    fn broadcast<'a>(&'a self, bytes: Bytes, shape: ReplyShape) -> BroadcastFuture<'a> {
        let request = self.next.broadcast(bytes, shape);
        if !enabled() {
            return request;
        }
        async move {
            let started = Instant::now();
            let results = request.await;
            tracing::debug!(
                target: "tailtrim_client::routes",
                route = "logging",
                op = "broadcast",
                backends = results.len(),
                failed = results.iter().filter(|r| r.is_err()).count(),
                next = self.next.name(),
                micros = micros(started),
                "route decision"
            );
            results
        }
        .boxed()
    }
}
