//! `stats` replies (memcached's format) and Prometheus text metrics.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use tailtrim_metrics::samples::QUANTILES;
use tailtrim_metrics::{Distribution, Exposition, ExpositionError, Samples};
use tailtrim_proto::reply::{self, ReplyBuf};

use crate::context::ExecContext;
use crate::shared::Shared;

/// Process CPU time (user, system) as memcached prints it: seconds with six decimals, from
/// `getrusage`'s whole microseconds.
/// The process's user and system CPU time as (seconds, microseconds) pairs.
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

/// `rusage_user`/`rusage_system` as memcached prints them: seconds with six decimals.
fn rusage() -> (String, String) {
    let ((us, uu), (ss, su)) = rusage_timevals();
    (format!("{us}.{uu:06}"), format!("{ss}.{su:06}"))
}

/// The process's user and system CPU time in seconds, for Prometheus.
fn rusage_seconds() -> (f64, f64) {
    let ((us, uu), (ss, su)) = rusage_timevals();
    (us as f64 + uu as f64 / 1e6, ss as f64 + su as f64 / 1e6)
}

/// Bytes of one entry of a shard's key index (hashbrown: the key, the slot, a control byte).
const HASH_ENTRY_BYTES: u64 = (std::mem::size_of::<(Bytes, u32)>() + 1) as u64;

/// memcached's `hash_power_level` for an index of `buckets` entries: the power of two that
/// holds them.
fn hash_power_level(buckets: u64) -> u32 {
    buckets.max(1).next_power_of_two().trailing_zeros()
}

