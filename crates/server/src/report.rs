//! `stats` replies (memcached's format) and Prometheus text metrics.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use tailtrim_metrics::samples::QUANTILES;
use tailtrim_metrics::{Distribution, Exposition, ExpositionError, Labels, Metric, Samples};
use tailtrim_proto::reply::{self, ReplyBuf};

use crate::context::ExecContext;
use crate::shared::Shared;
use crate::stats::CounterSnapshot;

/// The process's user and system CPU time as (seconds, microseconds) pairs (memcached prints
/// them as seconds with six decimals).
fn rusage_timevals() -> ((i64, i64), (i64, i64)) {
    // SAFETY: getrusage only writes into the struct we pass.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer is always defined.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    if rc != 0 {
        return ((0, 0), (0, 0));
    }
    let pair = |tv: libc::timeval| (tv.tv_sec, tv.tv_usec);
    (pair(usage.ru_utime), pair(usage.ru_stime))
}

/// memcached's `hash_power_level` for an index of `buckets` entries: the power of two that
/// holds them.
fn hash_power_level(buckets: u64) -> u32 {
    buckets.max(1).next_power_of_two().trailing_zeros()
}

/// What one `stats` reply or `/metrics` page reads of the server, once.
struct Reading<'a> {
    shared: &'a Shared,
    now: u64,
    counters: CounterSnapshot,
    store: tailtrim_store::StoreStats,
    /// User and system CPU time as (seconds, microseconds).
    rusage: ((i64, i64), (i64, i64)),
}

/// A general field's value.
enum Value {
    /// An integer, the same in `stats` and on `/metrics`.
    Count(u64),
    /// Text (a version, a name): `stats` only.
    Text(String),
    /// CPU seconds as (seconds, microseconds): six decimals in `stats`, a number on the page.
    Seconds((i64, i64)),
    /// An integer with labels on `/metrics` (a page-only info gauge).
    Labelled(Labels, u64),
}

