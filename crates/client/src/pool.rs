//! A pool of backends behind one key space: routing, replication, failover, multiget planning.
//!
//! ```text
//!   read(key)      ─► ring.replicas_for(key) ─► choose_replica (C3) ─► Backend::call
//!                        on failure: exclude that backend, choose again (failover)
//!   write(key)     ─► every replica concurrently; reply = owner's if it answered, else any
//!   multiget(keys) ─► plan_at: planner.plan(&request, &view), each fetch reserved on its
//!                        backend at once ─► Fetch per backend, concurrently
//!                        failed fetches: their keys are planned again without that backend
//!                        Unavailable: fail fast (NoBackend)
//!                        not_before: wait in the delay queue; priority: the backend gate's class,
//!                        or, to a backend that serves classes itself, `mg … p<class>` requests
//! ```
//!
//! The replica chooser's view ([`Pool::loads_at`]): each backend's outstanding requests (from
//! the moment a plan reserves them) and its latency estimate, an estimate that no reply has
//! refreshed pulled toward the pool's mean (half-life `estimate_half_life`); the cost is C3's
//! `(outstanding + 1)³ × estimate` (`tailtrim_policy::health::expected_cost`).

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use futures_util::future::join_all;
use parking_lot::Mutex;
use smallvec::SmallVec;
use tailtrim_policy::drr::CLASSES;
use tailtrim_policy::health::{
    choose_replica, settle_estimates, BackendLoad, LatencyEstimate, Timestamp,
};
use tailtrim_policy::planner::{
    Action, ClusterView, Fetch, Observation, PlanRequest, Planner, QueryShape,
};
use tailtrim_policy::rein::class_of;
use tailtrim_policy::ring::Ring;
use tailtrim_proto::compose;

use crate::backend::{Backend, BackendSettings, Priorities, Reservation};
use crate::clock::Clock;
use crate::config::{PoolConfig, DEFAULT_MODEL_CLIENT_THREADS};
use crate::connection::{RawReply, ReplyShape, ValueItem};
use crate::error::ClientError;
use crate::sched::DelayQueue;
use crate::shaping::{join_or_lead, seal, setup_wait, Merge, Shaper};
use crate::stats::PoolStats;

/// Key positions and key slices of one multiget, inline up to this many keys: the common
/// small multiget allocates nothing for its bookkeeping.
type Inline<T> = SmallVec<[T; 16]>;

/// Which multi-key read command to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MultigetKind {
    /// `get`.
    Get,
    /// `gets` (with CAS uniques).
    Gets,
    /// `gat <exptime>`.
    Gat(i32),
    /// `gats <exptime>`.
    Gats(i32),
}

impl MultigetKind {
    /// Appends the query as quiet `mg` requests carrying `class`, for a backend that serves
    /// classes.
    fn compose_classed(self, out: &mut Vec<u8>, keys: &[&[u8]], class: usize) {
        let (with_cas, touch) = match self {
            MultigetKind::Get => (false, None),
            MultigetKind::Gets => (true, None),
            MultigetKind::Gat(exptime) => (false, Some(exptime)),
            MultigetKind::Gats(exptime) => (true, Some(exptime)),
        };
        let class = u8::try_from(class.min(CLASSES - 1)).unwrap_or(0);
        compose::meta_multiget(out, keys, with_cas, touch, class);
    }

    /// Appends the query.
    fn compose(self, out: &mut Vec<u8>, keys: &[&[u8]]) {
        match self {
            MultigetKind::Get => compose::get(out, keys, false),
            MultigetKind::Gets => compose::get(out, keys, true),
            MultigetKind::Gat(exptime) | MultigetKind::Gats(exptime) => {
                out.extend_from_slice(if matches!(self, MultigetKind::Gat(_)) {
                    b"gat "
                } else {
                    b"gats "
                });
                out.extend_from_slice(exptime.to_string().as_bytes());
                for key in keys {
                    out.push(b' ');
                    out.extend_from_slice(key);
                }
                out.extend_from_slice(b"\r\n");
            }
        }
    }
}

/// A value read through the typed API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Value {
    /// Client flags.
    pub flags: u32,
    /// CAS unique, when asked for.
    pub cas: Option<u64>,
    /// The data.
    pub data: Bytes,
}

/// One key's outcome in [`Pool::multiget_each`]: its item, a miss, or why it failed.
pub type KeyResult = Result<Option<ValueItem>, ClientError>;

