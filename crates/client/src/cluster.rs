//! Runtime membership: a versioned [`Pool`] swapped atomically, hot-key tracking, and warm-up
//! of the keys a join or a removal moves.
//!
//! ```text
//!   request ─► enter(): Arc<View> (in-flight += 1 under the read lock) ─► view.pool.read/write
//!                 │ the request finishes on the view it entered, even if a change swaps it
//!   change(servers, warm-up):
//!     1. new Pool over the same Backend handles (connections kept) + new ones; a joining
//!        server gets `flush_all` first (what it still holds from an earlier membership is
//!        stale: it missed the writes made while it was out)
//!     2. preemptive: view {route old, shadow Next(new)}; wait until the old view is idle;
//!        each old owner's key listing (dump::list_keys, streamed) ─► keys whose owner
//!        changes ─► policy::warmup::CopyPlanner (heat: the trackers; bounded) ─► plan(share)
//!        ─► copy old owner ─► new owner (mg v f t ─► set), hottest first, rate-limited
//!        (an old owner that lists nothing: its tracked keys stand in)
//!     3. switch: view {route new, shadow Previous(old)} when fallback, else {route new}
//!        wait until the previous view is idle
//!     4. fallback: a miss at the new owner of a moved key ─► mg at the old owner ─► add at the
//!        new owner ─► the read is repeated; ends when policy::warmup::WarmupProgress says so
//!   consistency: while a view has a shadow, a write to a key whose owner differs takes the
//!   key's fence, writes at the routing owner and deletes at the shadow owner; copies take the
//!   same fence, so a copy is entirely before or entirely after any write of its key.
//! ```
//!
//! The request path over the views (tracking, fences, shadow deletes, fallback reads) is the
//! `warmup` route, `crate::routes::warmup`; this module owns the views and the changes.
//!
//! Only one change runs at a time. A change starting while a previous warm-up still runs ends
//! that warm-up first. Fences and the shadow deletes exist only during a change, so steady-state
//! requests pay one in-flight increment and one sampled-tracker check.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::join_all;
use parking_lot::{Mutex, RwLock};
use tailtrim_policy::hotkeys::{HotKey, HotKeyTracker, Sampler, TrackerConfig};
use tailtrim_policy::warmup::{CopyPlanner, WarmupEnd, WarmupProgress, WarmupSettings};
use tailtrim_proto::{compose, parse_response, Parsed, Response};

use crate::backend::{Backend, BackendSettings};
use crate::clock::Clock;
use crate::config::{PoolConfig, ServerSpec};
use crate::connection::ReplyShape;
use crate::dump::list_keys;
use crate::error::ClientError;
use crate::pool::Pool;
use crate::stats::{Counter, PoolStats};

/// Stripes of the per-key write/copy fence.
const FENCE_STRIPES: usize = 1024;
/// Poll step while waiting for a view to become idle.
const QUIESCE_STEP: Duration = Duration::from_millis(1);
/// Poll step of the warm-up monitor.
const MONITOR_STEP: Duration = Duration::from_millis(50);
/// Copies issued concurrently during a preemptive warm-up.
const COPY_CONCURRENCY: usize = 16;
/// Earlier routing pools whose owners a write still invalidates (see [`Cluster::write`]).
/// When it is full, a change first deletes every member's leftovers (keys it holds but does
/// not own) and starts the history over ([`Cluster::purge_leftovers`]).
const HISTORY: usize = 8;
/// Passes of [`Cluster::purge_leftovers`] over one member at most (each deletes up to
/// `max_copy_keys` keys).
const PURGE_PASSES: usize = 16;
/// memcached reads an exptime above 30 days as a unix time.
const RELATIVE_TTL_MAX: i64 = 60 * 60 * 24 * 30;

/// The other pool of a view during a change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ShadowRole {
    /// The pool about to be switched to (preemptive copying): writes also delete there.
    Next,
    /// The pool switched from: writes also delete there; misses may fall back to it.
    Previous {
        /// Read a miss of a moved key from its previous owner.
        fallback: bool,
    },
}

pub(crate) struct Shadow {
    pub(crate) pool: Arc<Pool>,
    pub(crate) role: ShadowRole,
    pub(crate) progress: Option<Mutex<WarmupProgress>>,
}

