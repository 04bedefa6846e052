//! Server-side request parser for the text and meta protocols.
//!
//! [`parse_request`] looks at the bytes buffered for a connection and returns
//! one of: [`Parsed::Incomplete`] (wait for more bytes), [`Parsed::Complete`]
//! (a request and the bytes it used) or [`Parsed::Invalid`] (memcached's error
//! reply and the bytes to drop). Validation follows memcached 1.6's
//! `proto_text.c` order of checks so that error replies match byte for byte.
//! [`parse_request_frame`] makes the same decisions on a `BytesMut`, splitting a
//! complete request's bytes off as its frame and cutting its keys from the frame
//! instead of copying them (one parser: the two differ only in how a key is cut: `KeyCut`).

use std::ops::Range;

use bytes::{Bytes, BytesMut};
use smallvec::SmallVec;

use crate::error::ProtoError;
use crate::meta::{decode_base64, MetaFlags, MetaKind};
use crate::number::{parse_i32, parse_u32, parse_u64};
use crate::{
    split_line, tokens, Limits, Parsed, MAX_GET_LINE, MAX_KEY_LEN, MAX_LINE_WITHOUT_NEWLINE,
};

/// Per-item overhead memcached adds when checking `-I`: a 48-byte header,
/// 8 bytes of CAS, the key's terminating NUL and the value's `\r\n`.
pub const ITEM_SIZE_OVERHEAD: usize = 56 + 1 + 2;

/// Extra bytes memcached stores for non-zero client flags.
pub const ITEM_FLAGS_OVERHEAD: usize = 4;

/// True when an item with this key, value length and flags exceeds
/// `item_size_max`, computed exactly as memcached's `item_size_ok`.
pub fn item_too_large(key_len: usize, value_len: usize, flags: u32, item_size_max: usize) -> bool {
    let flag_bytes = if flags != 0 { ITEM_FLAGS_OVERHEAD } else { 0 };
    ITEM_SIZE_OVERHEAD + key_len + value_len + flag_bytes > item_size_max
}

/// The storage commands of the text protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreMode {
    /// `set`: store unconditionally.
    Set,
    /// `add`: store only if absent.
    Add,
    /// `replace`: store only if present.
    Replace,
    /// `append`: add data after the existing value.
    Append,
    /// `prepend`: add data before the existing value.
    Prepend,
    /// `cas`: store only if the CAS unique still matches.
    Cas,
}

/// A storage command (`set`, `add`, `replace`, `append`, `prepend`, `cas`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreCommand {
    /// Which command.
    pub mode: StoreMode,
    /// The key.
    pub key: Bytes,
    /// Opaque client flags.
    pub flags: u32,
    /// Expiration as sent (0 never, ≤ 30 days relative, else absolute, < 0 expired).
    pub exptime: i32,
    /// CAS unique for `cas` (0 otherwise).
    pub cas_unique: u64,
    /// Where the value lies in the parsed input (without the trailing `\r\n`).
    pub data: Range<usize>,
    /// `noreply` was given.
    pub noreply: bool,
}

/// The keys of a `get`/`gets`/`gat`/`gats` request, in request order: one key (the common
/// case) without a heap allocation of its own; more spill to the heap.
pub type Keys = SmallVec<[Bytes; 1]>;

/// A decoded request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `get`/`gets`.
    Get {
        /// Keys in request order.
        keys: Keys,
        /// `gets`: return CAS uniques.
        with_cas: bool,
    },
    /// `gat`/`gats`: get and touch.
    GetAndTouch {
        /// New expiration.
        exptime: i32,
        /// Keys in request order.
        keys: Keys,
        /// `gats`: return CAS uniques.
        with_cas: bool,
    },
    /// A storage command.
    Store(StoreCommand),
    /// `delete`.
    Delete {
        /// The key.
        key: Bytes,
        /// `noreply` was given.
        noreply: bool,
    },
    /// `incr`/`decr`.
    Arithmetic {
        /// The key.
        key: Bytes,
        /// Amount to add or subtract.
        delta: u64,
        /// `incr` (true) or `decr` (false).
        incr: bool,
        /// `noreply` was given.
        noreply: bool,
    },
    /// `touch`.
    Touch {
        /// The key.
        key: Bytes,
        /// New expiration.
        exptime: i32,
        /// `noreply` was given.
        noreply: bool,
    },
    /// `flush_all [delay]`.
    FlushAll {
        /// Delay in seconds (same rules as exptime), if given.
        delay: Option<i32>,
        /// `noreply` was given.
        noreply: bool,
    },
    /// `version`.
    Version,
    /// `refresh_certs`: reload the TLS certificate files (memcached's reply: `OK`, or the
    /// load error's text; `Error TLS not enabled` without TLS). Arguments are ignored.
    RefreshCerts,
    /// `verbosity N`.
    Verbosity {
        /// `noreply` was given.
        noreply: bool,
    },
    /// `quit`.
    Quit,
    /// `stats [group ...]`.
    Stats {
        /// Arguments after `stats`.
        args: Vec<Bytes>,
    },
    /// `mg`.
    MetaGet {
        /// The key (decoded if the `b` flag was given).
        key: Bytes,
        /// Flags in request order.
        flags: MetaFlags,
    },
    /// `ms`.
    MetaSet {
        /// The key (decoded if `b`).
        key: Bytes,
        /// Flags in request order.
        flags: MetaFlags,
        /// Where the value lies in the parsed input.
        data: Range<usize>,
    },
    /// `md`.
    MetaDelete {
        /// The key (decoded if `b`).
        key: Bytes,
        /// Flags in request order.
        flags: MetaFlags,
    },
    /// `ma`.
    MetaArithmetic {
        /// The key (decoded if `b`).
        key: Bytes,
        /// Flags in request order.
        flags: MetaFlags,
    },
    /// `mn`.
    MetaNoop,
    /// `me`.
    MetaDebug {
        /// The key.
        key: Bytes,
    },
    /// `lru_crawler metadump all|hash|<class>[,<class>…]`: one line per live item.
    Metadump {
        /// The slab classes asked for (1 to 63); `None` for every item (`all`, `hash`).
        classes: Option<Vec<u8>>,
    },
    /// `watch [<type> …]`: the connection turns into a stream of log lines (memcached's
    /// "Watchers"); without a type, fetchers.
    Watch {
        /// The event types asked for.
        types: WatchTypes,
    },
    /// An administrative command memcached knows whose reply is fixed by the line alone in
    /// tailtrim, which has no slab allocator to tune (`slabs automove 1` → `OK`, `slabs
    /// reassign 1 2` → `NOSPARE ...`): accepted as a no-op with memcached's reply.
    Admin {
        /// The reply line, without `\r\n`.
        reply: &'static [u8],
        /// `noreply` was given (memcached then stays silent).
        noreply: bool,
    },
}