/// One entry of the general `stats` and of `/metrics`, in reply order.
#[derive(Clone, Copy)]
enum Field {
    /// A worker counter: its declaration is in [`crate::stats::WORKER_COUNTER_METRICS`], found by name.
    Worker(&'static str),
    /// A declared metric and how to read it (`None`: the field is left out).
    Read(&'static Metric, fn(&Reading<'_>) -> Option<Value>),
    /// One of memcached's fields for a mechanism tailtrim does not have: 0, `stats` only.
    Zero(&'static str),
    /// The dispatch policy's figures ([`DISPATCH_FIGURES`]) and latency summaries.
    Dispatch,
}

/// The help of the [`Field::Zero`] fields.
const ZERO_HELP: &str = "memcached's field for a mechanism tailtrim does not have: always 0.";

fn count(value: u64) -> Option<Value> {
    Some(Value::Count(value))
}

fn text(value: impl ToString) -> Option<Value> {
    Some(Value::Text(value.to_string()))
}

fn load(counter: &std::sync::atomic::AtomicU64) -> Option<Value> {
    count(counter.load(Ordering::Relaxed))
}

/// The general `stats` fields (every field of memcached 1.6.18's `stats`, in its order, then
/// tailtrim's own) and the `/metrics` families, declared once: each [`Field`]'s declaration
/// names its `stats` line and its Prometheus series. docs/server.md says which memcached
/// fields are constants here and why.
const GENERAL_FIELDS: &[Field] = &[
    Field::Read(&SERVER_INFO, |r| {
        let config = &r.shared.config;
        let labels = vec![
            ("version", r.shared.version.clone()),
            ("dispatch", config.workers.dispatch.name().to_string()),
        ];
        Some(Value::Labelled(labels, 1))
    }),
    Field::Read(&PID, |_| count(u64::from(std::process::id()))),
    Field::Read(&UPTIME, |r| count(r.now.saturating_sub(r.shared.started))),
    Field::Read(&TIME, |r| count(r.now)),
    Field::Read(&VERSION, |r| text(&r.shared.version)),
    Field::Read(&LIBEVENT, |_| text("none")),
    Field::Read(&POINTER_SIZE, |_| {
        count(8 * std::mem::size_of::<usize>() as u64)
    }),
    Field::Read(&RUSAGE_USER, |r| Some(Value::Seconds(r.rusage.0))),
    Field::Read(&RUSAGE_SYSTEM, |r| Some(Value::Seconds(r.rusage.1))),
    Field::Read(&MAX_CONNECTIONS, |r| {
        count(r.shared.config.server.max_connections as u64)
    }),
    Field::Read(&CURR_CONNECTIONS, |r| load(&r.shared.curr_connections)),
    Field::Read(&TOTAL_CONNECTIONS, |r| load(&r.shared.total_connections)),
    Field::Read(&REJECTED_CONNECTIONS, |r| {
        load(&r.shared.rejected_connections)
    }),
    Field::Read(&CONNECTION_STRUCTURES, |r| {
        let listeners = r.shared.listeners.get().map_or(0, Vec::len) as u64;
        count(listeners + r.shared.peak_connections.load(Ordering::Relaxed))
    }),
    Field::Zero("response_obj_oom"),
    Field::Zero("response_obj_count"),
    Field::Zero("response_obj_bytes"),
    Field::Zero("read_buf_count"),
    Field::Zero("read_buf_bytes"),
    Field::Zero("read_buf_bytes_free"),
    Field::Zero("read_buf_oom"),
    Field::Zero("reserved_fds"),
    Field::Worker("cmd_get"),
    Field::Worker("cmd_set"),
    Field::Worker("cmd_flush"),
    Field::Worker("cmd_touch"),
    Field::Worker("cmd_meta"),
    Field::Worker("get_hits"),
    Field::Worker("get_misses"),
    Field::Read(&GET_EXPIRED, |r| count(r.store.get_expired)),
    Field::Read(&GET_FLUSHED, |r| count(r.store.get_flushed)),
    Field::Worker("delete_misses"),
    Field::Worker("delete_hits"),
    Field::Worker("incr_misses"),
    Field::Worker("incr_hits"),
    Field::Worker("decr_misses"),
    Field::Worker("decr_hits"),
    Field::Worker("cas_misses"),
    Field::Worker("cas_hits"),
    Field::Worker("cas_badval"),
    Field::Worker("touch_hits"),
    Field::Worker("touch_misses"),
    Field::Worker("store_too_large"),
    Field::Worker("store_no_memory"),
    Field::Worker("auth_cmds"),
    Field::Worker("auth_errors"),
    Field::Worker("bytes_read"),
    Field::Worker("bytes_written"),
    Field::Read(&LIMIT_MAXBYTES, |r| count(r.store.limit_maxbytes)),
    Field::Read(&ACCEPTING_CONNS, |r| {
        count(u64::from(r.shared.accepting_conns.load(Ordering::Relaxed)))
    }),
    Field::Read(&LISTEN_DISABLED_NUM, |r| {
        load(&r.shared.listen_disabled_num)
    }),
    Field::Read(&TIME_IN_LISTEN_DISABLED, |r| {
        load(&r.shared.time_in_listen_disabled_us)
    }),
    Field::Read(&THREADS, |r| count(r.shared.config.workers.threads as u64)),
    Field::Zero("conn_yields"),
    Field::Read(&HASH_POWER_LEVEL, |r| {
        count(u64::from(hash_power_level(r.store.hash_buckets)))
    }),
    Field::Read(&HASH_BYTES, |r| count(r.store.hash_bytes)),
    Field::Zero("hash_is_expanding"),
    Field::Zero("slab_reassign_rescues"),
    Field::Zero("slab_reassign_chunk_rescues"),
    Field::Zero("slab_reassign_evictions_nomem"),
    Field::Zero("slab_reassign_inline_reclaim"),
    Field::Zero("slab_reassign_busy_items"),
    Field::Zero("slab_reassign_busy_deletes"),
    Field::Zero("slab_reassign_running"),
    Field::Zero("slabs_moved"),
    Field::Zero("lru_crawler_running"),
    Field::Read(&LRU_CRAWLER_STARTS, |r| load(&r.shared.crawler_starts)),
    Field::Zero("lru_maintainer_juggles"),
    Field::Zero("malloc_fails"),
    Field::Zero("log_worker_dropped"),
    Field::Zero("log_worker_written"),
    Field::Zero("log_watcher_skipped"),
    Field::Zero("log_watcher_sent"),
    Field::Zero("log_watchers"),
    Field::Read(&SSL_NEW_SESSIONS, |r| {
        let tls = r.shared.tls.as_ref()?;
        tls.options()
            .session_cache
            .then(|| Value::Count(r.shared.ssl_new_sessions.load(Ordering::Relaxed)))
    }),
    Field::Read(&SSL_HANDSHAKE_ERRORS, |r| {
        r.shared.tls.as_ref()?;
        load(&r.shared.ssl_handshake_errors)
    }),
    Field::Read(&TIME_SINCE_SERVER_CERT_REFRESH, |r| {
        count(r.shared.tls.as_ref()?.seconds_since_load())
    }),
    Field::Zero("unexpected_napi_ids"),
    Field::Zero("round_robin_fallback"),
    Field::Read(&BYTES, |r| count(r.store.bytes)),
    Field::Read(&CURR_ITEMS, |r| count(r.store.curr_items)),
    Field::Read(&TOTAL_ITEMS, |r| count(r.store.total_items)),
    Field::Zero("slab_global_page_pool"),
    Field::Read(&EXPIRED_UNFETCHED, |r| count(r.store.expired_unfetched)),
    Field::Read(&EVICTED_UNFETCHED, |r| count(r.store.evicted_unfetched)),
    Field::Zero("evicted_active"),
    Field::Read(&EVICTIONS, |r| count(r.store.evictions)),
    Field::Read(&RECLAIMED, |r| count(r.store.reclaimed)),
    Field::Read(&CRAWLER_RECLAIMED, |r| count(r.store.crawler_reclaimed)),
    Field::Read(&CRAWLER_ITEMS_CHECKED, |r| {
        count(r.store.crawler_items_checked)
    }),
    Field::Zero("lrutail_reflocked"),
    Field::Zero("moves_to_cold"),
    Field::Zero("moves_to_warm"),
    Field::Zero("moves_within_lru"),
    // Every eviction and reclaim happens in the thread that needs the memory.
    Field::Read(&DIRECT_RECLAIMS, |r| {
        count(r.store.evictions + r.store.reclaimed)
    }),
    Field::Zero("lru_bumps_dropped"),
    // tailtrim's own.
    Field::Read(&IDLE_KICKS, |r| load(&r.shared.idle_kicks)),
    Field::Read(&ITEM_SIZE_MAX, |r| count(r.store.item_size_max)),
    Field::Worker("priority_class0_requests"),
    Field::Worker("priority_class1_requests"),
    Field::Worker("priority_class2_requests"),
    Field::Worker("priority_class3_requests"),
    Field::Worker("priority_class4_requests"),
    Field::Dispatch,
];

/// The dispatch policy's figures ([`crate::shared::DispatchView::stats`] names, in the
/// order the policies list them) in the general `stats` (as `dispatch_<name>`, except `dispatch`) and on `/metrics`, by their
/// declarations; the policy's other figures are only in `stats sizeaware`.
const DISPATCH_FIGURES: &[(&str, &Metric)] = &[
    ("dispatch", &DISPATCH),
    ("small_workers", &DISPATCH_SMALL_WORKERS),
    ("large_workers", &DISPATCH_LARGE_WORKERS),
    ("threshold_bytes", &DISPATCH_THRESHOLD),
    ("handoffs", &DISPATCH_HANDOFFS),
    ("steals", &DISPATCH_STEALS),
    ("small_requests", &DISPATCH_SMALL_REQUESTS),
    ("small_p99_us", &DISPATCH_SMALL_P99),
    ("large_requests", &DISPATCH_LARGE_REQUESTS),
    ("large_p99_us", &DISPATCH_LARGE_P99),
    ("epochs", &DISPATCH_EPOCHS),
];

/// The `stats` names of the general fields in reply order, as declared: the TLS fields
/// appear only with TLS on, the dispatch figures after `dispatch` only under a dispatch
/// policy that reports them.
pub fn general_stat_names() -> Vec<&'static str> {
    let mut names = Vec::new();
    for field in GENERAL_FIELDS {
        match field {
            Field::Worker(name) | Field::Zero(name) => names.push(*name),
            Field::Read(metric, _) if metric.in_stats => names.push(metric.name),
            Field::Read(..) => {}
            Field::Dispatch => names.extend(
                DISPATCH_FIGURES
                    .iter()
                    .filter(|(_, metric)| metric.in_stats)
                    .map(|(_, metric)| metric.name),
            ),
        }
    }
    names
}

