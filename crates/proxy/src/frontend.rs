//! The client-facing side: one task per connection, requests parsed incrementally, executed
//! concurrently, replies written in request order.
//!
//! ```text
//!   socket ─► BytesMut ─► parse_request_frame ─┬─ Complete ─► routes.read / write / multiget / broadcast
//!                    (frame split off,         ├─ Invalid  ─► memcached's error reply (never forwarded)
//!                     keys cut from it)        └─ Incomplete ─► read more
//!   the batch of requests parsed from one read runs in rounds of at most MAX_KEYS_PER_ROUND
//!   keys; a round's requests run concurrently (join_all keeps order) ─► its replies written
//!   (the next round, and the next read, wait until the client has taken them)
//! ```
//!
//! A reply is kept as the segments it was received in (`Reply`): a multiget's `VALUE` items
//! are slices of the backends' read buffers, followed by `END`. A round of replies larger than
//! `COALESCE_LIMIT` leaves in `writev`s of those segments, without being copied into one buffer
//! first (a 100-key get with large values used to copy every value once more); a smaller round
//! is copied into one buffer and written at once.
//!
//! Without `[[routes]]` the tree is its leaf alone, and reads, writes and multigets call the
//! cluster (the leaf's own calls) directly: no trait-object call and no boxed future, whose
//! allocation and copy of the whole multiget's state were the largest user-space cost of a
//! multiget.
//!
//! With `-Y` (`[proxy] auth_file`), a connection is first read by memcached's authentication
//! rules (`tailtrim_proto::auth::AuthState`): every exchange is answered in place, nothing is
//! parsed as a request or reaches a backend until a `set` carries a known `user password`.
//!
//! Bounds per client: unparsed input at most one request (the parser refuses longer lines
//! and larger values than `item_size_max`); replies held at most one round's (a client that does not read stops having its
//! requests read or executed while its replies wait); no complete command for
//! `idle_timeout_secs` closes it. Connections past `max_connections` are refused at accept.

use std::io::IoSlice;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures_util::future::join_all;
use tailtrim_client::{ClientError, Cluster, KeyResult, MultigetKind, RawReply, ReplyShape, Route};
use tailtrim_proto::auth::{AuthState, Outcome, Step};
use tailtrim_proto::{parse_request_frame, FrameScratch, Limits, Parsed, ProtoError, Request};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use tailtrim_tls::ReloadableServerConfig;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::auth::ClientAuth;
use crate::classes::ClassLatency;
use crate::metrics::{self, FrontendStats, MetricsView};

/// Appended after requests whose reply is suppressed (`noreply`, quiet meta), so the backend
/// answers *something* and the connection stays in step.
const META_NOOP: &[u8] = b"mn\r\n";
/// Read buffer growth step.
const READ_CHUNK: usize = 16 * 1024;
/// Keys executed concurrently for one client before its replies are written: pipelined
/// requests beyond this wait for the replies before them to leave, so a client that never
/// reads holds at most one round of replies in the proxy (plus one request's, if a single
/// request names more keys).
pub const MAX_KEYS_PER_ROUND: usize = 128;
/// Segments handed to one `writev` at most (below the kernel's `IOV_MAX`, 1024).
const MAX_SEGMENTS_PER_WRITE: usize = 64;
/// A round of several segments up to this size is copied into one buffer and written at once
/// (small items cost less to copy than to hand over one by one, and a reply of more segments
/// than one `writev` takes would leave in several writes); larger rounds go out as segments.
const COALESCE_LIMIT: usize = 64 * 1024;
/// `END\r\n`, closing a multiget's reply.
const END_LINE: &[u8] = b"END\r\n";
/// Bound on a client's TLS handshake when no idle timeout is set.
const TLS_HANDSHAKE_LIMIT: Duration = Duration::from_secs(10);
/// memcached's reply to a connection past its limit.
pub const TOO_MANY_CONNECTIONS: &[u8] = b"ERROR Too many open connections\r\n";
/// Version string returned by `version`.
pub const VERSION_LINE: &str =
    concat!("VERSION tailtrim-proxy-", env!("CARGO_PKG_VERSION"), "\r\n");

