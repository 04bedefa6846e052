//! `stats` replies and Prometheus text, both rendered from the same counters.
//!
//! Names: `proxy_*` (front end), `pool_*` (per pool), `backend_*` (per backend, labelled by
//! address). Latencies are histograms in microseconds: `stats` shows quantiles in
//! microseconds, `/metrics` summaries in seconds (quantiles, `_sum`, `_count`); counters get
//! `_total` there, and every family its `# HELP` and `# TYPE`.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use tailtrim_client::backend::{Backend, Priorities};
use tailtrim_client::stats::LatencyHistogram;
use tailtrim_client::{Pool, ReplyShape};
use tailtrim_policy::drr::CLASSES;
use tailtrim_policy::serverq::Discipline;
use tailtrim_proto::exposition::{Exposition, ExpositionError, SummaryValue};

use crate::frontend::Shared;

const QUANTILES: [f64; 4] = [0.5, 0.9, 0.99, 0.999];
const QUANTILE_NAMES: [&str; 4] = ["p50", "p90", "p99", "p999"];

/// Whether a sample only goes up (a counter) or goes up and down (a gauge).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SampleKind {
    Counter,
    Gauge,
}

/// One named value. `stats` shows it under its name; `/metrics` under
/// [`prometheus_name_and_scale`] of that name.
struct Sample {
    name: String,
    help: &'static str,
    labels: Vec<(&'static str, String)>,
    kind: SampleKind,
    value: u64,
}

/// The samples of one `stats` or `/metrics` rendering, in order.
#[derive(Default)]
struct Samples(Vec<Sample>);

impl Samples {
    fn counter(&mut self, name: &str, help: &'static str, labels: Labels, value: u64) {
        self.add(name, help, labels, SampleKind::Counter, value);
    }

    fn gauge(&mut self, name: &str, help: &'static str, labels: Labels, value: u64) {
        self.add(name, help, labels, SampleKind::Gauge, value);
    }