/// The general fields read now, as samples: `stats` writes their lines, `/metrics` their
/// series.
fn general_samples(shared: &Shared, now: u64) -> Samples {
    let reading = Reading {
        shared,
        now,
        counters: shared.counter_snapshot(),
        store: shared.store.stats(),
        rusage: rusage_timevals(),
    };
    let workers = reading.counters.declared();
    let mut samples = Samples::new();
    for field in GENERAL_FIELDS {
        match field {
            Field::Worker(name) => {
                if let Some((metric, value)) = workers.iter().find(|(m, _)| m.name == *name) {
                    worker_sample(&mut samples, metric, *value);
                }
            }
            Field::Read(metric, read) => match read(&reading) {
                Some(Value::Count(value)) => samples.count(metric, vec![], value),
                Some(Value::Text(text)) => samples.shown(metric, vec![], text, None),
                Some(Value::Seconds((seconds, micros))) => samples.shown(
                    metric,
                    vec![],
                    format!("{seconds}.{micros:06}"),
                    Some(seconds as f64 + micros as f64 / 1e6),
                ),
                Some(Value::Labelled(labels, value)) => samples.count(metric, labels, value),
                None => {}
            },
            Field::Zero(name) => {
                samples.count(&Metric::gauge(name, ZERO_HELP).stats_only(), vec![], 0)
            }
            Field::Dispatch => dispatch_samples(&mut samples, shared),
        }
    }
    samples
}

/// A worker counter's sample; a priority class's counter is, on `/metrics`, the class's
/// series of [`SERVER_PRIORITY_REQUESTS`].
fn worker_sample(samples: &mut Samples, metric: &Metric, value: u64) {
    let class = metric
        .name
        .strip_prefix("priority_class")
        .and_then(|rest| rest.strip_suffix("_requests"));
    match class {
        Some(class) => {
            samples.count(&metric.stats_only(), vec![], value);
            samples.count(
                &SERVER_PRIORITY_REQUESTS,
                vec![("class", class.to_string())],
                value,
            );
        }
        None => samples.count(metric, vec![], value),
    }
}

/// The dispatch policy's figures ([`DISPATCH_FIGURES`]) in the policy's order and its
/// per-class latency summaries; without a policy runtime, its name.
fn dispatch_samples(samples: &mut Samples, shared: &Shared) {
    let Some(runtime) = shared.dispatch_view() else {
        let name = shared.config.workers.dispatch.name().to_string();
        return samples.shown(&DISPATCH, vec![], name, None);
    };
    let stats = runtime.stats();
    for (name, value) in &stats {
        if let Some((_, metric)) = DISPATCH_FIGURES.iter().find(|(figure, _)| figure == name) {
            let number = value.parse::<f64>().ok();
            samples.shown(metric, vec![], value.clone(), number);
        }
    }
    for (name, histogram) in runtime.histograms() {
        let class = match name.as_str() {
            "small_latency_us" => "small",
            "large_latency_us" => "large",
            _ => continue,
        };
        // The histogram holds the sampled requests; the count is every request's.
        let served = stats
            .iter()
            .find(|(figure, _)| *figure == format!("{class}_requests"))
            .and_then(|(_, value)| value.parse::<u64>().ok());
        samples.distribution(
            &DISPATCH_REQUEST_LATENCY,
            vec![("class", class.to_string())],
            distribution(&histogram, served),
        );
    }
}

