//! `stats` replies and Prometheus text, both rendered from the same declared metrics
//! ([`tailtrim_metrics`]): the constants below are the whole list, each with its name, help,
//! type and unit.
//!
//! Names: `proxy_*` (front end), `pool_*` (per pool), `chisel_*` (the chisel planner),
//! `cluster_*` (membership), `backend_*` (per backend, labelled by address), `latency_class_*`
//! (client reads by class, `crate::classes`). Latencies are
//! histograms in microseconds: `stats` shows quantiles in microseconds, `/metrics` summaries
//! in seconds (quantiles, `_sum`, `_count`); counters get `_total` there, and every family
//! its `# HELP` and `# TYPE`.
//!
//! ```text
//!   FrontendStats (counted by frontend) ─┐
//!   Cluster / Pool / Backend stats ──────┴─► samples(MetricsView) ─► Samples ─┬─► stats_reply
//!                                                                              └─► prometheus_text
//! ```
//!
//! This module reads a [`MetricsView`] and knows nothing of the front end's connection
//! handling, which calls it for `stats`.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use bytes::Bytes;
use tailtrim_client::backend::{Backend, Priorities};
use tailtrim_client::stats::LatencyHistogram;
use tailtrim_client::{Cluster, Pool, ReplyShape};
use tailtrim_metrics::samples::QUANTILES;
use tailtrim_metrics::{Distribution, Exposition, ExpositionError, Labels, Metric, Samples};
use tailtrim_model::Seconds;
use tailtrim_policy::drr::CLASSES;
use tailtrim_policy::serverq::Discipline;

use crate::classes::{ClassLatency, LatencyClass};
use crate::prediction::Predictor;

/// Front-end counters (`proxy_*`).
#[derive(Debug, Default)]
pub struct FrontendStats {
    /// `proxy_curr_connections`
    pub curr_connections: AtomicU64,
    /// `proxy_total_connections`
    pub total_connections: AtomicU64,
    /// `proxy_requests`: requests parsed.
    pub requests: AtomicU64,
    /// `proxy_client_errors`: invalid requests answered locally.
    pub client_errors: AtomicU64,
    /// `proxy_server_errors`: requests answered with SERVER_ERROR for backend failures.
    pub server_errors: AtomicU64,
    /// `rejected_connections`: connections refused past `max_connections`.
    pub rejected_connections: AtomicU64,
    /// `idle_kicks`: connections closed by the idle timeout.
    pub idle_kicks: AtomicU64,
    /// `auth_cmds`: credentials checked (`-Y`), as memcached counts them.
    pub auth_cmds: AtomicU64,
    /// `auth_errors`: credentials refused (`-Y`).
    pub auth_errors: AtomicU64,
    /// `ssl_handshake_errors`: TLS handshakes that failed or did not finish in time.
    pub ssl_handshake_errors: AtomicU64,
}

impl FrontendStats {
    /// `stats reset`: clears the cumulative counters (open connections stay counted).
    pub fn reset(&self) {
        for counter in [
            &self.total_connections,
            &self.requests,
            &self.client_errors,
            &self.server_errors,
            &self.auth_cmds,
            &self.auth_errors,
        ] {
            counter.store(0, Ordering::Relaxed);
        }
    }
}

/// What the proxy's metrics read: the front end's counters and the pool.
#[derive(Clone, Copy)]
pub struct MetricsView<'a> {
    /// Front-end counters.
    pub front: &'a FrontendStats,
    /// Read latency by class.
    pub classes: &'a ClassLatency,
    /// The backend pool and its membership.
    pub cluster: &'a Cluster,
    /// When the proxy started.
    pub started: Instant,
    /// Runtime worker threads.
    pub threads: usize,
    /// The model's live prediction.
    pub prediction: &'a Predictor,
}

