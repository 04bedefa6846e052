//! Executes one parsed request against the store and composes memcached's
//! reply. This is the only place where protocol meets storage: the protocol
//! crate never calls the store, and the store knows nothing of replies.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use tailtrim_proto::meta::{encode_base64, MetaFlags};
use tailtrim_proto::reply::{self, ReplyBuf};
use tailtrim_proto::request::StoreCommand;
use tailtrim_proto::{ProtoError, Request, StoreMode as WireMode};
use tailtrim_store::{
    flush_deadline, ArithDirection, ArithOutcome, ArithRequest, ArithVivify, DeleteOutcome,
    DeleteRequest, Expiry, MetaGetHit, MetaGetRequest, StoreError, StoreMode, StoreOutcome,
    StoreRequest, StoreStatus, UnixSecs,
};

use crate::shared::Shared;
use crate::stats::{add, bump, WorkerCounters};

/// What the connection should do after a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Keep reading requests.
    Continue,
    /// Close the connection once the reply is written (`quit`).
    Close,
}

/// Everything a request needs besides itself.
pub struct ExecContext<'a> {
    /// Server-wide state (store, settings, connection counts).
    pub shared: &'a Shared,
    /// The executing worker's counters.
    pub counters: &'a WorkerCounters,
    /// The client's socket descriptor (`watch` lines name it `cfd`).
    pub client_fd: i32,
    /// The current second.
    pub now: UnixSecs,
}

const NON_NUMERIC: &[u8] = b"CLIENT_ERROR cannot increment or decrement non-numeric value";

/// Executes `request`; `frame` is the buffer the request was parsed from
/// (storage commands slice their value out of it without copying).
pub fn execute(request: Request, frame: &Bytes, ctx: &ExecContext<'_>, out: &mut ReplyBuf) -> Flow {
    match request {
        Request::Get { keys, with_cas } => get(&keys, with_cas, None, ctx, out),
        Request::GetAndTouch {
            exptime,
            keys,
            with_cas,
        } => get(&keys, with_cas, Some(exptime), ctx, out),
        Request::Store(cmd) => {
            let value = crate::buffers::stored_value(frame, cmd.data.clone());
            store_text(&cmd, value, ctx, out);
        }
        Request::Delete { key, noreply } => {
            let deleted = ctx.shared.store.delete(&key, ctx.now);
            bump(if deleted {
                &ctx.counters.delete_hits
            } else {
                &ctx.counters.delete_misses
            });
            if !noreply {
                reply::line(out, if deleted { b"DELETED" } else { b"NOT_FOUND" });
            }
        }
        Request::Arithmetic {
            key,
            delta,
            incr,
            noreply,
        } => arithmetic_text(&key, delta, incr, noreply, ctx, out),
        Request::Touch {
            key,
            exptime,
            noreply,
        } => {
            let expiry = Expiry::from_protocol(i64::from(exptime), ctx.now);
            let found = ctx.shared.store.touch(&key, expiry, ctx.now);
            bump(&ctx.counters.cmd_touch);
            bump(if found {
                &ctx.counters.touch_hits
            } else {
                &ctx.counters.touch_misses
            });
            if !noreply {
                reply::line(out, if found { b"TOUCHED" } else { b"NOT_FOUND" });
            }
        }
        Request::FlushAll { delay, noreply } => {
            bump(&ctx.counters.cmd_flush);
            let at = flush_deadline(i64::from(delay.unwrap_or(0)), ctx.now);
            ctx.shared.store.flush_all(at, ctx.now);
            if !noreply {
                reply::line(out, b"OK");
            }
        }
        Request::Version => {
            out.push(b"VERSION ");
            reply::line(out, ctx.shared.version.as_bytes());
        }
        Request::Verbosity { noreply } => {
            if !noreply {
                reply::line(out, b"OK");
            }
        }
        Request::Admin { reply, noreply } => {
            if !noreply {
                reply::line(out, reply);
            }
        }
        Request::Quit => return Flow::Close,
        Request::Stats { args } => crate::report::stats_command(&args, ctx, out),
        Request::MetaNoop => reply::line(out, b"MN"),
        Request::MetaGet { key, flags } => meta_get(&key, &flags, ctx, out),
        Request::MetaSet { key, flags, data } => meta_set(
            &key,
            &flags,
            crate::buffers::stored_value(frame, data),
            ctx,
            out,
        ),
        Request::MetaDelete { key, flags } => meta_delete(&key, &flags, ctx, out),
        Request::MetaArithmetic { key, flags } => meta_arithmetic(&key, &flags, ctx, out),
        Request::MetaDebug { key } => meta_debug(&key, ctx, out),
        Request::Metadump { classes } => metadump(classes.as_deref(), ctx, out),
        // The runtime turns the connection into a watcher once this reply is written.
        Request::Watch { .. } => reply::line(out, b"OK"),
    }
    Flow::Continue
}

