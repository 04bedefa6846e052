//! One pipelined TCP connection to a backend.
//!
//! ```text
//!   caller ── lock io ─► take a reply slot (io.slots, reused) ─► push Pending{shape, slot}
//!                 │ + write the request into io.out ─► unlock
//!                 │ (same lock: FIFO order == byte order; no await, no allocation)
//!                 └─ no flush in progress: take io.out (swapped with a spare buffer) and
//!                    write it to the socket itself, without waiting (no task hop); requests
//!                    queued meanwhile (other threads) go out in its next write
//!   ReplyReceiver (the caller's future) ── lock io ─► slot ready? take the reply, free the
//!                 slot : leave the caller's waker in it
//!   writer task ── only when the socket did not take a whole batch: waits until it is
//!                  writable and writes the rest, then what was queued since
//!   reader task ◄── socket: parses replies in order with tailtrim_proto::parse_response
//!                 (the shape of the oldest Pending), lock io ─► pop it, put the RawReply in
//!                 its slot ─► unlock ─► wake the caller
//!   watchdog task ── sleeps until the oldest Pending's deadline (submitted + timeout); if it
//!                 is still unanswered then, fails it with Timeout (the others with
//!                 ConnectionLost) and kills the connection
//! ```
//!
//! The caller whose request finds no flush in progress writes it at once (as twemproxy
//! writes a server's queue from its event loop, without another thread); requests submitted
//! while a write is in progress or blocked leave together in the next one, and buffers are
//! reused. One timer per
//! connection bounds every request (as twemproxy keeps one tree of timeouts), not one per
//! request: replies come in request order, so the oldest request always has the earliest
//! deadline, and the watchdog re-arms at most once per timeout period. A timer per request
//! made the runtime wake its own event loop through an eventfd about every other request. Replies come back
//! in request order, so the reader matches each reply to the oldest pending job. A reply that
//! does not parse, bytes with no pending job, EOF or an I/O error kill the connection and fail
//! every pending job; [`Connection::kill`] (used on timeouts) does the same, so a late reply
//! can never be handed to the wrong request. A caller that stops waiting (its future dropped)
//! abandons its slot: the reply, when it comes, is dropped and the slot reused.

use std::collections::VecDeque;
use std::future::Future;
use std::ops::Range;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tailtrim_proto::number::parse_u64;
use tailtrim_proto::{parse_response, tokens, Parsed, Response};
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::task::AbortHandle;
use tokio::time::{Duration, Instant};

use crate::error::ClientError;

/// Read buffer growth step.
const READ_CHUNK: usize = 16 * 1024;
/// Room made in the read buffer at most at once for the rest of a value whose header has
/// arrived (a larger value grows the buffer as it comes).
const MAX_READ_AHEAD: usize = 4 * 1024 * 1024;
/// A write buffer grown past this (a batch of large values) is not kept for reuse.
const KEEP_WRITE_BUFFER: usize = 256 * 1024;

/// Which reply a request expects, so the reader knows where it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyShape {
    /// One reply item (storage, delete, arithmetic, touch, meta without `q`).
    Single,
    /// `VALUE` items (or `STAT` lines) until `END`; an error line also ends it.
    UntilEnd,
    /// Anything until an `MN` line, which is removed from the reply. Used for `noreply` and
    /// quiet meta requests, which the client follows with `mn\r\n` to keep the stream in step.
    UntilMetaNoop,
}

/// One `VALUE` item of a multiget reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueItem {
    /// The whole item: `VALUE …\r\n<data>\r\n`, ready to forward.
    pub item: Bytes,
    /// The key as the backend returned it, inside [`ValueItem::item`] (see
    /// [`ValueItem::key`]).
    pub key_at: Range<usize>,
    /// Client flags.
    pub flags: u32,
    /// CAS unique, for `gets`/`gats`.
    pub cas: Option<u64>,
    /// The data inside [`ValueItem::item`].
    pub data: Range<usize>,
}

impl ValueItem {
    /// The key as the backend returned it.
    pub fn key(&self) -> &[u8] {
        &self.item[self.key_at.clone()]
    }

    /// The value bytes.
    pub fn value(&self) -> Bytes {
        self.item.slice(self.data.clone())
    }
}

/// A complete reply as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawReply {
    /// The reply bytes (for `UntilMetaNoop`, without the closing `MN\r\n`).
    pub bytes: Bytes,
    /// The `VALUE` items, for `UntilEnd` replies.
    pub values: Vec<ValueItem>,
    /// The reply ended in `ERROR`, `CLIENT_ERROR …` or `SERVER_ERROR …`.
    pub error_line: bool,
}

/// A request written (or about to be) and waiting for its reply.
struct Pending {
    shape: ReplyShape,
    /// Its reply slot in [`Io::slots`].
    slot: u32,
    /// When the request times out: submitted + the connection's timeout.
    deadline: Instant,
}

