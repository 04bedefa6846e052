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

use crate::stats::{add, bump, bump_class, WorkerCounters};

pub use crate::context::ExecContext;

/// What the connection should do after a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Keep reading requests.
    Continue,
    /// Close the connection once the reply is written (`quit`).
    Close,
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
            let deleted = delete_text(&key, ctx);
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
            let touched = ctx.shared.store.get_and_touch(&key, expiry, ctx.now);
            count_lookup(&key, touched.as_ref(), true, ctx);
            let found = touched.is_some();
            if !noreply {
                reply::line(out, if found { b"TOUCHED" } else { b"NOT_FOUND" });
            }
        }
        Request::FlushAll { noreply, .. } if ctx.shared.config.server.disable_flush_all => {
            bump(&ctx.counters.cmd_flush);
            if !noreply {
                reply::line(out, b"CLIENT_ERROR flush_all not allowed");
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
        Request::RefreshCerts => match ctx.shared.refresh_certs() {
            Ok(()) => reply::line(out, b"OK"),
            Err(error) => reply::line(out, error.as_bytes()),
        },
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
        Request::Watch { .. } if ctx.shared.config.server.disable_watch => {
            reply::line(out, b"CLIENT_ERROR watch commands not allowed")
        }
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
        // A plain get of a small value nobody watches: composed in place under the
        // shard's lock, one copy (a large value is shared with the reply instead).
        if expiry.is_none() && !ctx.shared.watchers.fetchers() {
            let composed = store.get_with(key, ctx.now, |item| {
                if item.value.len() >= reply::ZERO_COPY_THRESHOLD {
                    return None;
                }
                let cas = with_cas.then_some(shown_cas(item.cas, ctx));
                reply::value_copied(out, key, item.flags, item.value, cas);
                Some(tailtrim_store::item_size(
                    key.len(),
                    item.value.len(),
                    item.flags,
                ))
            });
            match composed {
                Some(Some(size)) => {
                    count_get_hit(size, ctx);
                    continue;
                }
                None => {
                    count_lookup(key, None, false, ctx);
                    continue;
                }
                Some(None) => {}
            }
        }
        // memcached counts a gat/gats key as a touch only, a get/gets key as a get.
        let found = match expiry {
            Some(expiry) => store.get_and_touch(key, expiry, ctx.now),
            None => store.get(key, ctx.now),
        };
        if ctx.shared.watchers.fetchers() {
            watch_get(
                key,
                found.as_ref().map(|item| (item.flags, &item.value)),
                ctx,
            );
        }
        count_lookup(key, found.as_ref(), expiry.is_some(), ctx);
        if let Some(item) = found {
            reply::value(
                out,
                key,
                item.flags,
                &item.value,
                with_cas.then_some(shown_cas(item.cas, ctx)),
            );
        }
    }
    reply::line(out, b"END");
}

/// `delete`: true if it removed an item, counted in `delete_hits` (and the item's class) or
/// `delete_misses`.
fn delete_text(key: &[u8], ctx: &ExecContext<'_>) -> bool {
    let store = &ctx.shared.store;
    match store.meta_delete_sized(key, &DeleteRequest::default(), ctx.now) {
        Ok((DeleteOutcome::Deleted, size)) => {
            bump(&ctx.counters.delete_hits);
            bump_class(&ctx.counters.slabs.delete_hits, size);
            true
        }
        _ => {
            bump(&ctx.counters.delete_misses);
            false
        }
    }
}

/// Counts one key looked up, as memcached does: with a new expiry (`gat`, `mg … T`) in
/// `cmd_touch` and `touch_hits`/`touch_misses`, else in `cmd_get` and
/// `get_hits`/`get_misses`; a hit also in its size class.
fn count_lookup(
    key: &[u8],
    found: Option<&tailtrim_store::ItemView>,
    touch: bool,
    ctx: &ExecContext<'_>,
) {
    let c = ctx.counters;
    match (found, touch) {
        (Some(item), true) => {
            bump(&c.cmd_touch);
            bump(&c.touch_hits);
            bump_class(&c.slabs.touch_hits, view_size(key, item));
        }
        (Some(item), false) => count_get_hit(view_size(key, item), ctx),
        (None, true) => {
            bump(&c.cmd_touch);
            bump(&c.touch_misses);
        }
        (None, false) => {
            bump(&c.cmd_get);
            bump(&c.get_misses);
        }
    }
}

/// Counts a get that hit an item of accounted `size`: `cmd_get`, `get_hits` and its class.
fn count_get_hit(size: u64, ctx: &ExecContext<'_>) {
    let c = ctx.counters;
    bump(&c.cmd_get);
    bump(&c.get_hits);
    bump_class(&c.slabs.get_hits, size);
}