tailtrim_metrics::metrics! {
    /// Every declared metric (for the declarations' check).
    pub list DECLARED;
    /// Open client connections.
    pub gauge PROXY_CURR_CONNECTIONS = "proxy_curr_connections";
    /// Client connections accepted.
    pub counter PROXY_CONNECTIONS = "proxy_connections";
    /// Client requests parsed.
    pub counter PROXY_REQUESTS = "proxy_requests";
    /// Invalid client requests answered by the proxy.
    pub counter PROXY_CLIENT_ERRORS = "proxy_client_errors";
    /// Client connections refused past max_connections.
    pub counter PROXY_REJECTED_CONNECTIONS = "proxy_rejected_connections";
    /// Client connections closed by the idle timeout.
    pub counter PROXY_IDLE_KICKS = "proxy_idle_kicks";
    /// Credentials checked on the client listener (-Y).
    pub counter PROXY_AUTH_CMDS = "proxy_auth_cmds";
    /// Credentials refused on the client listener (-Y).
    pub counter PROXY_AUTH_ERRORS = "proxy_auth_errors";
    /// Requests answered SERVER_ERROR because backends failed.
    pub counter PROXY_SERVER_ERRORS = "proxy_server_errors";
    /// Single-key reads.
    pub counter POOL_READS = "pool_reads";
    /// Single-key writes (to every replica).
    pub counter POOL_WRITES = "pool_writes";
    /// Multi-key reads.
    pub counter POOL_MULTIGETS = "pool_multigets";
    /// Keys in multi-key reads.
    pub counter POOL_MULTIGET_KEYS = "pool_multiget_keys";
    /// Backend fetches issued by the planner.
    pub counter POOL_FETCHES = "pool_fetches";
    /// Reads retried on another replica.
    pub counter POOL_FAILOVERS = "pool_failovers";
    /// Requests failed because no replica could serve.
    pub counter POOL_UNAVAILABLE = "pool_unavailable";
    /// Backend queries sent for multi-key reads (after splitting and merging).
    pub counter POOL_QUERIES = "pool_queries";
    /// Keys in those backend queries.
    pub counter POOL_QUERY_KEYS = "pool_query_keys";
    /// Opsets waiting in the delay queue (tailx).
    pub gauge POOL_DELAY_QUEUE_LENGTH = "pool_delay_queue_length";
    /// Opsets that waited in the delay queue (tailx).
    pub counter POOL_DELAY_QUEUED = "pool_delay_queued";
    /// Requests in flight per backend before the proxy queues by priority (0: no bound).
    pub gauge POOL_BACKEND_WINDOW = "pool_backend_window";
    /// Planner state (see docs/proxy.md).
    pub gauge POOL_PLANNER_STATE = "pool_planner";
    /// Current merge level B (mice per backend query).
    pub gauge CHISEL_MERGE_LEVEL = "chisel_merge_level";
    /// Current chunk size L in keys (0: elephants are not split).
    pub gauge CHISEL_CHUNK_SIZE = "chisel_chunk_size";
    /// Backend queries that carried more than one request.
    pub counter CHISEL_MERGED_QUERIES = "chisel_merged_queries";
    /// Requests that rode in another request's backend query.
    pub counter CHISEL_MERGED_REQUESTS = "chisel_merged_requests";
    /// Analyzer epochs run.
    pub counter CHISEL_EPOCHS = "chisel_epochs";
    /// Epochs that fell back to batching (thin or poor fit, no stable plan).
    pub counter CHISEL_FALLBACKS = "chisel_fallbacks";
    /// 1 when the last epoch fell back to batching.
    pub gauge CHISEL_FALLBACK = "chisel_fallback";
    /// Observed mean latency of batching epochs that a plan must not exceed by the guard margin, µs.
    pub gauge CHISEL_BATCH_BASELINE = "chisel_batch_baseline_us" in Microseconds;
    /// Share of the fitted round trip the model counts as backend processing (measured unless configured), in thousandths.
    pub gauge CHISEL_PROCESSING_SHARE = "chisel_processing_share_permille" in Permille;
    /// Fitted round trip T(K) = fixed + per_key * K: fixed part, ns.
    pub gauge CHISEL_FIT_FIXED = "chisel_fit_fixed_ns" in Nanoseconds;
    /// Fitted round trip: per-key part, ns.
    pub gauge CHISEL_FIT_PER_KEY = "chisel_fit_per_key_ns" in Nanoseconds;
    /// R squared of the fit, in thousandths.
    pub gauge CHISEL_FIT_R2 = "chisel_fit_r2_permille" in Permille;
    /// Mean latency measured in the last epoch, µs.
    pub gauge CHISEL_OBSERVED_MEAN = "chisel_observed_mean_us" in Microseconds;
    /// 95th percentile measured in the last epoch, µs.
    pub gauge CHISEL_OBSERVED_P95 = "chisel_observed_p95_us" in Microseconds;
    /// Mean latency the model predicts for the current (B, L), µs.
    pub gauge CHISEL_PREDICTED_MEAN = "chisel_predicted_mean_us" in Microseconds;
    /// 95th percentile the model predicts for the current (B, L), µs.
    pub gauge CHISEL_PREDICTED_P95 = "chisel_predicted_p95_us" in Microseconds;
    /// Request p99 the tier model predicts for the last interval's load, µs (0: no estimate yet).
    pub gauge POOL_MODEL_P99_PREDICTED = "pool_model_p99_predicted_us" in Microseconds;
    /// Service time of one backend query the prediction used (configured or solved), µs.
    pub gauge POOL_MODEL_SERVICE = "pool_model_service_us" in Microseconds;
    /// Backend utilization the prediction found, in thousandths.
    pub gauge POOL_MODEL_UTILIZATION = "pool_model_utilization_permille" in Permille;
    /// Worker threads per backend the model assumes ([model] threads).
    pub gauge POOL_MODEL_THREADS = "pool_model_threads";
    /// A backend query's p99 the model predicts for the last interval's load, µs.
    pub gauge BACKEND_MODEL_P99_PREDICTED = "backend_model_p99_predicted_us" in Microseconds;
    /// Membership version (1 at start, +1 per installed view).
    pub gauge CLUSTER_VERSION = "cluster_version";
    /// Memory held by the hot-key trackers.
    pub gauge CLUSTER_TRACKER_BYTES = "cluster_tracker_bytes";
    /// Membership changes applied.
    pub counter CLUSTER_CHANGES = "cluster_changes";
    /// Keys copied to their new owner before a switch.
    pub counter CLUSTER_COPIES = "cluster_copies";
    /// Planned copies whose key was gone at the old owner.
    pub counter CLUSTER_COPY_MISSES = "cluster_copy_misses";
    /// Misses at a new owner read from the previous owner.
    pub counter CLUSTER_FALLBACK_READS = "cluster_fallback_reads";
    /// Fallback reads found and added at the new owner.
    pub counter CLUSTER_FALLBACK_HITS = "cluster_fallback_hits";
    /// Writes to moved keys during a change.
    pub counter CLUSTER_FENCED_WRITES = "cluster_fenced_writes";
    /// Steady-state writes that also deleted the key at its former owners.
    pub counter CLUSTER_FORMER_OWNER_DELETES = "cluster_former_owner_deletes";
    /// Keys deleted at members that held them without owning them (history start-over).
    pub counter CLUSTER_LEFTOVERS_DELETED = "cluster_leftovers_deleted";
    /// Changes that forgot the oldest pool without a complete purge of leftovers.
    pub counter CLUSTER_HISTORY_GAPS = "cluster_history_gaps";
    /// Requests sent to the backend.
    pub counter BACKEND_REQUESTS = "backend_requests";
    /// Connection errors and malformed replies.
    pub counter BACKEND_ERRORS = "backend_errors";
    /// Requests that timed out.
    pub counter BACKEND_TIMEOUTS = "backend_timeouts";
    /// Requests refused while the backend was down.
    pub counter BACKEND_FAIL_FAST = "backend_fail_fast";
    /// Times the backend was marked down.
    pub counter BACKEND_MARKED_DOWN = "backend_marked_down";
    /// Times the backend came back.
    pub counter BACKEND_REVIVED = "backend_revived";
    /// Connections opened.
    pub counter BACKEND_CONNECTS = "backend_connects";
    /// Requests `avoid-slow` sent off round robin's connection, stuck behind a late reply.
    pub counter BACKEND_STUCK_SKIPS = "backend_stuck_skips";
    /// Requests in flight.
    pub gauge BACKEND_OUTSTANDING = "backend_outstanding";
    /// Requests queued in the proxy for a slot in the backend's window.
    pub gauge BACKEND_GATE_WAITING = "backend_gate_waiting";
    /// Requests admitted to the backend by priority class.
    pub counter BACKEND_GATE_ADMITTED = "backend_gate_admitted";
    /// Requests that waited in the proxy's priority queue, by class.
    pub counter BACKEND_GATE_QUEUED = "backend_gate_queued";
    /// 1 when the backend announced that it serves priority classes itself (priorities strict or drr).
    pub gauge BACKEND_SERVES_PRIORITIES = "backend_serves_priorities";
    /// 1 when the backend is up.
    pub gauge BACKEND_UP = "backend_up";
    /// Latency in seconds (quantiles from an HDR histogram).
    pub summary POOL_LATENCY = "pool_latency_us" in Microseconds;
    /// Latency in seconds (quantiles from an HDR histogram).
    pub summary POOL_MULTIGET_LATENCY = "pool_multiget_latency_us" in Microseconds;
    /// Latency in seconds (quantiles from an HDR histogram).
    pub summary POOL_MICE_LATENCY = "pool_mice_latency_us" in Microseconds;
    /// Latency in seconds (quantiles from an HDR histogram).
    pub summary POOL_ELEPHANT_LATENCY = "pool_elephant_latency_us" in Microseconds;
    /// Latency in seconds (quantiles from an HDR histogram).
    pub summary POOL_DELAY_GRANTED = "pool_delay_granted_us" in Microseconds;
    /// Latency in seconds (quantiles from an HDR histogram).
    pub summary POOL_MULTIGET_CLASS_LATENCY = "pool_multiget_class_latency_us" in Microseconds;
    /// Latency in seconds (quantiles from an HDR histogram).
    pub summary POOL_FETCH_PRIORITY_LATENCY = "pool_fetch_priority_latency_us" in Microseconds;
    /// Latency in seconds (quantiles from an HDR histogram).
    pub summary BACKEND_LATENCY = "backend_latency_us" in Microseconds;
    /// Latency of client reads by class (small_get, large_get, mice, elephant), in seconds.
    pub summary LATENCY_CLASS = "latency_class_us" in Microseconds;
}