/// The requests that name one key besides a storage command (whose key is in its
/// [`StoreCommand`]), the key bound to `$key`: the one list every match on them uses.
macro_rules! one_key {
    ($key:ident) => {
        Request::Delete { key: $key, .. }
            | Request::Arithmetic { key: $key, .. }
            | Request::Touch { key: $key, .. }
            | Request::MetaGet { key: $key, .. }
            | Request::MetaSet { key: $key, .. }
            | Request::MetaDelete { key: $key, .. }
            | Request::MetaArithmetic { key: $key, .. }
            | Request::MetaDebug { key: $key }
    };
}

impl Request {
    /// Keys the request touches, for routing and dispatch decisions.
    pub fn keys(&self) -> Vec<&Bytes> {
        match self {
            Request::Get { keys, .. } | Request::GetAndTouch { keys, .. } => keys.iter().collect(),
            _ => self.single_key().into_iter().collect(),
        }
    }

    /// The key of a request that touches exactly one (`None` for multi-key
    /// and keyless requests); allocation-free, for per-request dispatch.
    pub fn single_key(&self) -> Option<&Bytes> {
        match self {
            Request::Get { keys, .. } | Request::GetAndTouch { keys, .. } if keys.len() == 1 => {
                keys.first()
            }
            Request::Store(cmd) => Some(&cmd.key),
            one_key!(key) => Some(key),
            _ => None,
        }
    }

    /// The priority class the request carries (`mg … p<class>`), if any.
    pub fn priority_class(&self) -> Option<u8> {
        self.priority().map(|priority| priority.class)
    }

    /// The priority class and ageing the request carries (`mg … p<class>[a<overtakes>]`), if
    /// any.
    pub fn priority(&self) -> Option<crate::meta::Priority> {
        match self {
            Request::MetaGet { flags, .. } => flags.priority(),
            _ => None,
        }
    }

    /// Replaces the empty placeholders a deferred parse left for keys by slices of `frame`,
    /// in the order the parser met the keys (`ranges`). Keys that are real already (decoded
    /// base64 keys) are left alone.
    fn fill_deferred_keys(&mut self, frame: &Bytes, ranges: &[Range<usize>]) {
        let mut next = ranges.iter();
        let mut fill = |key: &mut Bytes| {
            if key.is_empty() {
                if let Some(range) = next.next() {
                    *key = frame.slice(range.clone());
                }
            }
        };
        match self {
            Request::Get { keys, .. } | Request::GetAndTouch { keys, .. } => {
                keys.iter_mut().for_each(fill)
            }
            Request::Store(cmd) => fill(&mut cmd.key),
            one_key!(key) => fill(key),
            Request::FlushAll { .. }
            | Request::Version
            | Request::RefreshCerts
            | Request::Verbosity { .. }
            | Request::Quit
            | Request::Stats { .. }
            | Request::MetaNoop
            | Request::Metadump { .. }
            | Request::Watch { .. }
            | Request::Admin { .. } => {}
        }
        debug_assert!(next.next().is_none(), "a deferred key was not filled");
    }

    /// Declared value length of a storage request (bytes on the wire, without `\r\n`).
    pub fn data_len(&self) -> Option<usize> {
        match self {
            Request::Store(cmd) => Some(cmd.data.len()),
            Request::MetaSet { data, .. } => Some(data.len()),
            _ => None,
        }
    }
}

fn is_noreply(token: Option<&&[u8]>) -> bool {
    token.is_some_and(|t| *t == b"noreply")
}

/// When a storage command's line is complete, how many bytes the whole
/// request (line + data + `\r\n`) needs. Lets a server classify a large `set`
/// by its declared length before the value has arrived. `None` for a length the
/// parser rejects (negative or past `INT_MAX - 2`): such a line is answered at once,
/// no value is waited for.
pub fn declared_total(buf: &[u8]) -> Option<usize> {
    let (line, line_len) = split_line(buf)?;
    let mut toks = tokens(line);
    let len_token = match toks.next()? {
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => toks.nth(3),
        b"ms" => toks.nth(1),
        _ => None,
    }?;
    let len = value_length(parse_i32(len_token)?)?;
    Some(line_len + len + 2)
}

/// Parses one request from the front of `buf`. Keys are copies of the input's bytes;
/// [`parse_request_frame`] cuts them from the request's own bytes instead.
pub fn parse_request(buf: &[u8], limits: &Limits) -> Parsed<Request> {
    parse_with(buf, limits, &mut KeyCut::Copy)
}

/// Parses one request from the front of `input` and, when it is complete, splits its bytes
/// off `input` as its *frame*, left in `scratch` ([`FrameScratch::take_frame`]): the
/// request's keys are slices of the frame (no copy, no allocation per key), and a storage
/// command's `data` range indexes it. `Incomplete` and `Invalid` leave `input` as it was (the
/// caller drops `consumed` bytes of an invalid one).
///
/// Same decisions and errors as [`parse_request`]; only where the keys' bytes live differs.
pub fn parse_request_frame(
    input: &mut BytesMut,
    limits: &Limits,
    scratch: &mut FrameScratch,
) -> Parsed<Request> {
    scratch.ranges.clear();
    let mut parsed = parse_with(input, limits, &mut KeyCut::Defer(&mut scratch.ranges));
    if let Parsed::Complete { value, consumed } = &mut parsed {
        let frame = input.split_to(*consumed).freeze();
        value.fill_deferred_keys(&frame, &scratch.ranges);
        scratch.frame = frame;
    }
    parsed
}