/// State shared by every connection.
pub struct Shared {
    /// The backend pool, whose membership can change at runtime.
    pub pool: Arc<Cluster>,
    /// The route tree requests take (`[[routes]]`, ending in `pool`).
    pub routes: Arc<dyn Route>,
    /// The tree is its leaf alone (no `[[routes]]`): reads, writes and multigets call `pool`
    /// directly, as the leaf would, without a boxed future per request.
    pub leaf_only: bool,
    /// The client listener's auth file (`-Y`): clients authenticate before anything else.
    pub auth: Option<ClientAuth>,
    /// TLS on the client listener (`-Z`, `[tls]`): every connection starts with a handshake.
    pub tls: Option<ReloadableServerConfig>,
    /// Warm-up defaults for membership changes.
    pub warmup: crate::config::WarmupSection,
    /// Limits applied when parsing client requests.
    pub limits: Limits,
    /// Front-end counters.
    pub stats: FrontendStats,
    /// Read latency by class (small and large gets, mice and elephant multigets).
    pub classes: ClassLatency,
    /// When the proxy started.
    pub started: Instant,
    /// Runtime worker threads (reported by `stats`).
    pub threads: usize,
    /// Client connections at most (0: no limit).
    pub max_connections: usize,
    /// Close a client with no complete command for this long.
    pub idle_timeout: Option<Duration>,
    /// The model's live prediction (`stats`: `pool_model_*`).
    pub prediction: crate::prediction::Predictor,
}

impl Shared {
    /// What the metrics (`stats`, `/metrics`) read.
    pub fn metrics_view(&self) -> MetricsView<'_> {
        MetricsView {
            front: &self.stats,
            classes: &self.classes,
            cluster: &self.pool,
            started: self.started,
            threads: self.threads,
            prediction: &self.prediction,
        }
    }

    /// Counts a newly accepted connection, or refuses it past `max_connections` (the caller
    /// then answers [`TOO_MANY_CONNECTIONS`] and closes it). Returns true if admitted; an
    /// admitted connection must be served with [`serve_connection`].
    pub fn admit(&self) -> bool {
        let stats = &self.stats;
        let admitted = stats
            .curr_connections
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |current| {
                (self.max_connections == 0 || current < self.max_connections as u64)
                    .then_some(current + 1)
            })
            .is_ok();
        if admitted {
            stats.total_connections.fetch_add(1, Ordering::Relaxed);
        } else {
            stats.rejected_connections.fetch_add(1, Ordering::Relaxed);
        }
        admitted
    }

    /// A single-key read or write through the route tree.
    async fn single_key(
        &self,
        access: Access,
        key: &[u8],
        raw: Bytes,
        shape: ReplyShape,
    ) -> Result<RawReply, ClientError> {
        match (self.leaf_only, access) {
            (true, Access::Read) => self.pool.read(key, raw, shape).await,
            (true, Access::Write) => self.pool.write(key, raw, shape).await,
            (false, Access::Read) => self.routes.read(key, raw, shape).await,
            (false, Access::Write) => self.routes.write(key, raw, shape).await,
        }
    }

    /// A multi-key read through the route tree: one outcome per key. The cluster's multiget
    /// is boxed: held inline, its state (once tens of kilobytes, ~2.7 KB since its fetches
    /// live in an allocation of their own) made every request's future that large, single-key
    /// gets included, copied whole each time a request started.
    async fn multiget(&self, keys: &[Bytes], kind: MultigetKind) -> Vec<KeyResult> {
        match self.leaf_only {
            true => Box::pin(self.pool.multiget_each(keys, kind)).await,
            false => self.routes.multiget(keys, kind).await,
        }
    }
}