/// A pool of backends.
pub struct Pool {
    config: PoolConfig,
    ring: Ring,
    backends: Vec<Arc<Backend>>,
    planner: Mutex<Box<dyn Planner>>,
    shaper: Shaper,
    clock: Clock,
    delay: DelayQueue,
    stats: Arc<PoolStats>,
}

/// The planner's view of the pool, minus backends already tried for this request. In a
/// replica pool loads are read once per plan, for every backend at the first question
/// ([`Pool::loads_at`]: the estimates are settled together); without replicas only a
/// backend's availability matters, read when asked. The planners account for their own fetches within a plan
/// (one fetch per backend for batch, Rein and TailX; Chisel's chunk placement counts the
/// chunks it gave each backend), and the plan's fetches are reserved before the next plan.
struct PoolView<'a> {
    pool: &'a Pool,
    excluded: &'a [usize],
    /// When the plan is made.
    now: Timestamp,
    loads: std::cell::OnceCell<Inline<BackendLoad>>,
}

impl<'a> PoolView<'a> {
    fn new(pool: &'a Pool, excluded: &'a [usize], now: Timestamp) -> Self {
        PoolView {
            pool,
            excluded,
            now,
            loads: std::cell::OnceCell::new(),
        }
    }
}

/// A plan's actions and a reservation of each fetch on its backend ([`Pool::plan_at`]).
pub struct Plan<'a> {
    /// The planner's actions, in its order.
    pub actions: Vec<Action>,
    /// One per [`Action::Fetch`] of `actions`, in the same order.
    pub reservations: Vec<Reservation<'a>>,
    /// How many requests of this plan's size may share one backend query.
    pub merge_limit: u32,
}

impl ClusterView for PoolView<'_> {
    fn backend_count(&self) -> usize {
        self.pool.backends.len()
    }

    fn replicas(&self, key: &[u8], out: &mut Vec<usize>) {
        self.pool
            .ring
            .replicas_for(key, self.pool.config.replicas, out);
    }

    fn load(&self, backend: usize) -> BackendLoad {
        if self.pool.config.replicas == 1 {
            // One candidate per key: only its availability matters, not the estimates.
            let mut load = self.pool.backends[backend].load_at(self.now);
            load.available &= !self.excluded.contains(&backend);
            return load;
        }
        let loads = self
            .loads
            .get_or_init(|| self.pool.loads_at(self.now, self.excluded));
        loads.get(backend).copied().unwrap_or(BackendLoad {
            outstanding: 0,
            ewma_nanos: None,
            available: false,
        })
    }
}

impl Pool {
    /// Builds the pool (no connection is opened until the first request).
    pub fn new(config: PoolConfig) -> Result<Pool, ClientError> {
        let clock = Clock::new();
        let settings = BackendSettings::of(&config);
        let backends = config
            .servers
            .iter()
            .map(|server| Arc::new(Backend::new(server.address(), settings.clone(), clock)))
            .collect();
        Pool::assemble(config, backends, Arc::new(PoolStats::default()), clock)
    }

    /// Builds a pool over existing backends (one per `config.servers` entry, same order), so a
    /// new ring version keeps the connections, health and metrics of the servers it shares
    /// with the previous one ([`crate::cluster::Cluster`]).
    pub fn assemble(
        config: PoolConfig,
        backends: Vec<Arc<Backend>>,
        stats: Arc<PoolStats>,
        clock: Clock,
    ) -> Result<Pool, ClientError> {
        if config.replicas == 0 || config.replicas > config.servers.len() {
            return Err(ClientError::Config(format!(
                "replicas = {} must be between 1 and the number of servers ({})",
                config.replicas,
                config.servers.len()
            )));
        }
        if backends.len() != config.servers.len() {
            return Err(ClientError::Config(format!(
                "{} backends for {} servers",
                backends.len(),
                config.servers.len()
            )));
        }
        let ring_servers: Vec<_> = config.servers.iter().map(|s| s.ring_server()).collect();
        let ring = Ring::new(&ring_servers, config.ring)
            .map_err(|error| ClientError::Config(error.to_string()))?;
        let mut planner = config.planner.build_with(&config.planner_settings);
        let mut shape = planner
            .shape()
            .unwrap_or(tailtrim_policy::chisel::DEFAULT_SHAPE);
        shape.elephant_threshold = config.elephant_threshold;
        if let Some((merge_level, chunk_size)) = config.chisel_fixed {
            shape.merge_level = merge_level;
            shape.chunk_size = chunk_size;
        }
        planner.set_shape(shape);
        let mut analyzer = config.analyzer;
        analyzer.client_threads = match u32::try_from(config.query_threads) {
            Ok(0) | Err(_) => DEFAULT_MODEL_CLIENT_THREADS,
            Ok(threads) => threads,
        };
        analyzer.server_threads = (config.servers.len() as u32)
            .saturating_mul(config.backend_threads.max(1))
            .max(1);
        // Only a planner that reshapes queries, and has no fixed shape, is retuned.
        let epoch = (planner.shape().is_some() && config.chisel_fixed.is_none())
            .then_some(config.chisel_epoch);
        let mut shaper = Shaper::new(
            config.servers.len(),
            config.query_threads,
            config.inject_overhead,
            config.elephant_threshold,
            epoch,
            analyzer,
        );
        shaper.overhead_sleeps = config.inject_overhead_sleeps;
        Ok(Pool {
            planner: Mutex::new(planner),
            shaper,
            config,
            ring,
            backends,
            clock,
            delay: DelayQueue::default(),
            stats,
        })
    }