/// Where one request's reply is handed from the reader (or a shutdown) to the caller.
enum Slot {
    /// Not in use (its index is in [`Io::free`]).
    Free,
    /// The caller waits; its waker, once it has polled.
    Waiting(Option<Waker>),
    /// The outcome, not yet taken by the caller.
    Ready(Result<RawReply, ClientError>),
    /// The caller stopped waiting: whoever completes the request frees the slot.
    Abandoned,
}

/// The reply slots of a connection, reused: a request takes one when submitted and frees it
/// when its caller has taken the reply (or, abandoned, when the reply came). At most the
/// requests in flight plus the abandoned ones still pending hold one.
#[derive(Default)]
struct Slots {
    slots: Vec<Slot>,
    free: Vec<u32>,
}

impl Slots {
    fn take(&mut self) -> u32 {
        match self.free.pop() {
            Some(index) => {
                self.slots[index as usize] = Slot::Waiting(None);
                index
            }
            None => {
                self.slots.push(Slot::Waiting(None));
                (self.slots.len() - 1) as u32
            }
        }
    }

    fn release(&mut self, index: u32) {
        self.slots[index as usize] = Slot::Free;
        self.free.push(index);
    }

    /// Hands `outcome` to the slot's caller: the waker to wake once the lock is released, or,
    /// for an abandoned slot, the outcome back to be dropped outside the lock.
    #[must_use]
    fn complete(&mut self, index: u32, outcome: Result<RawReply, ClientError>) -> Completed {
        let slot = &mut self.slots[index as usize];
        match std::mem::replace(slot, Slot::Free) {
            Slot::Waiting(waker) => {
                *slot = Slot::Ready(outcome);
                Completed::Wake(waker)
            }
            Slot::Abandoned | Slot::Free | Slot::Ready(_) => {
                self.free.push(index);
                Completed::Dropped(outcome)
            }
        }
    }
}

/// What completing a slot leaves to do once the lock is released.
enum Completed {
    Wake(Option<Waker>),
    /// An abandoned request's outcome, dropped after the lock.
    Dropped(Result<RawReply, ClientError>),
}

impl Completed {
    fn finish(self) {
        match self {
            Completed::Wake(Some(waker)) => waker.wake(),
            Completed::Wake(None) => {}
            Completed::Dropped(outcome) => drop(outcome),
        }
    }
}

/// The caller's end of one request: resolves to its reply, or to the error that failed it (a
/// timeout, a lost connection). Dropping it abandons the request's reply (the request itself
/// stays queued; kill the connection to stop it).
pub struct ReplyReceiver<'a> {
    shared: &'a Shared,
    slot: u32,
    done: bool,
}

impl Future for ReplyReceiver<'_> {
    type Output = Result<RawReply, ClientError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.done {
            return Poll::Ready(Err(self.shared.lost("reply already taken")));
        }
        let mut io = self.shared.io.lock();
        let slots = &mut io.slots;
        let slot = &mut slots.slots[self.slot as usize];
        match slot {
            Slot::Waiting(waker) => {
                match waker {
                    Some(waker) if waker.will_wake(cx.waker()) => {}
                    _ => *waker = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
            Slot::Ready(_) => {
                let Slot::Ready(outcome) = std::mem::replace(slot, Slot::Free) else {
                    unreachable!("matched Ready")
                };
                slots.free.push(self.slot);
                drop(io);
                self.done = true;
                Poll::Ready(outcome)
            }
            Slot::Free | Slot::Abandoned => {
                drop(io);
                self.done = true;
                Poll::Ready(Err(self.shared.lost("connection closed")))
            }
        }
    }
}

impl Drop for ReplyReceiver<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut io = self.shared.io.lock();
        let slot = &mut io.slots.slots[self.slot as usize];
        let outcome = match std::mem::replace(slot, Slot::Abandoned) {
            Slot::Ready(outcome) => {
                io.slots.release(self.slot);
                Some(outcome)
            }
            Slot::Waiting(_) | Slot::Abandoned => None,
            Slot::Free => {
                *slot = Slot::Free;
                None
            }
        };
        drop(io);
        drop(outcome);
    }
}

/// What callers, the writer and the reader share, always updated under one lock.
struct Io {
    /// Requests not yet handed to the socket.
    out: Vec<u8>,
    /// An emptied batch buffer, swapped with `out` by the caller that flushes it.
    spare: Vec<u8>,
    /// The socket, for callers that flush `out` themselves; dropped (closing it, with a
    /// reset) when the connection is shut.
    socket: Option<Arc<TcpStream>>,
    /// Requests submitted and not yet answered, oldest first (the one whose reply the reader
    /// is receiving stays here until the reply is complete).
    pending: VecDeque<Pending>,
    /// Their reply slots, and those of replies not yet taken.
    slots: Slots,
    /// A flush is in progress (a caller writing a batch, or the writer woken and not yet
    /// having found `out` empty): requests queued meanwhile go out with the next batch.
    flush_scheduled: bool,
    /// The watchdog waits for a request (nothing was pending when it last looked).
    watchdog_idle: bool,
    /// Set once the connection is dead: nothing may be queued any more.
    closed: bool,
}