/// One reading of every metric, in the order `stats` and `/metrics` show them: front end,
/// pool, chisel, cluster, backends, the planner's gauges, then the latency histograms.
fn samples(view: MetricsView<'_>) -> Samples {
    let mut samples = Samples::new();
    let front = view.front;
    let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
    samples.count(
        &PROXY_CURR_CONNECTIONS,
        vec![],
        load(&front.curr_connections),
    );
    for (metric, counter) in [
        (&PROXY_CONNECTIONS, &front.total_connections),
        (&PROXY_REQUESTS, &front.requests),
        (&PROXY_CLIENT_ERRORS, &front.client_errors),
        (&PROXY_REJECTED_CONNECTIONS, &front.rejected_connections),
        (&PROXY_IDLE_KICKS, &front.idle_kicks),
        (&PROXY_AUTH_CMDS, &front.auth_cmds),
        (&PROXY_AUTH_ERRORS, &front.auth_errors),
        (&PROXY_SERVER_ERRORS, &front.server_errors),
    ] {
        samples.count(metric, vec![], load(counter));
    }
    let pool = view.cluster.current();
    let pool_label: Labels = vec![("pool", pool.config().name.clone())];
    let stats = pool.stats();
    for (metric, value) in [
        (&POOL_READS, stats.reads.get()),
        (&POOL_WRITES, stats.writes.get()),
        (&POOL_MULTIGETS, stats.multigets.get()),
        (&POOL_MULTIGET_KEYS, stats.multiget_keys.get()),
        (&POOL_FETCHES, stats.fetches.get()),
        (&POOL_FAILOVERS, stats.failovers.get()),
        (&POOL_UNAVAILABLE, stats.unavailable.get()),
        (&POOL_QUERIES, stats.queries.get()),
        (&POOL_QUERY_KEYS, stats.query_keys.get()),
        (&POOL_DELAY_QUEUE_LENGTH, pool.delay_queue().len()),
        (&POOL_DELAY_QUEUED, pool.delay_queue().delayed.get()),
        (
            &POOL_BACKEND_WINDOW,
            pool.config().effective_window() as u64,
        ),
    ] {
        samples.count(metric, pool_label.clone(), value);
    }
    chisel_samples(&pool, &pool_label, &mut samples);
    prediction_samples(view.prediction, &pool_label, &mut samples);
    let cluster = view.cluster.stats();
    for (metric, value) in [
        (&CLUSTER_VERSION, view.cluster.version()),
        (&CLUSTER_TRACKER_BYTES, view.cluster.tracker_memory() as u64),
        (&CLUSTER_CHANGES, cluster.changes.get()),
        (&CLUSTER_COPIES, cluster.copies.get()),
        (&CLUSTER_COPY_MISSES, cluster.copy_misses.get()),
        (&CLUSTER_FALLBACK_READS, cluster.fallback_reads.get()),
        (&CLUSTER_FALLBACK_HITS, cluster.fallback_hits.get()),
        (&CLUSTER_FENCED_WRITES, cluster.fenced_writes.get()),
        (
            &CLUSTER_FORMER_OWNER_DELETES,
            cluster.former_owner_deletes.get(),
        ),
        (&CLUSTER_LEFTOVERS_DELETED, cluster.leftovers_deleted.get()),
        (&CLUSTER_HISTORY_GAPS, cluster.history_gaps.get()),
    ] {
        samples.count(metric, pool_label.clone(), value);
    }
    for backend in pool.backends() {
        backend_samples(&pool, backend, &mut samples);
    }
    let planner_labels: Labels = vec![
        ("pool", pool.config().name.clone()),
        ("planner", pool.planner_name().to_string()),
    ];
    for (name, value) in pool.planner_gauges() {
        samples.real_named(
            format!("pool_{name}"),
            &POOL_PLANNER_STATE,
            planner_labels.clone(),
            value,
        );
    }
    latency_samples(&pool, &mut samples);
    for class in LatencyClass::ALL {
        samples.distribution(
            &LATENCY_CLASS,
            vec![("class", class.name().to_string())],
            distribution(view.classes.histogram(class)),
        );
    }
    samples
}