/// What a connection keeps between calls of [`parse_request_frame`]: the frame of the last
/// complete request, and room for its keys' places (reused from request to request).
#[derive(Debug, Default)]
pub struct FrameScratch {
    ranges: Vec<Range<usize>>,
    frame: Bytes,
}

impl FrameScratch {
    /// The frame of the request the last complete parse returned (empty once taken).
    pub fn take_frame(&mut self) -> Bytes {
        std::mem::take(&mut self.frame)
    }
}

/// How the parser makes a key out of a token of its input.
enum KeyCut<'r> {
    /// A copy of the token.
    Copy,
    /// An empty placeholder now; the token's range in the input is pushed here, and the
    /// placeholder is replaced by a slice of the frame once the request is split off
    /// ([`Request::fill_deferred_keys`]).
    Defer(&'r mut Vec<Range<usize>>),
}

impl KeyCut<'_> {
    /// The key for `token`, a slice of `input`.
    fn key(&mut self, input: &[u8], token: &[u8]) -> Bytes {
        match self {
            KeyCut::Copy => Bytes::copy_from_slice(token),
            KeyCut::Defer(ranges) => {
                let start = token.as_ptr() as usize - input.as_ptr() as usize;
                ranges.push(start..start + token.len());
                Bytes::new()
            }
        }
    }
}

fn parse_with(buf: &[u8], limits: &Limits, cut: &mut KeyCut<'_>) -> Parsed<Request> {
    let Some((line, line_len)) = split_line(buf) else {
        return incomplete_line(buf);
    };
    if line_len > READ_WINDOW && !is_get_line(buf) {
        // memcached would have seen a full read buffer without a newline.
        return invalid(ProtoError::LineTooLong, buf.len());
    }
    // memcached tokenizes the line as a C string: a NUL ends it.
    let line = &line[..memchr::memchr(0, line).unwrap_or(line.len())];
    let mut toks = LineTokens::new();
    toks.extend(tokens(line));
    let Some(&command) = toks.first() else {
        return invalid(ProtoError::UnknownCommand, line_len);
    };
    let result = match command {
        b"get" | b"gets" => {
            parse_get(buf, line, &toks, command == b"gets", false, cut).map(done(line_len))
        }
        b"gat" | b"gats" => {
            parse_get(buf, line, &toks, command == b"gats", true, cut).map(done(line_len))
        }
        b"set" => return parse_store(StoreMode::Set, &toks, buf, line_len, limits, cut),
        b"add" => return parse_store(StoreMode::Add, &toks, buf, line_len, limits, cut),
        b"replace" => return parse_store(StoreMode::Replace, &toks, buf, line_len, limits, cut),
        b"append" => return parse_store(StoreMode::Append, &toks, buf, line_len, limits, cut),
        b"prepend" => return parse_store(StoreMode::Prepend, &toks, buf, line_len, limits, cut),
        b"cas" => return parse_store(StoreMode::Cas, &toks, buf, line_len, limits, cut),
        b"delete" => parse_delete(buf, &toks, cut).map(done(line_len)),
        b"incr" | b"decr" => {
            parse_arithmetic(buf, &toks, command == b"incr", cut).map(done(line_len))
        }
        b"touch" => parse_touch(buf, &toks, cut).map(done(line_len)),
        b"flush_all" => parse_flush_all(&toks).map(done(line_len)),
        b"version" => Ok(Request::Version).map(done(line_len)),
        b"refresh_certs" => Ok(Request::RefreshCerts).map(done(line_len)),
        b"verbosity" if matches!(toks.len(), 2 | 3) => {
            let noreply = is_noreply(toks.last());
            if parse_u32(toks[1]).is_none() && !(toks.len() == 2 && noreply) {
                Err(ProtoError::BadCommandLine { noreply })
            } else {
                Ok((Request::Verbosity { noreply }, line_len))
            }
        }
        b"shutdown" => Err(ProtoError::ShutdownDisabled),
        b"quit" => Ok(Request::Quit).map(done(line_len)),
        b"stats" => Ok(Request::Stats {
            args: toks[1..]
                .iter()
                .map(|t| Bytes::copy_from_slice(t))
                .collect(),
        })
        .map(done(line_len)),
        b"mn" => Ok(Request::MetaNoop).map(done(line_len)),
        b"mg" => parse_meta_keyed(MetaKind::Get, buf, &toks, cut)
            .map(|(key, flags)| (Request::MetaGet { key, flags }, line_len)),
        b"md" => parse_meta_keyed(MetaKind::Delete, buf, &toks, cut)
            .map(|(key, flags)| (Request::MetaDelete { key, flags }, line_len)),
        b"ma" => parse_meta_keyed(MetaKind::Arithmetic, buf, &toks, cut)
            .map(|(key, flags)| (Request::MetaArithmetic { key, flags }, line_len)),
        b"me" => parse_meta_debug(buf, &toks, cut).map(done(line_len)),
        b"ms" => return parse_meta_set(&toks, buf, line_len, limits, cut),
        // memcached's long-gone "binary get", still accepted as `get`.
        b"bget" => parse_get(buf, line, &toks, false, false, cut).map(done(line_len)),
        b"slabs" => parse_slabs(&toks).map(done(line_len)),
        b"lru_crawler" => parse_lru_crawler(&toks).map(done(line_len)),
        b"watch" => parse_watch(&toks).map(done(line_len)),
        _ if is_http_request_line(&toks) => Err(ProtoError::HttpRequest),
        _ => Err(ProtoError::UnknownCommand),
    };
    match result {
        Ok((value, consumed)) => Parsed::Complete { value, consumed },
        Err(error) => invalid(error, line_len),
    }
}

fn done(line_len: usize) -> impl FnOnce(Request) -> (Request, usize) {
    move |r| (r, line_len)
}

fn invalid(error: ProtoError, consumed: usize) -> Parsed<Request> {
    Parsed::Invalid { error, consumed }
}