/// `stats settings` pairs: every setting memcached 1.6.18 lists, in its order, with
/// tailtrim's value (memcached's default where tailtrim has no such mechanism; see
/// docs/server.md), then tailtrim's own.
fn settings_stats(shared: &Shared) -> Vec<(String, String)> {
    let c = &shared.config;
    let yes_no = |on: bool| if on { "yes" } else { "no" }.to_string();
    let oldest = shared
        .store
        .flush_watermark()
        .map_or(0, |at| at.0.saturating_sub(shared.started));
    let mut pairs: Vec<(String, String)> = vec![
        (
            "maxbytes".into(),
            (c.storage.memory_mb * 1024 * 1024).to_string(),
        ),
        ("maxconns".into(), c.server.max_connections.to_string()),
        (
            "tcpport".into(),
            shared.tcp_port.load(Ordering::Relaxed).to_string(),
        ),
        (
            "udpport".into(),
            shared.udp_port.load(Ordering::Relaxed).to_string(),
        ),
        ("inter".into(), c.server.listen.clone()),
        ("verbosity".into(), c.server.verbose.to_string()),
        ("oldest".into(), oldest.to_string()),
        (
            "evictions".into(),
            if c.storage.evict_to_free { "on" } else { "off" }.into(),
        ),
    ];
    let constant = |name: &str, value: &str| (name.to_string(), value.to_string());
    pairs.extend([
        constant("domain_socket", "NULL"),
        constant("umask", "700"),
        ("shutdown_command".into(), yes_no(c.server.enable_shutdown)),
        constant("growth_factor", "1.25"),
        constant("chunk_size", "48"),
        ("num_threads".into(), c.workers.threads.to_string()),
        ("num_threads_per_udp".into(), c.workers.threads.to_string()),
        constant("stat_key_prefix", ":"),
        constant("detail_enabled", "no"),
        constant("reqs_per_event", "20"),
        ("cas_enabled".into(), yes_no(!c.server.disable_cas)),
        ("tcp_backlog".into(), c.server.listen_backlog.to_string()),
        constant("binding_protocol", "ascii"),
        constant("auth_enabled_sasl", "no"),
        (
            "auth_enabled_ascii".into(),
            if c.server.auth_file.is_empty() {
                "no".to_string()
            } else {
                c.server.auth_file.clone()
            },
        ),
        ("item_size_max".into(), c.storage.item_size_max.to_string()),
        constant("maxconns_fast", "yes"),
        constant("hashpower_init", "0"),
        constant("slab_reassign", "no"),
        constant("slab_automove", "0"),
        constant("slab_automove_ratio", "0.80"),
        constant("slab_automove_window", "30"),
        (
            "slab_chunk_max".into(),
            tailtrim_store::LARGEST_CHUNK.to_string(),
        ),
        (
            "lru_crawler".into(),
            yes_no(c.storage.crawl_interval_ms > 0),
        ),
        (
            "lru_crawler_sleep".into(),
            c.storage.crawl_interval_ms.to_string(),
        ),
        (
            "lru_crawler_tocrawl".into(),
            c.storage.crawl_budget.to_string(),
        ),
        constant("tail_repair_time", "0"),
        ("flush_enabled".into(), yes_no(!c.server.disable_flush_all)),
        ("dump_enabled".into(), yes_no(!c.server.disable_dumping)),
        constant("hash_algorithm", "ahash"),
        constant("lru_maintainer_thread", "no"),
        constant("lru_segmented", "no"),
        constant("hot_lru_pct", "20"),
        constant("warm_lru_pct", "40"),
        constant("hot_max_factor", "0.20"),
        constant("warm_max_factor", "2.00"),
        constant("temp_lru", "no"),
        constant("temporary_ttl", "61"),
        (
            "idle_timeout".into(),
            c.server.idle_timeout_secs.to_string(),
        ),
        constant("watcher_logbuf_size", "262144"),
        constant("worker_logbuf_size", "65536"),
        constant("read_buf_mem_limit", "0"),
        constant("track_sizes", "no"),
        constant("inline_ascii_response", "no"),
        constant("ext_item_size", "512"),
        constant("ext_item_age", "4294967295"),
        constant("ext_low_ttl", "0"),
        constant("ext_recache_rate", "2000"),
        constant("ext_wbuf_size", "4194304"),
        constant("ext_compact_under", "0"),
        constant("ext_drop_under", "0"),
        constant("ext_max_sleep", "1000000"),
        constant("ext_max_frag", "0.80"),
        constant("slab_automove_freeratio", "0.010"),
        constant("ext_drop_unread", "no"),
    ]);
    pairs.extend(tls_settings(&c.tls));
    pairs.extend([
        constant("num_napi_ids", "(null)"),
        constant("memory_file", "(null)"),
        // tailtrim's own.
        ("dispatch".into(), c.workers.dispatch.name().to_string()),
        ("priorities".into(), c.workers.priorities().to_string()),
        (
            "priority_classes".into(),
            tailtrim_proto::meta::PRIORITY_CLASSES.to_string(),
        ),
        (
            "emulate_service".into(),
            c.emulation
                .service_spec()
                .map_or_else(|e| e, |s| s.to_string()),
        ),
        (
            "emulate_network".into(),
            c.emulation
                .network_spec()
                .map_or_else(|e| e, |s| s.to_string()),
        ),
    ]);
    pairs
}