/// One version of the membership.
pub struct View {
    version: u64,
    pub(crate) pool: Arc<Pool>,
    pub(crate) shadow: Option<Shadow>,
    in_flight: AtomicUsize,
    /// The hot-key tracker of each routing backend (by index), looked up in
    /// [`Cluster::trackers`] (by address) the first time the view samples a key it owns.
    pub(crate) trackers: Vec<std::sync::OnceLock<Arc<Tracked>>>,
}

impl View {
    fn new(version: u64, pool: Arc<Pool>, shadow: Option<Shadow>) -> View {
        View {
            version,
            trackers: pool.backends().iter().map(|_| Default::default()).collect(),
            pool,
            shadow,
            in_flight: AtomicUsize::new(0),
        }
    }

    /// The version number (1 for the initial pool, +1 per installed view).
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The routing pool.
    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    /// The shadow pool's backends that hold `key` there but not in the routing pool.
    pub(crate) fn shadow_owners(&self, key: &[u8]) -> Vec<Arc<Backend>> {
        match &self.shadow {
            Some(shadow) => owners_elsewhere(&self.pool, &shadow.pool, key),
            None => Vec::new(),
        }
    }

    /// Members of the routing pool that owned `key` in an earlier pool of `history` but do
    /// not own it now: they may still hold a value of it that later writes did not reach.
    pub(crate) fn former_owners(&self, history: &[Arc<Pool>], key: &[u8]) -> Vec<Arc<Backend>> {
        let mut owners: Vec<Arc<Backend>> = Vec::new();
        for pool in history {
            for former in owners_elsewhere(&self.pool, pool, key) {
                let member = self
                    .pool
                    .backends()
                    .iter()
                    .find(|b| b.address() == former.address());
                if let Some(member) = member {
                    if !owners.iter().any(|b| b.address() == member.address()) {
                        owners.push(member.clone());
                    }
                }
            }
        }
        owners
    }

    pub(crate) fn owner(&self, key: &[u8]) -> &Arc<Backend> {
        &self.pool.backends()[self.pool.ring().server_for(key)]
    }
}

/// A request's hold on the view it entered: the view stays "busy" until this drops.
pub(crate) struct Ticket(pub(crate) Arc<View>);

impl Drop for Ticket {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Counters of membership changes and warm-up (`cluster_*`).
#[derive(Debug, Default)]
pub struct ClusterStats {
    /// `cluster_changes`: membership changes applied.
    pub changes: Counter,
    /// `cluster_copies`: keys copied before a switch (preemptive warm-up, drain).
    pub copies: Counter,
    /// `cluster_copy_misses`: planned copies whose key was gone at the old owner.
    pub copy_misses: Counter,
    /// `cluster_fallback_reads`: misses at a new owner read from the previous owner.
    pub fallback_reads: Counter,
    /// `cluster_fallback_hits`: of those, found there and added at the new owner.
    pub fallback_hits: Counter,
    /// `cluster_fenced_writes`: writes to moved keys during a change (fenced, shadow delete).
    pub fenced_writes: Counter,
    /// `cluster_former_owner_deletes`: steady-state writes that also deleted the key at
    /// members that owned it in an earlier routing pool.
    pub former_owner_deletes: Counter,
    /// `cluster_leftovers_deleted`: keys deleted at members that held them without owning
    /// them, so that the history of former owners could start over.
    pub leftovers_deleted: Counter,
    /// `cluster_history_gaps`: changes that dropped the oldest pool of a full history without
    /// a complete purge of leftovers (a member's listing failed or may be truncated).
    pub history_gaps: Counter,
}

/// What the last change did (for the admin API and the experiment).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChangeReport {
    /// Version installed by the switch.
    pub version: u64,
    /// Warm-up mode name.
    pub mode: String,
    /// Servers before and after.
    pub before: Vec<String>,
    /// Servers after.
    pub after: Vec<String>,
    /// Tracked keys whose owner changes.
    pub moved_tracked: usize,
    /// Keys the old owners listed whose owner changes (held, so worth a copy; for an old owner
    /// whose listing failed, its tracked keys whose owner changes).
    pub moved_held: usize,
    /// Old owners whose key listing failed (their tracked keys stood in).
    pub unlisted: usize,
    /// Keys planned for copying.
    pub planned: usize,
    /// Keys copied.
    pub copied: usize,
    /// Time spent copying before the switch (ms).
    pub copy_ms: f64,
    /// Warm-up after the switch: still running, or how it ended.
    pub warmup_end: Option<String>,
    /// Warm-up time after the switch (ms), once ended.
    pub warmup_ms: Option<f64>,
}