    fn add(
        &mut self,
        name: &str,
        help: &'static str,
        labels: Labels,
        kind: SampleKind,
        value: u64,
    ) {
        self.0.push(Sample {
            name: name.to_string(),
            help,
            labels,
            kind,
            value,
        });
    }
}

fn counters(shared: &Shared) -> Vec<Sample> {
    let mut samples = Samples::default();
    let front = &shared.stats;
    samples.gauge(
        "proxy_curr_connections",
        "Open client connections.",
        vec![],
        front.curr_connections.load(Ordering::Relaxed),
    );
    samples.counter(
        "proxy_connections",
        "Client connections accepted.",
        vec![],
        front.total_connections.load(Ordering::Relaxed),
    );
    samples.counter(
        "proxy_requests",
        "Client requests parsed.",
        vec![],
        front.requests.load(Ordering::Relaxed),
    );
    samples.counter(
        "proxy_client_errors",
        "Invalid client requests answered by the proxy.",
        vec![],
        front.client_errors.load(Ordering::Relaxed),
    );
    samples.counter(
        "proxy_rejected_connections",
        "Client connections refused past max_connections.",
        vec![],
        front.rejected_connections.load(Ordering::Relaxed),
    );
    samples.counter(
        "proxy_idle_kicks",
        "Client connections closed by the idle timeout.",
        vec![],
        front.idle_kicks.load(Ordering::Relaxed),
    );
    samples.counter(
        "proxy_auth_cmds",
        "Credentials checked on the client listener (-Y).",
        vec![],
        front.auth_cmds.load(Ordering::Relaxed),
    );
    samples.counter(
        "proxy_auth_errors",
        "Credentials refused on the client listener (-Y).",
        vec![],
        front.auth_errors.load(Ordering::Relaxed),
    );
    samples.counter(
        "proxy_server_errors",
        "Requests answered SERVER_ERROR because backends failed.",
        vec![],
        front.server_errors.load(Ordering::Relaxed),
    );
    let pool = shared.pool.current();
    let pool_label = vec![("pool", pool.config().name.clone())];
    let stats = pool.stats();
    samples.counter(
        "pool_reads",
        "Single-key reads.",
        pool_label.clone(),
        stats.reads.get(),
    );
    samples.counter(
        "pool_writes",
        "Single-key writes (to every replica).",
        pool_label.clone(),
        stats.writes.get(),
    );
    samples.counter(
        "pool_multigets",
        "Multi-key reads.",
        pool_label.clone(),
        stats.multigets.get(),
    );
    samples.counter(
        "pool_multiget_keys",
        "Keys in multi-key reads.",
        pool_label.clone(),
        stats.multiget_keys.get(),
    );
    samples.counter(
        "pool_fetches",
        "Backend fetches issued by the planner.",
        pool_label.clone(),
        stats.fetches.get(),
    );
    samples.counter(
        "pool_failovers",
        "Reads retried on another replica.",
        pool_label.clone(),
        stats.failovers.get(),
    );
    samples.counter(
        "pool_unavailable",
        "Requests failed because no replica could serve.",
        pool_label.clone(),
        stats.unavailable.get(),
    );
    samples.counter(
        "pool_queries",
        "Backend queries sent for multi-key reads (after splitting and merging).",
        pool_label.clone(),
        stats.queries.get(),
    );
    samples.counter(
        "pool_query_keys",
        "Keys in those backend queries.",
        pool_label.clone(),
        stats.query_keys.get(),
    );
    samples.gauge(
        "pool_delay_queue_length",
        "Opsets waiting in the delay queue (tailx).",
        pool_label.clone(),
        pool.delay_queue().len(),
    );
    samples.counter(
        "pool_delay_queued",
        "Opsets that waited in the delay queue (tailx).",
        pool_label.clone(),
        pool.delay_queue().delayed.get(),
    );
    samples.gauge(
        "pool_backend_window",
        "Requests in flight per backend before the proxy queues by priority (0: no bound).",
        pool_label.clone(),
        pool.config().effective_window() as u64,
    );
    chisel_samples(&pool, &pool_label, &mut samples);
    let cluster = shared.pool.stats();
    samples.gauge(
        "cluster_version",
        "Membership version (1 at start, +1 per installed view).",
        pool_label.clone(),
        shared.pool.version(),
    );
    samples.gauge(
        "cluster_tracker_bytes",
        "Memory held by the hot-key trackers.",
        pool_label.clone(),
        shared.pool.tracker_memory() as u64,
    );
    for (name, help, value) in [
        (
            "cluster_changes",
            "Membership changes applied.",
            cluster.changes.get(),
        ),
        (
            "cluster_copies",
            "Keys copied to their new owner before a switch.",
            cluster.copies.get(),
        ),
        (
            "cluster_copy_misses",
            "Planned copies whose key was gone at the old owner.",
            cluster.copy_misses.get(),
        ),
        (
            "cluster_fallback_reads",
            "Misses at a new owner read from the previous owner.",
            cluster.fallback_reads.get(),
        ),
        (
            "cluster_fallback_hits",
            "Fallback reads found and added at the new owner.",
            cluster.fallback_hits.get(),
        ),
        (
            "cluster_fenced_writes",
            "Writes to moved keys during a change.",
            cluster.fenced_writes.get(),
        ),
        (
            "cluster_former_owner_deletes",
            "Steady-state writes that also deleted the key at its former owners.",
            cluster.former_owner_deletes.get(),
        ),
        (
            "cluster_leftovers_deleted",
            "Keys deleted at members that held them without owning them (history start-over).",
            cluster.leftovers_deleted.get(),
        ),
        (
            "cluster_history_gaps",
            "Changes that forgot the oldest pool without a complete purge of leftovers.",
            cluster.history_gaps.get(),
        ),
    ] {
        samples.counter(name, help, pool_label.clone(), value);
    }
    for backend in pool.backends() {
        let labels = vec![
            ("pool", pool.config().name.clone()),
            ("backend", backend.address().to_string()),
        ];
        let stats = backend.stats();
        samples.counter(
            "backend_requests",
            "Requests sent to the backend.",
            labels.clone(),
            stats.requests.get(),
        );
        samples.counter(
            "backend_errors",
            "Connection errors and malformed replies.",
            labels.clone(),
            stats.errors.get(),
        );
        samples.counter(
            "backend_timeouts",
            "Requests that timed out.",
            labels.clone(),
            stats.timeouts.get(),
        );
        samples.counter(
            "backend_fail_fast",
            "Requests refused while the backend was down.",
            labels.clone(),
            stats.fail_fast.get(),
        );
        samples.counter(
            "backend_marked_down",
            "Times the backend was marked down.",
            labels.clone(),
            stats.marked_down.get(),
        );
        samples.counter(
            "backend_revived",
            "Times the backend came back.",
            labels.clone(),
            stats.revived.get(),
        );
        samples.counter(
            "backend_connects",
            "Connections opened.",
            labels.clone(),
            stats.connects.get(),
        );
        samples.gauge(
            "backend_outstanding",
            "Requests in flight.",
            labels.clone(),
            u64::from(backend.outstanding()),
        );
        if let Some(gate) = backend.gate() {
            samples.gauge(
                "backend_gate_waiting",
                "Requests queued in the proxy for a slot in the backend's window.",
                labels.clone(),
                gate.waiting() as u64,
            );
            for class in 0..CLASSES {
                let mut class_labels = labels.clone();
                class_labels.push(("class", class.to_string()));
                samples.counter(
                    "backend_gate_admitted",
                    "Requests admitted to the backend by priority class.",
                    class_labels.clone(),
                    gate.admitted[class].get(),
                );
                samples.counter(
                    "backend_gate_queued",
                    "Requests that waited in the proxy's priority queue, by class.",
                    class_labels,
                    gate.queued[class].get(),
                );
            }
        }
        samples.gauge(
            "backend_serves_priorities",
            "1 when the backend announced that it serves priority classes itself (priorities strict or drr).",
            labels.clone(),
            u64::from(backend.priorities() == Priorities::Backend),
        );
        samples.gauge(
            "backend_up",
            "1 when the backend is up.",
            labels,
            u64::from(backend.is_up()),
        );
    }
    samples.0
}

/// Metric labels as (name, value) pairs.
type Labels = Vec<(&'static str, String)>;

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
    samples.gauge(
        "chisel_merge_level",
        "Current merge level B (mice per backend query).",
        labels.clone(),
        u64::from(shape.merge_level),
    );
    samples.gauge(
        "chisel_chunk_size",
        "Current chunk size L in keys (0: elephants are not split).",
        labels.clone(),
        if shape.chunk_size == u32::MAX {
            0
        } else {
            u64::from(shape.chunk_size)
        },
    );
    samples.counter(
        "chisel_merged_queries",
        "Backend queries that carried more than one request.",
        labels.clone(),
        shaper.merged_queries.get(),
    );
    samples.counter(
        "chisel_merged_requests",
        "Requests that rode in another request's backend query.",
        labels.clone(),
        shaper.merged_requests.get(),
    );
    samples.counter(
        "chisel_epochs",
        "Analyzer epochs run.",
        labels.clone(),
        shaper.epochs.get(),
    );
    samples.counter(
        "chisel_fallbacks",
        "Epochs that fell back to batching (thin or poor fit, no stable plan).",
        labels.clone(),
        shaper.fallbacks(),
    );
    let Some((decision, observed)) = shaper.last_decision() else {
        return;
    };
    samples.gauge(
        "chisel_fallback",
        "1 when the last epoch fell back to batching.",
        labels.clone(),
        u64::from(decision.fallback.is_some()),
    );
    if let Some(baseline) = decision.batch_baseline {
        samples.gauge(
            "chisel_batch_baseline_us",
            "Observed mean latency of batching epochs that a plan must not exceed by the guard margin, µs.",
            labels.clone(),
            micros(baseline.as_micros()),
        );
    }
    samples.gauge(
        "chisel_processing_share_permille",
        "Share of the fitted round trip the model counts as backend processing (measured unless configured), in thousandths.",
        labels.clone(),
        micros(decision.processing_share * 1000.0),
    );
    if let Some(fit) = decision.fit {
        samples.gauge(
            "chisel_fit_fixed_ns",
            "Fitted round trip T(K) = fixed + per_key * K: fixed part, ns.",
            labels.clone(),
            micros(fit.fixed * 1e9),
        );
        samples.gauge(
            "chisel_fit_per_key_ns",
            "Fitted round trip: per-key part, ns.",
            labels.clone(),
            micros(fit.per_key * 1e9),
        );
        samples.gauge(
            "chisel_fit_r2_permille",
            "R squared of the fit, in thousandths.",
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
        samples.gauge(
            "chisel_observed_mean_us",
            "Mean latency measured in the last epoch, µs.",
            class_labels.clone(),
            micros(mean),
        );
        samples.gauge(
            "chisel_observed_p95_us",
            "95th percentile measured in the last epoch, µs.",
            class_labels.clone(),
            micros(p95),
        );
        if let Some(prediction) = &decision.prediction {
            let predicted = if class == "mice" {
                prediction.mice
            } else {
                prediction.elephant
            };
            samples.gauge(
                "chisel_predicted_mean_us",
                "Mean latency the model predicts for the current (B, L), µs.",
                class_labels.clone(),
                micros(predicted.mean.as_micros()),
            );
            samples.gauge(
                "chisel_predicted_p95_us",
                "95th percentile the model predicts for the current (B, L), µs.",
                class_labels,
                micros(predicted.p95.as_micros()),
            );
        }
    }
}

fn histograms(pool: &Pool) -> Vec<(String, Labels, &LatencyHistogram)> {
    let mut out = vec![
        (
            "pool_latency_us".to_string(),
            vec![("pool", pool.config().name.clone())],
            &pool.stats().latency,
        ),
        (
            "pool_multiget_latency_us".to_string(),
            vec![
                ("pool", pool.config().name.clone()),
                ("planner", pool.planner_name().to_string()),
            ],
            &pool.stats().multiget_latency,
        ),
        (
            "pool_mice_latency_us".to_string(),
            vec![
                ("pool", pool.config().name.clone()),
                ("planner", pool.planner_name().to_string()),
            ],
            &pool.stats().mice_latency,
        ),
        (
            "pool_elephant_latency_us".to_string(),
            vec![
                ("pool", pool.config().name.clone()),
                ("planner", pool.planner_name().to_string()),
            ],
            &pool.stats().elephant_latency,
        ),
    ];
    out.push((
        "pool_delay_granted_us".to_string(),
        vec![("pool", pool.config().name.clone())],
        &pool.delay_queue().granted,
    ));
    for class in 0..CLASSES {
        let labels = vec![
            ("pool", pool.config().name.clone()),
            ("planner", pool.planner_name().to_string()),
            ("class", class.to_string()),
        ];
        out.push((
            "pool_multiget_class_latency_us".to_string(),
            labels.clone(),
            &pool.stats().multiget_class_latency[class],
        ));
        out.push((
            "pool_fetch_priority_latency_us".to_string(),
            labels,
            &pool.stats().fetch_class_latency[class],
        ));
    }
    for backend in pool.backends() {
        out.push((
            "backend_latency_us".to_string(),
            vec![
                ("pool", pool.config().name.clone()),
                ("backend", backend.address().to_string()),
            ],
            &backend.stats().latency,
        ));
    }
    out
}

/// memcached `stats` fields that are summed over the reachable backends (item counts, memory,
/// hit and miss counters), so `stats` on the proxy describes the pool as one cache.
pub const SUMMED_BACKEND_STATS: [&str; 29] = [
    "cmd_get",
    "cmd_set",
    "cmd_flush",
    "cmd_touch",
    "get_hits",
    "get_misses",
    "get_expired",
    "get_flushed",
    "delete_misses",
    "delete_hits",
    "incr_misses",
    "incr_hits",
    "decr_misses",
    "decr_hits",
    "cas_misses",
    "cas_hits",
    "cas_badval",
    "touch_hits",
    "touch_misses",
    "bytes_read",
    "bytes_written",
    "limit_maxbytes",
    "curr_items",
    "total_items",
    "expired_unfetched",
    "evicted_unfetched",
    "evictions",
    "reclaimed",
    "bytes",
];

/// Sums [`SUMMED_BACKEND_STATS`] over the backends' `stats` replies; returns the sums and how
/// many backends did not answer.
async fn backend_totals(shared: &Shared) -> (Vec<u64>, usize) {
    let replies = shared
        .pool
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
                .position(|s| s.as_bytes() == name)
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

/// The `stats` reply. `stats` alone gives the proxy's own fields (pid, uptime, connections,
/// threads), the pool totals of the backends' counters, then per-pool and per-backend
/// counters and latency quantiles; other groups get an empty `END`.
///
/// Subcommands as memcached answers them: `settings` lists the pool's settings, `reset`
/// clears the front end's counters (`RESET`; the pool's and backends' counters and latency
/// histograms are cumulative, as Prometheus counters must be), `detail` is answered as by a
/// memcached with no prefixes recorded, and any other group `ERROR`.
pub async fn stats_reply(shared: &Shared, args: &[Bytes]) -> Vec<u8> {
    let mut out = String::new();
    match args.first().map(|arg| arg.as_ref()) {
        None => {}
        Some(b"settings") => {
            settings_reply(shared, &mut out);
            out.push_str("END\r\n");
            return out.into_bytes();
        }
        Some(b"reset") => {
            shared.stats.reset();
            return b"RESET\r\n".to_vec();
        }
        Some(b"detail") => {
            let arg = args.get(1).map(|arg| arg.as_ref());
            return tailtrim_proto::reply::stats_detail(arg).to_vec();
        }
        Some(_) => return b"ERROR\r\n".to_vec(),
    }
    {
        let uptime = shared.started.elapsed().as_secs();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let front = &shared.stats;
        let _ = write!(out, "STAT pid {}\r\n", std::process::id());
        let _ = write!(out, "STAT uptime {uptime}\r\n");
        let _ = write!(out, "STAT time {now}\r\n");
        let _ = write!(
            out,
            "STAT version tailtrim-proxy-{}\r\n",
            env!("CARGO_PKG_VERSION")
        );
        let _ = write!(
            out,
            "STAT curr_connections {}\r\n",
            front.curr_connections.load(Ordering::Relaxed)
        );
        let _ = write!(
            out,
            "STAT total_connections {}\r\n",
            front.total_connections.load(Ordering::Relaxed)
        );
        for (name, counter) in [
            ("rejected_connections", &front.rejected_connections),
            ("idle_kicks", &front.idle_kicks),
            ("auth_cmds", &front.auth_cmds),
            ("auth_errors", &front.auth_errors),
            ("ssl_handshake_errors", &front.ssl_handshake_errors),
        ] {
            let _ = write!(out, "STAT {name} {}\r\n", counter.load(Ordering::Relaxed));
        }
        let _ = write!(out, "STAT threads {}\r\n", shared.threads);
        let (totals, unreachable) = backend_totals(shared).await;
        for (name, total) in SUMMED_BACKEND_STATS.iter().zip(totals) {
            let _ = write!(out, "STAT {name} {total}\r\n");
        }
        let _ = write!(out, "STAT backends_unreachable {unreachable}\r\n");
        let pool = shared.pool.current();
        let _ = write!(out, "STAT pool_planner {}\r\n", pool.planner_name());
        if let Some((decision, _)) = pool.shaper().last_decision() {
            let state = match decision.fallback {
                Some(why) => why.name(),
                None if decision.held => "held",
                None => "model",
            };
            let _ = write!(out, "STAT chisel_decision {state}\r\n");
        }
        let _ = write!(out, "STAT pool_priorities {}\r\n", priorities_mode(&pool));
        for backend in pool.backends() {
            let _ = write!(
                out,
                "STAT backend_priorities:{} {}\r\n",
                backend.address(),
                backend_priorities_mode(&pool, backend)
            );
        }
        for sample in counters(shared) {
            let suffix = stat_suffix(&sample.labels);
            let _ = write!(out, "STAT {}{suffix} {}\r\n", sample.name, sample.value);
        }
        for (name, value) in pool.planner_gauges() {
            let _ = write!(out, "STAT pool_{name} {}\r\n", gauge_text(value));
        }
        for (name, labels, histogram) in histograms(&pool) {
            let (count, values, max) = histogram.summary(&QUANTILES);
            let backend = stat_suffix(&labels);
            let _ = write!(out, "STAT {name}_count{backend} {count}\r\n");
            for (quantile, value) in QUANTILE_NAMES.iter().zip(values) {
                let _ = write!(out, "STAT {name}_{quantile}{backend} {value}\r\n");
            }
            let _ = write!(out, "STAT {name}_max{backend} {max}\r\n");
        }
    }
    out.push_str("END\r\n");
    out.into_bytes()
}

/// `stats settings`: how the proxy routes, as `STAT name value` lines.
fn settings_reply(shared: &Shared, out: &mut String) {
    let pool = shared.pool.current();
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
    let settings: [(&str, String); 11] = [
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
        ("queue_limit", config.queue_limit.to_string()),
        ("num_threads", shared.threads.to_string()),
    ];
    for (name, value) in settings {
        let value = if value.is_empty() { "none" } else { &value };
        let _ = write!(out, "STAT {name} {value}\r\n");
    }
}

/// `:backend` and `:classN` (priority) or `:mice`-like (named class) suffixes of a `stats` line (pool and planner are implied).
fn stat_suffix(labels: &[(&'static str, String)]) -> String {
    let mut suffix = String::new();
    for (name, value) in labels {
        match *name {
            "backend" => {
                let _ = write!(suffix, ":{value}");
            }
            "class" if value.bytes().all(|b| b.is_ascii_digit()) => {
                let _ = write!(suffix, ":class{value}");
            }
            "class" => {
                let _ = write!(suffix, ":{value}");
            }
            _ => {}
        }
    }
    suffix
}

/// Where the planner's priorities are applied: `proxy-strict` (or `proxy-drr`, `proxy-aged`:
/// the gate's order) when the proxy queues requests by class behind a bounded window (stock
/// memcached backends serve a connection in order), `proxy-fifo` when it bounds the window
/// without priorities, `none` otherwise.
fn priorities_mode(pool: &tailtrim_client::Pool) -> &'static str {
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

/// A gauge as text: integers without a fraction, others with up to 6 significant decimals.
fn gauge_text(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else {
        format!("{value:.6}")
    }
}

/// The `/metrics` name and scale of a sample named `name` in `stats`: latencies and times
/// kept in micro- or nanoseconds (`_us`, `_ns`, `_nanos`) become seconds, thousandths
/// (`_permille`) plain fractions; the value is divided by the scale.
fn prometheus_name_and_scale(name: &str) -> (String, f64) {
    for (suffix, replacement, scale) in [
        ("_us", "_seconds", 1e6),
        ("_ns", "_seconds", 1e9),
        ("_nanos", "_seconds", 1e9),
        ("_permille", "", 1e3),
    ] {
        if let Some(stem) = name.strip_suffix(suffix) {
            return (format!("{stem}{replacement}"), scale);
        }
    }
    (name.to_string(), 1.0)
}

/// Quantiles, sum and count of a latency histogram, in seconds.
fn seconds_summary(histogram: &LatencyHistogram) -> SummaryValue {
    let snapshot = histogram.snapshot(&QUANTILES);
    SummaryValue {
        quantiles: QUANTILES
            .iter()
            .zip(snapshot.quantiles)
            .map(|(&quantile, micros)| (quantile, micros as f64 / 1e6))
            .collect(),
        sum: snapshot.sum_micros / 1e6,
        count: snapshot.count,
    }
}

/// Prometheus text exposition (format 0.0.4): the `stats` samples as `tailtrim_<name>_total`
/// counters and `tailtrim_<name>` gauges, the planner's gauges, and the latency histograms
/// as summaries in seconds. The exposition refuses names that break Prometheus' rules, so a
/// mistake here is an error, not a page a scraper half-reads.
pub fn prometheus_text(shared: &Shared) -> Result<String, ExpositionError> {
    let mut page = Exposition::new("tailtrim");
    for sample in counters(shared) {
        let (name, scale) = prometheus_name_and_scale(&sample.name);
        let value = sample.value as f64 / scale;
        match sample.kind {
            SampleKind::Counter => page.counter(&name, sample.help, &sample.labels, value),
            SampleKind::Gauge => page.gauge(&name, sample.help, &sample.labels, value),
        }
    }
    let pool = shared.pool.current();
    let pool_labels = [
        ("pool", pool.config().name.clone()),
        ("planner", pool.planner_name().to_string()),
    ];
    for (name, value) in pool.planner_gauges() {
        let (name, scale) = prometheus_name_and_scale(name);
        page.gauge(
            &format!("pool_{name}"),
            "Planner state (see docs/proxy.md).",
            &pool_labels,
            value / scale,
        );
    }
    for (name, labels, histogram) in histograms(&pool) {
        let (name, _) = prometheus_name_and_scale(&name);
        page.summary(
            &name,
            "Latency in seconds (quantiles from an HDR histogram).",
            &labels,
            &seconds_summary(histogram),
        );
    }
    page.finish()
}
