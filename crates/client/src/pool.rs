//! A pool of backends behind one key space: its ring, backends, planner and shaper, the
//! replica chooser's view, and the typed API. The request paths over it are layers in
//! `crate::routes`: `read`/`write`/`broadcast` in `routes::failover` (replica choice and
//! failover), `multiget`/`multiget_each` in `routes::planner` (the multiget planner's run-time
//! side), the backend's priority gate in `routes::gate`.
//!
//! The replica chooser's view ([`Pool::loads_at`]): each backend's outstanding requests (from
//! the moment a plan reserves them) and its latency estimate, an estimate that no reply has
//! refreshed pulled toward the pool's mean (half-life `estimate_half_life`); the cost is C3's
//! `(outstanding + 1)³ × estimate` (`tailtrim_policy::health::expected_cost`).

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use parking_lot::Mutex;
use smallvec::SmallVec;
use tailtrim_policy::drr::CLASSES;
use tailtrim_policy::health::{settle_estimates, BackendLoad, LatencyEstimate, Timestamp};
use tailtrim_policy::planner::{Action, ClusterView, PlanRequest, Planner, QueryShape};
use tailtrim_policy::ring::Ring;
use tailtrim_policy::spread::ReplicaChoice;
use tailtrim_proto::compose;
use tailtrim_proto::meta::Priority;

use crate::backend::{Backend, BackendSettings, Reservation};
use crate::clock::Clock;
use crate::config::{PoolConfig, DEFAULT_MODEL_CLIENT_THREADS};
use crate::connection::{ReplyShape, ValueItem};
use crate::error::ClientError;
use crate::sched::DelayQueue;
use crate::shaping::Shaper;
use crate::stats::PoolStats;

/// Key positions and key slices of one multiget, inline up to this many keys: the common
/// small multiget allocates nothing for its bookkeeping.
pub(crate) type Inline<T> = SmallVec<[T; 16]>;

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
    /// Appends the query as quiet `mg` requests carrying `class` (and `ageing`, the overtakes
    /// of an aged order such as `cost-sbf`'s), for a backend that serves classes.
    pub(crate) fn compose_classed(
        self,
        out: &mut Vec<u8>,
        keys: &[&[u8]],
        class: usize,
        ageing: Option<u64>,
    ) {
        let (with_cas, touch) = match self {
            MultigetKind::Get => (false, None),
            MultigetKind::Gets => (true, None),
            MultigetKind::Gat(exptime) => (false, Some(exptime)),
            MultigetKind::Gats(exptime) => (true, Some(exptime)),
        };
        let priority = Priority {
            class: u8::try_from(class.min(CLASSES - 1)).unwrap_or(0),
            overtakes: ageing,
        };
        compose::meta_multiget(out, keys, with_cas, touch, priority);
    }

    /// Appends the query.
    pub(crate) fn compose(self, out: &mut Vec<u8>, keys: &[&[u8]]) {
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
    pub(crate) config: PoolConfig,
    pub(crate) ring: Ring,
    pub(crate) backends: Vec<Arc<Backend>>,
    pub(crate) planner: Mutex<Box<dyn Planner>>,
    pub(crate) shaper: Shaper,
    pub(crate) clock: Clock,
    pub(crate) delay: DelayQueue,
    pub(crate) stats: Arc<PoolStats>,
}

/// The planner's view of the pool, minus backends already tried for this request. In a
/// replica pool loads are read once per plan, for every backend at the first question
/// ([`Pool::loads_at`]: the estimates are settled together); without replicas only a
/// backend's availability matters, read once per plan for each backend asked about (a
/// multiget asks once per key: reading it each time took two locks per key). The planners
/// account for their own fetches within a plan (one fetch per backend for batch, Rein and
/// TailX; Chisel's chunk placement counts the chunks it gave each backend), and the plan's
/// fetches are reserved before the next plan.
struct PoolView<'a> {
    pool: &'a Pool,
    excluded: &'a [usize],
    /// When the plan is made.
    now: Timestamp,
    loads: std::cell::OnceCell<Inline<BackendLoad>>,
    /// Without replicas: each backend's load, once asked.
    own_loads: Inline<std::cell::OnceCell<BackendLoad>>,
}