struct Shared {
    backend: String,
    /// How long a request may wait for its reply.
    timeout: Duration,
    alive: AtomicBool,
    in_flight: AtomicUsize,
    io: Mutex<Io>,
    wake_writer: Notify,
    /// Told when a request is queued on a connection with nothing pending.
    wake_watchdog: Notify,
    tasks: Mutex<Vec<AbortHandle>>,
}

impl Shared {
    /// Marks the connection dead, stops its tasks and fails every pending request.
    fn shut(&self, error: impl Fn() -> ClientError) {
        self.shut_each(|_| error());
    }

    /// As [`Shared::shut`], with each pending request's error chosen from it.
    fn shut_each(&self, error: impl Fn(&Pending) -> ClientError) {
        self.alive.store(false, Ordering::Release);
        for task in self.tasks.lock().drain(..) {
            task.abort();
        }
        let mut completed = Vec::new();
        let socket;
        {
            let mut io = self.io.lock();
            io.closed = true;
            io.out = Vec::new();
            io.spare = Vec::new();
            socket = io.socket.take();
            let pending = std::mem::take(&mut io.pending);
            for job in pending {
                let failure = error(&job);
                completed.push(io.slots.complete(job.slot, Err(failure)));
            }
        }
        self.in_flight.store(0, Ordering::Relaxed);
        drop(socket);
        for done in completed {
            done.finish();
        }
    }

    /// Writes `batch` (taken from `out` by the caller, who set `flush_scheduled`) without
    /// waiting, then writes whatever other callers queued meanwhile; what the socket does not
    /// take at once is handed, in order, to the writer task. Clears `flush_scheduled` once
    /// `out` is found empty.
    fn flush(&self, socket: &TcpStream, mut batch: Vec<u8>) {
        loop {
            let result = socket.try_write(&batch);
            let mut io = self.io.lock();
            if io.closed {
                return;
            }
            match result {
                Ok(written) if written == batch.len() => {
                    batch.clear();
                    if io.out.is_empty() {
                        io.flush_scheduled = false;
                        if batch.capacity() <= KEEP_WRITE_BUFFER {
                            io.spare = batch;
                        }
                        return;
                    }
                    // Queued while this batch was written (another thread): write it too.
                    std::mem::swap(&mut io.out, &mut batch);
                }
                Ok(written) => {
                    // The rest, ahead of what was queued since, goes out through the writer.
                    batch.drain(..written);
                    batch.extend_from_slice(&io.out);
                    io.out = batch;
                    drop(io);
                    self.wake_writer.notify_one();
                    return;
                }
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                    batch.extend_from_slice(&io.out);
                    io.out = batch;
                    drop(io);
                    self.wake_writer.notify_one();
                    return;
                }
                Err(error) => {
                    drop(io);
                    let reason = error.to_string();
                    self.shut(|| self.lost(&reason));
                    return;
                }
            }
        }
    }

    fn lost(&self, reason: &str) -> ClientError {
        ClientError::ConnectionLost {
            backend: self.backend.clone(),
            reason: reason.to_string(),
        }
    }
}

/// A handle on one pipelined connection; cheap to clone.
#[derive(Clone)]
pub struct Connection {
    shared: Arc<Shared>,
    queue_limit: usize,
}

