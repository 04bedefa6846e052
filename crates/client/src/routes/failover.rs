//! Replica choice and failover for single-key requests.
//!
//! ```text
//!   read(key)  ─► ring.replicas_for(key) ─► choose_replica (C3) ─► Backend::call
//!                   on failure: exclude that backend, choose again (failover)
//!   write(key) ─► every replica concurrently; reply = owner's if it answered, else any
//!   broadcast  ─► every backend
//! ```

use bytes::Bytes;
use futures_util::future::join_all;
use std::sync::Arc;
use std::time::Instant;
use tailtrim_policy::health::choose_replica;

use crate::backend::Backend;
use crate::config::PoolConfig;
use crate::connection::{RawReply, ReplyShape};
use crate::error::ClientError;
use crate::pool::Pool;
use crate::routes::spec::RouteSpec;

/// The registry's configure: `replicas` copies of each key (the route's key, else the pool's),
/// at least 2 and at most the number of servers. Left out of a configuration that lists the
/// pool's layers, each key has one copy and nothing to fail over to.
pub fn configure(spec: Option<&RouteSpec>, config: &mut PoolConfig) -> Result<(), ClientError> {
    let Some(spec) = spec else {
        return match config.replicas {
            1 => Ok(()),
            replicas => Err(ClientError::Config(format!(
                "[pool] replicas = {replicas} needs the failover route in [[routes]]"
            ))),
        };
    };
    let replicas = spec.replicas.unwrap_or(config.replicas);
    if replicas < 2 || replicas > config.servers.len() {
        return Err(ClientError::Config(format!(
            "route failover: replicas = {replicas} must be between 2 and the number of servers ({})",
            config.servers.len()
        )));
    }
    config.replicas = replicas;
    Ok(())
}

impl Pool {
    /// Sends a single-key read to the best replica, failing over to the others.
    pub async fn read(
        &self,
        key: &[u8],
        bytes: Bytes,
        shape: ReplyShape,
    ) -> Result<RawReply, ClientError> {
        self.stats.reads.incr();
        let started = Instant::now();
        if self.config.replicas == 1 {
            // One clock reading for the backend's and the pool's latency.
            let owner = self.ring.server_for(key);
            let (result, elapsed) = self.backends[owner]
                .call_with(shape, 0, started, |out| out.extend_from_slice(&bytes))
                .await;
            self.record_elapsed(elapsed);
            return result;
        }
        let mut candidates = Vec::with_capacity(self.config.replicas);
        self.ring
            .replicas_for(key, self.config.replicas, &mut candidates);
        let mut excluded: Vec<usize> = Vec::new();
        let mut last_error: Option<ClientError> = None;
        loop {
            let loads = self.loads_at(self.clock.now(), &excluded);
            let choice = choose_replica(&candidates, |backend| loads[backend]);
            let Some(backend) = choice else {
                self.stats.unavailable.incr();
                self.record_latency(started);
                return Err(no_backend(last_error));
            };
            if !excluded.is_empty() {
                self.stats.failovers.incr();
            }
            match self.backends[backend].call(bytes.clone(), shape).await {
                Ok(reply) => {
                    self.record_latency(started);
                    return Ok(reply);
                }
                Err(error) => {
                    excluded.push(backend);
                    last_error = Some(error);
                }
            }
        }
    }

    /// Sends a single-key write to every replica at once. The reply is the owner's when it
    /// answered, else the first replica's that did; the error is the owner's when none did.
    pub async fn write(
        &self,
        key: &[u8],
        bytes: Bytes,
        shape: ReplyShape,
    ) -> Result<RawReply, ClientError> {
        self.stats.writes.incr();
        let started = Instant::now();
        let mut replicas = Vec::with_capacity(self.config.replicas);
        self.ring
            .replicas_for(key, self.config.replicas, &mut replicas);
        let result = if replicas.len() == 1 {
            self.backends[replicas[0]].call(bytes, shape).await
        } else {
            let calls = replicas
                .iter()
                .map(|&backend| self.backends[backend].call(bytes.clone(), shape));
            let mut results = join_all(calls).await;
            match results.iter().position(Result::is_ok) {
                Some(0) | None => results.swap_remove(0),
                Some(first_ok) => results.swap_remove(first_ok),
            }
        };
        self.record_latency(started);
        result
    }

    /// Sends the same request to every backend (e.g. `flush_all`); results in backend order.
    pub async fn broadcast(
        &self,
        bytes: Bytes,
        shape: ReplyShape,
    ) -> Vec<Result<RawReply, ClientError>> {
        call_each(self.backends.iter(), bytes, shape).await
    }
}

/// Sends the same request to each of `backends` at once; results in their order.
pub(crate) async fn call_each<'a>(
    backends: impl Iterator<Item = &'a Arc<Backend>>,
    bytes: Bytes,
    shape: ReplyShape,
) -> Vec<Result<RawReply, ClientError>> {
    join_all(backends.map(|backend| backend.call(bytes.clone(), shape))).await
}

pub(crate) fn no_backend(last_error: Option<ClientError>) -> ClientError {
    ClientError::NoBackend {
        last: last_error
            .map(|error| error.to_string())
            .unwrap_or_else(|| "all replicas are marked down".to_string()),
    }
}