fn get(
    keys: &[Bytes],
    with_cas: bool,
    touch: Option<i32>,
    ctx: &ExecContext<'_>,
    out: &mut ReplyBuf,
) {
    let store = &ctx.shared.store;
    let expiry = touch.map(|t| Expiry::from_protocol(i64::from(t), ctx.now));
    for key in keys {
        if let Some(hotkeys) = &ctx.shared.hotkeys {
            hotkeys.offer(key);
        }
        let found = match expiry {
            Some(expiry) => {
                bump(&ctx.counters.cmd_touch);
                store.get_and_touch(key, expiry, ctx.now)
            }
            None => store.get(key, ctx.now),
        };
        if ctx.shared.watchers.fetchers() {
            watch_get(
                key,
                found.as_ref().map(|item| (item.flags, &item.value)),
                ctx,
            );
        }
        bump(&ctx.counters.cmd_get);
        match found {
            Some(item) => {
                bump(&ctx.counters.get_hits);
                if expiry.is_some() {
                    bump(&ctx.counters.touch_hits);
                }
                reply::value(
                    out,
                    key,
                    item.flags,
                    &item.value,
                    with_cas.then_some(item.cas),
                );
            }
            None => {
                bump(&ctx.counters.get_misses);
                if expiry.is_some() {
                    bump(&ctx.counters.touch_misses);
                }
            }
        }
    }
    reply::line(out, b"END");
}

fn store_mode(mode: WireMode) -> StoreMode {
    match mode {
        WireMode::Set | WireMode::Cas => StoreMode::Set,
        WireMode::Add => StoreMode::Add,
        WireMode::Replace => StoreMode::Replace,
        WireMode::Append => StoreMode::Append,
        WireMode::Prepend => StoreMode::Prepend,
    }
}

fn store_error_reply(err: &StoreError, out: &mut ReplyBuf) {
    match err {
        StoreError::TooLarge { .. } => reply::line(out, b"SERVER_ERROR object too large for cache"),
        StoreError::OutOfMemory { .. } => {
            reply::line(out, b"SERVER_ERROR out of memory storing object")
        }
        StoreError::EmptyKey | StoreError::KeyTooLong { .. } => {
            reply::line(out, b"CLIENT_ERROR bad command line format")
        }
        StoreError::InvalidConfig(_) => reply::line(out, b"SERVER_ERROR internal error"),
    }
}