impl Connection {
    /// Wraps a connected stream, spawning its reader, writer and watchdog tasks on the current
    /// runtime; a request unanswered after `timeout` fails with [`ClientError::Timeout`] and
    /// kills the connection.
    pub fn start(
        stream: TcpStream,
        backend: String,
        queue_limit: usize,
        timeout: Duration,
    ) -> Connection {
        let _ = stream.set_nodelay(true);
        // Closed by a reset, not an orderly FIN: a connection given up on (a timeout, a lost
        // reply) may still hold requests in its send queue, which the kernel would keep
        // retransmitting after an orderly close. Behind a partition, a `set` the caller was
        // told had failed would then reach the backend after a later `set` of the same key
        // and bring the old value back (scripts/chaos.sh found it). A zero linger drops them.
        let _ = socket2::SockRef::from(&stream).set_linger(Some(std::time::Duration::ZERO));
        // One stream shared by the reader and the writer rather than split halves: a dropped
        // write half would shut the write side down (a FIN after whatever is still queued)
        // before the socket is closed, defeating the zero linger.
        let stream = Arc::new(stream);
        let shared = Arc::new(Shared {
            backend,
            timeout,
            alive: AtomicBool::new(true),
            in_flight: AtomicUsize::new(0),
            io: Mutex::new(Io {
                out: Vec::new(),
                spare: Vec::new(),
                socket: Some(stream.clone()),
                pending: VecDeque::new(),
                slots: Slots::default(),
                flush_scheduled: false,
                watchdog_idle: false,
                closed: false,
            }),
            wake_writer: Notify::new(),
            wake_watchdog: Notify::new(),
            tasks: Mutex::new(Vec::new()),
        });
        let reader = tokio::spawn(read_loop(stream.clone(), shared.clone()));
        let writer = tokio::spawn(write_loop(stream, shared.clone()));
        let watchdog = tokio::spawn(watch_deadlines(shared.clone()));
        {
            let mut tasks = shared.tasks.lock();
            tasks.push(reader.abort_handle());
            tasks.push(writer.abort_handle());
            tasks.push(watchdog.abort_handle());
        }
        // A task that already ended (a connection refused at once) aborted nothing: end it now.
        if !shared.alive.load(Ordering::Acquire) {
            shared.shut(|| shared.lost("connection closed"));
        }
        Connection {
            shared,
            queue_limit: queue_limit.max(1),
        }
    }

    /// Requests queued or waiting for their reply on this connection.
    pub fn in_flight(&self) -> usize {
        self.shared.in_flight.load(Ordering::Relaxed)
    }

    /// How long, at `now`, the oldest request still waiting for its reply has waited (zero
    /// when none): its deadline less the timeout, read under the connection's lock.
    pub fn oldest_age(&self, now: Instant) -> Duration {
        let io = self.shared.io.lock();
        io.pending.front().map_or(Duration::ZERO, |job| {
            (now + self.shared.timeout).saturating_duration_since(job.deadline)
        })
    }

    /// False once the connection failed or was killed.
    pub fn is_alive(&self) -> bool {
        self.shared.alive.load(Ordering::Acquire)
    }

    /// Closes the connection; every pending request fails with `ConnectionLost`.
    pub fn kill(&self) {
        self.shared.shut(|| self.shared.lost("connection closed"));
    }

    /// Queues a request (in the caller's task, no hand-off, no wait) and returns the receiver
    /// of its reply; the connection's writer sends it with the others queued in the same
    /// tick. The reply is bounded by the connection's timeout (the watchdog fails it with
    /// [`ClientError::Timeout`]); a caller that gives up earlier calls [`Connection::kill`].
    pub fn submit(
        &self,
        bytes: &[u8],
        shape: ReplyShape,
    ) -> Result<ReplyReceiver<'_>, ClientError> {
        self.submit_with(shape, |out| out.extend_from_slice(bytes))
    }

    /// As [`Connection::submit`], the request written by `write` straight into the
    /// connection's output buffer (no copy of it composed elsewhere). `write` runs under the
    /// connection's lock: it must only append the request.
    pub fn submit_with(
        &self,
        shape: ReplyShape,
        write: impl FnOnce(&mut Vec<u8>),
    ) -> Result<ReplyReceiver<'_>, ClientError> {
        let shared = &*self.shared;
        if shared.in_flight.load(Ordering::Relaxed) >= self.queue_limit {
            return Err(ClientError::Overloaded {
                backend: shared.backend.clone(),
                limit: self.queue_limit,
            });
        }
        let deadline = Instant::now() + shared.timeout;
        let (slot, flush, wake_watchdog) = {
            let mut io = shared.io.lock();
            if io.closed || !self.is_alive() {
                return Err(shared.lost("connection closed"));
            }
            let wake_watchdog = io.pending.is_empty() && io.watchdog_idle;
            if wake_watchdog {
                io.watchdog_idle = false;
            }
            let slot = io.slots.take();
            io.pending.push_back(Pending {
                shape,
                slot,
                deadline,
            });
            write(&mut io.out);
            shared.in_flight.fetch_add(1, Ordering::Relaxed);
            // Nobody flushing: this caller writes the batch itself (no hand-off to the writer
            // task); otherwise the request goes out with the flush in progress.
            let flush = if io.flush_scheduled {
                None
            } else {
                match io.socket.clone() {
                    Some(socket) => {
                        io.flush_scheduled = true;
                        let spare = std::mem::take(&mut io.spare);
                        Some((socket, std::mem::replace(&mut io.out, spare)))
                    }
                    None => None,
                }
            };
            (slot, flush, wake_watchdog)
        };
        if let Some((socket, batch)) = flush {
            shared.flush(&socket, batch);
        }
        if wake_watchdog {
            shared.wake_watchdog.notify_one();
        }
        Ok(ReplyReceiver {
            shared,
            slot,
            done: false,
        })
    }
}