    /// The clock requests are timed with.
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// The shared metrics handle (kept across ring versions).
    pub fn stats_handle(&self) -> Arc<PoolStats> {
        self.stats.clone()
    }

    /// The configuration.
    pub fn config(&self) -> &PoolConfig {
        &self.config
    }

    /// The backends, in config order.
    pub fn backends(&self) -> &[Arc<Backend>] {
        &self.backends
    }

    /// Pool metrics.
    pub fn stats(&self) -> &PoolStats {
        &self.stats
    }

    /// The ring.
    pub fn ring(&self) -> &Ring {
        &self.ring
    }

    /// TailX's delay queue.
    pub fn delay_queue(&self) -> &DelayQueue {
        &self.delay
    }

    /// The active planner's gauges (see `Planner::gauges`).
    pub fn planner_gauges(&self) -> Vec<(&'static str, f64)> {
        self.planner.lock().gauges()
    }

    /// Name of the active planner.
    pub fn planner_name(&self) -> &'static str {
        self.planner.lock().name()
    }

    /// The planner's current query shape (`None` for planners that do not reshape).
    pub fn planner_shape(&self) -> Option<QueryShape> {
        self.planner.lock().shape()
    }

    /// True when the planner may merge requests of `keys` keys (so even one-key reads
    /// should go through [`Pool::multiget`]).
    pub fn merges(&self, keys: usize) -> bool {
        self.planner.lock().merge_limit(keys) > 1
    }

    /// True when every read must be planned on its own through [`Pool::multiget`], one-key
    /// reads included: the planner may merge them (Chisel with B > 1), or backend queries
    /// are shaped ([`Shaper::shapes_queries`]: query slots, injected setup time, Chisel's
    /// analyzer), which the direct read path would skip.
    pub fn plans_each_read(&self) -> bool {
        self.merges(1) || self.shaper.shapes_queries()
    }

    /// Query shaping state: merge counters, the analyzer's last decision.
    pub fn shaper(&self) -> &Shaper {
        &self.shaper
    }

    /// What the replica chooser sees of every backend at `now`: outstanding requests,
    /// availability (none for `excluded`), and the latency estimates settled together
    /// (`tailtrim_policy::health::settle_estimates`: stale ones pulled toward the mean).
    pub fn loads_at(&self, now: Timestamp, excluded: &[usize]) -> Inline<BackendLoad> {
        let estimates: Inline<Option<LatencyEstimate>> = self
            .backends
            .iter()
            .map(|backend| backend.estimate_at(now))
            .collect();
        let half_life =
            u64::try_from(self.config.estimate_half_life.as_nanos()).unwrap_or(u64::MAX);
        let mut settled = Vec::with_capacity(estimates.len());
        settle_estimates(&estimates, half_life, &mut settled);
        self.backends
            .iter()
            .zip(settled)
            .enumerate()
            .map(|(index, (backend, estimate))| {
                let mut load = backend.load_at(now);
                load.ewma_nanos = estimate;
                if excluded.contains(&index) {
                    load.available = false;
                }
                load
            })
            .collect()
    }

    /// Plans a read of `keys` at `now` without `excluded` backends, and reserves every fetch
    /// on its backend (so the next plan sees it as outstanding, even before it is sent).
    /// Dropping a reservation releases it.
    pub fn plan_at(&self, keys: &[&[u8]], excluded: &[usize], now: Timestamp) -> Plan<'_> {
        let request = PlanRequest { keys, now };
        let view = PoolView::new(self, excluded, now);
        // Planned and reserved under the planner's lock: a concurrent plan sees these fetches.
        let mut planner = self.planner.lock();
        let actions = planner.plan(&request, &view);
        let reservations = actions
            .iter()
            .filter_map(|action| match action {
                Action::Fetch(fetch) => Some(self.backends[fetch.backend].reserve()),
                Action::Unavailable { .. } => None,
            })
            .collect();
        let merge_limit = planner.merge_limit(keys.len());
        Plan {
            actions,
            reservations,
            merge_limit,
        }
    }

    fn record_latency(&self, started: Instant) {
        self.record_elapsed(started.elapsed());
    }

    fn record_elapsed(&self, elapsed: std::time::Duration) {
        self.stats
            .latency
            .record_micros(u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX));
    }

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
        join_all(
            self.backends
                .iter()
                .map(|backend| backend.call(bytes.clone(), shape)),
        )
        .await
    }

    /// Reads many keys, planned by the pool's planner. The result has one entry per key, in
    /// `keys` order (`None` for a miss). Keys whose backends failed are planned again on other
    /// replicas; if some key can be served by no replica the whole read fails.
    pub async fn multiget(
        &self,
        keys: &[Bytes],
        kind: MultigetKind,
    ) -> Result<Vec<Option<ValueItem>>, ClientError> {
        self.multiget_each(keys, kind).await.into_iter().collect()
    }

    /// Like [`Pool::multiget`], but a failure only fails the keys it concerns: each key gets
    /// its value, a miss, or the error of the backend(s) that should have served it.
    pub async fn multiget_each(&self, keys: &[Bytes], kind: MultigetKind) -> Vec<KeyResult> {
        self.stats.multigets.incr();
        self.stats.multiget_keys.add(keys.len() as u64);
        let started = Instant::now();
        self.shaper.request(keys.len());
        self.shaper.maybe_run_epoch();
        if let Some(shape) = self.shaper.take_pending(self.config.elephant_threshold) {
            self.planner.lock().set_shape(shape);
        }
        let result = self.multiget_inner(keys, kind, started).await;
        let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.stats.multiget_latency.record_micros(micros);
        self.stats.multiget_class_latency[usize::from(class_of(keys.len() as u64))]
            .record_micros(micros);
        self.stats.latency.record_micros(micros);
        if self.shaper.is_elephant(keys.len()) {
            self.stats.elephant_latency.record_micros(micros);
        } else {
            self.stats.mice_latency.record_micros(micros);
        }
        self.shaper.finished(keys.len(), micros);
        result
    }

    /// Runs one planned fetch, of the keys at `positions` in `keys`: merged into a query being
    /// set up (mice, `merge_limit > 1`), or as its own query.
    async fn run_fetch(
        &self,
        fetch: &Fetch,
        reservation: Reservation<'_>,
        keys: &[Bytes],
        positions: &[usize],
        kind: MultigetKind,
        merge_limit: u32,
    ) -> Result<Fetched, ClientError> {
        let backend = fetch.backend;
        let class = usize::from(fetch.priority.unwrap_or(0)).min(CLASSES - 1);
        if let Some(start_at) = fetch.not_before {
            let wait = start_at.nanos_since(self.clock.now());
            self.delay.hold(std::time::Duration::from_nanos(wait)).await;
        }
        let shaper = &self.shaper;
        if merge_limit <= 1 {
            let _slot = shaper.query_slots.acquire().await;
            if !shaper.inject_overhead.is_zero() {
                let setup = Instant::now();
                setup_wait(shaper.inject_overhead, shaper.overhead_sleeps).await;
                shaper.setup_done(setup.elapsed());
            }
            let refs: Inline<&[u8]> = positions.iter().map(|&i| keys[i].as_ref()).collect();
            return self
                .query(backend, reservation, &refs, kind, class)
                .await
                .map(Fetched::Items);
        }
        let keys: Vec<Bytes> = positions.iter().map(|&i| keys[i].clone()).collect();
        let query = match join_or_lead(&shaper.slots[backend], &keys, merge_limit) {
            Merge::Joined(reply) => {
                // The leader's query is the one outstanding request.
                drop(reservation);
                shaper.merged_requests.incr();
                return reply.await.map_or_else(
                    |_| {
                        Err(ClientError::ConnectionLost {
                            backend: self.backends[backend].address().to_string(),
                            reason: "the merged query was abandoned".to_string(),
                        })
                    },
                    |reply| reply.map(Fetched::PerKey),
                );
            }
            Merge::Leader(query) => query,
        };
        // Mice keep joining while the query waits for a slot and is set up.
        let _slot = shaper.query_slots.acquire().await;
        let setup = Instant::now();
        setup_wait(shaper.inject_overhead, shaper.overhead_sleeps).await;
        shaper.setup_done(setup.elapsed());
        let sealed = seal(&shaper.slots[backend], &query);
        if !sealed.members.is_empty() {
            shaper.merged_queries.incr();
        }
        let own = keys.len();
        let refs: Vec<&[u8]> = sealed.keys.iter().map(Bytes::as_ref).collect();
        match self.query(backend, reservation, &refs, kind, class).await {
            Ok(items) => {
                let mut values = vec![None; refs.len()];
                match_values(refs.iter().copied(), items, |at, item| values[at] = item);
                for (range, member) in sealed.members {
                    let _ =
                        member.send(Ok(values.get(range).map(<[_]>::to_vec).unwrap_or_default()));
                }
                values.truncate(own);
                Ok(Fetched::PerKey(values))
            }
            Err(error) => {
                for (_, member) in sealed.members {
                    let _ = member.send(Err(error.clone()));
                }
                Err(error)
            }
        }
    }

    /// Sends one multi-key query to `backend`; the items it returned, in its order.
    async fn query(
        &self,
        backend: usize,
        reservation: Reservation<'_>,
        keys: &[&[u8]],
        kind: MultigetKind,
        class: usize,
    ) -> Result<Vec<ValueItem>, ClientError> {
        let classed = self.backends[backend].detect_priorities().await == Priorities::Backend;
        self.stats.queries.incr();
        self.stats.query_keys.add(keys.len() as u64);
        let sent = Instant::now();
        let (reply, elapsed) = if classed {
            let write = |out: &mut Vec<u8>| kind.compose_classed(out, keys, class);
            let call = self.backends[backend].call_reserved(
                reservation,
                ReplyShape::UntilMetaNoop,
                class,
                sent,
                write,
            );
            call.await
        } else {
            let write = |out: &mut Vec<u8>| kind.compose(out, keys);
            let call = self.backends[backend].call_reserved(
                reservation,
                ReplyShape::UntilEnd,
                class,
                sent,
                write,
            );
            call.await
        };
        self.stats.fetch_class_latency[class]
            .record_micros(u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX));
        let mut reply = reply?;
        if classed && !reply.error_line {
            match meta_multiget_values(&reply.bytes) {
                Ok(values) => reply.values = values,
                Err(line) => {
                    return Err(ClientError::BackendReplied {
                        backend: self.backends[backend].address().to_string(),
                        line,
                    })
                }
            }
        }
        if reply.error_line {
            return Err(ClientError::BackendReplied {
                backend: self.backends[backend].address().to_string(),
                line: String::from_utf8_lossy(reply.bytes.trim_ascii_end()).into_owned(),
            });
        }
        let hits = reply.values.len() as u32;
        let value_bytes = reply.values.iter().map(|v| v.data.len() as u64).sum();
        self.shaper.query_done(keys.len() as u32, elapsed);
        let mut planner = self.planner.lock();
        if planner.wants_values() {
            for value in &reply.values {
                planner.observe_value(value.key(), value.data.len() as u64);
            }
        }
        planner.observe(&Observation {
            backend,
            keys: keys.len() as u32,
            hits,
            value_bytes,
            latency_nanos: u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX),
            at: self.clock.at(sent + elapsed),
        });
        drop(planner);
        Ok(reply.values)
    }

    async fn multiget_inner(
        &self,
        keys: &[Bytes],
        kind: MultigetKind,
        started: Instant,
    ) -> Vec<KeyResult> {
        let mut results: Vec<KeyResult> = vec![Ok(None); keys.len()];
        let mut remaining: Inline<usize> = (0..keys.len()).collect();
        let mut excluded: Vec<usize> = Vec::new();
        let mut failed: Vec<(usize, ClientError)> = Vec::new();
        for round in 0..self.config.replicas.max(1) {
            if remaining.is_empty() {
                break;
            }
            let now = if round > 0 {
                self.stats.failovers.incr();
                self.clock.now()
            } else {
                self.clock.at(started)
            };
            let last_error = failed.last().map(|(_, error)| error.clone());
            failed.clear();
            let round_keys: Inline<&[u8]> = remaining.iter().map(|&i| keys[i].as_ref()).collect();
            let Plan {
                actions,
                reservations,
                merge_limit: planned_merge,
            } = self.plan_at(&round_keys, &excluded, now);
            // Only plain `get`s merge: their replies carry nothing request-specific.
            let merge_limit = if kind == MultigetKind::Get {
                planned_merge
            } else {
                1
            };
            let mut fetches: SmallVec<[_; 4]> = SmallVec::with_capacity(actions.len());
            for action in actions {
                match action {
                    Action::Fetch(fetch) => fetches.push(fetch),
                    Action::Unavailable { keys: unavailable } => {
                        self.stats.unavailable.incr();
                        for index in unavailable {
                            results[remaining[index as usize]] =
                                Err(no_backend(last_error.clone()));
                        }
                    }
                }
            }
            self.stats.fetches.add(fetches.len() as u64);
            // Each fetch's keys as positions in `keys`, worked out once for sending and matching.
            let planned: SmallVec<[Inline<usize>; 4]> = fetches
                .iter()
                .map(|fetch| fetch.keys.iter().map(|&i| remaining[i as usize]).collect())
                .collect();
            let calls = fetches.iter().zip(&planned).zip(reservations).map(
                |((fetch, positions), reservation)| {
                    self.run_fetch(fetch, reservation, keys, positions, kind, merge_limit)
                },
            );
            let replies = join_few(calls, fetches.len()).await;
            for ((fetch, original), reply) in fetches.iter().zip(planned).zip(replies) {
                match reply {
                    Ok(Fetched::Items(items)) => {
                        let asked = original.iter().map(|&index| keys[index].as_ref());
                        match_values(asked, items, |at, item| results[original[at]] = Ok(item));
                    }
                    Ok(Fetched::PerKey(values)) => {
                        for (&index, value) in original.iter().zip(values) {
                            results[index] = Ok(value);
                        }
                    }
                    Err(error @ ClientError::BackendReplied { .. }) => {
                        for &index in &original {
                            results[index] = Err(error.clone());
                        }
                    }
                    Err(error) => {
                        excluded.push(fetch.backend);
                        failed.extend(original.into_iter().map(|index| (index, error.clone())));
                    }
                }
            }
            failed.sort_unstable_by_key(|(index, _)| *index);
            remaining = failed.iter().map(|(index, _)| *index).collect();
        }
        let replicated = self.config.replicas > 1;
        for (index, error) in failed {
            results[index] = Err(if replicated {
                no_backend(Some(error))
            } else {
                error
            });
        }
        results
    }

    /// Typed read of one key.
    pub async fn get(&self, key: &[u8]) -> Result<Option<Value>, ClientError> {
        if self.plans_each_read() {
            let mut values = self.get_many(&[Bytes::copy_from_slice(key)]).await?;
            return Ok(values.pop().flatten());
        }
        let mut out = Vec::with_capacity(key.len() + 6);
        compose::get(&mut out, &[key], false);
        let reply = self
            .read(key, Bytes::from(out), ReplyShape::UntilEnd)
            .await?;
        if reply.error_line {
            return Err(ClientError::BackendReplied {
                backend: String::new(),
                line: String::from_utf8_lossy(reply.bytes.trim_ascii_end()).into_owned(),
            });
        }
        Ok(reply
            .values
            .into_iter()
            .find(|item| item.key() == key)
            .map(|item| Value {
                flags: item.flags,
                cas: item.cas,
                data: item.value(),
            }))
    }

    /// Typed multi-key read; one entry per key, in order.
    pub async fn get_many(&self, keys: &[Bytes]) -> Result<Vec<Option<Value>>, ClientError> {
        let items = self.multiget(keys, MultigetKind::Get).await?;
        Ok(items
            .into_iter()
            .map(|item| {
                item.map(|item| Value {
                    flags: item.flags,
                    cas: item.cas,
                    data: item.value(),
                })
            })
            .collect())
    }

    /// Typed `set`; true when the owner replied `STORED`.
    pub async fn set(
        &self,
        key: &[u8],
        flags: u32,
        exptime: i64,
        data: &[u8],
    ) -> Result<bool, ClientError> {
        let mut out = Vec::with_capacity(key.len() + data.len() + 32);
        compose::set(&mut out, key, flags, exptime, data);
        let reply = self
            .write(key, Bytes::from(out), ReplyShape::Single)
            .await?;
        Ok(reply.bytes.as_ref() == b"STORED\r\n")
    }

    /// Typed `delete`; true when the owner replied `DELETED`.
    pub async fn delete(&self, key: &[u8]) -> Result<bool, ClientError> {
        let mut out = Vec::with_capacity(key.len() + 10);
        compose::delete(&mut out, key, false);
        let reply = self
            .write(key, Bytes::from(out), ReplyShape::Single)
            .await?;
        Ok(reply.bytes.as_ref() == b"DELETED\r\n")
    }
}