/// General statistics as (name, value) pairs: every field of memcached 1.6.18's `stats`, in
/// its order, then tailtrim's own. docs/server.md says which memcached fields are constants
/// here and why.
pub fn general_stats(shared: &Shared, now: u64) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut push = |name: &str, value: String| out.push((name.to_string(), value));
    let (user, system) = rusage();
    let load = |counter: &std::sync::atomic::AtomicU64| counter.load(Ordering::Relaxed).to_string();
    let zero = || "0".to_string();
    let counters = shared.counter_snapshot();
    let store = shared.store.stats();
    let listeners = shared.listeners.get().map_or(0, Vec::len) as u64;
    push("pid", std::process::id().to_string());
    push("uptime", now.saturating_sub(shared.started).to_string());
    push("time", now.to_string());
    push("version", shared.version.clone());
    push("libevent", "none".into());
    push(
        "pointer_size",
        (8 * std::mem::size_of::<usize>()).to_string(),
    );
    push("rusage_user", user);
    push("rusage_system", system);
    push(
        "max_connections",
        shared.config.server.max_connections.to_string(),
    );
    push("curr_connections", load(&shared.curr_connections));
    push("total_connections", load(&shared.total_connections));
    push("rejected_connections", load(&shared.rejected_connections));
    push(
        "connection_structures",
        (listeners + shared.peak_connections.load(Ordering::Relaxed)).to_string(),
    );
    for name in [
        "response_obj_oom",
        "response_obj_count",
        "response_obj_bytes",
        "read_buf_count",
        "read_buf_bytes",
        "read_buf_bytes_free",
        "read_buf_oom",
        "reserved_fds",
    ] {
        push(name, zero());
    }
    let c = &counters;
    for (name, value) in [
        ("cmd_get", c.cmd_get),
        ("cmd_set", c.cmd_set),
        ("cmd_flush", c.cmd_flush),
        ("cmd_touch", c.cmd_touch),
        ("cmd_meta", c.cmd_meta),
        ("get_hits", c.get_hits),
        ("get_misses", c.get_misses),
        ("get_expired", store.get_expired),
        ("get_flushed", store.get_flushed),
        ("delete_misses", c.delete_misses),
        ("delete_hits", c.delete_hits),
        ("incr_misses", c.incr_misses),
        ("incr_hits", c.incr_hits),
        ("decr_misses", c.decr_misses),
        ("decr_hits", c.decr_hits),
        ("cas_misses", c.cas_misses),
        ("cas_hits", c.cas_hits),
        ("cas_badval", c.cas_badval),
        ("touch_hits", c.touch_hits),
        ("touch_misses", c.touch_misses),
        ("store_too_large", c.store_too_large),
        ("store_no_memory", c.store_no_memory),
        ("auth_cmds", c.auth_cmds),
        ("auth_errors", c.auth_errors),
        ("bytes_read", c.bytes_read),
        ("bytes_written", c.bytes_written),
        ("limit_maxbytes", store.limit_maxbytes),
        (
            "accepting_conns",
            u64::from(shared.accepting_conns.load(Ordering::Relaxed)),
        ),
    ] {
        push(name, value.to_string());
    }
    push("listen_disabled_num", load(&shared.listen_disabled_num));
    push(
        "time_in_listen_disabled_us",
        load(&shared.time_in_listen_disabled_us),
    );
    push("threads", shared.config.workers.threads.to_string());
    push("conn_yields", zero());
    push(
        "hash_power_level",
        hash_power_level(store.hash_buckets).to_string(),
    );
    push(
        "hash_bytes",
        (store.hash_buckets * HASH_ENTRY_BYTES).to_string(),
    );
    push("hash_is_expanding", zero());
    for name in [
        "slab_reassign_rescues",
        "slab_reassign_chunk_rescues",
        "slab_reassign_evictions_nomem",
        "slab_reassign_inline_reclaim",
        "slab_reassign_busy_items",
        "slab_reassign_busy_deletes",
        "slab_reassign_running",
        "slabs_moved",
        "lru_crawler_running",
    ] {
        push(name, zero());
    }
    push("lru_crawler_starts", load(&shared.crawler_starts));
    for name in [
        "lru_maintainer_juggles",
        "malloc_fails",
        "log_worker_dropped",
        "log_worker_written",
        "log_watcher_skipped",
        "log_watcher_sent",
        "log_watchers",
    ] {
        push(name, zero());
    }
    if let Some(tls) = &shared.tls {
        if tls.options().session_cache {
            push("ssl_new_sessions", load(&shared.ssl_new_sessions));
        }
        push("ssl_handshake_errors", load(&shared.ssl_handshake_errors));
        push(
            "time_since_server_cert_refresh",
            tls.seconds_since_load().to_string(),
        );
    }
    for name in ["unexpected_napi_ids", "round_robin_fallback"] {
        push(name, zero());
    }
    push("bytes", store.bytes.to_string());
    push("curr_items", store.curr_items.to_string());
    push("total_items", store.total_items.to_string());
    push("slab_global_page_pool", zero());
    push("expired_unfetched", store.expired_unfetched.to_string());
    push("evicted_unfetched", store.evicted_unfetched.to_string());
    push("evicted_active", zero());
    push("evictions", store.evictions.to_string());
    push("reclaimed", store.reclaimed.to_string());
    push("crawler_reclaimed", store.crawler_reclaimed.to_string());
    push(
        "crawler_items_checked",
        store.crawler_items_checked.to_string(),
    );
    for name in [
        "lrutail_reflocked",
        "moves_to_cold",
        "moves_to_warm",
        "moves_within_lru",
    ] {
        push(name, zero());
    }
    // Every eviction and reclaim happens in the thread that needs the memory.
    push(
        "direct_reclaims",
        (store.evictions + store.reclaimed).to_string(),
    );
    push("lru_bumps_dropped", zero());
    // tailtrim's own.
    push("idle_kicks", load(&shared.idle_kicks));
    push("item_size_max", store.item_size_max.to_string());
    for (name, value) in [
        ("priority_class0_requests", c.priority_class0_requests),
        ("priority_class1_requests", c.priority_class1_requests),
        ("priority_class2_requests", c.priority_class2_requests),
        ("priority_class3_requests", c.priority_class3_requests),
        ("priority_class4_requests", c.priority_class4_requests),
    ] {
        push(name, value.to_string());
    }
    // The dispatch policy's live state (the full set is `stats sizeaware`).
    match shared.dispatch_view() {
        Some(runtime) => {
            for (name, value) in runtime.stats() {
                if GENERAL_DISPATCH_STATS.contains(&name.as_str()) {
                    let name = if name == "dispatch" {
                        name
                    } else {
                        format!("dispatch_{name}")
                    };
                    out.push((name, value));
                }
            }
        }
        None => out.push((
            "dispatch".to_string(),
            shared.config.workers.dispatch.name().to_string(),
        )),
    }
    out
}