/// Writes what callers queue, one batch per write; a write error kills the connection.
async fn write_loop(socket: Arc<TcpStream>, shared: Arc<Shared>) {
    let mut batch: Vec<u8> = Vec::new();
    let failure = 'run: loop {
        shared.wake_writer.notified().await;
        loop {
            {
                let mut io = shared.io.lock();
                if io.closed {
                    return;
                }
                if io.out.is_empty() {
                    io.flush_scheduled = false;
                    break;
                }
                std::mem::swap(&mut io.out, &mut batch);
            }
            if let Err(error) = write_all(&socket, &batch).await {
                break 'run error.to_string();
            }
            batch.clear();
            if batch.capacity() > KEEP_WRITE_BUFFER {
                batch = Vec::new();
            }
        }
    };
    shared.shut(|| shared.lost(&failure));
}

/// Fails the connection when its oldest request passes its deadline. It sleeps until the
/// deadline of the oldest request it saw; requests answered meanwhile do not wake it, so it
/// arms a timer at most once per timeout period while requests flow, and waits for the next
/// request without a timer when nothing is pending.
async fn watch_deadlines(shared: Arc<Shared>) {
    loop {
        let oldest = {
            let mut io = shared.io.lock();
            let oldest = io.pending.front().map(|job| job.deadline);
            io.watchdog_idle = oldest.is_none();
            oldest
        };
        match oldest {
            None => shared.wake_watchdog.notified().await,
            Some(deadline) if deadline <= Instant::now() => {
                let now = Instant::now();
                let after_ms = u64::try_from(shared.timeout.as_millis()).unwrap_or(u64::MAX);
                shared.shut_each(|job| {
                    if job.deadline <= now {
                        ClientError::Timeout {
                            backend: shared.backend.clone(),
                            after_ms,
                        }
                    } else {
                        shared.lost("closed after another request timed out")
                    }
                });
                return;
            }
            Some(deadline) => tokio::time::sleep_until(deadline).await,
        }
    }
}

/// Progress through one reply that may arrive in pieces.
struct ReplyProgress {
    shape: ReplyShape,
    offset: usize,
    values: Vec<PendingValue>,
}

/// A `VALUE` item located in the read buffer (offsets from the start of the reply).
struct PendingValue {
    key: Range<usize>,
    flags: u32,
    cas: Option<u64>,
    item: Range<usize>,
    data: Range<usize>,
}

enum Step {
    NeedMore,
    Done {
        consumed: usize,
        keep: usize,
        error_line: bool,
    },
    Malformed,
}

/// Largest value list a connection keeps between replies for the next one to reuse.
const KEEP_VALUE_SLOTS: usize = 1024;

impl ReplyProgress {
    #[cfg(test)]
    fn new(shape: ReplyShape) -> Self {
        ReplyProgress::reusing(shape, Vec::new())
    }

    /// A reply's progress reusing the value list a finished reply gave back (no allocation
    /// per reply once a connection has seen one of its size).
    fn reusing(shape: ReplyShape, mut values: Vec<PendingValue>) -> Self {
        values.clear();
        if values.capacity() > KEEP_VALUE_SLOTS {
            values = Vec::new();
        }
        ReplyProgress {
            shape,
            offset: 0,
            values,
        }
    }

    /// Bytes still missing from the item being received, when its header line (`VALUE … <bytes>`
    /// or `VA <bytes> …`) has arrived and says how many: the read buffer makes room for the
    /// whole value at once instead of growing (and copying what it holds) a chunk at a time.
    fn missing(&self, buf: &[u8]) -> usize {
        let rest = &buf[self.offset.min(buf.len())..];
        let size_token = if rest.starts_with(b"VALUE ") {
            3
        } else if rest.starts_with(b"VA ") {
            1
        } else {
            return 0;
        };
        let Some(line_end) = rest.windows(2).position(|pair| pair == b"\r\n") else {
            return 0;
        };
        let size = tokens(&rest[..line_end])
            .nth(size_token)
            .and_then(parse_u64)
            .and_then(|size| usize::try_from(size).ok())
            .unwrap_or(0);
        (line_end + 2 + size + 2).saturating_sub(rest.len())
    }