/// memcached's `ssl_*` lines of `stats settings`: the options as given (a path as written,
/// `(null)` / `NULL` where memcached prints those for an unset one).
fn tls_settings(tls: &tailtrim_tls::ServerTlsOptions) -> Vec<(String, String)> {
    let yes_no = |on: bool| if on { "yes" } else { "no" }.to_string();
    let path = |path: &Option<std::path::PathBuf>, unset: &str| {
        path.as_ref()
            .map_or_else(|| unset.to_string(), |p| p.display().to_string())
    };
    vec![
        ("ssl_enabled".into(), yes_no(tls.enabled)),
        ("ssl_chain_cert".into(), path(&tls.chain_cert, "(null)")),
        ("ssl_key".into(), path(&tls.key, "(null)")),
        (
            "ssl_verify_mode".into(),
            tls.verify_mode.number().to_string(),
        ),
        ("ssl_keyformat".into(), tls.keyformat.to_string()),
        (
            "ssl_ciphers".into(),
            tls.ciphers.clone().unwrap_or_else(|| "NULL".to_string()),
        ),
        ("ssl_ca_cert".into(), path(&tls.ca_cert, "NULL")),
        ("ssl_wbuf_size".into(), tls.write_buffer_bytes().to_string()),
        ("ssl_session_cache".into(), yes_no(tls.session_cache)),
        ("ssl_kernel_tls".into(), yes_no(tls.kernel_tls)),
        ("ssl_min_version".into(), tls.min_version.name().to_string()),
    ]
}

/// `stats items`: memcached's fields for every size class that holds items.
fn items_stats(shared: &Shared, now: u64) -> Vec<(String, String)> {
    let classes = shared.store.class_stats(tailtrim_store::UnixSecs(now));
    let slabs = shared.slab_snapshots();
    let mut pairs = Vec::new();
    for (id, class) in classes.iter().enumerate() {
        if class.number == 0 {
            continue;
        }
        let mut push = |name: &str, value: u64| {
            pairs.push((format!("items:{id}:{name}"), value.to_string()));
        };
        push("number", class.number);
        // Without LRU segments every item is in the one (cold) LRU.
        push("number_hot", 0);
        push("number_warm", 0);
        push("number_cold", class.number);
        push("age_hot", 0);
        push("age_warm", 0);
        push("age", class.age);
        push("mem_requested", class.mem_requested);
        push("evicted", class.evicted);
        push("evicted_nonzero", class.evicted_nonzero);
        push("evicted_time", class.evicted_time);
        push("outofmemory", class.outofmemory);
        push("tailrepairs", 0);
        push("reclaimed", class.reclaimed);
        push("expired_unfetched", class.expired_unfetched);
        push("evicted_unfetched", class.evicted_unfetched);
        push("evicted_active", 0);
        push("crawler_reclaimed", class.crawler_reclaimed);
        push("crawler_items_checked", 0);
        push("lrutail_reflocked", 0);
        push("moves_to_cold", 0);
        push("moves_to_warm", 0);
        push("moves_within_lru", 0);
        push("direct_reclaims", class.evicted + class.reclaimed);
        push("hits_to_hot", 0);
        push("hits_to_warm", 0);
        push("hits_to_cold", slabs[id].get_hits);
        push("hits_to_temp", 0);
    }
    pairs
}

/// `stats slabs`: memcached's per class fields for every class that holds items or has
/// counted a command, then `active_slabs` and `total_malloced`. tailtrim allocates per item,
/// not in 1 MiB pages: a class's "page" is its items' chunks rounded up to memcached's page.
fn slabs_stats(shared: &Shared, now: u64) -> Vec<(String, String)> {
    let classes = shared.store.class_stats(tailtrim_store::UnixSecs(now));
    let slabs = shared.slab_snapshots();
    let chunk_sizes = tailtrim_store::class_chunk_sizes();
    let mut pairs = Vec::new();
    let mut active = 0u64;
    let mut malloced = 0u64;
    for (id, chunk_size) in chunk_sizes
        .iter()
        .enumerate()
        .map(|(i, size)| (i + 1, *size))
    {
        let class = &classes[id];
        let counted = slabs[id];
        if class.number == 0 && counted == crate::stats::SlabSnapshot::default() {
            continue;
        }
        active += 1;
        let per_page = (SLAB_PAGE_BYTES / chunk_size).max(1);
        let pages = class.number.div_ceil(per_page).max(1);
        malloced += pages * SLAB_PAGE_BYTES;
        let mut push = |name: &str, value: u64| {
            pairs.push((format!("{id}:{name}"), value.to_string()));
        };
        push("chunk_size", chunk_size);
        push("chunks_per_page", per_page);
        push("total_pages", pages);
        push("total_chunks", pages * per_page);
        push("used_chunks", class.number);
        push("free_chunks", pages * per_page - class.number);
        push("free_chunks_end", 0);
        for (name, value) in counted.pairs() {
            push(name, value);
        }
    }
    pairs.push(("active_slabs".into(), active.to_string()));
    pairs.push(("total_malloced".into(), malloced.to_string()));
    pairs
}

/// memcached's slab page (`-o slab_page_size`, 1 MiB).
const SLAB_PAGE_BYTES: u64 = 1024 * 1024;

/// Hot keys listed by `stats hotkeys` without a count.
pub const DEFAULT_HOTKEYS_SHOWN: usize = 20;