/// `stats sizeaware` entries repeated in the general `stats` (prefixed
/// `dispatch_`) and so in the Prometheus text.
const GENERAL_DISPATCH_STATS: &[&str] = &[
    "dispatch",
    "small_workers",
    "large_workers",
    "threshold_bytes",
    "handoffs",
    "steals",
    "small_requests",
    "large_requests",
    "small_p99_us",
    "large_p99_us",
];

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
        None => general_stats(ctx.shared, ctx.now.0),
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
    /// The server's `/metrics` families besides the worker counters
    /// ([`crate::stats::WORKER_COUNTER_METRICS`]), in page order.
    pub list SERVER_METRICS;
    /// Constant 1, labelled with the server version and dispatch policy.
    pub gauge SERVER_INFO = "server_info";
    /// Seconds since the server started.
    pub gauge SERVER_UPTIME = "server_uptime_seconds";
    /// User CPU time of the process, seconds.
    pub counter PROCESS_CPU_USER = "process_cpu_user_seconds";
    /// System CPU time of the process, seconds.
    pub counter PROCESS_CPU_SYSTEM = "process_cpu_system_seconds";
    /// Simultaneous client connections allowed (-c).
    pub gauge SERVER_MAX_CONNECTIONS = "server_max_connections";
    /// Open client connections.
    pub gauge SERVER_CURR_CONNECTIONS = "server_curr_connections";
    /// Client connections accepted.
    pub counter SERVER_CONNECTIONS = "server_connections";
    /// Client connections refused past max_connections.
    pub counter SERVER_REJECTED_CONNECTIONS = "server_rejected_connections";
    /// Client connections closed by the idle timeout.
    pub counter SERVER_IDLE_KICKS = "server_idle_kicks";
    /// Times accepting failed (no descriptor left) and the acceptor backed off.
    pub counter SERVER_LISTEN_DISABLED = "server_listen_disabled";
    /// Worker threads (-t).
    pub gauge SERVER_THREADS = "server_threads";
    /// mg requests executed, by priority class (p0 the highest).
    pub counter SERVER_PRIORITY_REQUESTS = "server_priority_requests";
    /// Memory limit for items (-m).
    pub gauge STORE_LIMIT = "store_limit_bytes";
    /// Largest item accepted (-I).
    pub gauge STORE_ITEM_SIZE_MAX = "store_item_size_max_bytes";
    /// Bytes held by items.
    pub gauge STORE_BYTES = "store_bytes";
    /// Items held, including expired ones not yet reclaimed.
    pub gauge STORE_CURR_ITEMS = "store_curr_items";
    /// Items ever stored.
    pub counter STORE_ITEMS = "store_items";
    /// Live items removed to make room.
    pub counter STORE_EVICTIONS = "store_evictions";
    /// Evicted items that were never read.
    pub counter STORE_EVICTED_UNFETCHED = "store_evicted_unfetched";
    /// Expired or flushed items removed that were never read.
    pub counter STORE_EXPIRED_UNFETCHED = "store_expired_unfetched";
    /// Expired or flushed items whose memory was reused.
    pub counter STORE_RECLAIMED = "store_reclaimed";
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
    /// Size-aware controller epochs run.
    pub counter DISPATCH_EPOCHS = "dispatch_epochs";
    /// Server-side latency from the kernel's receipt of a request to its reply queued, by size class.
    pub summary DISPATCH_REQUEST_LATENCY = "dispatch_request_latency_us" in Microseconds;
}

/// An HDR histogram in microseconds, read at the summaries' quantiles (the sum is the
/// histogram's estimate: its mean times its count).
fn distribution(histogram: &hdrhistogram::Histogram<u64>) -> Distribution {
    Distribution {
        count: histogram.len(),
        quantiles: QUANTILES
            .iter()
            .map(|(quantile, _)| histogram.value_at_quantile(*quantile))
            .collect(),
        max: histogram.max(),
        sum: histogram.mean() * histogram.len() as f64,
    }
}