/// The items of a reply to [`compose::meta_multiget`]: each `VA` item (return flags `f`, `k`
/// and maybe `c`) becomes the `VALUE` item a text multiget would have returned. Any other
/// reply item is the backend's error, returned as its line.
fn meta_multiget_values(bytes: &Bytes) -> Result<Vec<ValueItem>, String> {
    use tailtrim_proto::number::{parse_u32, parse_u64};
    use tailtrim_proto::{parse_response, tokens, Parsed, Response};
    let mut values = Vec::new();
    let mut rest = &bytes[..];
    while !rest.is_empty() {
        let (flags, data, consumed) = match parse_response(rest) {
            Parsed::Complete {
                value: Response::MetaValue { flags, data },
                consumed,
            } => (flags, data, consumed),
            Parsed::Complete { consumed, .. } | Parsed::Invalid { consumed, .. } => {
                let line = &rest[..consumed.min(rest.len())];
                return Err(String::from_utf8_lossy(line.trim_ascii_end()).into_owned());
            }
            Parsed::Incomplete => return Err("truncated meta reply".to_string()),
        };
        let (mut key, mut client_flags, mut cas) = (None, 0, None);
        for token in tokens(&flags) {
            match token.split_first() {
                Some((b'k', k)) => key = Some(k),
                Some((b'f', f)) => client_flags = parse_u32(f).unwrap_or(0),
                Some((b'c', c)) => cas = parse_u64(c),
                _ => {}
            }
        }
        let key = key.ok_or_else(|| "VA item without its key".to_string())?;
        let value = &rest[data];
        let mut item = Vec::with_capacity(key.len() + value.len() + 48);
        item.extend_from_slice(b"VALUE ");
        item.extend_from_slice(key);
        item.extend_from_slice(format!(" {client_flags} {}", value.len()).as_bytes());
        if let Some(cas) = cas {
            item.extend_from_slice(format!(" {cas}").as_bytes());
        }
        item.extend_from_slice(b"\r\n");
        let start = item.len();
        item.extend_from_slice(value);
        item.extend_from_slice(b"\r\n");
        values.push(ValueItem {
            key_at: 6..6 + key.len(),
            item: Bytes::from(item),
            flags: client_flags,
            cas,
            data: start..start + value.len(),
        });
        rest = &rest[consumed..];
    }
    Ok(values)
}