fn backend_samples(pool: &Pool, backend: &Backend, samples: &mut Samples) {
    let labels: Labels = vec![
        ("pool", pool.config().name.clone()),
        ("backend", backend.address().to_string()),
    ];
    let stats = backend.stats();
    for (metric, value) in [
        (&BACKEND_REQUESTS, stats.requests.get()),
        (&BACKEND_ERRORS, stats.errors.get()),
        (&BACKEND_TIMEOUTS, stats.timeouts.get()),
        (&BACKEND_FAIL_FAST, stats.fail_fast.get()),
        (&BACKEND_MARKED_DOWN, stats.marked_down.get()),
        (&BACKEND_REVIVED, stats.revived.get()),
        (&BACKEND_CONNECTS, stats.connects.get()),
        (&BACKEND_STUCK_SKIPS, stats.stuck_skips.get()),
        (&BACKEND_OUTSTANDING, u64::from(backend.outstanding())),
    ] {
        samples.count(metric, labels.clone(), value);
    }
    if let Some(gate) = backend.gate() {
        samples.count(&BACKEND_GATE_WAITING, labels.clone(), gate.waiting() as u64);
        for class in 0..CLASSES {
            let mut class_labels = labels.clone();
            class_labels.push(("class", class.to_string()));
            samples.count(
                &BACKEND_GATE_ADMITTED,
                class_labels.clone(),
                gate.admitted[class].get(),
            );
            samples.count(&BACKEND_GATE_QUEUED, class_labels, gate.queued[class].get());
        }
    }
    samples.count(
        &BACKEND_SERVES_PRIORITIES,
        labels.clone(),
        u64::from(backend.priorities() == Priorities::Backend),
    );
    samples.count(&BACKEND_UP, labels, u64::from(backend.is_up()));
}

/// Microseconds as an integer sample (rounded; negative or NaN as 0).
fn micros(value: f64) -> u64 {
    if value.is_finite() && value > 0.0 {
        value.round() as u64
    } else {
        0
    }
}