impl<'a> PoolView<'a> {
    fn new(pool: &'a Pool, excluded: &'a [usize], now: Timestamp) -> Self {
        let own_loads = match pool.config.replicas {
            1 => pool
                .backends
                .iter()
                .map(|_| std::cell::OnceCell::new())
                .collect(),
            _ => Inline::new(),
        };
        PoolView {
            pool,
            excluded,
            now,
            loads: std::cell::OnceCell::new(),
            own_loads,
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
        if let Some(cell) = self.own_loads.get(backend) {
            // One candidate per key: only its availability matters, not the estimates.
            return *cell.get_or_init(|| {
                let mut load = self.pool.backends[backend].load_at(self.now);
                load.available &= !self.excluded.contains(&backend);
                load
            });
        }
        let loads = self
            .loads
            .get_or_init(|| self.pool.loads_at(self.now, self.excluded));
        let mut load = loads.get(backend).copied().unwrap_or(BackendLoad {
            outstanding: 0,
            outstanding_work: None,
            demoted_work: None,
            ewma_nanos: None,
            available: false,
        });
        let settings = &self.pool.config.planner_settings;
        if settings.replica_choice != ReplicaChoice::Cover {
            return load;
        }
        if let Some(server) = self.pool.backends.get(backend) {
            // Keys in flight (large ones weighed by the planner's T_L / T_S) plus a fixed cost
            // per request, in keys: what the covering replica choice weighs backends by.
            let per_request = settings.fetch_cost_keys;
            load.outstanding_work = Some(
                f64::from(load.outstanding) * per_request + f64::from(server.outstanding_keys()),
            );
        }
        load
    }

    fn fetch_work(&self) -> Option<f64> {
        Some(self.pool.config.planner_settings.fetch_cost_keys + 1.0)
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
                Action::Fetch(fetch) => {
                    // Its work in small keys, as the planner estimates it (a large value
                    // counts as T_L / T_S keys for planners that know which keys are large).
                    let work = planner.fetch_work_keys(&request, fetch).round();
                    Some(
                        self.backends[fetch.backend]
                            .reserve_keys(work.clamp(1.0, f64::from(u32::MAX / 2)) as u32),
                    )
                }
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

    pub(crate) fn record_latency(&self, started: Instant) {
        self.record_elapsed(started.elapsed());
    }

    pub(crate) fn record_elapsed(&self, elapsed: std::time::Duration) {
        self.stats
            .latency
            .record_micros(u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PoolConfig, ServerSpec};
    use tailtrim_policy::health::Timestamp;
    use tailtrim_policy::planner::PlannerKind;
    use tailtrim_policy::spread::ReplicaChoice;
    use tailtrim_policy::tailx::{DEFAULT_LARGE_COST_RATIO, LEARN_MIN_SAMPLES};

    #[test]
    fn a_fetch_holding_a_large_value_weighs_on_its_backend_as_many_small_keys() {
        let servers = (1..=2)
            .map(|port| ServerSpec::parse(&format!("127.0.0.1:{port}:1")).expect("server line"))
            .collect();
        let mut config = PoolConfig::new("large", servers);
        config.planner = PlannerKind::SizeRel;
        config.planner_settings.replica_choice = ReplicaChoice::Cover;
        let pool = Pool::new(config).expect("pool");
        {
            // The planner has seen 1 KB values (its size threshold learned) and one of 100 KB.
            let mut planner = pool.planner.lock();
            for i in 0..LEARN_MIN_SAMPLES * 2 {
                planner.observe_value(format!("small:{i}").as_bytes(), 1_000);
            }
            planner.observe_value(b"large", 100_000);
        }
        let at = Timestamp::from_nanos(1_000_000_000);
        let in_flight = |plan: &Plan<'_>| match &plan.actions[..] {
            [Action::Fetch(fetch)] => pool.backends()[fetch.backend].outstanding_keys(),
            other => panic!("one fetch expected: {other:?}"),
        };
        let small = pool.plan_at(&[b"small:0".as_slice()], &[], at);
        assert_eq!(in_flight(&small), 1);
        drop(small);
        // No fetch timed yet: T_L / T_S is TailX's default ratio.
        let large = pool.plan_at(&[b"large".as_slice()], &[], at);
        assert_eq!(in_flight(&large), DEFAULT_LARGE_COST_RATIO as u32);
        drop(large);
        assert!(pool.backends().iter().all(|b| b.outstanding_keys() == 0));
    }
}