fn store_text(cmd: &StoreCommand, value: Bytes, ctx: &ExecContext<'_>, out: &mut ReplyBuf) {
    bump(&ctx.counters.cmd_set);
    let mut request = StoreRequest::new(
        store_mode(cmd.mode),
        cmd.flags,
        Expiry::from_protocol(i64::from(cmd.exptime), ctx.now),
    );
    if cmd.mode == WireMode::Cas {
        request.compare_cas = Some(cmd.cas_unique);
    }
    let size = value.len();
    let result = ctx.shared.store.store(&cmd.key, value, &request, ctx.now);
    if ctx.shared.watchers.mutations() {
        let command = match cmd.mode {
            WireMode::Set => "set",
            WireMode::Add => "add",
            WireMode::Replace => "replace",
            WireMode::Append => "append",
            WireMode::Prepend => "prepend",
            WireMode::Cas => "cas",
        };
        watch_store(&cmd.key, command, &request, size, &result, ctx);
    }
    if cmd.mode == WireMode::Cas {
        if let Ok(StoreOutcome { status, .. }) = result {
            bump(match status {
                StoreStatus::Stored => &ctx.counters.cas_hits,
                StoreStatus::Exists => &ctx.counters.cas_badval,
                _ => &ctx.counters.cas_misses,
            });
        }
    }
    if cmd.noreply {
        return;
    }
    match result {
        Ok(outcome) => reply::line(
            out,
            match outcome.status {
                StoreStatus::Stored => b"STORED",
                StoreStatus::NotStored => b"NOT_STORED",
                StoreStatus::Exists => b"EXISTS",
                StoreStatus::NotFound => b"NOT_FOUND",
            },
        ),
        Err(err) => store_error_reply(&err, out),
    }
}

fn arithmetic_text(
    key: &[u8],
    delta: u64,
    incr: bool,
    noreply: bool,
    ctx: &ExecContext<'_>,
    out: &mut ReplyBuf,
) {
    let direction = if incr {
        ArithDirection::Incr
    } else {
        ArithDirection::Decr
    };
    let result = ctx
        .shared
        .store
        .arithmetic(key, &ArithRequest::new(direction, delta), ctx.now);
    let (hits, misses) = if incr {
        (&ctx.counters.incr_hits, &ctx.counters.incr_misses)
    } else {
        (&ctx.counters.decr_hits, &ctx.counters.decr_misses)
    };
    match &result {
        Ok(ArithOutcome::Updated(_)) => bump(hits),
        Ok(ArithOutcome::NotFound) => bump(misses),
        _ => {}
    }
    if noreply {
        return;
    }
    match result {
        Ok(ArithOutcome::Updated(item) | ArithOutcome::Created(item)) => {
            reply::number(out, item.value)
        }
        Ok(ArithOutcome::NotFound | ArithOutcome::Exists) => reply::line(out, b"NOT_FOUND"),
        Ok(ArithOutcome::NonNumeric) => reply::line(out, NON_NUMERIC),
        Err(err) => store_error_reply(&err, out),
    }
}

// ---------------------------------------------------------------- meta

fn flag_ttl(flags: &MetaFlags, letter: u8, now: UnixSecs) -> Result<Option<Expiry>, ()> {
    flags
        .ttl(letter)
        .map(|t| t.map(|t| Expiry::from_protocol(i64::from(t), now)))
        .map_err(|_| ())
}

fn bad_token(out: &mut ReplyBuf) {
    reply::line(out, b"CLIENT_ERROR bad token in command line format");
}

/// Appends ` k<key>`, base64 with ` b` when `binary` (the key is binary).
fn push_key_flag(out: &mut ReplyBuf, key: &[u8], binary: bool) {
    out.push(b" k");
    if binary {
        out.push(&encode_base64(key));
        out.push(b" b");
    } else {
        out.push(key);
    }
}

fn push_opaque(out: &mut ReplyBuf, flags: &MetaFlags) {
    if let Some(opaque) = flags.token(b'O') {
        out.push(b" O");
        out.push(opaque);
    }
}

/// The `O` and `k` flags, echoed on every meta status line in request order.
fn push_echo_flags(out: &mut ReplyBuf, key: &[u8], flags: &MetaFlags) {
    for flag in &flags.list {
        match flag.letter {
            b'k' => push_key_flag(out, key, flags.has(b'b')),
            b'O' => push_opaque(out, flags),
            _ => {}
        }
    }
}