/// Membership and warm-up status.
#[derive(Debug, Clone)]
pub struct ClusterStatus {
    /// Current version.
    pub version: u64,
    /// Routing servers (`host:port:weight [name]`).
    pub servers: Vec<String>,
    /// `steady`, `copying` or `warming`.
    pub phase: &'static str,
    /// The last change, if any.
    pub last_change: Option<ChangeReport>,
}

pub(crate) struct Tracked {
    pub(crate) tracker: Mutex<HotKeyTracker>,
}

/// Backends of `other` that hold `key` there but are not among its owners in `routing`.
fn owners_elsewhere(routing: &Pool, other: &Pool, key: &[u8]) -> Vec<Arc<Backend>> {
    let copies = routing.config().replicas;
    let mut owners = Vec::with_capacity(copies);
    routing.ring().replicas_for(key, copies, &mut owners);
    let mut elsewhere = Vec::with_capacity(copies);
    other
        .ring()
        .replicas_for(key, other.config().replicas, &mut elsewhere);
    let owner_addresses: Vec<&str> = owners
        .iter()
        .map(|&i| routing.backends()[i].address())
        .collect();
    elsewhere
        .into_iter()
        .map(|i| other.backends()[i].clone())
        .filter(|backend| !owner_addresses.contains(&backend.address()))
        .collect()
}

/// A pool whose membership can change at runtime.
pub struct Cluster {
    view: RwLock<Arc<View>>,
    changing: tokio::sync::Mutex<()>,
    template: PoolConfig,
    pool_stats: Arc<PoolStats>,
    clock: Clock,
    versions: AtomicU64,
    fences: Vec<tokio::sync::Mutex<()>>,
    pub(crate) sampler: Sampler,
    pub(crate) tracker_config: TrackerConfig,
    pub(crate) trackers: RwLock<HashMap<String, Arc<Tracked>>>,
    pub(crate) stats: ClusterStats,
    last_change: Mutex<Option<ChangeReport>>,
    monitor: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The routing pools before the current one, newest first (at most [`HISTORY`]).
    pub(crate) history: RwLock<Arc<Vec<Arc<Pool>>>>,
}

impl Cluster {
    /// Builds the cluster's first version (no connection is opened until the first request).
    pub fn new(config: PoolConfig, tracker: TrackerConfig) -> Result<Arc<Cluster>, ClientError> {
        let pool = Pool::new(config.clone())?;
        let clock = pool.clock();
        let pool_stats = pool.stats_handle();
        let cluster = Cluster {
            view: RwLock::new(Arc::new(View::new(1, Arc::new(pool), None))),
            changing: tokio::sync::Mutex::new(()),
            template: config,
            pool_stats,
            clock,
            versions: AtomicU64::new(1),
            fences: (0..FENCE_STRIPES)
                .map(|_| tokio::sync::Mutex::new(()))
                .collect(),
            sampler: Sampler::new(tracker.sample_every),
            tracker_config: TrackerConfig {
                sample_every: 1,
                ..tracker
            },
            trackers: RwLock::new(HashMap::new()),
            stats: ClusterStats::default(),
            last_change: Mutex::new(None),
            monitor: Mutex::new(None),
            history: RwLock::new(Arc::new(Vec::new())),
        };
        Ok(Arc::new(cluster))
    }

    /// The routing pool now (a request started now would use it).
    pub fn current(&self) -> Arc<Pool> {
        self.view.read().pool.clone()
    }

    /// The current membership version.
    pub fn version(&self) -> u64 {
        self.view.read().version
    }

    /// Change and warm-up counters.
    pub fn stats(&self) -> &ClusterStats {
        &self.stats
    }

    /// Pool metrics, kept across versions.
    pub fn pool_stats(&self) -> &PoolStats {
        &self.pool_stats
    }

    /// Membership and warm-up status.
    pub fn status(&self) -> ClusterStatus {
        let view = self.view.read().clone();
        let phase = match view.shadow.as_ref().map(|shadow| shadow.role) {
            None => "steady",
            Some(ShadowRole::Next) => "copying",
            Some(ShadowRole::Previous { .. }) => "warming",
        };
        ClusterStatus {
            version: view.version,
            servers: view
                .pool
                .config()
                .servers
                .iter()
                .map(ToString::to_string)
                .collect(),
            phase,
            last_change: self.last_change.lock().clone(),
        }
    }