/// Serves one client connection, admitted by [`Shared::admit`], until it closes or sends
/// `quit`.
pub async fn serve_connection(stream: TcpStream, shared: Arc<Shared>) {
    let _ = stream.set_nodelay(true);
    match &shared.tls {
        None => {
            let _ = serve(stream, &shared).await;
        }
        Some(tls) => {
            let acceptor = TlsAcceptor::from(tls.current());
            let limit = shared.idle_timeout.unwrap_or(TLS_HANDSHAKE_LIMIT);
            match tokio::time::timeout(limit, acceptor.accept(stream)).await {
                Ok(Ok(secured)) => {
                    let mut secured = secured;
                    let _ = serve(&mut secured, &shared).await;
                    let _ = secured.shutdown().await;
                }
                Ok(Err(error)) => {
                    shared
                        .stats
                        .ssl_handshake_errors
                        .fetch_add(1, Ordering::Relaxed);
                    tracing::debug!("tailtrim proxy: client TLS handshake failed: {error}");
                }
                Err(_) => {
                    shared
                        .stats
                        .ssl_handshake_errors
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
    shared
        .stats
        .curr_connections
        .fetch_sub(1, Ordering::Relaxed);
}

/// Whether a single-key request reads or writes (the route tree's `read` or `write`).
#[derive(Clone, Copy)]
enum Access {
    Read,
    Write,
}

/// The reply to one request, as the segments it is written in.
enum Reply {
    /// One piece: a backend's reply forwarded whole, or a reply made here.
    Whole(Bytes),
    /// A multiget's found items as the backends sent them, then `END`: written with one
    /// `writev`, never copied into one buffer.
    Items(Vec<Bytes>),
}

impl Reply {
    /// An empty reply (`noreply`, quiet requests): nothing is written.
    fn none() -> Reply {
        Reply::Whole(Bytes::new())
    }

    /// Its segments, in order.
    fn parts(&self) -> &[Bytes] {
        match self {
            Reply::Whole(bytes) => std::slice::from_ref(bytes),
            Reply::Items(items) => items,
        }
    }

    /// Its length in bytes.
    fn len(&self) -> usize {
        match self {
            Reply::Whole(bytes) => bytes.len(),
            Reply::Items(items) => items.iter().map(Bytes::len).sum(),
        }
    }
}

/// What one parsed request turns into.
enum Work {
    /// A reply known without asking a backend.
    Ready(Bytes),
    /// A request to execute.
    Forward(Request, Bytes),
}

/// A client connection: plain TCP or TLS.
trait ClientStream: AsyncRead + AsyncWrite + Unpin {
    /// Writes what the connection takes at once of `parts`, in order, without waiting (plain
    /// TCP, one `writev`; TLS takes nothing this way and goes through the buffered write).
    fn write_now(&mut self, parts: &[IoSlice<'_>]) -> std::io::Result<usize>;
}

impl ClientStream for TcpStream {
    fn write_now(&mut self, parts: &[IoSlice<'_>]) -> std::io::Result<usize> {
        self.try_write_vectored(parts)
    }
}

impl ClientStream for &mut TlsStream<TcpStream> {
    fn write_now(&mut self, _parts: &[IoSlice<'_>]) -> std::io::Result<usize> {
        Ok(0)
    }
}

async fn serve<S: ClientStream>(mut stream: S, shared: &Shared) -> std::io::Result<()> {
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    let mut swallow = 0usize;
    let mut scratch = FrameScratch::default();
    let mut last_command = tokio::time::Instant::now();
    // The clock is read for the idle timeout only.
    let idle_clock = shared.idle_timeout.is_some();
    // Reused across reads: the parsed requests and the coalesced replies.
    let mut batch: Vec<Work> = Vec::new();
    let mut out: Vec<u8> = Vec::new();
    // With -Y, the connection is read by memcached's authentication rules until it logs in.
    let mut auth_state = AuthState::default();
    auth_state.authenticated = shared.auth.is_none();
    loop {
        if buf.capacity() - buf.len() < READ_CHUNK / 4 {
            buf.reserve(READ_CHUNK);
        }
        let read = stream.read_buf(&mut buf);
        let got = match shared.idle_timeout {
            Some(idle) => match tokio::time::timeout_at(last_command + idle, read).await {
                Ok(got) => got?,
                Err(_) => {
                    shared.stats.idle_kicks.fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                }
            },
            None => read.await?,
        };
        if got == 0 {
            return Ok(());
        }
        let mut close = false;
        loop {
            if swallow > 0 {
                let drop_now = swallow.min(buf.len());
                let _ = buf.split_to(drop_now);
                swallow -= drop_now;
                if swallow > 0 {
                    break;
                }
            }
            if buf.is_empty() {
                break;
            }
            if let (false, Some(auth)) = (auth_state.authenticated, &shared.auth) {
                match auth_state.step(&buf, |user, password| auth.check(user, password)) {
                    Step::Incomplete => break,
                    Step::Close => {
                        close = true;
                        break;
                    }
                    Step::Consumed(taken) => {
                        let _ = buf.split_to(taken);
                    }
                    Step::Answered { consumed, outcome } => {
                        let _ = buf.split_to(consumed);
                        if idle_clock {
                            last_command = tokio::time::Instant::now();
                        }
                        if outcome.is_attempt() {
                            shared.stats.auth_cmds.fetch_add(1, Ordering::Relaxed);
                        }
                        if outcome == Outcome::Failure {
                            shared.stats.auth_errors.fetch_add(1, Ordering::Relaxed);
                        }
                        batch.push(Work::Ready(Bytes::from_static(outcome.reply())));
                    }
                }
                continue;
            }
            let parsed = parse_request_frame(&mut buf, &shared.limits, &mut scratch);
            if idle_clock && !matches!(parsed, Parsed::Incomplete) {
                last_command = tokio::time::Instant::now();
            }
            match parsed {
                Parsed::Incomplete => break,
                Parsed::Complete { value, .. } => {
                    shared.stats.requests.fetch_add(1, Ordering::Relaxed);
                    let raw = scratch.take_frame();
                    if matches!(value, Request::Quit) {
                        close = true;
                        break;
                    }
                    batch.push(Work::Forward(value, raw));
                }
                Parsed::Invalid { error, consumed } => {
                    shared.stats.client_errors.fetch_add(1, Ordering::Relaxed);
                    let _ = buf.split_to(consumed.min(buf.len()));
                    if error.closes_connection() {
                        close = true;
                        break;
                    }
                    swallow = error.swallow();
                    if let ProtoError::TooLarge {
                        unlink_key: Some(key),
                        ..
                    } = &error
                    {
                        // memcached drops the old value of a key whose new value was too large;
                        // the backends must do the same for the pool to behave like one server.
                        let mut delete = b"delete ".to_vec();
                        delete.extend_from_slice(key);
                        delete.extend_from_slice(b" noreply\r\n");
                        let request = Request::Delete {
                            key: key.clone(),
                            noreply: true,
                        };
                        batch.push(Work::Forward(request, Bytes::from(delete)));
                    }
                    if !error.silent() {
                        batch.push(Work::Ready(Bytes::from(error.reply_line())));
                    }
                }
            }
        }
        if batch.len() == 1 {
            // The common case, one request per read: no round bookkeeping, no copy.
            if let Some(work) = batch.pop() {
                let reply = run_one(shared, work).await;
                write_replies(&mut stream, std::slice::from_ref(&reply), &mut out).await?;
                if idle_clock {
                    last_command = tokio::time::Instant::now();
                }
            }
        }
        while !batch.is_empty() {
            let rest = batch.split_off(round_len(&batch));
            let replies = run_in_order(shared, std::mem::replace(&mut batch, rest)).await;
            write_replies(&mut stream, &replies, &mut out).await?;
            // Time spent waiting for the client to take its replies is not idleness.
            if idle_clock {
                last_command = tokio::time::Instant::now();
            }
        }
        if close {
            return Ok(());
        }
    }
}

/// Keys a piece of work reads or writes (1 for keyless work).
fn keys_of(work: &Work) -> usize {
    match work {
        Work::Forward(Request::Get { keys, .. } | Request::GetAndTouch { keys, .. }, _) => {
            keys.len().max(1)
        }
        _ => 1,
    }
}

/// How many leading requests of `batch` form the next round: as many as fit in
/// [`MAX_KEYS_PER_ROUND`] keys, and at least one.
fn round_len(batch: &[Work]) -> usize {
    let mut keys = 0;
    for (index, work) in batch.iter().enumerate() {
        keys += keys_of(work);
        if keys > MAX_KEYS_PER_ROUND {
            return index.max(1);
        }
    }
    batch.len()
}

/// Writes a round's replies in order, their segments gathered into `writev`s of up to
/// [`MAX_SEGMENTS_PER_WRITE`]: at once while the socket takes them (the common case, without
/// the write future's machinery), else the segment the socket stopped in when it is writable
/// (TLS: every segment through the buffered write, then a flush). Several segments of at most
/// [`COALESCE_LIMIT`] bytes in all are copied into `out` (reused) and written as one.
async fn write_replies<S: ClientStream>(
    stream: &mut S,
    replies: &[Reply],
    out: &mut Vec<u8>,
) -> std::io::Result<()> {
    let segments: usize = replies.iter().map(|reply| reply.parts().len()).sum();
    if segments > 1 && replies.iter().map(Reply::len).sum::<usize>() <= COALESCE_LIMIT {
        out.clear();
        for reply in replies {
            for part in reply.parts() {
                out.extend_from_slice(part);
            }
        }
        return write_whole(stream, out).await;
    }
    let mut at = WritePosition::default();
    at.advance(replies, 0);
    let mut waited = false;
    while let Some(current) = at.segment(replies) {
        let mut slices = [IoSlice::new(&[]); MAX_SEGMENTS_PER_WRITE];
        let count = at.gather(replies, &mut slices);
        let written = match stream.write_now(&slices[..count]) {
            Ok(written) => written,
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => 0,
            Err(error) => return Err(error),
        };
        if written > 0 {
            at.advance(replies, written);
            continue;
        }
        // Not writable now (or TLS): the current segment's rest through the async write.
        stream.write_all(current).await?;
        waited = true;
        at.advance(replies, current.len());
    }
    if waited {
        // TLS holds records until flushed; plain TCP has nothing to flush.
        stream.flush().await?;
    }
    Ok(())
}

/// Writes `data`: at once when the socket takes it all, else the rest when it is writable.
async fn write_whole<S: ClientStream>(stream: &mut S, data: &[u8]) -> std::io::Result<()> {
    let written = match stream.write_now(&[IoSlice::new(data)]) {
        Ok(written) => written,
        Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => 0,
        Err(error) => return Err(error),
    };
    if written < data.len() {
        stream.write_all(&data[written..]).await?;
        // TLS holds records until flushed; plain TCP has nothing to flush.
        stream.flush().await?;
    }
    Ok(())
}

/// How far the write of a round's replies has come: the reply, its segment, and the bytes of
/// that segment already written. Kept at a segment with bytes left, or past the last reply.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct WritePosition {
    reply: usize,
    part: usize,
    offset: usize,
}

impl WritePosition {
    /// The rest of the current segment (`None` once everything is written).
    fn segment<'a>(&self, replies: &'a [Reply]) -> Option<&'a [u8]> {
        let part = replies.get(self.reply)?.parts().get(self.part)?;
        Some(&part[self.offset..])
    }

    /// Fills `slices` with the segments from here on (the current one's rest first), skipping
    /// empty ones; returns how many it filled.
    fn gather<'a>(&self, replies: &'a [Reply], slices: &mut [IoSlice<'a>]) -> usize {
        let mut count = 0;
        let mut offset = self.offset;
        let mut skip = self.part;
        for reply in replies.iter().skip(self.reply) {
            for segment in reply.parts().iter().skip(skip) {
                if count == slices.len() {
                    return count;
                }
                let rest = &segment[offset..];
                offset = 0;
                if !rest.is_empty() {
                    slices[count] = IoSlice::new(rest);
                    count += 1;
                }
            }
            skip = 0;
        }
        count
    }

    /// Moves past `written` bytes, and past any empty segments after them.
    fn advance(&mut self, replies: &[Reply], mut written: usize) {
        while let Some(reply) = replies.get(self.reply) {
            let Some(part) = reply.parts().get(self.part) else {
                self.reply += 1;
                self.part = 0;
                continue;
            };
            let left = part.len() - self.offset;
            if written < left {
                self.offset += written;
                return;
            }
            written -= left;
            self.part += 1;
            self.offset = 0;
        }
    }
}

/// True for work that neither changes backend state nor depends on earlier writes beyond what
/// memcached's own ordering gives: such work may run concurrently with its neighbours.
fn is_read(work: &Work) -> bool {
    match work {
        Work::Ready(_) => true,
        Work::Forward(request, _) => matches!(
            request,
            Request::Get { .. }
                | Request::MetaGet { .. }
                | Request::MetaDebug { .. }
                | Request::MetaNoop
                | Request::Version
                | Request::Stats { .. }
        ),
    }
}

/// Executes a batch with the semantics of one memcached connection: a write completes before
/// anything after it starts, and runs of reads between writes go out concurrently (replies are
/// still collected in request order).
async fn run_in_order(shared: &Shared, batch: Vec<Work>) -> Vec<Reply> {
    let mut replies = Vec::with_capacity(batch.len());
    let mut reads: Vec<Work> = Vec::new();
    for work in batch {
        if is_read(&work) {
            reads.push(work);
            continue;
        }
        if !reads.is_empty() {
            replies.extend(run_concurrently(shared, std::mem::take(&mut reads)).await);
        }
        replies.push(run_one(shared, work).await);
    }
    if !reads.is_empty() {
        replies.extend(run_concurrently(shared, reads).await);
    }
    replies
}

async fn run_concurrently(shared: &Shared, mut works: Vec<Work>) -> Vec<Reply> {
    if works.len() == 1 {
        if let Some(work) = works.pop() {
            return vec![run_one(shared, work).await];
        }
    }
    // Pipelined plain `get`s are merged into one planned multiget (one request per backend
    // for the whole run instead of one per client request); each client request still gets
    // its own `VALUE … END` reply in its place. A planner that merges requests itself (chisel)
    // sees each request on its own, so its classes and merge level are the clients'; so does
    // a pool that shapes queries (slots, setup time, Chisel's analyzer counting requests).
    if shared.pool.current().plans_each_read() {
        return join_all(works.into_iter().map(|work| run_one(shared, work))).await;
    }
    let mut merged_keys: Vec<Bytes> = Vec::new();
    let mut merged: Vec<(usize, std::ops::Range<usize>, Bytes)> = Vec::new();
    let mut others: Vec<(usize, Work)> = Vec::new();
    for (position, work) in works.into_iter().enumerate() {
        match work {
            Work::Forward(
                Request::Get {
                    keys,
                    with_cas: false,
                },
                raw,
            ) => {
                let start = merged_keys.len();
                merged_keys.extend(keys);
                merged.push((position, start..merged_keys.len(), raw));
            }
            other => others.push((position, other)),
        }
    }
    if merged.len() < 2 {
        // Nothing to merge: put the lone get back and run everything side by side.
        let mut all = others;
        for (position, range, raw) in merged {
            let request = Request::Get {
                keys: merged_keys[range].into(),
                with_cas: false,
            };
            all.push((position, Work::Forward(request, raw)));
        }
        all.sort_by_key(|(position, _)| *position);
        return join_all(all.into_iter().map(|(_, work)| run_one(shared, work))).await;
    }
    let total = merged.len() + others.len();
    let started = Instant::now();
    if others.is_empty() {
        // Gets only (the pipelined case): the merged read alone, its replies in request
        // order, without a join around the whole multiget's state.
        let mut outcomes = shared.multiget(&merged_keys, MultigetKind::Get).await;
        return merged_replies(shared, &merged, &mut outcomes, started);
    }
    let merged_reads = async {
        // Per-key outcomes: a backend failure only fails the requests that needed it.
        let mut outcomes = shared.multiget(&merged_keys, MultigetKind::Get).await;
        merged_replies(shared, &merged, &mut outcomes, started)
    };
    let positions: Vec<usize> = others.iter().map(|(position, _)| *position).collect();
    let other_reads = join_all(others.into_iter().map(|(_, work)| run_one(shared, work)));
    let (merged_replies, other_replies) =
        futures_util::future::join(merged_reads, other_reads).await;
    let mut replies: Vec<Reply> = (0..total).map(|_| Reply::none()).collect();
    for ((position, _, _), reply) in merged.iter().zip(merged_replies) {
        replies[*position] = reply;
    }
    for (position, reply) in positions.into_iter().zip(other_replies) {
        replies[position] = reply;
    }
    replies
}

/// Each merged get's reply (in `merged`'s order) from the merged read's per-key `outcomes`,
/// whose items it takes; every reply's latency (the merged read's, read from the clock once)
/// goes into its class.
fn merged_replies(
    shared: &Shared,
    merged: &[(usize, std::ops::Range<usize>, Bytes)],
    mut outcomes: &mut [KeyResult],
    started: Instant,
) -> Vec<Reply> {
    let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
    merged
        .iter()
        .map(|(_, range, _)| {
            // The ranges follow each other from the start: each takes the next outcomes.
            let (own, rest) = std::mem::take(&mut outcomes).split_at_mut(range.len());
            outcomes = rest;
            let reply = outcomes_reply(shared, own);
            let class = shared.classes.classify(range.len(), reply.len());
            shared.classes.histogram(class).record_micros(micros);
            reply
        })
        .collect()
}

async fn run_one(shared: &Shared, work: Work) -> Reply {
    match work {
        Work::Ready(bytes) => Reply::Whole(bytes),
        Work::Forward(request, raw) => {
            let read_keys = ClassLatency::read_keys(&request);
            let started = Instant::now();
            let reply = execute(shared, request, raw).await;
            if let Some(keys) = read_keys {
                shared.classes.record(keys, reply.len(), started);
            }
            reply
        }
    }
}

fn server_error(shared: &Shared, error: &ClientError) -> Bytes {
    shared.stats.server_errors.fetch_add(1, Ordering::Relaxed);
    Bytes::from(format!("SERVER_ERROR {error}\r\n"))
}

/// Forwards a reply, or turns a failure into `SERVER_ERROR …` (nothing if `silent`).
fn relay(shared: &Shared, result: Result<RawReply, ClientError>, silent: bool) -> Bytes {
    match result {
        Ok(reply) if silent => {
            let _ = reply;
            Bytes::new()
        }
        Ok(reply) => reply.bytes,
        Err(_) if silent => {
            shared.stats.server_errors.fetch_add(1, Ordering::Relaxed);
            Bytes::new()
        }
        Err(error) => server_error(shared, &error),
    }
}

/// The raw request, plus `mn\r\n` when its reply is suppressed.
fn with_noop(raw: Bytes, quiet: bool) -> (Bytes, ReplyShape) {
    if quiet {
        let mut bytes = Vec::with_capacity(raw.len() + META_NOOP.len());
        bytes.extend_from_slice(&raw);
        bytes.extend_from_slice(META_NOOP);
        (Bytes::from(bytes), ReplyShape::UntilMetaNoop)
    } else {
        (raw, ReplyShape::Single)
    }
}

async fn execute(shared: &Shared, request: Request, raw: Bytes) -> Reply {
    let pool = &shared.routes;
    Reply::Whole(match request {
        Request::Get { keys, .. }
            if keys.len() == 1 && !shared.pool.current().plans_each_read() =>
        {
            // One key: forward the client's own bytes to the chosen replica, no planning.
            let key = &keys[0];
            match shared
                .single_key(Access::Read, key, raw, ReplyShape::UntilEnd)
                .await
            {
                Ok(reply) if reply.values.iter().all(|item| item.key() == key.as_ref()) => {
                    reply.bytes
                }
                Ok(_) => server_error(
                    shared,
                    &ClientError::BackendReplied {
                        backend: "?".to_string(),
                        line: "a value for another key".to_string(),
                    },
                ),
                Err(error) => server_error(shared, &error),
            }
        }
        Request::Get { keys, with_cas } => {
            let kind = if with_cas {
                MultigetKind::Gets
            } else {
                MultigetKind::Get
            };
            return multiget(shared, &keys, kind).await;
        }
        Request::GetAndTouch {
            exptime,
            keys,
            with_cas,
        } => {
            let kind = if with_cas {
                MultigetKind::Gats(exptime)
            } else {
                MultigetKind::Gat(exptime)
            };
            return multiget(shared, &keys, kind).await;
        }
        Request::Store(command) => {
            let (bytes, shape) = with_noop(raw, command.noreply);
            relay(
                shared,
                shared
                    .single_key(Access::Write, &command.key, bytes, shape)
                    .await,
                command.noreply,
            )
        }
        Request::Delete { key, noreply }
        | Request::Arithmetic { key, noreply, .. }
        | Request::Touch { key, noreply, .. } => {
            let (bytes, shape) = with_noop(raw, noreply);
            relay(
                shared,
                shared.single_key(Access::Write, &key, bytes, shape).await,
                noreply,
            )
        }
        Request::MetaGet { key, flags } => {
            let quiet = flags.quiet();
            let (bytes, shape) = with_noop(raw, quiet);
            relay(
                shared,
                shared.single_key(Access::Read, &key, bytes, shape).await,
                false,
            )
        }
        Request::MetaDebug { key } => relay(
            shared,
            shared
                .single_key(Access::Read, &key, raw, ReplyShape::Single)
                .await,
            false,
        ),
        Request::MetaSet { key, flags, .. }
        | Request::MetaDelete { key, flags }
        | Request::MetaArithmetic { key, flags } => {
            let quiet = flags.quiet();
            let (bytes, shape) = with_noop(raw, quiet);
            relay(
                shared,
                shared.single_key(Access::Write, &key, bytes, shape).await,
                false,
            )
        }
        Request::MetaNoop => Bytes::from_static(b"MN\r\n"),
        Request::FlushAll { noreply, .. } => {
            let (bytes, shape) = with_noop(raw, noreply);
            let results = pool.broadcast(bytes, shape).await;
            if noreply {
                return Reply::none();
            }
            match results.into_iter().find_map(|result| match result {
                Err(error) => Some(Err(error)),
                Ok(reply) if reply.bytes.as_ref() != b"OK\r\n" => Some(Ok(reply)),
                Ok(_) => None,
            }) {
                None => Bytes::from_static(b"OK\r\n"),
                Some(Ok(odd)) => odd.bytes,
                Some(Err(error)) => server_error(shared, &error),
            }
        }
        Request::Version => Bytes::from_static(VERSION_LINE.as_bytes()),
        // memcached's reply without TLS on the listener.
        Request::RefreshCerts => Bytes::from_static(b"Error TLS not enabled\r\n"),
        Request::Verbosity { noreply } => {
            if noreply {
                Bytes::new()
            } else {
                Bytes::from_static(b"OK\r\n")
            }
        }
        Request::Admin { reply, noreply } => {
            if noreply {
                Bytes::new()
            } else {
                Bytes::from([reply, b"\r\n"].concat())
            }
        }
        Request::Stats { args } => {
            Bytes::from(Box::pin(metrics::stats_reply(shared.metrics_view(), &args)).await)
        }
        Request::Quit => Bytes::new(),
        // A backend's item dump and log stream have no meaning across a pool.
        Request::Metadump { .. } | Request::Watch { .. } => Bytes::from_static(b"ERROR\r\n"),
    })
}

async fn multiget(shared: &Shared, keys: &[Bytes], kind: MultigetKind) -> Reply {
    outcomes_reply(shared, &mut shared.multiget(keys, kind).await)
}

/// The reply to a multiget from its keys' outcomes, whose items it takes: the first failure's
/// `SERVER_ERROR …` (a multiget fails as a whole), else the found items, in order, then `END`.
fn outcomes_reply(shared: &Shared, outcomes: &mut [KeyResult]) -> Reply {
    if let Some(error) = outcomes.iter().find_map(|outcome| outcome.as_ref().err()) {
        return Reply::Whole(server_error(shared, error));
    }
    found_items(outcomes)
}

/// The found items of a multiget's outcomes, taken from them, then `END` (`END` alone when
/// none was found).
fn found_items(outcomes: &mut [KeyResult]) -> Reply {
    let found = outcomes
        .iter()
        .filter(|outcome| matches!(outcome, Ok(Some(_))))
        .count();
    if found == 0 {
        return Reply::Whole(Bytes::from_static(END_LINE));
    }
    let mut parts = Vec::with_capacity(found + 1);
    parts.extend(
        outcomes
            .iter_mut()
            .filter_map(|outcome| outcome.as_mut().ok().and_then(Option::take))
            .map(|item| item.item),
    );
    parts.push(Bytes::from_static(END_LINE));
    Reply::Items(parts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailtrim_client::ValueItem;

    fn item(reply: &Bytes, at: std::ops::Range<usize>) -> KeyResult {
        Ok(Some(ValueItem {
            key_at: 6..7,
            flags: 0,
            cas: None,
            data: 13..at.len() - 2,
            item: reply.slice(at),
        }))
    }

    fn future_size<'a, F: std::future::Future>(_: impl Fn(&'a Shared, Work) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// Every request's future holds `execute`'s, which held a multiget's whole state inline
    /// (tens of KB), copied each time any request started, a single-key get included.
    #[test]
    fn a_requests_future_stays_small() {
        let size = future_size(run_one);
        eprintln!("run_one's future: {size} bytes");
        assert!(size <= 4096, "run_one's future is {size} bytes");
    }

    /// A multiget's future is boxed once per multiget and moved into the box whole, so it must
    /// stay small: the rare connect and its dial are boxed inside it, and so are its fetches
    /// (held inline, four of them made it ~7.7 KB, copied for every multiget).
    #[test]
    fn a_multigets_future_holds_no_connect() {
        fn size<'a, F: std::future::Future>(
            _: impl Fn(&'a Cluster, &'a [Bytes], MultigetKind) -> F,
        ) -> usize {
            std::mem::size_of::<F>()
        }
        let size = size(Cluster::multiget_each);
        eprintln!("the cluster's multiget future: {size} bytes");
        assert!(size <= 4096, "the multiget future is {size} bytes");
    }

    #[test]
    fn a_multigets_items_are_forwarded_from_the_backends_buffers_not_copied() {
        let first = Bytes::from_static(b"VALUE a 0 5\r\nhello\r\nEND\r\n");
        let second = Bytes::from_static(b"VALUE b 0 5\r\nworld\r\nEND\r\n");
        let mut outcomes = vec![item(&second, 0..20), Ok(None), item(&first, 0..20)];
        let reply = found_items(&mut outcomes);
        let parts = reply.parts();
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[0].as_ptr(), second.as_ptr(), "the item was copied");
        assert_eq!(parts[1].as_ptr(), first.as_ptr(), "the item was copied");
        assert_eq!(parts[2].as_ref(), END_LINE);
        assert_eq!(reply.len(), 45);
        assert!(matches!(found_items(&mut [Ok(None)]), Reply::Whole(end) if end == END_LINE));
    }
}