fn push_ttl(out: &mut ReplyBuf, expiry: Expiry, now: UnixSecs) {
    out.push(b" t");
    match expiry.ttl_remaining(now) {
        Some(secs) => out.push_u64(secs),
        None => out.push(b"-1"),
    }
}

fn meta_get(key: &[u8], flags: &MetaFlags, ctx: &ExecContext<'_>, out: &mut ReplyBuf) {
    let (Ok(new_expiry), Ok(vivify), Ok(recache_before)) = (
        flag_ttl(flags, b'T', ctx.now),
        flag_ttl(flags, b'N', ctx.now),
        flag_ttl(flags, b'R', ctx.now),
    ) else {
        return bad_token(out);
    };
    let request = MetaGetRequest {
        new_expiry,
        vivify,
        recache_before,
        no_bump: flags.has(b'u'),
    };
    if let Some(hotkeys) = &ctx.shared.hotkeys {
        hotkeys.offer(key);
    }
    if let Some(class) = flags.class() {
        bump(ctx.counters.priority_requests(class));
    }
    bump(&ctx.counters.cmd_get);
    if new_expiry.is_some() {
        bump(&ctx.counters.cmd_touch);
    }
    let hit = match ctx.shared.store.meta_get(key, &request, ctx.now) {
        Ok(hit) => hit,
        Err(err) => return store_error_reply(&err, out),
    };
    if ctx.shared.watchers.fetchers() {
        watch_get(
            key,
            hit.as_ref().map(|hit| (hit.item.flags, &hit.item.value)),
            ctx,
        );
    }
    let Some(hit) = hit else {
        bump(&ctx.counters.get_misses);
        if new_expiry.is_some() {
            bump(&ctx.counters.touch_misses);
        }
        if !flags.quiet() {
            out.push(b"EN");
            push_echo_flags(out, key, flags);
            out.push(b"\r\n");
        }
        return;
    };
    if hit.created {
        bump(&ctx.counters.get_misses);
    } else {
        bump(&ctx.counters.get_hits);
        if new_expiry.is_some() {
            bump(&ctx.counters.touch_hits);
        }
    }
    let with_value = flags.has(b'v');
    if with_value {
        out.push(b"VA ");
        out.push_u64(hit.item.value.len() as u64);
    } else {
        out.push(b"HD");
    }
    push_hit_flags(out, key, flags, &hit, ctx.now);
    out.push(b"\r\n");
    if with_value {
        out.push_value(&hit.item.value);
        out.push(b"\r\n");
    }
}

fn push_hit_flags(
    out: &mut ReplyBuf,
    key: &[u8],
    flags: &MetaFlags,
    hit: &MetaGetHit,
    now: UnixSecs,
) {
    for flag in &flags.list {
        match flag.letter {
            b'c' => {
                out.push(b" c");
                out.push_u64(hit.item.cas);
            }
            b'f' => {
                out.push(b" f");
                out.push_u64(u64::from(hit.item.flags));
            }
            b'h' => out.push(if hit.hit_before { b" h1" } else { b" h0" }),
            b'k' => push_key_flag(out, key, hit.item.binary_key),
            b'l' => {
                out.push(b" l");
                out.push_u64(hit.secs_since_access);
            }
            b'O' => push_opaque(out, flags),
            b's' => {
                out.push(b" s");
                out.push_u64(hit.item.value.len() as u64);
            }
            b't' => push_ttl(out, hit.item.expiry, now),
            _ => {}
        }
    }
    if hit.token_already_sent {
        out.push(b" Z");
    }
    if hit.stale {
        out.push(b" X");
    }
    if hit.won {
        out.push(b" W");
    }
}