/// Executes a `stats` command.
pub fn stats_command(args: &[Bytes], ctx: &ExecContext<'_>, out: &mut ReplyBuf) {
    let pairs = match args.first().map(|a| a.as_ref()) {
        None => {
            let mut lines = String::new();
            general_samples(ctx.shared, ctx.now.0).stats_lines(&mut lines);
            out.push(lines.as_bytes());
            return reply::line(out, b"END");
        }
        Some(b"settings") => settings_stats(ctx.shared),
        Some(b"items") => items_stats(ctx.shared, ctx.now.0),
        Some(b"slabs") => slabs_stats(ctx.shared, ctx.now.0),
        Some(b"sizeaware" | b"dispatch") => match ctx.shared.dispatch_view() {
            Some(runtime) => runtime.stats(),
            None => vec![
                ("dispatch".into(), "pinned".into()),
                (
                    "workers".into(),
                    ctx.shared.config.workers.threads.to_string(),
                ),
            ],
        },
        Some(b"histograms") => match ctx.shared.dispatch_view() {
            Some(runtime) => runtime
                .histograms()
                .into_iter()
                .map(|(name, histogram)| (name, encoded_histogram(&histogram)))
                .collect(),
            None => Vec::new(),
        },
        Some(b"hotkeys") => match &ctx.shared.hotkeys {
            Some(hotkeys) => {
                let n = match args.get(1) {
                    None => DEFAULT_HOTKEYS_SHOWN,
                    Some(text) => match std::str::from_utf8(text).ok().and_then(|t| t.parse().ok())
                    {
                        Some(n) => n,
                        None => return reply::line(out, b"CLIENT_ERROR bad number of hot keys"),
                    },
                };
                hotkeys.stats(n)
            }
            None => vec![("hotkeys_enabled".into(), "0".into())],
        },
        // memcached without `-o track_sizes`: the size histogram is off; with more
        // tokens it answers an empty list.
        Some(b"sizes") if args.len() == 1 => {
            vec![("sizes_status".into(), "disabled".into())]
        }
        Some(b"sizes") => Vec::new(),
        Some(b"reset") => {
            for counters in &ctx.shared.counters {
                counters.reset();
            }
            ctx.shared.reset_stats();
            if let Some(hotkeys) = &ctx.shared.hotkeys {
                hotkeys.reset();
            }
            if let Some(runtime) = ctx.shared.dispatch_view() {
                runtime.reset_stats();
            }
            return reply::line(out, b"RESET");
        }
        Some(b"conns") => return conns_stats(ctx, out),
        Some(b"cachedump") if ctx.shared.config.server.disable_dumping => {
            return reply::line(out, b"CLIENT_ERROR stats cachedump not allowed")
        }
        Some(b"cachedump") => return cachedump(args, ctx, out),
        Some(b"detail") => {
            return out.push(reply::stats_detail(args.get(1).map(|arg| arg.as_ref())));
        }
        Some(_) => return reply::line(out, b"ERROR"),
    };
    for (name, value) in pairs {
        reply::stat(out, &name, &value);
    }
    reply::line(out, b"END");
}

/// `stats conns`: the listening sockets, then every client connection, as memcached lists them
/// (`STAT <fd>:addr …`, `listen_addr`, `state`, `secs_since_last_cmd`).
fn conns_stats(ctx: &ExecContext<'_>, out: &mut ReplyBuf) {
    let uptime = ctx.now.0.saturating_sub(ctx.shared.started);
    for (fd, addr) in ctx.shared.listeners.get().into_iter().flatten() {
        let state = if addr.starts_with("udp:") {
            "conn_read"
        } else {
            "conn_listening"
        };
        reply::stat(out, &format!("{fd}:addr"), addr);
        reply::stat(out, &format!("{fd}:state"), &state);
        reply::stat(out, &format!("{fd}:secs_since_last_cmd"), &uptime);
    }
    let connections = ctx
        .shared
        .dispatch_view()
        .map(|runtime| runtime.connections())
        .unwrap_or_default();
    for conn in connections {
        let fd = conn.fd;
        reply::stat(out, &format!("{fd}:addr"), &conn.addr);
        reply::stat(out, &format!("{fd}:listen_addr"), &conn.listen_addr);
        reply::stat(out, &format!("{fd}:state"), &conn.state);
        reply::stat(
            out,
            &format!("{fd}:secs_since_last_cmd"),
            &conn.secs_since_last_cmd,
        );
    }
    reply::line(out, b"END");
}

/// memcached's slab classes (`MAX_NUMBER_OF_SLAB_CLASSES`): ids from this on are illegal.
const SLAB_CLASS_LIMIT: u64 = 64;
/// memcached's `stats cachedump` stops at 2 MB of output.
const CACHEDUMP_BYTES: usize = 2 * 1024 * 1024;

