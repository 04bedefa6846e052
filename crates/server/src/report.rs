//! `stats` replies (memcached's format) and Prometheus text metrics.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use tailtrim_proto::reply::{self, ReplyBuf};

use crate::exec::ExecContext;
use crate::shared::Shared;

/// Process CPU time (user, system) in seconds.
fn rusage() -> (f64, f64) {
    // SAFETY: getrusage only writes into the struct we pass.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer is always defined.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    if rc != 0 {
        return (0.0, 0.0);
    }
    let secs = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    (secs(usage.ru_utime), secs(usage.ru_stime))
}

/// General statistics as (name, value) pairs, in memcached's order where
/// the names exist there.
pub fn general_stats(shared: &Shared, now: u64) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut push = |name: &str, value: String| out.push((name.to_string(), value));
    let (user, system) = rusage();
    push("pid", std::process::id().to_string());
    push("uptime", now.saturating_sub(shared.started).to_string());
    push("time", now.to_string());
    push("version", shared.version.clone());
    push(
        "pointer_size",
        (8 * std::mem::size_of::<usize>()).to_string(),
    );
    push("rusage_user", format!("{user:.6}"));
    push("rusage_system", format!("{system:.6}"));
    push(
        "max_connections",
        shared.config.server.max_connections.to_string(),
    );
    push(
        "curr_connections",
        shared.curr_connections.load(Ordering::Relaxed).to_string(),
    );
    push(
        "total_connections",
        shared.total_connections.load(Ordering::Relaxed).to_string(),
    );
    push(
        "rejected_connections",
        shared
            .rejected_connections
            .load(Ordering::Relaxed)
            .to_string(),
    );
    push(
        "idle_kicks",
        shared.idle_kicks.load(Ordering::Relaxed).to_string(),
    );
    push(
        "listen_disabled_num",
        shared
            .listen_disabled_num
            .load(Ordering::Relaxed)
            .to_string(),
    );
    let counters = shared.counter_snapshot();
    for (name, value) in counters.pairs() {
        push(name, value.to_string());
    }
    let store = shared.store.stats();
    push("limit_maxbytes", store.limit_maxbytes.to_string());
    push("threads", shared.config.workers.threads.to_string());
    push("bytes", store.bytes.to_string());
    push("curr_items", store.curr_items.to_string());
    push("total_items", store.total_items.to_string());
    push("expired_unfetched", store.expired_unfetched.to_string());
    push("evicted_unfetched", store.evicted_unfetched.to_string());
    push("evictions", store.evictions.to_string());
    push("reclaimed", store.reclaimed.to_string());
    push("item_size_max", store.item_size_max.to_string());
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

/// `stats settings` pairs.
fn settings_stats(shared: &Shared) -> Vec<(String, String)> {
    let c = &shared.config;
    vec![
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
        ("evictions".into(), "on".into()),
        ("num_threads".into(), c.workers.threads.to_string()),
        ("cas_enabled".into(), "yes".into()),
        ("item_size_max".into(), c.storage.item_size_max.to_string()),
        (
            "idle_timeout".into(),
            c.server.idle_timeout_secs.to_string(),
        ),
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
    ]
}

/// Hot keys listed by `stats hotkeys` without a count.
pub const DEFAULT_HOTKEYS_SHOWN: usize = 20;

/// Executes a `stats` command.
pub fn stats_command(args: &[Bytes], ctx: &ExecContext<'_>, out: &mut ReplyBuf) {
    let pairs = match args.first().map(|a| a.as_ref()) {
        None => general_stats(ctx.shared, ctx.now.0),
        Some(b"settings") => settings_stats(ctx.shared),
        Some(b"items") => {
            let store = ctx.shared.store.stats();
            vec![
                ("items:1:number".into(), store.curr_items.to_string()),
                ("items:1:evicted".into(), store.evictions.to_string()),
                ("items:1:reclaimed".into(), store.reclaimed.to_string()),
            ]
        }
        Some(b"slabs") => {
            let store = ctx.shared.store.stats();
            vec![
                ("active_slabs".into(), "1".into()),
                ("total_malloced".into(), store.bytes.to_string()),
            ]
        }
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

/// Prometheus text exposition of the general statistics.
pub fn prometheus(shared: &Shared, now: u64) -> String {
    let mut text = String::new();
    for (name, value) in general_stats(shared, now) {
        if value.parse::<f64>().is_err() {
            continue;
        }
        text.push_str(&format!("tailtrim_{name} {value}\n"));
    }
    text
}