fn chisel_samples(pool: &Pool, labels: &Labels, samples: &mut Samples) {
    let Some(shape) = pool.planner_shape() else {
        return;
    };
    let shaper = pool.shaper();
    let chunk_size = if shape.chunk_size == u32::MAX {
        0
    } else {
        u64::from(shape.chunk_size)
    };
    for (metric, value) in [
        (&CHISEL_MERGE_LEVEL, u64::from(shape.merge_level)),
        (&CHISEL_CHUNK_SIZE, chunk_size),
        (&CHISEL_MERGED_QUERIES, shaper.merged_queries.get()),
        (&CHISEL_MERGED_REQUESTS, shaper.merged_requests.get()),
        (&CHISEL_EPOCHS, shaper.epochs.get()),
        (&CHISEL_FALLBACKS, shaper.fallbacks()),
    ] {
        samples.count(metric, labels.clone(), value);
    }
    let Some((decision, observed)) = shaper.last_decision() else {
        return;
    };
    samples.count(
        &CHISEL_FALLBACK,
        labels.clone(),
        u64::from(decision.fallback.is_some()),
    );
    if let Some(baseline) = decision.batch_baseline {
        samples.count(
            &CHISEL_BATCH_BASELINE,
            labels.clone(),
            micros(baseline.as_micros()),
        );
    }
    samples.count(
        &CHISEL_PROCESSING_SHARE,
        labels.clone(),
        micros(decision.processing_share * 1000.0),
    );
    if let Some(fit) = decision.fit {
        samples.count(&CHISEL_FIT_FIXED, labels.clone(), micros(fit.fixed * 1e9));
        samples.count(
            &CHISEL_FIT_PER_KEY,
            labels.clone(),
            micros(fit.per_key * 1e9),
        );
        samples.count(
            &CHISEL_FIT_R2,
            labels.clone(),
            micros(fit.r_squared * 1000.0),
        );
    }
    let classes = [
        ("mice", observed.mice_mean_us, observed.mice_p95_us),
        (
            "elephant",
            observed.elephant_mean_us,
            observed.elephant_p95_us,
        ),
    ];
    for (class, mean, p95) in classes {
        let mut class_labels = labels.clone();
        class_labels.push(("class", class.to_string()));
        samples.count(&CHISEL_OBSERVED_MEAN, class_labels.clone(), micros(mean));
        samples.count(&CHISEL_OBSERVED_P95, class_labels.clone(), micros(p95));
        if let Some(prediction) = &decision.prediction {
            let predicted = if class == "mice" {
                prediction.mice
            } else {
                prediction.elephant
            };
            samples.count(
                &CHISEL_PREDICTED_MEAN,
                class_labels.clone(),
                micros(predicted.mean.as_micros()),
            );
            samples.count(
                &CHISEL_PREDICTED_P95,
                class_labels,
                micros(predicted.p95.as_micros()),
            );
        }
    }
}

/// A latency histogram read once, for both renderings.
fn distribution(histogram: &LatencyHistogram) -> Distribution {
    let quantiles: Vec<f64> = QUANTILES.iter().map(|(quantile, _)| *quantile).collect();
    let snapshot = histogram.snapshot(&quantiles);
    Distribution {
        count: snapshot.count,
        quantiles: snapshot.quantiles,
        max: snapshot.max,
        sum: snapshot.sum_micros,
    }
}

fn latency_samples(pool: &Pool, samples: &mut Samples) {
    let name = pool.config().name.clone();
    let planner = pool.planner_name().to_string();
    let pool_label: Labels = vec![("pool", name.clone())];
    let planner_labels: Labels = vec![("pool", name.clone()), ("planner", planner.clone())];
    let stats = pool.stats();
    samples.distribution(
        &POOL_LATENCY,
        pool_label.clone(),
        distribution(&stats.latency),
    );
    for (metric, histogram) in [
        (&POOL_MULTIGET_LATENCY, &stats.multiget_latency),
        (&POOL_MICE_LATENCY, &stats.mice_latency),
        (&POOL_ELEPHANT_LATENCY, &stats.elephant_latency),
    ] {
        samples.distribution(metric, planner_labels.clone(), distribution(histogram));
    }
    samples.distribution(
        &POOL_DELAY_GRANTED,
        pool_label,
        distribution(&pool.delay_queue().granted),
    );
    for class in 0..CLASSES {
        let mut labels = planner_labels.clone();
        labels.push(("class", class.to_string()));
        samples.distribution(
            &POOL_MULTIGET_CLASS_LATENCY,
            labels.clone(),
            distribution(&stats.multiget_class_latency[class]),
        );
        samples.distribution(
            &POOL_FETCH_PRIORITY_LATENCY,
            labels,
            distribution(&stats.fetch_class_latency[class]),
        );
    }
    for backend in pool.backends() {
        samples.distribution(
            &BACKEND_LATENCY,
            vec![
                ("pool", name.clone()),
                ("backend", backend.address().to_string()),
            ],
            distribution(&backend.stats().latency),
        );
    }
}