/// Prometheus text exposition (format 0.0.4) of the server: the memcached counters as
/// `tailtrim_server_<name>_total`, connections, store and dispatch gauges, and the
/// per-class latency as summaries in seconds, all declared metrics ([`SERVER_METRICS`],
/// [`crate::stats::WORKER_COUNTER_METRICS`]). `stats` keeps memcached's names; this page
/// follows Prometheus' rules (see `docs/server.md`, section Metrics).
pub fn prometheus(shared: &Shared, now: u64) -> Result<String, ExpositionError> {
    let mut samples = Samples::new();
    samples.count(
        &SERVER_INFO,
        vec![
            ("version", shared.version.clone()),
            (
                "dispatch",
                shared.config.workers.dispatch.name().to_string(),
            ),
        ],
        1,
    );
    samples.count(&SERVER_UPTIME, vec![], now.saturating_sub(shared.started));
    let (user, system) = rusage_seconds();
    samples.real(&PROCESS_CPU_USER, vec![], user);
    samples.real(&PROCESS_CPU_SYSTEM, vec![], system);
    let load = |counter: &std::sync::atomic::AtomicU64| counter.load(Ordering::Relaxed);
    for (metric, value) in [
        (
            &SERVER_MAX_CONNECTIONS,
            shared.config.server.max_connections as u64,
        ),
        (&SERVER_CURR_CONNECTIONS, load(&shared.curr_connections)),
        (&SERVER_CONNECTIONS, load(&shared.total_connections)),
        (
            &SERVER_REJECTED_CONNECTIONS,
            load(&shared.rejected_connections),
        ),
        (&SERVER_IDLE_KICKS, load(&shared.idle_kicks)),
        (&SERVER_LISTEN_DISABLED, load(&shared.listen_disabled_num)),
        (&SERVER_THREADS, shared.config.workers.threads as u64),
    ] {
        samples.count(metric, vec![], value);
    }
    for (metric, value) in shared.counter_snapshot().declared() {
        match metric
            .name
            .strip_prefix("priority_class")
            .and_then(|rest| rest.strip_suffix("_requests"))
        {
            Some(class) => samples.count(
                &SERVER_PRIORITY_REQUESTS,
                vec![("class", class.to_string())],
                value,
            ),
            None => samples.count(metric, vec![], value),
        }
    }
    let store = shared.store.stats();
    for (metric, value) in [
        (&STORE_LIMIT, store.limit_maxbytes),
        (&STORE_ITEM_SIZE_MAX, store.item_size_max),
        (&STORE_BYTES, store.bytes),
        (&STORE_CURR_ITEMS, store.curr_items),
        (&STORE_ITEMS, store.total_items),
        (&STORE_EVICTIONS, store.evictions),
        (&STORE_EVICTED_UNFETCHED, store.evicted_unfetched),
        (&STORE_EXPIRED_UNFETCHED, store.expired_unfetched),
        (&STORE_RECLAIMED, store.reclaimed),
    ] {
        samples.count(metric, vec![], value);
    }
    if let Some(runtime) = shared.dispatch_view() {
        dispatch_samples(&mut samples, runtime.as_ref());
    }
    let mut page = Exposition::new("tailtrim");
    samples.expose(&mut page);
    page.finish()
}

/// The dispatch policy's gauges and counters and the per-class latency summaries.
fn dispatch_samples(samples: &mut Samples, runtime: &dyn crate::shared::DispatchView) {
    for (name, value) in runtime.stats() {
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let metric = match name.as_str() {
            "small_workers" => &DISPATCH_SMALL_WORKERS,
            "large_workers" => &DISPATCH_LARGE_WORKERS,
            "threshold_bytes" => &DISPATCH_THRESHOLD,
            "handoffs" => &DISPATCH_HANDOFFS,
            "steals" => &DISPATCH_STEALS,
            "epochs" => &DISPATCH_EPOCHS,
            _ => continue,
        };
        samples.real(metric, vec![], value);
    }
    for (name, histogram) in runtime.histograms() {
        let class = match name.as_str() {
            "small_latency_us" => "small",
            "large_latency_us" => "large",
            _ => continue,
        };
        samples.distribution(
            &DISPATCH_REQUEST_LATENCY,
            vec![("class", class.to_string())],
            distribution(&histogram),
        );
    }
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
}