/// Accounted size of the item `view` read under `key` (its size class counts the hit).
fn view_size(key: &[u8], view: &tailtrim_store::ItemView) -> u64 {
    tailtrim_store::item_size(key.len(), view.value.len(), view.flags)
}

/// Counts a storage command: `cmd_set` (and its class) unless no item could be made for it,
/// as memcached counts only stores that allocated an item; `store_too_large` and
/// `store_no_memory` for those that could not.
fn count_store(
    key: &[u8],
    value_len: usize,
    flags: u32,
    result: &Result<StoreOutcome, StoreError>,
    ctx: &ExecContext<'_>,
) {
    match result {
        Err(StoreError::TooLarge { .. }) => bump(&ctx.counters.store_too_large),
        Err(StoreError::OutOfMemory { .. }) => bump(&ctx.counters.store_no_memory),
        _ => {
            bump(&ctx.counters.cmd_set);
            let size = tailtrim_store::item_size(key.len(), value_len, flags);
            bump_class(&ctx.counters.slabs.cmd_set, size);
        }
    }
}

/// The CAS value a reply shows: 0 when CAS is disabled (`-C`), as memcached shows it.
fn shown_cas(cas: u64, ctx: &ExecContext<'_>) -> u64 {
    if ctx.shared.config.server.disable_cas {
        0
    } else {
        cas
    }
}