tailtrim_metrics::metrics! {
    /// The fields `stats` shows first, under memcached's names (in `stats` only: the
    /// `proxy_*` families carry the same counts on `/metrics`).
    pub list STATS_HEAD;
    /// Process id.
    pub gauge PID = "pid", stats_only;
    /// Seconds since the proxy started.
    pub counter UPTIME = "uptime", stats_only;
    /// Unix time, seconds.
    pub gauge TIME = "time", stats_only;
    /// The proxy's version.
    pub gauge VERSION = "version", stats_only;
    /// Open client connections.
    pub gauge CURR_CONNECTIONS = "curr_connections", stats_only;
    /// Client connections accepted.
    pub counter TOTAL_CONNECTIONS = "total_connections", stats_only;
    /// Client connections refused past max_connections.
    pub counter REJECTED_CONNECTIONS = "rejected_connections", stats_only;
    /// Client connections closed by the idle timeout.
    pub counter IDLE_KICKS = "idle_kicks", stats_only;
    /// Credentials checked (-Y).
    pub counter AUTH_CMDS = "auth_cmds", stats_only;
    /// Credentials refused (-Y).
    pub counter AUTH_ERRORS = "auth_errors", stats_only;
    /// TLS handshakes that failed or did not finish in time.
    pub counter SSL_HANDSHAKE_ERRORS = "ssl_handshake_errors", stats_only;
    /// Runtime worker threads.
    pub gauge THREADS = "threads", stats_only;
    /// Backends whose `stats` did not answer for the summed fields.
    pub gauge BACKENDS_UNREACHABLE = "backends_unreachable", stats_only;
    /// Multiget planner configured.
    pub gauge POOL_PLANNER = "pool_planner", stats_only;
    /// The planner that plans now, for a planner that chooses between others (`auto`).
    pub gauge POOL_PLANNER_CHOICE = "pool_planner_choice", stats_only;
    /// The Chisel analyzer's last decision: model, held or why it fell back.
    pub gauge CHISEL_DECISION = "chisel_decision", stats_only;
    /// Where the planner's priorities are applied (proxy-strict, proxy-fifo, none ...).
    pub gauge POOL_PRIORITIES = "pool_priorities", stats_only;
    /// Where one backend's priorities are applied.
    pub gauge BACKEND_PRIORITIES = "backend_priorities", stats_only;
}

tailtrim_metrics::metrics! {
    /// memcached `stats` fields summed over the reachable backends (item counts, memory, hit
    /// and miss counters), so `stats` on the proxy describes the pool as one cache; in
    /// `stats` only (a backend's own `/metrics` has them).
    pub list SUMMED_BACKEND_STATS;
    /// get commands the backends counted.
    pub counter TOTAL_CMD_GET = "cmd_get", stats_only;
    /// Storage commands the backends counted.
    pub counter TOTAL_CMD_SET = "cmd_set", stats_only;
    /// flush_all commands the backends counted.
    pub counter TOTAL_CMD_FLUSH = "cmd_flush", stats_only;
    /// touch commands the backends counted.
    pub counter TOTAL_CMD_TOUCH = "cmd_touch", stats_only;
    /// Keys found by the backends' reads.
    pub counter TOTAL_GET_HITS = "get_hits", stats_only;
    /// Keys the backends' reads missed.
    pub counter TOTAL_GET_MISSES = "get_misses", stats_only;
    /// Reads that found an expired item.
    pub counter TOTAL_GET_EXPIRED = "get_expired", stats_only;
    /// Reads that found a flushed item.
    pub counter TOTAL_GET_FLUSHED = "get_flushed", stats_only;
    /// Deletes of absent keys.
    pub counter TOTAL_DELETE_MISSES = "delete_misses", stats_only;
    /// Deletes of present keys.
    pub counter TOTAL_DELETE_HITS = "delete_hits", stats_only;
    /// incr of absent keys.
    pub counter TOTAL_INCR_MISSES = "incr_misses", stats_only;
    /// incr of present keys.
    pub counter TOTAL_INCR_HITS = "incr_hits", stats_only;
    /// decr of absent keys.
    pub counter TOTAL_DECR_MISSES = "decr_misses", stats_only;
    /// decr of present keys.
    pub counter TOTAL_DECR_HITS = "decr_hits", stats_only;
    /// cas of absent keys.
    pub counter TOTAL_CAS_MISSES = "cas_misses", stats_only;
    /// cas that stored.
    pub counter TOTAL_CAS_HITS = "cas_hits", stats_only;
    /// cas refused for a changed value.
    pub counter TOTAL_CAS_BADVAL = "cas_badval", stats_only;
    /// touch of present keys.
    pub counter TOTAL_TOUCH_HITS = "touch_hits", stats_only;
    /// touch of absent keys.
    pub counter TOTAL_TOUCH_MISSES = "touch_misses", stats_only;
    /// Bytes the backends read from their clients.
    pub counter TOTAL_BYTES_READ = "bytes_read", stats_only;
    /// Bytes the backends wrote to their clients.
    pub counter TOTAL_BYTES_WRITTEN = "bytes_written", stats_only;
    /// Item memory of the backends, bytes.
    pub gauge TOTAL_LIMIT_MAXBYTES = "limit_maxbytes", stats_only;
    /// Items the backends hold.
    pub gauge TOTAL_CURR_ITEMS = "curr_items", stats_only;
    /// Items the backends ever stored.
    pub counter TOTAL_TOTAL_ITEMS = "total_items", stats_only;
    /// Expired items never read.
    pub counter TOTAL_EXPIRED_UNFETCHED = "expired_unfetched", stats_only;
    /// Evicted items never read.
    pub counter TOTAL_EVICTED_UNFETCHED = "evicted_unfetched", stats_only;
    /// Items evicted for memory.
    pub counter TOTAL_EVICTIONS = "evictions", stats_only;
    /// Expired items whose memory was reused.
    pub counter TOTAL_RECLAIMED = "reclaimed", stats_only;
    /// Bytes the backends' items use.
    pub gauge TOTAL_BYTES = "bytes", stats_only;
}