fn meta_set(
    key: &[u8],
    flags: &MetaFlags,
    value: Bytes,
    ctx: &ExecContext<'_>,
    out: &mut ReplyBuf,
) {
    bump(&ctx.counters.cmd_set);
    let mode = match flags.mode().map(|m| m.to_ascii_uppercase()) {
        None | Some(b'S') => StoreMode::Set,
        Some(b'E') => StoreMode::Add,
        Some(b'A') => StoreMode::Append,
        Some(b'P') => StoreMode::Prepend,
        Some(b'R') => StoreMode::Replace,
        Some(_) => return reply::line(out, b"CLIENT_ERROR invalid mode for ms M token"),
    };
    let (Ok(client_flags), Ok(ttl), Ok(compare_cas), Ok(new_cas)) = (
        flags.u32(b'F'),
        flag_ttl(flags, b'T', ctx.now),
        flags.u64(b'C'),
        flags.u64(b'E'),
    ) else {
        return bad_token(out);
    };
    let mut request = StoreRequest::new(
        mode,
        client_flags.unwrap_or(0),
        ttl.unwrap_or(Expiry::Never),
    );
    request.compare_cas = compare_cas;
    request.new_cas = new_cas;
    request.invalidate = flags.has(b'I');
    request.binary_key = flags.has(b'b');
    let size = value.len();
    let result = ctx.shared.store.store(key, value, &request, ctx.now);
    if ctx.shared.watchers.mutations() {
        let command = match mode {
            StoreMode::Set => "set",
            StoreMode::Add => "add",
            StoreMode::Replace => "replace",
            StoreMode::Append => "append",
            StoreMode::Prepend => "prepend",
        };
        watch_store(key, command, &request, size, &result, ctx);
    }
    match result {
        Ok(outcome) => {
            let code: &[u8] = match outcome.status {
                StoreStatus::Stored => b"HD",
                StoreStatus::NotStored => b"NS",
                StoreStatus::Exists => b"EX",
                StoreStatus::NotFound => b"NF",
            };
            if flags.quiet() && outcome.status == StoreStatus::Stored {
                return;
            }
            out.push(code);
            for flag in &flags.list {
                match flag.letter {
                    b'k' => push_key_flag(out, key, flags.has(b'b')),
                    b'O' => push_opaque(out, flags),
                    b'c' => {
                        out.push(b" c");
                        out.push_u64(outcome.cas);
                    }
                    _ => {}
                }
            }
            out.push(b"\r\n");
        }
        Err(err) => store_error_reply(&err, out),
    }
}

fn meta_delete(key: &[u8], flags: &MetaFlags, ctx: &ExecContext<'_>, out: &mut ReplyBuf) {
    let (Ok(compare_cas), Ok(new_cas), Ok(new_expiry)) = (
        flags.u64(b'C'),
        flags.u64(b'E'),
        flag_ttl(flags, b'T', ctx.now),
    ) else {
        return bad_token(out);
    };
    let request = DeleteRequest {
        compare_cas,
        invalidate: flags.has(b'I'),
        new_expiry,
        new_cas,
    };
    let outcome = match ctx.shared.store.meta_delete(key, &request, ctx.now) {
        Ok(outcome) => outcome,
        Err(err) => return store_error_reply(&err, out),
    };
    let code: &[u8] = match outcome {
        DeleteOutcome::Deleted | DeleteOutcome::Invalidated => {
            bump(&ctx.counters.delete_hits);
            if flags.quiet() {
                return;
            }
            b"HD"
        }
        DeleteOutcome::NotFound => {
            bump(&ctx.counters.delete_misses);
            b"NF"
        }
        DeleteOutcome::Exists => b"EX",
    };
    out.push(code);
    push_echo_flags(out, key, flags);
    out.push(b"\r\n");
}