    /// The `n` hottest keys the tracker of backend `address` holds.
    pub fn hot_keys(&self, address: &str, n: usize) -> Vec<HotKey> {
        self.trackers
            .read()
            .get(address)
            .map(|tracked| tracked.tracker.lock().top(n))
            .unwrap_or_default()
    }

    /// Bytes held by all trackers.
    pub fn tracker_memory(&self) -> usize {
        self.trackers
            .read()
            .values()
            .map(|tracked| tracked.tracker.lock().memory_bytes())
            .sum()
    }

    pub(crate) fn enter(&self) -> Ticket {
        let guard = self.view.read();
        guard.in_flight.fetch_add(1, Ordering::AcqRel);
        Ticket(guard.clone())
    }

    pub(crate) fn fence(&self, key: &[u8]) -> &tokio::sync::Mutex<()> {
        // FNV-1a: any hash spreading keys over stripes will do.
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for &byte in key {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        &self.fences[(hash % FENCE_STRIPES as u64) as usize]
    }

    fn install(&self, pool: Arc<Pool>, shadow: Option<Shadow>) -> Arc<View> {
        let version = self.versions.fetch_add(1, Ordering::AcqRel) + 1;
        let view = Arc::new(View::new(version, pool, shadow));
        let old = std::mem::replace(&mut *self.view.write(), view);
        old
    }

    /// Waits until no request holds `view` (it is no longer current, so none can enter it).
    async fn quiesce(view: &View) {
        while view.in_flight.load(Ordering::Acquire) > 0 {
            tokio::time::sleep(QUIESCE_STEP).await;
        }
    }

    /// Builds the pool for `servers`, reusing the backends already connected.
    fn build_pool(&self, servers: Vec<ServerSpec>) -> Result<Arc<Pool>, ClientError> {
        let current = self.current();
        let settings = BackendSettings::of(&self.template);
        let backends = servers
            .iter()
            .map(|spec| {
                let address = spec.address();
                current
                    .backends()
                    .iter()
                    .find(|backend| backend.address() == address)
                    .cloned()
                    .unwrap_or_else(|| {
                        Arc::new(Backend::new(address, settings.clone(), self.clock))
                    })
            })
            .collect();
        let mut config = self.template.clone();
        config.servers = servers;
        Ok(Arc::new(Pool::assemble(
            config,
            backends,
            self.pool_stats.clone(),
            self.clock,
        )?))
    }

    /// Adds `spec`, or re-weights it if a server with its address is already a member.
    pub async fn add_server(
        self: &Arc<Self>,
        spec: ServerSpec,
        warmup: WarmupSettings,
    ) -> Result<ChangeReport, ClientError> {
        let mut servers = self.current().config().servers.clone();
        match servers.iter_mut().find(|s| s.address() == spec.address()) {
            Some(existing) if *existing == spec => {
                return Err(ClientError::Config(format!("{spec} is already a member")))
            }
            Some(existing) => *existing = spec,
            None => servers.push(spec),
        }
        self.change(servers, warmup).await
    }

    /// Removes the server at `address` (`host:port`); a preemptive mode drains its hottest
    /// keys to their new owners first.
    pub async fn remove_server(
        self: &Arc<Self>,
        address: &str,
        warmup: WarmupSettings,
    ) -> Result<ChangeReport, ClientError> {
        let mut servers = self.current().config().servers.clone();
        let before = servers.len();
        servers.retain(|s| s.address() != address);
        if servers.len() == before {
            return Err(ClientError::Config(format!("{address} is not a member")));
        }
        self.change(servers, warmup).await
    }

    /// Switches to `servers` (e.g. a reloaded config), warming up as `warmup` says. Returns
    /// once the new view routes requests; a fallback warm-up continues in the background.
    pub async fn change(
        self: &Arc<Self>,
        servers: Vec<ServerSpec>,
        warmup: WarmupSettings,
    ) -> Result<ChangeReport, ClientError> {
        let _one_at_a_time = self.changing.lock().await;
        if let Some(monitor) = self.monitor.lock().take() {
            monitor.abort();
        }
        // End a warm-up still running: steady on the current routing pool.
        let current = self.view.read().clone();
        if current.shadow.is_some() {
            let old = self.install(current.pool.clone(), None);
            Self::quiesce(&old).await;
            self.finish_report(WarmupEnd::TimeBound, None);
        }
        let old_pool = self.current();
        let new_pool = self.build_pool(servers)?;
        if self.history.read().len() >= HISTORY {
            // The oldest pool is about to be forgotten: members that owned keys in it could
            // still hold them, and later writes would no longer delete them there.
            if self.purge_leftovers(&old_pool, warmup).await {
                *self.history.write() = Arc::new(Vec::new());
            } else {
                self.stats.history_gaps.incr();
            }
        }
        // A joining server starts empty: values it still holds from an earlier membership
        // were not kept up to date while it was out, and would come back stale.
        for backend in new_pool.backends() {
            let member = old_pool
                .backends()
                .iter()
                .any(|old| old.address() == backend.address());
            if !member {
                let reply = backend
                    .call(Bytes::from_static(b"flush_all\r\n"), ReplyShape::Single)
                    .await?;
                if reply.bytes.as_ref() != b"OK\r\n" {
                    return Err(ClientError::Config(format!(
                        "{}: flush_all before joining answered {:?}",
                        backend.address(),
                        String::from_utf8_lossy(&reply.bytes)
                    )));
                }
            }
        }
        let mut report = ChangeReport {
            mode: warmup.mode.name().to_string(),
            before: names(&old_pool),
            after: names(&new_pool),
            ..ChangeReport::default()
        };
        if warmup.mode.preemptive {
            let started = Instant::now();
            let shadow = Shadow {
                pool: new_pool.clone(),
                role: ShadowRole::Next,
                progress: None,
            };
            let old = self.install(old_pool.clone(), Some(shadow));
            Self::quiesce(&old).await;
            let plan = self.plan(&old_pool, &new_pool, warmup, &mut report).await;
            report.planned = plan.len();
            report.copied = self.copy_all(&old_pool, &new_pool, &plan, warmup).await;
            report.copy_ms = started.elapsed().as_secs_f64() * 1e3;
        }
        let shadow = warmup.mode.fallback.then(|| Shadow {
            pool: old_pool.clone(),
            role: ShadowRole::Previous { fallback: true },
            progress: Some(Mutex::new(WarmupProgress::new(warmup, self.clock.now()))),
        });
        let warming = shadow.is_some();
        {
            let mut history = self.history.write();
            let mut pools = Vec::with_capacity(HISTORY);
            pools.push(old_pool.clone());
            pools.extend(history.iter().take(HISTORY - 1).cloned());
            *history = Arc::new(pools);
        }
        let old = self.install(new_pool.clone(), shadow);
        Self::quiesce(&old).await;
        report.version = self.version();
        self.stats.changes.incr();
        // Trackers of servers that left are dropped.
        let members: Vec<String> = new_pool
            .backends()
            .iter()
            .map(|b| b.address().to_string())
            .collect();
        self.trackers
            .write()
            .retain(|address, _| members.contains(address));
        if !warming {
            report.warmup_end = Some("none".to_string());
            report.warmup_ms = Some(0.0);
        }
        *self.last_change.lock() = Some(report.clone());
        if warming {
            let cluster = self.clone();
            let switched = Instant::now();
            *self.monitor.lock() = Some(tokio::spawn(async move {
                cluster.monitor(switched).await;
            }));
        }
        Ok(report)
    }

    /// Ends the fallback warm-up when the policy says so.
    async fn monitor(self: Arc<Self>, switched: Instant) {
        loop {
            tokio::time::sleep(MONITOR_STEP).await;
            let view = self.view.read().clone();
            let Some(progress) = view.shadow.as_ref().and_then(|s| s.progress.as_ref()) else {
                return;
            };
            let done = progress.lock().done(self.clock.now());
            if let Some(end) = done {
                let _one_at_a_time = self.changing.lock().await;
                let old = self.install(view.pool.clone(), None);
                Self::quiesce(&old).await;
                self.finish_report(end, Some(switched.elapsed()));
                return;
            }
        }
    }

    fn finish_report(&self, end: WarmupEnd, after: Option<Duration>) {
        if let Some(report) = self.last_change.lock().as_mut() {
            if report.warmup_end.is_none() {
                report.warmup_end = Some(end.name().to_string());
                report.warmup_ms = after.map(|d| d.as_secs_f64() * 1e3);
            }
        }
    }

    /// Deletes, at every member of `pool` (the routing pool, no warm-up running), the keys it
    /// holds but does not own: what earlier changes left behind. Then no member holds a key
    /// that a pool before `pool` gave it, and the history of former owners can start over.
    /// Nothing can store such a key meanwhile (no warm-up, no copy, writes go to the owners).
    /// False when a listing failed or may be incomplete.
    async fn purge_leftovers(&self, pool: &Pool, warmup: WarmupSettings) -> bool {
        let connect_timeout = self.template.connect_timeout;
        let dialer = &self.template.dialer;
        let mut complete = true;
        for (index, backend) in pool.backends().iter().enumerate() {
            let mut owners = Vec::new();
            let mut done = false;
            for _ in 0..PURGE_PASSES {
                let mut leftovers: Vec<Vec<u8>> = Vec::new();
                let mut full = false;
                let listed = list_keys(backend.address(), connect_timeout, dialer, |held| {
                    owners.clear();
                    pool.ring()
                        .replicas_for(&held.key, pool.config().replicas, &mut owners);
                    if !owners.contains(&index) {
                        if leftovers.len() < warmup.max_copy_keys.max(1) {
                            leftovers.push(held.key);
                        } else {
                            full = true;
                        }
                    }
                })
                .await;
                let Ok(summary) = listed else {
                    break;
                };
                if !self.delete_all(backend, &leftovers, warmup).await {
                    break;
                }
                if !full {
                    done = summary.complete();
                    break;
                }
            }
            complete &= done;
        }
        complete
    }

    /// Deletes `keys` at `backend`, rate-limited like copies; false if a delete failed.
    async fn delete_all(
        &self,
        backend: &Backend,
        keys: &[Vec<u8>],
        warmup: WarmupSettings,
    ) -> bool {
        let started = Instant::now();
        let rate = f64::from(warmup.copy_rate.max(1));
        for (batch_index, batch) in keys.chunks(COPY_CONCURRENCY).enumerate() {
            let due = Duration::from_secs_f64((batch_index * COPY_CONCURRENCY) as f64 / rate);
            if let Some(wait) = due.checked_sub(started.elapsed()) {
                tokio::time::sleep(wait).await;
            }
            let deletes = batch.iter().map(|key| {
                let mut delete = Vec::with_capacity(key.len() + 10);
                compose::delete(&mut delete, key, false);
                backend.call(Bytes::from(delete), ReplyShape::Single)
            });
            for outcome in join_all(deletes).await {
                match outcome {
                    Ok(reply) if reply.bytes.as_ref() == b"DELETED\r\n" => {
                        self.stats.leftovers_deleted.incr();
                    }
                    Ok(reply) if reply.bytes.as_ref() == b"NOT_FOUND\r\n" => {}
                    _ => return false,
                }
            }
        }
        true
    }

    /// The copy plan: the keys the old owners hold (their listings, streamed) whose owner
    /// changes, ranked by the trackers' heat ([`CopyPlanner`]); an old owner whose listing
    /// fails contributes its tracked keys instead.
    async fn plan(
        &self,
        old: &Pool,
        new: &Pool,
        warmup: WarmupSettings,
        report: &mut ChangeReport,
    ) -> Vec<Box<[u8]>> {
        let moves_from = |address: &str, key: &[u8]| {
            let before = old.backends()[old.ring().server_for(key)].address();
            let after = new.backends()[new.ring().server_for(key)].address();
            before == address && before != after
        };
        let trackers: Vec<(String, Arc<Tracked>)> = self
            .trackers
            .read()
            .iter()
            .map(|(address, tracked)| (address.clone(), tracked.clone()))
            .collect();
        let mut tracked: HashMap<String, Vec<HotKey>> = HashMap::new();
        for (address, keys) in trackers {
            let top = keys.tracker.lock().top(usize::MAX);
            let moved: Vec<HotKey> = top
                .into_iter()
                .filter(|hot| moves_from(&address, &hot.key))
                .collect();
            report.moved_tracked += moved.len();
            tracked.insert(address, moved);
        }
        let mut planner =
            CopyPlanner::new(warmup.max_copy_keys, tracked.values().flatten().cloned());
        // A pure removal moves only the departing servers' keys; otherwise any old owner
        // may lose keys.
        let new_addresses: Vec<&str> = new.backends().iter().map(|b| b.address()).collect();
        let removal = new
            .config()
            .servers
            .iter()
            .all(|spec| old.config().servers.contains(spec));
        let connect_timeout = self.template.connect_timeout;
        let dialer = &self.template.dialer;
        for backend in old.backends() {
            let address = backend.address();
            if removal && new_addresses.contains(&address) {
                continue;
            }
            let before = planner.offered();
            let listed = list_keys(address, connect_timeout, dialer, |held| {
                if moves_from(address, &held.key) {
                    planner.offer(&held.key, held.last_access);
                }
            })
            .await;
            if listed.is_err() {
                report.unlisted += 1;
                for hot in tracked.get(address).into_iter().flatten() {
                    planner.offer(&hot.key, None);
                }
            }
            report.moved_held += (planner.offered() - before) as usize;
        }
        planner.plan(warmup.warm_share)
    }

    async fn copy_all(
        &self,
        old: &Pool,
        new: &Pool,
        plan: &[Box<[u8]>],
        warmup: WarmupSettings,
    ) -> usize {
        let started = Instant::now();
        let rate = f64::from(warmup.copy_rate.max(1));
        let mut copied = 0;
        for (batch_index, batch) in plan.chunks(COPY_CONCURRENCY).enumerate() {
            let due = Duration::from_secs_f64((batch_index * COPY_CONCURRENCY) as f64 / rate);
            if let Some(wait) = due.checked_sub(started.elapsed()) {
                tokio::time::sleep(wait).await;
            }
            let copies = batch.iter().map(|key| async move {
                let from = &old.backends()[old.ring().server_for(key)];
                let to = &new.backends()[new.ring().server_for(key)];
                let _fence = self.fence(key).lock().await;
                copy_key(key, from, to, CopyMode::Set).await
            });
            for outcome in join_all(copies).await {
                match outcome {
                    Ok(true) => {
                        copied += 1;
                        self.stats.copies.incr();
                    }
                    _ => self.stats.copy_misses.incr(),
                }
            }
        }
        copied
    }
}

fn names(pool: &Pool) -> Vec<String> {
    pool.config()
        .servers
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum CopyMode {
    /// Before the switch: the old owner is the authority, overwrite.
    Set,
    /// After the switch: the new owner is the authority, never overwrite.
    Add,
}

/// Copies `key` with its flags and remaining TTL; true when a value was found and stored.
pub(crate) async fn copy_key(
    key: &[u8],
    from: &Backend,
    to: &Backend,
    mode: CopyMode,
) -> Result<bool, ClientError> {
    let mut request = Vec::with_capacity(key.len() + 12);
    request.extend_from_slice(b"mg ");
    request.extend_from_slice(key);
    request.extend_from_slice(b" v f t\r\n");
    let reply = from.call(Bytes::from(request), ReplyShape::Single).await?;
    let Parsed::Complete {
        value: Response::MetaValue { flags, data },
        ..
    } = parse_response(&reply.bytes)
    else {
        return Ok(false);
    };
    let Some(value) = reply.bytes.get(data) else {
        return Ok(false);
    };
    let mut client_flags: u32 = 0;
    let mut exptime: i64 = 0;
    for token in flags.split(|&b| b == b' ') {
        let Some((&letter, number)) = token.split_first() else {
            continue;
        };
        let number = std::str::from_utf8(number).ok();
        match letter {
            b'f' => client_flags = number.and_then(|n| n.parse().ok()).unwrap_or(0),
            b't' => exptime = number.and_then(|n| n.parse().ok()).unwrap_or(-1),
            _ => {}
        }
    }
    if exptime == 0 {
        // Expiring this very second: not worth a copy.
        return Ok(false);
    }
    let exptime = if exptime < 0 {
        0
    } else if exptime > RELATIVE_TTL_MAX {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        now + exptime
    } else {
        exptime
    };
    let mut store = Vec::with_capacity(key.len() + value.len() + 40);
    let store_mode = match mode {
        CopyMode::Set => tailtrim_proto::StoreMode::Set,
        CopyMode::Add => tailtrim_proto::StoreMode::Add,
    };
    compose::store(
        &mut store,
        store_mode,
        key,
        client_flags,
        exptime,
        value,
        0,
        false,
    );
    let stored = to.call(Bytes::from(store), ReplyShape::Single).await?;
    Ok(stored.bytes.as_ref() == b"STORED\r\n")
}