/// Sums [`SUMMED_BACKEND_STATS`] over the backends' `stats` replies; returns the sums and how
/// many backends did not answer.
async fn backend_totals(cluster: &Cluster) -> (Vec<u64>, usize) {
    let replies = cluster
        .current()
        .broadcast(Bytes::from_static(b"stats\r\n"), ReplyShape::UntilEnd)
        .await;
    let mut totals = vec![0u64; SUMMED_BACKEND_STATS.len()];
    let mut unreachable = 0;
    for reply in replies {
        let Ok(reply) = reply else {
            unreachable += 1;
            continue;
        };
        for line in reply.bytes.split(|&b| b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let mut words = line.split(|&b| b == b' ');
            if words.next() != Some(b"STAT".as_slice()) {
                continue;
            }
            let (Some(name), Some(value)) = (words.next(), words.next()) else {
                continue;
            };
            let Some(index) = SUMMED_BACKEND_STATS
                .iter()
                .position(|metric| metric.name.as_bytes() == name)
            else {
                continue;
            };
            let parsed = std::str::from_utf8(value)
                .ok()
                .and_then(|v| v.parse::<u64>().ok());
            if let Some(value) = parsed {
                totals[index] = totals[index].saturating_add(value);
            }
        }
    }
    (totals, unreachable)
}

/// The memcached-named fields `stats` shows first ([`STATS_HEAD`], with the backends'
/// [`SUMMED_BACKEND_STATS`] after `threads`).
fn head_samples(view: MetricsView<'_>, totals: &[u64], unreachable: usize) -> Samples {
    let mut head = Samples::new();
    let front = view.front;
    let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs())
        .unwrap_or(0);
    head.count(&PID, vec![], u64::from(std::process::id()));
    head.count(&UPTIME, vec![], view.started.elapsed().as_secs());
    head.count(&TIME, vec![], now);
    let version = concat!("tailtrim-proxy-", env!("CARGO_PKG_VERSION"));
    head.shown(&VERSION, vec![], version.to_string(), None);
    for (metric, counter) in [
        (&CURR_CONNECTIONS, &front.curr_connections),
        (&TOTAL_CONNECTIONS, &front.total_connections),
        (&REJECTED_CONNECTIONS, &front.rejected_connections),
        (&IDLE_KICKS, &front.idle_kicks),
        (&AUTH_CMDS, &front.auth_cmds),
        (&AUTH_ERRORS, &front.auth_errors),
        (&SSL_HANDSHAKE_ERRORS, &front.ssl_handshake_errors),
    ] {
        head.count(metric, vec![], load(counter));
    }
    head.count(&THREADS, vec![], view.threads as u64);
    for (metric, total) in SUMMED_BACKEND_STATS.iter().zip(totals) {
        head.count(metric, vec![], *total);
    }
    head.count(&BACKENDS_UNREACHABLE, vec![], unreachable as u64);
    let pool = view.cluster.current();
    let shown = |head: &mut Samples, metric: &Metric, labels: Labels, text: &str| {
        head.shown(metric, labels, text.to_string(), None);
    };
    shown(&mut head, &POOL_PLANNER, vec![], pool.planner_name());
    if let Some(choice) = pool.planner_choice() {
        shown(&mut head, &POOL_PLANNER_CHOICE, vec![], choice);
    }
    if let Some((decision, _)) = pool.shaper().last_decision() {
        let state = match decision.fallback {
            Some(why) => why.name(),
            None if decision.held => "held",
            None => "model",
        };
        shown(&mut head, &CHISEL_DECISION, vec![], state);
    }
    shown(&mut head, &POOL_PRIORITIES, vec![], priorities_mode(&pool));
    for backend in pool.backends() {
        let labels = vec![("backend", backend.address().to_string())];
        let mode = backend_priorities_mode(&pool, backend);
        shown(&mut head, &BACKEND_PRIORITIES, labels, mode);
    }
    head
}

/// The `stats` reply. `stats` alone gives the proxy's own fields (pid, uptime, connections,
/// threads), the pool totals of the backends' counters, then per-pool and per-backend
/// counters and latency quantiles; other groups get an empty `END`.
///
/// Subcommands as memcached answers them: `settings` lists the pool's settings, `reset`
/// clears the front end's counters (`RESET`; the pool's and backends' counters and latency
/// histograms are cumulative, as Prometheus counters must be), `detail` is answered as by a
/// memcached with no prefixes recorded, and any other group `ERROR`.
pub async fn stats_reply(view: MetricsView<'_>, args: &[Bytes]) -> Vec<u8> {
    let mut out = String::new();
    match args.first().map(|arg| arg.as_ref()) {
        None => {}
        Some(b"settings") => {
            settings_reply(view, &mut out);
            out.push_str("END\r\n");
            return out.into_bytes();
        }
        Some(b"reset") => {
            view.front.reset();
            return b"RESET\r\n".to_vec();
        }
        Some(b"detail") => {
            let arg = args.get(1).map(|arg| arg.as_ref());
            return tailtrim_proto::reply::stats_detail(arg).to_vec();
        }
        Some(_) => return b"ERROR\r\n".to_vec(),
    }
    let (totals, unreachable) = backend_totals(view.cluster).await;
    head_samples(view, &totals, unreachable).stats_lines(&mut out);
    samples(view).stats_lines(&mut out);
    out.push_str("END\r\n");
    out.into_bytes()
}