/// `stats cachedump <class> <limit>`: the items of the store's one class (1), most recently
/// used first, `ITEM <key> [<bytes> b; <expiry, Unix seconds, 0 if none> s]`; other legal
/// class ids are empty. Argument errors answer as memcached does.
fn cachedump(args: &[Bytes], ctx: &ExecContext<'_>, out: &mut ReplyBuf) {
    let (Some(class), Some(limit)) = (args.get(1), args.get(2)) else {
        return reply::line(out, b"CLIENT_ERROR bad command line");
    };
    let number = |text: &Bytes| {
        std::str::from_utf8(text)
            .ok()
            .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|t| t.parse::<u64>().ok())
    };
    let (Some(class), Some(limit)) = (number(class), number(limit)) else {
        return reply::line(out, b"CLIENT_ERROR bad command line format");
    };
    if class >= SLAB_CLASS_LIMIT {
        return reply::line(out, b"CLIENT_ERROR Illegal slab id");
    }
    if class == 1 {
        let limit = if limit == 0 {
            usize::MAX
        } else {
            usize::try_from(limit).unwrap_or(usize::MAX)
        };
        for item in ctx.shared.store.dump_items(limit, CACHEDUMP_BYTES, ctx.now) {
            let expiry = match item.expiry {
                tailtrim_store::Expiry::Never => 0,
                tailtrim_store::Expiry::At(at) => at.0,
            };
            let mut line = Vec::with_capacity(item.key.len() + 40);
            line.extend_from_slice(b"ITEM ");
            line.extend_from_slice(&item.key);
            line.extend_from_slice(format!(" [{} b; {expiry} s]", item.value_len).as_bytes());
            reply::line(out, &line);
        }
    }
    reply::line(out, b"END");
}

/// A histogram as `stats histograms` gives it: hdrhistogram's V2 serialization in base64 (one
/// token), which HdrHistogram's implementations and `experiments/harness.py` decode.
fn encoded_histogram(histogram: &hdrhistogram::Histogram<u64>) -> String {
    use base64::Engine;
    use hdrhistogram::serialization::Serializer;
    let mut bytes = Vec::new();
    match hdrhistogram::serialization::V2Serializer::new().serialize(histogram, &mut bytes) {
        Ok(_) => base64::engine::general_purpose::STANDARD.encode(bytes),
        Err(_) => "unavailable".to_string(),
    }
}

tailtrim_metrics::metrics! {
    /// The declarations of the general `stats` fields and `/metrics` families besides the
    /// worker counters ([`crate::stats::WORKER_COUNTER_METRICS`]) and memcached's constant
    /// fields ([`Field::Zero`]).
    pub list SERVER_METRICS;
    /// Constant 1, labelled with the server version and dispatch policy.
    pub gauge SERVER_INFO = "server_info", page_only;
    /// The server's process id.
    pub gauge PID = "pid", stats_only;
    /// Seconds since the server started.
    pub gauge UPTIME = "uptime" as "server_uptime_seconds";
    /// The server's clock, Unix seconds.
    pub gauge TIME = "time", stats_only;
    /// The server's version.
    pub gauge VERSION = "version", stats_only;
    /// memcached's libevent version: `none` (tailtrim has its own event loop).
    pub gauge LIBEVENT = "libevent", stats_only;
    /// Bits of a pointer.
    pub gauge POINTER_SIZE = "pointer_size", stats_only;
    /// User CPU time of the process, seconds.
    pub counter RUSAGE_USER = "rusage_user" as "process_cpu_user_seconds";
    /// System CPU time of the process, seconds.
    pub counter RUSAGE_SYSTEM = "rusage_system" as "process_cpu_system_seconds";
    /// Simultaneous client connections allowed (-c).
    pub gauge MAX_CONNECTIONS = "max_connections" as "server_max_connections";
    /// Open client connections.
    pub gauge CURR_CONNECTIONS = "curr_connections" as "server_curr_connections";
    /// Client connections accepted.
    pub counter TOTAL_CONNECTIONS = "total_connections" as "server_connections";
    /// Client connections refused past max_connections.
    pub counter REJECTED_CONNECTIONS = "rejected_connections" as "server_rejected_connections";
    /// Listeners plus the most client connections open at once.
    pub gauge CONNECTION_STRUCTURES = "connection_structures", stats_only;
    /// Lookups that found an expired item.
    pub counter GET_EXPIRED = "get_expired", stats_only;
    /// Lookups that found an item invalidated by flush_all.
    pub counter GET_FLUSHED = "get_flushed", stats_only;
    /// Memory limit for items (-m).
    pub gauge LIMIT_MAXBYTES = "limit_maxbytes" as "store_limit_bytes";
    /// 1 while the server accepts connections.
    pub gauge ACCEPTING_CONNS = "accepting_conns", stats_only;
    /// Times accepting failed (no descriptor left) and the acceptor backed off.
    pub counter LISTEN_DISABLED_NUM = "listen_disabled_num" as "server_listen_disabled";
    /// Time spent with accepting backed off, µs.
    pub counter TIME_IN_LISTEN_DISABLED = "time_in_listen_disabled_us" in Microseconds, stats_only;
    /// Worker threads (-t).
    pub gauge THREADS = "threads" as "server_threads";
    /// The power of two that holds the key index's entries.
    pub gauge HASH_POWER_LEVEL = "hash_power_level", stats_only;
    /// Bytes of the key index.
    pub gauge HASH_BYTES = "hash_bytes", stats_only;
    /// Expiry crawls started.
    pub counter LRU_CRAWLER_STARTS = "lru_crawler_starts", stats_only;
    /// TLS sessions created (with the session cache on).
    pub counter SSL_NEW_SESSIONS = "ssl_new_sessions", stats_only;
    /// TLS handshakes that failed.
    pub counter SSL_HANDSHAKE_ERRORS = "ssl_handshake_errors", stats_only;
    /// Seconds since the certificate was (re)loaded.
    pub gauge TIME_SINCE_SERVER_CERT_REFRESH = "time_since_server_cert_refresh", stats_only;
    /// Bytes held by items.
    pub gauge BYTES = "bytes" as "store_bytes";
    /// Items held, including expired ones not yet reclaimed.
    pub gauge CURR_ITEMS = "curr_items" as "store_curr_items";
    /// Items ever stored.
    pub counter TOTAL_ITEMS = "total_items" as "store_items";
    /// Expired or flushed items removed that were never read.
    pub counter EXPIRED_UNFETCHED = "expired_unfetched" as "store_expired_unfetched";
    /// Evicted items that were never read.
    pub counter EVICTED_UNFETCHED = "evicted_unfetched" as "store_evicted_unfetched";
    /// Live items removed to make room.
    pub counter EVICTIONS = "evictions" as "store_evictions";
    /// Expired or flushed items whose memory was reused.
    pub counter RECLAIMED = "reclaimed" as "store_reclaimed";
    /// Expired items the crawler removed.
    pub counter CRAWLER_RECLAIMED = "crawler_reclaimed", stats_only;
    /// Items the crawler looked at.
    pub counter CRAWLER_ITEMS_CHECKED = "crawler_items_checked", stats_only;
    /// Evictions and reclaims done by the thread that needed the memory (all of them).
    pub counter DIRECT_RECLAIMS = "direct_reclaims", stats_only;
    /// Client connections closed by the idle timeout.
    pub counter IDLE_KICKS = "idle_kicks" as "server_idle_kicks";
    /// Largest item accepted (-I).
    pub gauge ITEM_SIZE_MAX = "item_size_max" as "store_item_size_max_bytes";
    /// mg requests executed, by priority class (p0 the highest).
    pub counter SERVER_PRIORITY_REQUESTS = "server_priority_requests", page_only;
    /// The dispatch policy.
    pub gauge DISPATCH = "dispatch", stats_only;
    /// Workers that read requests (size-aware: the small workers).
    pub gauge DISPATCH_SMALL_WORKERS = "dispatch_small_workers";
    /// Workers that serve only handed-off requests (size-aware: the large workers).
    pub gauge DISPATCH_LARGE_WORKERS = "dispatch_large_workers";
    /// Size-aware threshold between small and large requests.
    pub gauge DISPATCH_THRESHOLD = "dispatch_threshold_bytes";
    /// Requests handed from a small to a large worker.
    pub counter DISPATCH_HANDOFFS = "dispatch_handoffs";
    /// Connections taken from another worker's epoll.
    pub counter DISPATCH_STEALS = "dispatch_steals";
    /// Small requests served (their latency is the small class's summary on `/metrics`).
    pub counter DISPATCH_SMALL_REQUESTS = "dispatch_small_requests", stats_only;
    /// Large requests served (their latency is the large class's summary on `/metrics`).
    pub counter DISPATCH_LARGE_REQUESTS = "dispatch_large_requests", stats_only;
    /// 99th percentile latency of small requests, µs.
    pub gauge DISPATCH_SMALL_P99 = "dispatch_small_p99_us" in Microseconds, stats_only;
    /// 99th percentile latency of large requests, µs.
    pub gauge DISPATCH_LARGE_P99 = "dispatch_large_p99_us" in Microseconds, stats_only;
    /// Size-aware controller epochs run.
    pub counter DISPATCH_EPOCHS = "dispatch_epochs", page_only;
    /// Server-side latency from the kernel's receipt of a request to its reply queued, by size class.
    pub summary DISPATCH_REQUEST_LATENCY = "dispatch_request_latency_us" in Microseconds, page_only;
}