/// Awaits `count` futures concurrently, outputs in order. Up to four (a multiget over up to
/// four backends) are joined in place: `join_all` would allocate their futures and outputs.
async fn join_few<F: std::future::Future>(
    mut futures: impl Iterator<Item = F>,
    count: usize,
) -> SmallVec<[F::Output; 4]> {
    use futures_util::future::{join, join3, join4};
    let mut next = || futures.next();
    match count {
        0 | 1 => match next() {
            Some(one) => smallvec::smallvec![one.await],
            None => SmallVec::new(),
        },
        2..=4 => {
            let (Some(a), Some(b)) = (next(), next()) else {
                return SmallVec::new();
            };
            match (count > 2).then(&mut next).flatten() {
                None => {
                    let (a, b) = join(a, b).await;
                    smallvec::smallvec![a, b]
                }
                Some(c) => match (count > 3).then(&mut next).flatten() {
                    None => {
                        let (a, b, c) = join3(a, b, c).await;
                        smallvec::smallvec![a, b, c]
                    }
                    Some(d) => {
                        let (a, b, c, d) = join4(a, b, c, d).await;
                        smallvec::smallvec![a, b, c, d]
                    }
                },
            }
        }
        _ => join_all(futures).await.into(),
    }
}

/// What one fetch returns.
enum Fetched {
    /// The backend's items, in its order, to be matched to the fetch's keys.
    Items(Vec<ValueItem>),
    /// One entry per key of the fetch (a merged query's share).
    PerKey(Vec<Option<ValueItem>>),
}