fn meta_arithmetic(key: &[u8], flags: &MetaFlags, ctx: &ExecContext<'_>, out: &mut ReplyBuf) {
    let direction = match flags.mode() {
        None | Some(b'I' | b'i' | b'+') => ArithDirection::Incr,
        Some(b'D' | b'd' | b'-') => ArithDirection::Decr,
        Some(_) => return reply::line(out, b"CLIENT_ERROR invalid mode for ma M token"),
    };
    let (Ok(delta), Ok(initial), Ok(vivify_ttl), Ok(new_expiry), Ok(compare_cas), Ok(new_cas)) = (
        flags.u64(b'D'),
        flags.u64(b'J'),
        flag_ttl(flags, b'N', ctx.now),
        flag_ttl(flags, b'T', ctx.now),
        flags.u64(b'C'),
        flags.u64(b'E'),
    ) else {
        return reply::line(out, b"CLIENT_ERROR bad token in command line format");
    };
    let request = ArithRequest {
        direction,
        delta: delta.unwrap_or(1),
        compare_cas,
        vivify: vivify_ttl.map(|expiry| ArithVivify {
            initial: initial.unwrap_or(0),
            expiry,
        }),
        new_expiry,
        new_cas,
    };
    let result = match ctx.shared.store.arithmetic(key, &request, ctx.now) {
        Ok(result) => result,
        Err(err) => return store_error_reply(&err, out),
    };
    let (hits, misses) = match direction {
        ArithDirection::Incr => (&ctx.counters.incr_hits, &ctx.counters.incr_misses),
        ArithDirection::Decr => (&ctx.counters.decr_hits, &ctx.counters.decr_misses),
    };
    let item = match result {
        ArithOutcome::Updated(item) => {
            bump(hits);
            item
        }
        ArithOutcome::Created(item) => {
            bump(misses);
            item
        }
        ArithOutcome::NotFound | ArithOutcome::Exists => {
            if matches!(result, ArithOutcome::NotFound) {
                bump(misses);
            }
            out.push(if matches!(result, ArithOutcome::NotFound) {
                b"NF"
            } else {
                b"EX"
            });
            push_echo_flags(out, key, flags);
            out.push(b"\r\n");
            return;
        }
        ArithOutcome::NonNumeric => return reply::line(out, NON_NUMERIC),
    };
    let with_value = flags.has(b'v');
    if flags.quiet() && !with_value {
        return;
    }
    let number = item.value.to_string();
    if with_value {
        out.push(b"VA ");
        out.push_u64(number.len() as u64);
    } else {
        out.push(b"HD");
    }
    for flag in &flags.list {
        match flag.letter {
            b'k' => push_key_flag(out, key, flags.has(b'b')),
            b'O' => push_opaque(out, flags),
            b'c' => {
                out.push(b" c");
                out.push_u64(item.cas);
            }
            b't' => push_ttl(out, item.expiry, ctx.now),
            _ => {}
        }
    }
    out.push(b"\r\n");
    if with_value {
        out.push(number.as_bytes());
        out.push(b"\r\n");
    }
}

/// `watch fetchers`: a fetch of `key`, with the flags and value found.
fn watch_get(key: &[u8], found: Option<(u32, &Bytes)>, ctx: &ExecContext<'_>) {
    let hit = found.map(|(flags, value)| {
        let class = slab_class(tailtrim_store::item_size(key.len(), value.len(), flags));
        (class, value.len())
    });
    ctx.shared.watchers.item_get(key, hit, ctx.client_fd);
}

/// `watch mutations`: a store of `key` and how it ended.
fn watch_store(
    key: &[u8],
    command: &str,
    request: &StoreRequest,
    size: usize,
    result: &Result<StoreOutcome, StoreError>,
    ctx: &ExecContext<'_>,
) {
    let status = match result {
        Ok(StoreOutcome { status, .. }) => match status {
            StoreStatus::Stored => "stored",
            StoreStatus::NotStored => "not_stored",
            StoreStatus::Exists => "exists",
            StoreStatus::NotFound => "not_found",
        },
        Err(StoreError::TooLarge { .. }) => "too_large",
        Err(_) => "no_memory",
    };
    ctx.shared.watchers.item_store(crate::watch::ItemStore {
        key,
        status,
        command,
        ttl: request.expiry.ttl_remaining(ctx.now).unwrap_or(0),
        class: slab_class(tailtrim_store::item_size(key.len(), size, request.flags)),
        client_fd: ctx.client_fd,
        size,
    });
}