/// An HDR histogram in microseconds, read at the summaries' quantiles, of a sample of
/// `count` observations (`None`: the histogram holds them all); the sum is an estimate:
/// the histogram's mean times the count.
fn distribution(histogram: &hdrhistogram::Histogram<u64>, count: Option<u64>) -> Distribution {
    let count = count.unwrap_or_else(|| histogram.len());
    Distribution {
        count,
        quantiles: QUANTILES
            .iter()
            .map(|(quantile, _)| histogram.value_at_quantile(*quantile))
            .collect(),
        max: histogram.max(),
        sum: histogram.mean() * count as f64,
    }
}

/// Prometheus text exposition (format 0.0.4) of the server: the general `stats` fields'
/// declarations (`GENERAL_FIELDS`) that are shown on the page, as
/// `tailtrim_<exposed name>` (`_total` for counters), the per-class latency as summaries in
/// seconds. `stats` keeps memcached's names; this page follows Prometheus' rules (see
/// `docs/server.md`, section Metrics).
pub fn prometheus(shared: &Shared, now: u64) -> Result<String, ExpositionError> {
    let mut page = Exposition::new("tailtrim");
    general_samples(shared, now).expose(&mut page);
    page.finish()
}

#[cfg(test)]
mod metric_tests {
    use super::*;

    #[test]
    fn declarations_name_their_units_once() {
        let mut all = SERVER_METRICS.to_vec();
        all.extend_from_slice(crate::stats::WORKER_COUNTER_METRICS);
        assert_eq!(tailtrim_metrics::declare::check_declarations(&all), Ok(()));
    }

    #[test]
    fn every_worker_counter_is_a_general_field_once() {
        let names = general_stat_names();
        for metric in crate::stats::WORKER_COUNTER_METRICS {
            let times = names.iter().filter(|name| **name == metric.name).count();
            assert_eq!(times, 1, "{} is listed {times} times", metric.name);
        }
        let mut distinct = names.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(
            distinct.len(),
            names.len(),
            "a general field is listed twice"
        );
    }
}