/// memcached's read buffer: a line whose newline lies beyond it was seen
/// without a newline, which closes the connection (unless it is a `get`).
pub const READ_WINDOW: usize = 16384;

/// True for a `get`/`gets` line (after at most 100 leading spaces), which
/// memcached lets grow beyond its read buffer.
fn is_get_line(buf: &[u8]) -> bool {
    let start = buf.iter().position(|&b| b != b' ').unwrap_or(buf.len());
    let rest = &buf[start..];
    start <= 100 && (rest.starts_with(b"get ") || rest.starts_with(b"gets "))
}

/// No newline yet: wait, unless the line is already longer than memcached
/// tolerates (then the connection is closed, as memcached does).
fn incomplete_line(buf: &[u8]) -> Parsed<Request> {
    if buf.len() <= MAX_LINE_WITHOUT_NEWLINE {
        return Parsed::Incomplete;
    }
    if is_get_line(buf) && buf.len() <= MAX_GET_LINE {
        Parsed::Incomplete
    } else {
        Parsed::Invalid {
            error: ProtoError::LineTooLong,
            consumed: buf.len(),
        }
    }
}

/// A command line's tokens, on the stack for every line of up to 24 tokens (memcached's own
/// tokenizer has 24 slots); longer multiget lines spill to the heap.
type LineTokens<'a> = SmallVec<[&'a [u8]; 24]>;

/// Multiget keys whose span on the line is at most this long share one copy of it; longer
/// lines copy key by key, so a key kept after its request never holds more than this alive.
const SHARED_KEY_SPAN_MAX: usize = 16 * 1024;

/// The keys of a `get`-style `line` of `input`, in order (`toks` are slices of `line`). Copied,
/// one key is copied alone and several are cut from one copy of the span they occupy on the
/// line (one allocation instead of one per key); deferred, every key is a slice of the frame.
fn parse_keys(
    input: &[u8],
    line: &[u8],
    toks: &[&[u8]],
    cut: &mut KeyCut<'_>,
) -> Result<Keys, ProtoError> {
    if toks.iter().any(|t| t.len() > MAX_KEY_LEN) {
        return Err(ProtoError::BadCommandLine { noreply: false });
    }
    if let [only] = toks {
        return Ok(Keys::from_buf([cut.key(input, only)]));
    }
    if let KeyCut::Defer(_) = cut {
        return Ok(toks.iter().map(|t| cut.key(input, t)).collect());
    }
    let (Some(first), Some(last)) = (toks.first(), toks.last()) else {
        return Ok(Keys::new());
    };
    // Tokens are slices of `line`: their addresses give their offsets in it.
    let offset = |token: &[u8]| token.as_ptr() as usize - line.as_ptr() as usize;
    let start = offset(first);
    let end = offset(last) + last.len();
    if toks.len() == 1 || end - start > SHARED_KEY_SPAN_MAX {
        return Ok(toks.iter().map(|t| Bytes::copy_from_slice(t)).collect());
    }
    let span = Bytes::copy_from_slice(&line[start..end]);
    Ok(toks
        .iter()
        .map(|t| {
            let at = offset(t) - start;
            span.slice(at..at + t.len())
        })
        .collect())
}

/// `get`, `gets` and `bget`, or with `touch` `gat` and `gats` (an exptime before the keys).
fn parse_get(
    input: &[u8],
    line: &[u8],
    toks: &[&[u8]],
    with_cas: bool,
    touch: bool,
    cut: &mut KeyCut<'_>,
) -> Result<Request, ProtoError> {
    if toks.len() < 2 {
        return Err(ProtoError::UnknownCommand);
    }
    if !touch {
        return Ok(Request::Get {
            keys: parse_keys(input, line, &toks[1..], cut)?,
            with_cas,
        });
    }
    let exptime = parse_i32(toks[1]).ok_or(ProtoError::InvalidExptime { noreply: false })?;
    Ok(Request::GetAndTouch {
        exptime,
        keys: parse_keys(input, line, &toks[2..], cut)?,
        with_cas,
    })
}

fn parse_store(
    mode: StoreMode,
    toks: &[&[u8]],
    buf: &[u8],
    line_len: usize,
    limits: &Limits,
    cut: &mut KeyCut<'_>,
) -> Parsed<Request> {
    let base = if mode == StoreMode::Cas { 6 } else { 5 };
    if toks.len() != base && toks.len() != base + 1 {
        return invalid(ProtoError::UnknownCommand, line_len);
    }
    let noreply = is_noreply(toks.last());
    let bad = ProtoError::BadCommandLine { noreply };
    if toks[1].len() > MAX_KEY_LEN {
        return invalid(bad, line_len);
    }
    let (Some(flags), Some(exptime), Some(vlen)) =
        (parse_u32(toks[2]), parse_i32(toks[3]), parse_i32(toks[4]))
    else {
        return invalid(bad, line_len);
    };
    let cas_unique = if mode == StoreMode::Cas {
        match parse_u64(toks[5]) {
            Some(c) => c,
            None => return invalid(bad, line_len),
        }
    } else {
        0
    };
    let Some(vlen) = value_length(vlen) else {
        return invalid(bad, line_len);
    };
    if item_too_large(toks[1].len(), vlen, flags, limits.item_size_max) {
        let unlink_key = (mode == StoreMode::Set).then(|| Bytes::copy_from_slice(toks[1]));
        return invalid(
            ProtoError::TooLarge {
                swallow: vlen + 2,
                noreply,
                unlink_key,
            },
            line_len,
        );
    }
    data_block(buf, line_len, vlen, noreply, |data| {
        Request::Store(StoreCommand {
            mode,
            key: cut.key(buf, toks[1]),
            flags,
            exptime,
            cas_unique,
            data,
            noreply,
        })
    })
}