/// memcached's slab class for an item of `size` bytes with the default
/// growth factor 1.25 and 96-byte first chunk (reported by `me` as `cls`).
fn slab_class(size: u64) -> u32 {
    let mut chunk = 96.0f64;
    let mut class = 1;
    while (chunk as u64) < size && class < 63 {
        chunk = ((chunk * 1.25) / 8.0).ceil() * 8.0;
        class += 1;
    }
    class
}

fn meta_debug(key: &[u8], ctx: &ExecContext<'_>, out: &mut ReplyBuf) {
    let request = MetaGetRequest {
        no_bump: true,
        ..MetaGetRequest::default()
    };
    let Ok(Some(hit)) = ctx.shared.store.meta_get(key, &request, ctx.now) else {
        return reply::line(out, b"EN");
    };
    let size = tailtrim_store::item_size(key.len(), hit.item.value.len(), hit.item.flags);
    let exp = match hit.item.expiry.ttl_remaining(ctx.now) {
        Some(secs) => secs.to_string(),
        None => "-1".to_string(),
    };
    out.push(b"ME ");
    out.push(key);
    out.push(
        format!(
            " exp={exp} la={} cas={} fetch={} cls={} size={size}\r\n",
            hit.secs_since_access,
            hit.item.cas,
            if hit.hit_before { "yes" } else { "no" },
            slab_class(size),
        )
        .as_bytes(),
    );
}

/// `lru_crawler metadump`: `key=<url-encoded> exp=<unix second or -1> la=<unix second>
/// cas=<n> fetch=<yes|no> cls=<class> size=<bytes>` per live item (lines end in `\n` alone,
/// as memcached writes them), then `END`. The store is copied out one shard at a time.
fn metadump(classes: Option<&[u8]>, ctx: &ExecContext<'_>, out: &mut ReplyBuf) {
    use std::fmt::Write;
    let store = &ctx.shared.store;
    let mut text = String::new();
    for shard in 0..store.shard_count() {
        text.clear();
        for item in store.item_metas(shard, ctx.now) {
            let class = slab_class(item.size);
            if classes.is_some_and(|wanted| !wanted.contains(&(class as u8))) {
                continue;
            }
            let exp = match item.expiry {
                Expiry::Never => -1,
                Expiry::At(at) => at.0 as i64,
            };
            let _ = writeln!(
                text,
                "key={} exp={exp} la={} cas={} fetch={} cls={class} size={}",
                percent_encoding::percent_encode(&item.key, crate::watch::KEY_ESCAPES),
                item.last_access.0,
                item.cas,
                if item.fetched { "yes" } else { "no" },
                item.size,
            );
        }
        out.push(text.as_bytes());
    }
    reply::line(out, b"END");
}

/// Drops the old value of a storage command rejected as too large, as
/// memcached does (so a reader never sees the value the client replaced).
pub fn unlink_too_large(error: &ProtoError, ctx: &ExecContext<'_>) {
    if let ProtoError::TooLarge {
        unlink_key: Some(key),
        ..
    } = error
    {
        ctx.shared.store.delete(key, ctx.now);
    }
}

/// memcached's reply to invalid input, with its side effect on the store
/// ([`unlink_too_large`]).
pub fn error_reply(error: &ProtoError, ctx: &ExecContext<'_>, out: &mut ReplyBuf) {
    unlink_too_large(error, ctx);
    reply::error(out, error);
}

/// Counts bytes read from a client.
pub fn count_read(counters: &WorkerCounters, n: usize) {
    add(&counters.bytes_read, n as u64);
}

/// Counts bytes written to a client.
pub fn count_written(counters: &WorkerCounters, n: usize) {
    counters
        .bytes_written
        .fetch_add(n as u64, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slab_classes_grow() {
        assert_eq!(slab_class(61), 1);
        assert_eq!(slab_class(96), 1);
        assert_eq!(slab_class(97), 2);
        assert!(slab_class(1_000_000) > slab_class(1000));
    }
}