/// Matches the `VALUE` items of one query to the keys it asked for: `put(position, item)` for
/// every key position, in order (`None` for a miss). Backends answer in request order,
/// skipping misses; an item is only ever given to a key equal to the item's key, so a confused
/// backend can cause a miss but never a wrong value.
fn match_values<'k>(
    keys: impl IntoIterator<Item = &'k [u8]>,
    values: Vec<ValueItem>,
    mut put: impl FnMut(usize, Option<ValueItem>),
) {
    let mut values = values.into_iter().peekable();
    for (position, key) in keys.into_iter().enumerate() {
        let matched = match values.peek() {
            Some(next) if next.key() == key => values.next(),
            _ => None,
        };
        put(position, matched);
    }
}

fn no_backend(last_error: Option<ClientError>) -> ClientError {
    ClientError::NoBackend {
        last: last_error
            .map(|error| error.to_string())
            .unwrap_or_else(|| "all replicas are marked down".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classed_meta_replies_become_the_text_items_a_get_returns() {
        let reply = Bytes::from_static(b"VA 2 f7 kab c99\r\nhi\r\nVA 0 f0 kc\r\n\r\n");
        let values = meta_multiget_values(&reply).expect("parses");
        assert_eq!(values.len(), 2);
        assert_eq!(values[0].item.as_ref(), b"VALUE ab 7 2 99\r\nhi\r\n");
        assert_eq!(
            (values[0].key(), values[0].flags, values[0].cas),
            (&b"ab"[..], 7, Some(99))
        );
        assert_eq!(values[0].value().as_ref(), b"hi");
        assert_eq!(values[1].item.as_ref(), b"VALUE c 0 0\r\n\r\n");
        assert_eq!(values[1].value().as_ref(), b"");
        assert_eq!(
            meta_multiget_values(&Bytes::from_static(b"CLIENT_ERROR invalid flag\r\n")),
            Err("CLIENT_ERROR invalid flag".to_string())
        );
        assert!(meta_multiget_values(&Bytes::from_static(b"VA 1 f0\r\nx\r\n")).is_err());
        assert_eq!(meta_multiget_values(&Bytes::new()), Ok(Vec::new()));
    }

    fn item(key: &str) -> ValueItem {
        let text = format!("VALUE {key} 0 1\r\nx\r\n");
        let len = text.len();
        ValueItem {
            key_at: 6..6 + key.len(),
            item: Bytes::from(text),
            flags: 0,
            cas: None,
            data: (len - 3)..(len - 2),
        }
    }

    #[test]
    fn values_go_only_to_indices_with_the_same_key() {
        let keys: Vec<Bytes> = ["a", "b", "c", "a"]
            .iter()
            .map(|k| Bytes::from(*k))
            .collect();
        let matched = |keys: &[Bytes], items: Vec<ValueItem>| {
            let mut results = vec![None; keys.len()];
            match_values(keys.iter().map(Bytes::as_ref), items, |at, item| {
                results[at] = item
            });
            results
        };
        // b missed; a asked twice and returned twice.
        let results = matched(&keys, vec![item("a"), item("c"), item("a")]);
        let got: Vec<Option<&[u8]>> = results
            .iter()
            .map(|r| r.as_ref().map(ValueItem::key))
            .collect();
        assert_eq!(
            got,
            vec![Some(&b"a"[..]), None, Some(&b"c"[..]), Some(&b"a"[..])]
        );
        // A backend returning an unexpected key gives no value to anyone.
        let results = matched(&keys[..2], vec![item("zz")]);
        assert!(results.iter().all(Option::is_none));
    }

    #[tokio::test]
    async fn a_few_futures_join_in_order() {
        for count in 0..7 {
            let futures = (0..count).map(|i| async move {
                tokio::task::yield_now().await;
                i * 10
            });
            let outputs = join_few(futures, count).await;
            assert_eq!(
                outputs.to_vec(),
                (0..count).map(|i| i * 10).collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn multiget_commands_compose() {
        let keys: [&[u8]; 2] = [b"a", b"bb"];
        let composed = |kind: MultigetKind| {
            let mut out = Vec::new();
            kind.compose(&mut out, &keys);
            out
        };
        assert_eq!(composed(MultigetKind::Get), b"get a bb\r\n");
        assert_eq!(composed(MultigetKind::Gats(30)), b"gats 30 a bb\r\n");
    }
}