/// The data block after a storage command's line of `line_len` bytes: incomplete until its
/// `vlen` bytes and `\r\n` are in `buf`, `CLIENT_ERROR bad data chunk` when they do not end
/// in `\r\n`, else the request `build` makes of the data's range in `buf`.
fn data_block(
    buf: &[u8],
    line_len: usize,
    vlen: usize,
    noreply: bool,
    build: impl FnOnce(Range<usize>) -> Request,
) -> Parsed<Request> {
    let total = line_len + vlen + 2;
    if buf.len() < total {
        return Parsed::Incomplete;
    }
    if &buf[line_len + vlen..total] != b"\r\n" {
        return invalid(ProtoError::BadDataChunk { noreply }, total);
    }
    Parsed::Complete {
        value: build(line_len..line_len + vlen),
        consumed: total,
    }
}

/// A declared value length as memcached accepts it: not negative and leaving room for the
/// data block's `\r\n` in a C `int` (past that: `CLIENT_ERROR bad command line format`,
/// not `SERVER_ERROR object too large for cache`).
fn value_length(declared: i32) -> Option<usize> {
    if declared > i32::MAX - 2 {
        return None;
    }
    usize::try_from(declared).ok()
}

/// Tokens memcached's tokenizer yields before it stops splitting (24 slots, one for the rest).
const MAX_TOKENS_SPLIT: usize = 23;

/// True for a line memcached treats as an HTTP request: an unknown command whose last
/// token (of the first 23) starts with `HTTP/`. memcached hangs up without a reply.
/// Commands whose first letter memcached dispatches on (`g`, `s`, `a`, `c`, `i`, `d`, `t`,
/// two-letter `m?`) answer `ERROR` instead, as do one-byte commands.
fn is_http_request_line(toks: &[&[u8]]) -> bool {
    let Some(command) = toks.first() else {
        return false;
    };
    let dispatched_by_letter = matches!(command[0], b'g' | b's' | b'a' | b'c' | b'i' | b'd' | b't')
        || (command[0] == b'm' && command.len() == 2);
    if command.len() < 2 || dispatched_by_letter {
        return false;
    }
    let last = toks[toks.len().min(MAX_TOKENS_SPLIT) - 1];
    last.starts_with(b"HTTP/")
}

/// memcached's class ids run from 0 (the global page pool) to the largest class, 39 with the
/// default growth factor and chunk sizes (the same for `-I 512k` to `-I 2m`).
const SLAB_CLASS_LARGEST: i32 = 39;

/// `slabs automove <0|1|2|ratio N>` and `slabs reassign <src> <dst>`, answered as memcached
/// answers them; tailtrim has no slab pages, so there is never a spare page to move (and
/// `-1`, "any class with a spare page", finds none: `BADCLASS`, as memcached says then).
fn parse_slabs(toks: &[&[u8]]) -> Result<Request, ProtoError> {
    let admin = |reply: &'static [u8], noreply: bool| Ok(Request::Admin { reply, noreply });
    match toks.get(1).copied() {
        Some(b"reassign") if toks.len() == 4 => {
            let (Some(src), Some(dst)) = (parse_i32(toks[2]), parse_i32(toks[3])) else {
                return Err(ProtoError::BadCommandLine { noreply: false });
            };
            let valid = |class: i32| (0..=SLAB_CLASS_LARGEST).contains(&class);
            if src == dst {
                admin(b"SAME src and dst class are identical", false)
            } else if !valid(src) || !valid(dst) {
                admin(b"BADCLASS invalid src or dst class id", false)
            } else {
                admin(b"NOSPARE source class has no spare pages", false)
            }
        }
        Some(b"automove") if toks.len() >= 3 => {
            let noreply = is_noreply(toks.last());
            if toks[2] == b"ratio" {
                let ratio = toks.get(3).and_then(|t| std::str::from_utf8(t).ok());
                if toks.len() < 4 || ratio.and_then(|r| r.parse::<f64>().ok()).is_none() {
                    return admin(b"ERROR", noreply);
                }
                return admin(b"OK", noreply);
            }
            match parse_u32(toks[2]) {
                None => Err(ProtoError::BadCommandLine { noreply }),
                Some(0..=2) => admin(b"OK", noreply),
                Some(_) => admin(b"ERROR", noreply),
            }
        }
        _ => Err(ProtoError::UnknownCommand),
    }
}

/// The event types a `watch` asks for (memcached's `watch` arguments).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WatchTypes {
    /// `fetchers`: every item fetch (`type=item_get`).
    pub fetchers: bool,
    /// `mutations`: every item store (`type=item_store`).
    pub mutations: bool,
    /// A type memcached knows that produces no events here (`evictions`, `connevents`...).
    pub others: bool,
}

/// The `watch` type names memcached 1.6 accepts.
const WATCH_TYPES_OTHER: [&[u8]; 8] = [
    b"rawcmds",
    b"evictions",
    b"sysevents",
    b"connevents",
    b"deletions",
    b"proxyreqs",
    b"proxyevents",
    b"proxyuser",
];

/// `watch [type …]`: every word must be a type memcached knows (else `ERROR`, as memcached
/// answers); no word means fetchers.
fn parse_watch(toks: &[&[u8]]) -> Result<Request, ProtoError> {
    let mut types = WatchTypes::default();
    for word in &toks[1..] {
        match *word {
            b"fetchers" => types.fetchers = true,
            b"mutations" => types.mutations = true,
            other if WATCH_TYPES_OTHER.contains(&other) => types.others = true,
            _ => return Err(ProtoError::UnknownCommand),
        }
    }
    if toks.len() == 1 {
        types.fetchers = true;
    }
    Ok(Request::Watch { types })
}

/// memcached's largest slab class id `lru_crawler metadump` accepts.
const METADUMP_CLASS_MAX: u8 = 63;

/// `lru_crawler metadump <all|hash|classes>`; the crawler's other subcommands are not
/// supported (`ERROR`). Class lists are comma separated; one bad id is `BADCLASS`, as
/// memcached answers.
fn parse_lru_crawler(toks: &[&[u8]]) -> Result<Request, ProtoError> {
    if toks.len() != 3 || toks[1] != b"metadump" {
        return Err(ProtoError::UnknownCommand);
    }
    if matches!(toks[2], b"all" | b"hash") {
        return Ok(Request::Metadump { classes: None });
    }
    let mut classes = Vec::new();
    for id in toks[2].split(|b| *b == b',') {
        match parse_u32(id) {
            Some(class) if (1..=u32::from(METADUMP_CLASS_MAX)).contains(&class) => {
                classes.push(class as u8)
            }
            _ => {
                return Ok(Request::Admin {
                    reply: b"BADCLASS invalid class id",
                    noreply: false,
                })
            }
        }
    }
    Ok(Request::Metadump {
        classes: Some(classes),
    })
}