    fn advance(&mut self, buf: &[u8]) -> Step {
        loop {
            let rest = &buf[self.offset..];
            let (response, consumed) = match parse_response(rest) {
                Parsed::Incomplete => return Step::NeedMore,
                Parsed::Invalid { .. } => return Step::Malformed,
                Parsed::Complete { value, consumed } => (value, consumed),
            };
            let start = self.offset;
            let end = start + consumed;
            self.offset = end;
            let is_error = matches!(
                response,
                Response::Error | Response::ClientError(_) | Response::ServerError(_)
            );
            match self.shape {
                ReplyShape::Single => {
                    return Step::Done {
                        consumed: end,
                        keep: end,
                        error_line: is_error,
                    }
                }
                ReplyShape::UntilEnd => match response {
                    Response::Value {
                        key,
                        flags,
                        cas,
                        data,
                    } => {
                        let data = (data.start + start)..(data.end + start);
                        let key = (key.start + start)..(key.end + start);
                        self.values.push(PendingValue {
                            key,
                            flags,
                            cas,
                            item: start..end,
                            data,
                        });
                    }
                    Response::Stat { .. } => {}
                    Response::End => {
                        return Step::Done {
                            consumed: end,
                            keep: end,
                            error_line: false,
                        }
                    }
                    _ if is_error => {
                        return Step::Done {
                            consumed: end,
                            keep: end,
                            error_line: true,
                        }
                    }
                    _ => return Step::Malformed,
                },
                ReplyShape::UntilMetaNoop => {
                    if let Response::MetaStatus { code, .. } = &response {
                        if code == b"MN" {
                            return Step::Done {
                                consumed: end,
                                keep: start,
                                error_line: false,
                            };
                        }
                    }
                }
            }
        }
    }

    /// The reply, and the emptied value list for [`ReplyProgress::reusing`].
    fn finish(mut self, reply: Bytes, error_line: bool) -> (RawReply, Vec<PendingValue>) {
        let values = self
            .values
            .drain(..)
            .map(|value| {
                let start = value.item.start;
                ValueItem {
                    key_at: (value.key.start - start)..(value.key.end - start),
                    flags: value.flags,
                    cas: value.cas,
                    data: (value.data.start - start)..(value.data.end - start),
                    item: reply.slice(value.item),
                }
            })
            .collect();
        let reply = RawReply {
            bytes: reply,
            values,
            error_line,
        };
        (reply, self.values)
    }
}