/// The CAS value a compare-and-swap compares. With CAS disabled (`-C`) memcached's items all
/// hold CAS 0: a store compared with any value answers `EXISTS` (`EX`), `ma` and `md` compared
/// with 0 go ahead and with anything else answer `EX`. The store reads 0 as such for each
/// command, and `u64::MAX`, a value no item reaches, as "anything else".
fn compared_cas(supplied: u64, ctx: &ExecContext<'_>) -> u64 {
    match (ctx.shared.config.server.disable_cas, supplied) {
        (false, _) | (true, 0) => supplied,
        (true, _) => u64::MAX,
    }
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
    let value_len = value.len();
    let mut request = StoreRequest::new(
        store_mode(cmd.mode),
        cmd.flags,
        Expiry::from_protocol(i64::from(cmd.exptime), ctx.now),
    );
    if cmd.mode == WireMode::Cas {
        request.compare_cas = Some(compared_cas(cmd.cas_unique, ctx));
    }
    let result = ctx.shared.store.store(&cmd.key, value, &request, ctx.now);
    count_store(&cmd.key, value_len, cmd.flags, &result, ctx);
    if ctx.shared.watchers.mutations() {
        let command = match cmd.mode {
            WireMode::Set => "set",
            WireMode::Add => "add",
            WireMode::Replace => "replace",
            WireMode::Append => "append",
            WireMode::Prepend => "prepend",
            WireMode::Cas => "cas",
        };
        watch_store(&cmd.key, command, &request, value_len, &result, ctx);
    }
    if cmd.mode == WireMode::Cas {
        if let Ok(StoreOutcome { status, .. }) = result {
            let size = tailtrim_store::item_size(cmd.key.len(), value_len, cmd.flags);
            match status {
                StoreStatus::Stored => {
                    bump(&ctx.counters.cas_hits);
                    bump_class(&ctx.counters.slabs.cas_hits, size);
                }
                StoreStatus::Exists => {
                    bump(&ctx.counters.cas_badval);
                    bump_class(&ctx.counters.slabs.cas_badval, size);
                }
                _ => bump(&ctx.counters.cas_misses),
            }
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
    let class_hits = if incr {
        &ctx.counters.slabs.incr_hits
    } else {
        &ctx.counters.slabs.decr_hits
    };
    match &result {
        Ok(ArithOutcome::Updated(item)) => {
            bump(hits);
            bump_class(class_hits, item.size);
        }
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

/// The `k`, `O` and `c` flags of a meta status line about an item, in request order, with
/// `t` too when the item's expiry is given: `(cas, expiry)`.
fn push_item_flags(
    out: &mut ReplyBuf,
    key: &[u8],
    flags: &MetaFlags,
    (cas, expiry): (u64, Option<Expiry>),
    ctx: &ExecContext<'_>,
) {
    for flag in &flags.list {
        match (flag.letter, expiry) {
            (b'k', _) => push_key_flag(out, key, flags.has(b'b')),
            (b'O', _) => push_opaque(out, flags),
            (b'c', _) => {
                out.push(b" c");
                out.push_u64(shown_cas(cas, ctx));
            }
            (b't', Some(expiry)) => push_ttl(out, expiry, ctx.now),
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
    let hit = match ctx.shared.store.meta_get(key, &request, ctx.now) {
        Ok(hit) => hit,
        Err(err) => return store_error_reply(&err, out),
    };
    // memcached 1.6.18: a miss is a get miss even with `T`; a hit (an item `N` created
    // included) with `T` is a touch, without it a get.
    count_lookup(
        key,
        hit.as_ref().map(|hit| &hit.item),
        hit.is_some() && new_expiry.is_some(),
        ctx,
    );
    if ctx.shared.watchers.fetchers() {
        watch_get(
            key,
            hit.as_ref().map(|hit| (hit.item.flags, &hit.item.value)),
            ctx,
        );
    }
    let Some(hit) = hit else {
        if !flags.quiet() {
            out.push(b"EN");
            push_echo_flags(out, key, flags);
            out.push(b"\r\n");
        }
        return;
    };
    let with_value = flags.has(b'v');
    if with_value {
        out.push(b"VA ");
        out.push_u64(hit.item.value.len() as u64);
    } else {
        out.push(b"HD");
    }
    push_hit_flags(out, key, flags, &hit, shown_cas(hit.item.cas, ctx), ctx.now);
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
    cas: u64,
    now: UnixSecs,
) {
    for flag in &flags.list {
        match flag.letter {
            b'c' => {
                out.push(b" c");
                out.push_u64(cas);
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
    request.compare_cas = compare_cas.map(|cas| compared_cas(cas, ctx));
    request.new_cas = new_cas;
    request.invalidate = flags.has(b'I');
    request.binary_key = flags.has(b'b');
    let value_len = value.len();
    let result = ctx.shared.store.store(key, value, &request, ctx.now);
    count_store(key, value_len, request.flags, &result, ctx);
    if ctx.shared.watchers.mutations() {
        let command = match mode {
            StoreMode::Set => "set",
            StoreMode::Add => "add",
            StoreMode::Replace => "replace",
            StoreMode::Append => "append",
            StoreMode::Prepend => "prepend",
        };
        watch_store(key, command, &request, value_len, &result, ctx);
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
            push_item_flags(out, key, flags, (outcome.cas, None), ctx);
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
        // The store compares 0 too; with CAS disabled every item's CAS is 0 to memcached.
        compare_cas: match compare_cas {
            Some(0) if ctx.shared.config.server.disable_cas => None,
            other => other.map(|cas| compared_cas(cas, ctx)),
        },
        invalidate: flags.has(b'I'),
        new_expiry,
        new_cas,
    };
    let (outcome, size) = match ctx.shared.store.meta_delete_sized(key, &request, ctx.now) {
        Ok(found) => found,
        Err(err) => return store_error_reply(&err, out),
    };
    let code: &[u8] = match outcome {
        DeleteOutcome::Deleted | DeleteOutcome::Invalidated => {
            bump(&ctx.counters.delete_hits);
            bump_class(&ctx.counters.slabs.delete_hits, size);
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
        compare_cas: compare_cas.map(|cas| compared_cas(cas, ctx)),
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
    let (hits, misses, class_hits) = match direction {
        ArithDirection::Incr => (
            &ctx.counters.incr_hits,
            &ctx.counters.incr_misses,
            &ctx.counters.slabs.incr_hits,
        ),
        ArithDirection::Decr => (
            &ctx.counters.decr_hits,
            &ctx.counters.decr_misses,
            &ctx.counters.slabs.decr_hits,
        ),
    };
    let item = match result {
        ArithOutcome::Updated(item) => {
            bump(hits);
            bump_class(class_hits, item.size);
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
    push_item_flags(out, key, flags, (item.cas, Some(item.expiry)), ctx);
    out.push(b"\r\n");
    if with_value {
        out.push(number.as_bytes());
        out.push(b"\r\n");
    }
}

/// `watch fetchers`: a fetch of `key`, with the flags and value found.
fn watch_get(key: &[u8], found: Option<(u32, &Bytes)>, ctx: &ExecContext<'_>) {
    let hit = found.map(|(flags, value)| {
        let class =
            tailtrim_store::size_class(tailtrim_store::item_size(key.len(), value.len(), flags))
                as u32;
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
        class: tailtrim_store::size_class(tailtrim_store::item_size(key.len(), size, request.flags))
            as u32,
        client_fd: ctx.client_fd,
        size,
    });
}

fn meta_debug(key: &[u8], ctx: &ExecContext<'_>, out: &mut ReplyBuf) {
    bump(&ctx.counters.cmd_meta);
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
            shown_cas(hit.item.cas, ctx),
            if hit.hit_before { "yes" } else { "no" },
            tailtrim_store::size_class(size),
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
            let class = tailtrim_store::size_class(item.size);
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
                shown_cas(item.cas, ctx),
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
    if let ProtoError::TooLarge { unlink_key, .. } = error {
        bump(&ctx.counters.store_too_large);
        if let Some(key) = unlink_key {
            ctx.shared.store.delete(key, ctx.now);
        }
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