/// `me <key> [b]`: memcached ignores tokens after the key except a `b` (base64 key) in third
/// place.
fn parse_meta_debug(
    input: &[u8],
    toks: &[&[u8]],
    cut: &mut KeyCut<'_>,
) -> Result<Request, ProtoError> {
    let bad = ProtoError::BadCommandLine { noreply: false };
    let Some(raw) = toks.get(1) else {
        return Err(bad);
    };
    if raw.len() > MAX_KEY_LEN {
        return Err(bad);
    }
    let key = if toks.get(2).copied() == Some(b"b".as_slice()) {
        match decode_base64(raw) {
            Some(decoded) if !decoded.is_empty() => Bytes::from(decoded),
            _ => return Err(bad),
        }
    } else {
        cut.key(input, raw)
    };
    Ok(Request::MetaDebug { key })
}

fn parse_delete(input: &[u8], toks: &[&[u8]], cut: &mut KeyCut<'_>) -> Result<Request, ProtoError> {
    if !(2..=4).contains(&toks.len()) {
        return Err(ProtoError::UnknownCommand);
    }
    // memcached looks for `noreply` only after the key (`delete noreply`
    // deletes the key named "noreply").
    let noreply = toks.len() > 2 && is_noreply(toks.last());
    if toks.len() > 2 {
        let hold_is_zero = toks[2] == b"0";
        let valid = (toks.len() == 3 && (hold_is_zero || noreply))
            || (toks.len() == 4 && hold_is_zero && noreply);
        if !valid {
            return Err(ProtoError::DeleteUsage { noreply });
        }
    }
    if toks[1].len() > MAX_KEY_LEN {
        return Err(ProtoError::BadCommandLine { noreply });
    }
    Ok(Request::Delete {
        key: cut.key(input, toks[1]),
        noreply,
    })
}

/// Checks a `<command> <key> <argument> [noreply]` line (`incr`, `decr`, `touch`): the
/// token count and the key's length. Returns whether it ends in `noreply`.
fn key_and_argument(toks: &[&[u8]]) -> Result<bool, ProtoError> {
    if toks.len() != 3 && toks.len() != 4 {
        return Err(ProtoError::UnknownCommand);
    }
    let noreply = is_noreply(toks.last());
    if toks[1].len() > MAX_KEY_LEN {
        return Err(ProtoError::BadCommandLine { noreply });
    }
    Ok(noreply)
}

fn parse_arithmetic(
    input: &[u8],
    toks: &[&[u8]],
    incr: bool,
    cut: &mut KeyCut<'_>,
) -> Result<Request, ProtoError> {
    let noreply = key_and_argument(toks)?;
    let delta = parse_u64(toks[2]).ok_or(ProtoError::InvalidDelta { noreply })?;
    Ok(Request::Arithmetic {
        key: cut.key(input, toks[1]),
        delta,
        incr,
        noreply,
    })
}

fn parse_touch(input: &[u8], toks: &[&[u8]], cut: &mut KeyCut<'_>) -> Result<Request, ProtoError> {
    let noreply = key_and_argument(toks)?;
    let exptime = parse_i32(toks[2]).ok_or(ProtoError::InvalidExptime { noreply })?;
    Ok(Request::Touch {
        key: cut.key(input, toks[1]),
        exptime,
        noreply,
    })
}

fn parse_flush_all(toks: &[&[u8]]) -> Result<Request, ProtoError> {
    if toks.len() > 3 {
        return Err(ProtoError::UnknownCommand);
    }
    let noreply = is_noreply(toks.last()) && toks.len() > 1;
    let expected_without_delay = if noreply { 2 } else { 1 };
    let delay = if toks.len() != expected_without_delay {
        Some(parse_i32(toks[1]).ok_or(ProtoError::InvalidExptime { noreply })?)
    } else {
        None
    };
    Ok(Request::FlushAll { delay, noreply })
}

fn meta_key(
    input: &[u8],
    raw: &[u8],
    flags: &MetaFlags,
    cut: &mut KeyCut<'_>,
) -> Result<Bytes, ProtoError> {
    if raw.len() > MAX_KEY_LEN {
        return Err(ProtoError::BadCommandLine { noreply: false });
    }
    if flags.has(b'b') {
        let decoded = decode_base64(raw).ok_or(ProtoError::BadBase64Key)?;
        if decoded.len() > MAX_KEY_LEN {
            return Err(ProtoError::BadCommandLine { noreply: false });
        }
        return Ok(Bytes::from(decoded));
    }
    Ok(cut.key(input, raw))
}

fn parse_meta_keyed(
    kind: MetaKind,
    input: &[u8],
    toks: &[&[u8]],
    cut: &mut KeyCut<'_>,
) -> Result<(Bytes, MetaFlags), ProtoError> {
    let Some(raw_key) = toks.get(1) else {
        return Err(ProtoError::UnknownCommand);
    };
    let flags = MetaFlags::parse(kind, toks[2..].iter().copied())?;
    let key = meta_key(input, raw_key, &flags, cut)?;
    Ok((key, flags))
}