/// Writes all of `data` to a stream shared with its reader.
async fn write_all(socket: &TcpStream, mut data: &[u8]) -> std::io::Result<()> {
    while !data.is_empty() {
        socket.writable().await?;
        match socket.try_write(data) {
            Ok(written) => data = &data[written..],
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

async fn read_loop(socket: Arc<TcpStream>, shared: Arc<Shared>) {
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    // The reply being received: the oldest pending request's, which stays pending (and under
    // the watchdog) until its reply is complete.
    let mut current: Option<ReplyProgress> = None;
    // The last finished reply's value list, reused by the next.
    let mut spare_values: Vec<PendingValue> = Vec::new();
    // The oldest pending request's shape, when the previous reply's lock already saw it.
    let mut next_shape: Option<ReplyShape> = None;
    let failure = loop {
        // Complete as many replies as the buffer holds.
        let stop = loop {
            if current.is_none() {
                if buf.is_empty() {
                    break None;
                }
                let shape = match next_shape.take() {
                    Some(shape) => Some(shape),
                    None => shared.io.lock().pending.front().map(|job| job.shape),
                };
                match shape {
                    Some(shape) => {
                        current = Some(ReplyProgress::reusing(
                            shape,
                            std::mem::take(&mut spare_values),
                        ))
                    }
                    None => break Some("unsolicited bytes from backend"),
                }
            }
            let Some(progress) = current.as_mut() else {
                break None;
            };
            match progress.advance(&buf) {
                Step::NeedMore => break None,
                Step::Malformed => break Some("malformed reply"),
                Step::Done {
                    consumed,
                    keep,
                    error_line,
                } => {
                    let mut reply = buf.split_to(consumed);
                    reply.truncate(keep);
                    let Some(progress) = current.take() else {
                        break None;
                    };
                    let (reply, values) = progress.finish(reply.freeze(), error_line);
                    spare_values = values;
                    let completed = {
                        let mut io = shared.io.lock();
                        let job = io.pending.pop_front();
                        if !buf.is_empty() {
                            next_shape = io.pending.front().map(|job| job.shape);
                        }
                        job.map(|job| io.slots.complete(job.slot, Ok(reply)))
                    };
                    if let Some(completed) = completed {
                        shared.in_flight.fetch_sub(1, Ordering::Relaxed);
                        completed.finish();
                    }
                }
            }
        };
        if let Some(reason) = stop {
            break reason.to_string();
        }
        let missing = current
            .as_ref()
            .map_or(0, |progress| progress.missing(&buf))
            .min(MAX_READ_AHEAD);
        if buf.capacity() - buf.len() < missing.max(READ_CHUNK / 4) {
            buf.reserve(missing.max(READ_CHUNK));
        }
        if let Err(error) = socket.readable().await {
            break error.to_string();
        }
        // A read that leaves room in the buffer drained the socket: its readiness is cleared
        // (as tokio's own `poll_read` does), so the next turn waits for the next event instead
        // of trying a read that would fail with EAGAIN.
        let room = buf.capacity() - buf.len();
        let mut got = 0;
        let read = socket.try_io(Interest::READABLE, || {
            got = socket.try_read_buf(&mut buf)?;
            if got > 0 && got < room {
                return Err(std::io::ErrorKind::WouldBlock.into());
            }
            Ok(())
        });
        match read {
            Ok(()) if got == 0 => break "backend closed the connection".to_string(),
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(error) => break error.to_string(),
        }
    };
    let error = || {
        if failure == "malformed reply" || failure == "unsolicited bytes from backend" {
            ClientError::Protocol {
                backend: shared.backend.clone(),
            }
        } else {
            shared.lost(&failure)
        }
    };
    shared.shut(error);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(shape: ReplyShape, pieces: &[&[u8]]) -> Option<RawReply> {
        let mut progress = ReplyProgress::new(shape);
        let mut buf = Vec::new();
        for piece in pieces {
            buf.extend_from_slice(piece);
            match progress.advance(&buf) {
                Step::NeedMore => continue,
                Step::Malformed => return None,
                Step::Done {
                    consumed,
                    keep,
                    error_line,
                } => {
                    assert_eq!(consumed, buf.len(), "test input holds exactly one reply");
                    let reply = Bytes::copy_from_slice(&buf[..keep]);
                    return Some(progress.finish(reply, error_line).0);
                }
            }
        }
        None
    }

    /// A connection to a fake backend answering each `get <key>` line with `VALUE <key> 0 1`
    /// and `x`, once `hold` lines have arrived (so a test can drop a waiter before its reply).
    async fn echo_backend(hold: usize) -> Connection {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (socket, _) = listener.accept().await.unwrap();
            let (read, mut write) = socket.into_split();
            let mut lines = BufReader::new(read).lines();
            let mut held = Vec::new();
            while let Ok(Some(line)) = lines.next_line().await {
                let key = line.trim_start_matches("get ").to_string();
                held.push(format!("VALUE {key} 0 1\r\nx\r\nEND\r\n"));
                if held.len() >= hold {
                    for reply in held.drain(..) {
                        write.write_all(reply.as_bytes()).await.unwrap();
                    }
                }
            }
        });
        let stream = TcpStream::connect(address).await.unwrap();
        Connection::start(stream, address.to_string(), 16, Duration::from_secs(5))
    }

    fn get(connection: &Connection, key: u8) -> ReplyReceiver<'_> {
        let request = [b'g', b'e', b't', b' ', key, b'\r', b'\n'];
        connection.submit(&request, ReplyShape::UntilEnd).unwrap()
    }

    #[tokio::test]
    async fn an_abandoned_reply_goes_to_nobody_and_its_slot_is_reused() {
        let connection = echo_backend(2).await;
        let first = get(&connection, b'a');
        let second = get(&connection, b'b');
        drop(first);
        let reply = second.await.unwrap();
        assert_eq!(reply.values[0].key(), b"b");
        for key in [b'c', b'd', b'e', b'f'] {
            let (one, two) = tokio::join!(get(&connection, key), get(&connection, key));
            assert_eq!(one.unwrap().values[0].key(), [key]);
            assert_eq!(two.unwrap().values[0].key(), [key]);
        }
        let io = connection.shared.io.lock();
        assert!(io.slots.slots.len() <= 2, "{} slots", io.slots.slots.len());
        assert_eq!(io.slots.free.len(), io.slots.slots.len());
        assert!(connection.is_alive());
    }

    /// Requests larger than the socket takes at once (the backend reads nothing at first):
    /// the caller writes what it can, the writer task the rest, and the backend must still see
    /// every request whole and in order, followed by the ones queued meanwhile.
    #[tokio::test]
    async fn a_batch_the_socket_does_not_take_at_once_arrives_whole_and_in_order() {
        use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
        const REQUESTS: usize = 24;
        const SIZE: usize = 256 * 1024;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let backend = tokio::spawn(async move {
            let (socket, _) = listener.accept().await.unwrap();
            tokio::time::sleep(Duration::from_millis(300)).await;
            let (read, mut write) = socket.into_split();
            let mut reader = BufReader::new(read);
            let mut seen = Vec::new();
            for _ in 0..REQUESTS {
                let mut line = String::new();
                reader.read_line(&mut line).await.unwrap();
                let index: usize = line.split(' ').nth(1).unwrap()[1..].parse().unwrap();
                let mut data = vec![0u8; SIZE + 2];
                reader.read_exact(&mut data).await.unwrap();
                assert!(
                    data[..SIZE].iter().all(|&b| b == index as u8),
                    "request {index}"
                );
                assert_eq!(&data[SIZE..], b"\r\n");
                seen.push(index);
                write.write_all(b"STORED\r\n").await.unwrap();
            }
            seen
        });
        let stream = TcpStream::connect(address).await.unwrap();
        let connection = Connection::start(
            stream,
            address.to_string(),
            REQUESTS,
            Duration::from_secs(10),
        );
        let receivers: Vec<_> = (0..REQUESTS)
            .map(|index| {
                let mut request = format!("set k{index} 0 0 {SIZE}\r\n").into_bytes();
                request.resize(request.len() + SIZE, index as u8);
                request.extend_from_slice(b"\r\n");
                connection.submit(&request, ReplyShape::Single).unwrap()
            })
            .collect();
        for receiver in receivers {
            assert_eq!(&receiver.await.unwrap().bytes[..], b"STORED\r\n");
        }
        assert_eq!(backend.await.unwrap(), (0..REQUESTS).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_killed_connection_fails_its_waiters() {
        let connection = echo_backend(usize::MAX).await;
        let waiting = get(&connection, b'a');
        let abandoned = get(&connection, b'b');
        drop(abandoned);
        connection.kill();
        assert!(matches!(
            waiting.await,
            Err(ClientError::ConnectionLost { .. })
        ));
        let io = connection.shared.io.lock();
        assert_eq!(io.slots.free.len(), io.slots.slots.len());
    }

    #[test]
    fn a_reused_value_list_carries_nothing_into_the_next_reply() {
        let first: &[u8] = b"VALUE a 0 1\r\nx\r\nVALUE b 0 1\r\ny\r\nEND\r\n";
        let mut progress = ReplyProgress::new(ReplyShape::UntilEnd);
        assert!(matches!(progress.advance(first), Step::Done { .. }));
        let (reply, spare) = progress.finish(Bytes::from_static(first), false);
        assert_eq!(reply.values.len(), 2);
        assert!(spare.capacity() >= 2);
        let second: &[u8] = b"VALUE c 0 1\r\nz\r\nEND\r\n";
        let mut progress = ReplyProgress::reusing(ReplyShape::UntilEnd, spare);
        assert!(matches!(progress.advance(second), Step::Done { .. }));
        let (reply, _) = progress.finish(Bytes::from_static(second), false);
        assert_eq!(reply.values.len(), 1);
        assert_eq!(reply.values[0].key(), b"c");
        assert_eq!(&reply.values[0].item[..], b"VALUE c 0 1\r\nz\r\n");
    }

    #[test]
    fn multiget_reply_split_anywhere_yields_items() {
        let whole: &[u8] = b"VALUE a 5 2\r\nhi\r\nVALUE bb 0 3 9\r\nxyz\r\nEND\r\n";
        for cut in 1..whole.len() {
            let reply = run(ReplyShape::UntilEnd, &[&whole[..cut], &whole[cut..]]).unwrap();
            assert_eq!(reply.values.len(), 2);
            assert_eq!(&reply.values[0].item[..], b"VALUE a 5 2\r\nhi\r\n");
            assert_eq!(&reply.values[0].value()[..], b"hi");
            assert_eq!(reply.values[1].cas, Some(9));
            assert_eq!(&reply.values[1].value()[..], b"xyz");
            assert!(!reply.error_line);
        }
    }

    #[test]
    fn a_value_whose_header_arrived_says_how_many_bytes_are_missing() {
        let mut progress = ReplyProgress::new(ReplyShape::UntilEnd);
        assert_eq!(
            progress.missing(b"VALUE a 0 100000"),
            0,
            "header not complete"
        );
        assert_eq!(progress.missing(b"VALUE a 0 100000\r\nxy"), 100_000);
        assert_eq!(progress.missing(b"VALUE a 0 10 77\r\n0123456789\r"), 1);
        assert_eq!(progress.missing(b"VA 7 f0\r\nabc"), 6);
        assert_eq!(progress.missing(b"END\r\n"), 0);
        // Past a finished item, the next one's header counts.
        let first: &[u8] = b"VALUE a 0 1\r\nx\r\nVALUE b 0 50\r\n";
        assert!(matches!(progress.advance(first), Step::NeedMore));
        assert_eq!(progress.missing(first), 52);
    }

    #[test]
    fn error_line_ends_a_multiget_and_junk_is_malformed() {
        let reply = run(ReplyShape::UntilEnd, &[b"SERVER_ERROR out of memory\r\n"]).unwrap();
        assert!(reply.error_line);
        assert!(run(ReplyShape::UntilEnd, &[b"STORED\r\n"]).is_none());
    }

    #[test]
    fn until_meta_noop_strips_the_mn_line() {
        let reply = run(
            ReplyShape::UntilMetaNoop,
            &[b"VA 2 k\r\nhi\r\nHD\r\nMN\r\n"],
        )
        .unwrap();
        assert_eq!(&reply.bytes[..], b"VA 2 k\r\nhi\r\nHD\r\n");
        let empty = run(ReplyShape::UntilMetaNoop, &[b"MN\r\n"]).unwrap();
        assert!(empty.bytes.is_empty());
    }
}