/// `stats settings`: how the proxy routes, as `STAT name value` lines.
fn settings_reply(view: MetricsView<'_>, out: &mut String) {
    let pool = view.cluster.current();
    let config = pool.config();
    let servers: Vec<String> = pool
        .backends()
        .iter()
        .map(|backend| backend.address().to_string())
        .collect();
    let hash_tag = config
        .ring
        .hash_tag
        .map(|[open, close]| format!("{}{}", open as char, close as char))
        .unwrap_or_default();
    let settings: [(&str, String); 13] = [
        ("pool", config.name.clone()),
        ("servers", servers.join(",")),
        ("hash", config.ring.hash.name().to_string()),
        ("distribution", config.ring.distribution.name().to_string()),
        ("hash_tag", hash_tag),
        ("replicas", config.replicas.to_string()),
        ("planner", pool.planner_name().to_string()),
        ("timeout_ms", config.timeout.as_millis().to_string()),
        (
            "server_connections",
            config.connections_per_backend.to_string(),
        ),
        (
            "connection_choice",
            config.connection_choice.name().to_string(),
        ),
        (
            "replica_choice",
            config.planner_settings.replica_choice.name().to_string(),
        ),
        ("queue_limit", config.queue_limit.to_string()),
        ("num_threads", view.threads.to_string()),
    ];
    for (name, value) in settings {
        let value = if value.is_empty() { "none" } else { &value };
        let _ = write!(out, "STAT {name} {value}\r\n");
    }
}

/// Where the planner's priorities are applied: `proxy-strict` (or `proxy-drr`, `proxy-aged`:
/// the gate's order) when the proxy queues requests by class behind a bounded window (stock
/// memcached backends serve a connection in order), `proxy-fifo` when it bounds the window
/// without priorities, `none` otherwise.
fn priorities_mode(pool: &Pool) -> &'static str {
    match (
        pool.config().effective_window() > 0,
        pool.config().planner.uses_priorities(),
    ) {
        (true, true) => match pool.config().gate_order() {
            Discipline::Strict => "proxy-strict",
            Discipline::Aged { .. } => "proxy-aged",
            Discipline::Drr => "proxy-drr",
        },
        (true, false) => "proxy-fifo",
        (false, _) => "none",
    }
}

/// Where one backend's priorities are applied: `backend-drr` when it announced that it serves
/// the classes itself (requests carry `mg … p<class>`, the proxy does not hold them back),
/// else the pool's mode ([`priorities_mode`]); `undetected` before the first connection when
/// the planner assigns classes.
fn backend_priorities_mode(pool: &Pool, backend: &Backend) -> &'static str {
    match backend.priorities() {
        Priorities::Backend => "backend-drr",
        Priorities::Undetected if pool.config().planner.uses_priorities() => "undetected",
        Priorities::Undetected | Priorities::Client => priorities_mode(pool),
    }
}

/// Prometheus text exposition (format 0.0.4): the declared metrics as
/// `tailtrim_<name>_total` counters, `tailtrim_<name>` gauges and the latency histograms as
/// summaries in seconds. The exposition refuses names that break Prometheus' rules, so a
/// mistake here is an error, not a page a scraper half-reads.
pub fn prometheus_text(view: MetricsView<'_>) -> Result<String, ExpositionError> {
    let mut page = Exposition::new("tailtrim");
    samples(view).expose(&mut page);
    page.finish()
}

/// The model's latest prediction as gauges (0 before the first interval with traffic).
fn prediction_samples(predictor: &Predictor, pool_labels: &Labels, samples: &mut Samples) {
    let latest = predictor.latest();
    let overall = latest
        .as_ref()
        .and_then(|(prediction, _)| prediction.overall);
    let micros = |value: Option<Seconds>| value.map_or(0.0, Seconds::as_micros);
    samples.real(
        &POOL_MODEL_P99_PREDICTED,
        pool_labels.clone(),
        micros(overall.map(|o| o.p99)),
    );
    samples.real(
        &POOL_MODEL_SERVICE,
        pool_labels.clone(),
        micros(overall.map(|o| o.query_service)),
    );
    samples.real(
        &POOL_MODEL_UTILIZATION,
        pool_labels.clone(),
        overall.map_or(0.0, |o| o.utilization * 1000.0),
    );
    samples.count(
        &POOL_MODEL_THREADS,
        pool_labels.clone(),
        u64::from(predictor.threads()),
    );
    let Some((prediction, addresses)) = latest else {
        return;
    };
    for (address, estimate) in addresses.iter().zip(&prediction.backends) {
        let mut labels = pool_labels.clone();
        labels.push(("backend", address.clone()));
        samples.real(
            &BACKEND_MODEL_P99_PREDICTED,
            labels,
            micros(estimate.map(|e| e.p99)),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declarations_name_their_units_once() {
        for list in [DECLARED, STATS_HEAD, SUMMED_BACKEND_STATS] {
            assert_eq!(tailtrim_metrics::declare::check_declarations(list), Ok(()));
        }
    }
}