fn parse_meta_set(
    toks: &[&[u8]],
    buf: &[u8],
    line_len: usize,
    limits: &Limits,
    cut: &mut KeyCut<'_>,
) -> Parsed<Request> {
    let bad = ProtoError::BadCommandLine { noreply: false };
    let Some(raw_key) = toks.get(1) else {
        return invalid(ProtoError::UnknownCommand, line_len);
    };
    let Some(len_token) = toks.get(2) else {
        return invalid(bad, line_len);
    };
    if raw_key.len() > MAX_KEY_LEN {
        return invalid(bad, line_len);
    }
    let Some(vlen) = parse_i32(len_token).and_then(value_length) else {
        return invalid(bad, line_len);
    };
    let swallow = vlen + 2;
    let swallowing = |error: ProtoError| {
        invalid(
            ProtoError::WithSwallow {
                error: Box::new(error),
                swallow,
            },
            line_len,
        )
    };
    let flags = match MetaFlags::parse(MetaKind::Set, toks[3..].iter().copied()) {
        Ok(flags) => flags,
        Err(error) => return swallowing(error),
    };
    if let Some(mode) = flags.mode() {
        if !b"EAPRS".contains(&mode) {
            return invalid(ProtoError::InvalidMetaSetMode { swallow }, line_len);
        }
    }
    let key = match meta_key(buf, raw_key, &flags, cut) {
        Ok(key) => key,
        Err(error) => return swallowing(error),
    };
    // A deferred key is still an empty placeholder (a real key is never empty): its bytes
    // are the raw token's.
    let deferred = key.is_empty();
    let meta_flags_value = match flags.u32(b'F') {
        Ok(v) => v.unwrap_or(0),
        Err(error) => return swallowing(error),
    };
    let key_len = if deferred { raw_key.len() } else { key.len() };
    if item_too_large(key_len, vlen, meta_flags_value, limits.item_size_max) {
        let set_mode = matches!(flags.mode(), None | Some(b'S' | b's'));
        let owned = || {
            if deferred {
                Bytes::copy_from_slice(raw_key)
            } else {
                key.clone()
            }
        };
        return invalid(
            ProtoError::TooLarge {
                swallow,
                noreply: false,
                unlink_key: set_mode.then(owned),
            },
            line_len,
        );
    }
    data_block(buf, line_len, vlen, false, |data| Request::MetaSet {
        key,
        flags,
        data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(input: &[u8]) -> Parsed<Request> {
        parse_request(input, &Limits::default())
    }

    #[test]
    fn single_key_names_the_key_of_single_key_requests_only() {
        let key = |text: &[u8]| match parse(text) {
            Parsed::Complete { value, .. } => value.single_key().map(|k| k.to_vec()),
            _ => panic!("{text:?} does not parse"),
        };
        assert_eq!(key(b"get a\r\n"), Some(b"a".to_vec()));
        assert_eq!(key(b"get a b\r\n"), None);
        assert_eq!(key(b"set k 0 0 1\r\nx\r\n"), Some(b"k".to_vec()));
        assert_eq!(key(b"mg k v\r\n"), Some(b"k".to_vec()));
        assert_eq!(key(b"version\r\n"), None);
    }

    #[test]
    fn only_mg_carries_a_priority_class() {
        let class = |text: &[u8]| match parse(text) {
            Parsed::Complete { value, .. } => value.priority_class(),
            _ => panic!("{text:?} does not parse"),
        };
        assert_eq!(class(b"mg k v p0\r\n"), Some(0));
        assert_eq!(class(b"mg k p4 v k\r\n"), Some(4));
        assert_eq!(class(b"mg k v\r\n"), None);
        assert_eq!(class(b"get k\r\n"), None);
        assert_eq!(class(b"ms k 1 T0\r\nx\r\n"), None);
    }

    #[test]
    fn get_many_keys() {
        let Parsed::Complete { value, consumed } = parse(b"gets a b c\r\nrest") else {
            panic!("expected complete");
        };
        assert_eq!(consumed, 12);
        assert_eq!(
            value,
            Request::Get {
                keys: vec![Bytes::from("a"), Bytes::from("b"), Bytes::from("c")].into(),
                with_cas: true
            }
        );
    }

    #[test]
    fn set_waits_for_data_then_gives_range() {
        assert_eq!(parse(b"set k 1 2 5\r\nhel"), Parsed::Incomplete);
        let input = b"set k 1 2 5\r\nhello\r\n";
        let Parsed::Complete {
            value: Request::Store(cmd),
            consumed,
        } = parse(input)
        else {
            panic!("expected a store");
        };
        assert_eq!(consumed, input.len());
        assert_eq!(&input[cmd.data.clone()], b"hello");
        assert_eq!((cmd.flags, cmd.exptime, cmd.noreply), (1, 2, false));
        assert_eq!(declared_total(b"set k 1 2 5\r\n"), Some(input.len()));
        // Lengths the parser rejects announce no value to wait for.
        assert_eq!(declared_total(b"set k 0 0 2147483646\r\n"), None);
        assert_eq!(declared_total(b"set k 0 0 -1\r\n"), None);
        assert_eq!(declared_total(b"ms k 2147483647\r\n"), None);
        assert_eq!(
            declared_total(b"set k 0 0 2147483645\r\n"),
            Some(2147483645 + 24)
        );
    }

    #[test]
    fn bad_data_chunk_consumes_declared_length() {
        let input = b"set a 0 0 1\r\nxyz\r\n";
        assert_eq!(
            parse(input),
            Parsed::Invalid {
                error: ProtoError::BadDataChunk { noreply: false },
                consumed: 16
            }
        );
    }

    #[test]
    fn errors_match_memcached() {
        const BAD_LINE: ProtoError = ProtoError::BadCommandLine { noreply: false };
        const BAD_EXPTIME: ProtoError = ProtoError::InvalidExptime { noreply: false };
        let cases: &[(&[u8], ProtoError)] = &[
            (b"foo\r\n", ProtoError::UnknownCommand),
            (b"\r\n", ProtoError::UnknownCommand),
            (b"get\r\n", ProtoError::UnknownCommand),
            (b"set a 0 0\r\n", ProtoError::UnknownCommand),
            (b"set a 0 0 -1\r\n", BAD_LINE),
            (b"set a x 0 1\r\n", BAD_LINE),
            (b"cas a 0 0 1 abc\r\n", BAD_LINE),
            (b"incr a x\r\n", ProtoError::InvalidDelta { noreply: false }),
            (b"touch a x\r\n", BAD_EXPTIME),
            (
                b"delete a 1\r\n",
                ProtoError::DeleteUsage { noreply: false },
            ),
            (b"flush_all x\r\n", BAD_EXPTIME),
            (b"verbosity\r\n", ProtoError::UnknownCommand),
            (b"mg k zz\r\n", ProtoError::InvalidMetaFlag),
            (b"mg k v v\r\n", ProtoError::DuplicateMetaFlag),
            (b"mg k v p5\r\n", ProtoError::BadMetaToken),
            (b"mg k v p\r\n", ProtoError::BadMetaToken),
            (b"mg k p1 p1\r\n", ProtoError::DuplicateMetaFlag),
            (b"GET / HTTP/1.0\r\n", ProtoError::HttpRequest),
            (b"HTTP/1.1\r\n", ProtoError::HttpRequest),
            (b"gxx / HTTP/1.1\r\n", ProtoError::UnknownCommand),
            (b"xx HTTP/1.0 tail\r\n", ProtoError::UnknownCommand),
            (b"set a 0 0 2147483646\r\n", BAD_LINE),
            (b"ms a 2147483647\r\n", BAD_LINE),
            (
                b"slabs automove x noreply\r\n",
                ProtoError::BadCommandLine { noreply: true },
            ),
            (b"slabs automove\r\n", ProtoError::UnknownCommand),
        ];
        for (input, expected) in cases {
            match parse(input) {
                Parsed::Invalid { error, .. } => {
                    assert_eq!(&error, expected, "{}", String::from_utf8_lossy(input))
                }
                other => panic!("{}: {other:?}", String::from_utf8_lossy(input)),
            }
        }
    }

    #[test]
    fn admin_commands_answer_as_memcached() {
        let cases: &[(&[u8], &[u8], bool)] = &[
            (b"slabs automove 2\r\n", b"OK", false),
            (b"slabs automove 3 noreply\r\n", b"ERROR", true),
            (b"slabs automove ratio 0.8 x\r\n", b"OK", false),
            (b"slabs automove ratio\r\n", b"ERROR", false),
            (
                b"slabs reassign 3 3\r\n",
                b"SAME src and dst class are identical",
                false,
            ),
            (
                b"slabs reassign 1 40\r\n",
                b"BADCLASS invalid src or dst class id",
                false,
            ),
            (
                b"slabs reassign 0 39\r\n",
                b"NOSPARE source class has no spare pages",
                false,
            ),
        ];
        for (input, reply, noreply) in cases {
            match parse(input) {
                Parsed::Complete {
                    value:
                        Request::Admin {
                            reply: got,
                            noreply: quiet,
                        },
                    ..
                } => assert_eq!((got, quiet), (*reply, *noreply)),
                other => panic!("{}: {other:?}", String::from_utf8_lossy(input)),
            }
        }
        assert!(ProtoError::HttpRequest.closes_connection());
    }

    #[test]
    fn long_key_rejected() {
        let mut line = b"get ".to_vec();
        line.extend(std::iter::repeat_n(b'k', 251));
        line.extend_from_slice(b"\r\n");
        assert!(matches!(
            parse(&line),
            Parsed::Invalid {
                error: ProtoError::BadCommandLine { .. },
                ..
            }
        ));
    }

    #[test]
    fn too_large_swallows_and_unlinks() {
        let limits = Limits {
            item_size_max: 1024,
        };
        match parse_request(b"set big 0 0 5000\r\n", &limits) {
            Parsed::Invalid {
                error:
                    ProtoError::TooLarge {
                        swallow,
                        unlink_key,
                        ..
                    },
                consumed,
            } => {
                assert_eq!(swallow, 5002);
                assert_eq!(consumed, 18);
                assert_eq!(unlink_key, Some(Bytes::from("big")));
            }
            other => panic!("{other:?}"),
        }
        // memcached's exact boundary: 56 + key + 1 + value + 2 <= -I
        assert!(!item_too_large(1, 1_048_516, 0, 1_048_576));
        assert!(item_too_large(1, 1_048_517, 0, 1_048_576));
        assert!(!item_too_large(100, 1_048_417, 0, 1_048_576));
        assert!(item_too_large(1, 1_048_516, 7, 1_048_576));
    }

    #[test]
    fn unterminated_lines() {
        assert_eq!(parse(&[b'a'; 2048]), Parsed::Incomplete);
        assert!(matches!(
            parse(&[b'a'; 2049]),
            Parsed::Invalid {
                error: ProtoError::LineTooLong,
                ..
            }
        ));
        let mut get = b"get ".to_vec();
        get.extend(std::iter::repeat_n(b'k', 5000));
        assert_eq!(parse(&get), Parsed::Incomplete);
    }

    #[test]
    fn meta_set_and_modes() {
        let input = b"ms k 2 T0 F5 MA\r\nhi\r\n";
        let Parsed::Complete {
            value: Request::MetaSet { key, flags, data },
            consumed,
        } = parse(input)
        else {
            panic!()
        };
        assert_eq!((key.as_ref(), consumed), (&b"k"[..], input.len()));
        assert_eq!(&input[data], b"hi");
        assert_eq!(flags.mode(), Some(b'A'));
        assert!(matches!(
            parse(b"ms k 2 MZ\r\nhi\r\n"),
            Parsed::Invalid {
                error: ProtoError::InvalidMetaSetMode { swallow: 4 },
                ..
            }
        ));
        assert!(matches!(
            parse(b"ms x S1\r\n"),
            Parsed::Invalid {
                error: ProtoError::BadCommandLine { .. },
                ..
            }
        ));
    }

    #[test]
    fn key_named_noreply() {
        assert!(matches!(
            parse(b"delete noreply\r\n"),
            Parsed::Complete {
                value: Request::Delete { noreply: false, .. },
                ..
            }
        ));
        assert!(matches!(
            parse(b"delete k noreply\r\n"),
            Parsed::Complete {
                value: Request::Delete { noreply: true, .. },
                ..
            }
        ));
    }

    #[test]
    fn bare_newline_accepted() {
        assert!(matches!(
            parse(b"get a\n"),
            Parsed::Complete { consumed: 6, .. }
        ));
    }
}
