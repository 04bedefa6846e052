//! A worker thread: one mio event loop owning a set of connections (and,
//! when UDP is on, its own `SO_REUSEPORT` UDP socket).
//!
//! ```text
//!   acceptor ──(channel + waker)──► worker: poll ─► read ─► parse ─► execute ─► ReplyBuf ─► writev
//! ```
//!
//! Memory per connection is bounded: the read buffer never grows past
//! `max_connection_buffer` (a request can never need more, since values over
//! `-I` are swallowed, not buffered), and a connection whose pending output
//! exceeds [`OUTPUT_HIGH_WATER`] stops being read until the client drains it.

use std::io::{self, IoSlice, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::{Buf, BytesMut};
use crossbeam_channel::Receiver;
use mio::net::{TcpStream, UdpSocket};
use mio::{Events, Interest, Poll, Token, Waker};
use tailtrim_proto::reply::{self, ReplyBuf};
use tailtrim_proto::udp::{split_reply, FrameHeader, HEADER_LEN};
use tailtrim_proto::{parse_request, Limits, Parsed};

use crate::exec::{count_read, count_written, execute, ExecContext, Flow};
use crate::shared::{unix_now, Shared};

/// Token of the worker's waker.
pub const WAKER_TOKEN: Token = Token(usize::MAX);
/// Token of the worker's UDP socket.
const UDP_TOKEN: Token = Token(usize::MAX - 1);
/// Stop parsing a connection's requests while this much output is pending.
pub const OUTPUT_HIGH_WATER: usize = 4 * 1024 * 1024;
/// Bytes read per `read` call.
const READ_CHUNK: usize = 64 * 1024;
/// Most slices handed to one `writev`.
const MAX_IOVECS: usize = 64;

/// One client connection.
struct Connection {
    stream: TcpStream,
    peer: SocketAddr,
    input: BytesMut,
    output: ReplyBuf,
    /// Bytes of a rejected data block still to discard.
    swallow: usize,
    /// Close once output is flushed.
    closing: bool,
    /// Waiting for the client to drain output before reading more.
    output_blocked: bool,
    /// Currently registered for writable events.
    wants_write: bool,
    /// Reading stopped before the socket said "would block" (buffer full or
    /// output blocked), so more input may be waiting without a new event.
    socket_may_have_more: bool,
}

/// What a worker needs at start.
pub struct WorkerSetup {
    /// Worker index.
    pub id: usize,
    /// Shared server state.
    pub shared: Arc<Shared>,
    /// New connections from the acceptor.
    pub incoming: Receiver<(TcpStream, SocketAddr)>,
    /// The worker's poll (its waker is registered on it).
    pub poll: Poll,
    /// Its UDP socket, if UDP is enabled.
    pub udp: Option<UdpSocket>,
}

/// Creates a poll and its waker for a worker.
pub fn poll_with_waker() -> io::Result<(Poll, Arc<Waker>)> {
    let poll = Poll::new()?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER_TOKEN)?);
    Ok((poll, waker))
}

/// Runs the worker's event loop until shutdown.
pub fn run(mut setup: WorkerSetup) -> io::Result<()> {
    let shared = Arc::clone(&setup.shared);
    let limits = Limits {
        item_size_max: shared.config.storage.item_size_max as usize,
    };
    let max_buffer = shared.config.server.max_connection_buffer;
    let mut connections: Vec<Option<Connection>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut events = Events::with_capacity(1024);
    if let Some(udp) = setup.udp.as_mut() {
        setup
            .poll
            .registry()
            .register(udp, UDP_TOKEN, Interest::READABLE)?;
    }
    let verbose = shared.config.server.verbose;
    while !shared.stopping() {
        if let Err(e) = setup.poll.poll(&mut events, None) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        let now = unix_now();
        let ctx = ExecContext {
            shared: &shared,
            counters: &shared.counters[setup.id],
            now,
        };
        for event in events.iter() {
            match event.token() {
                WAKER_TOKEN => {
                    while let Ok((stream, peer)) = setup.incoming.try_recv() {
                        let mut stream = stream;
                        let _ = stream.set_nodelay(true);
                        let slot = free.pop().unwrap_or_else(|| {
                            connections.push(None);
                            connections.len() - 1
                        });
                        if let Err(e) = setup.poll.registry().register(
                            &mut stream,
                            Token(slot),
                            Interest::READABLE,
                        ) {
                            eprintln!("worker {}: cannot register connection: {e}", setup.id);
                            free.push(slot);
                            shared.curr_connections.fetch_sub(1, Ordering::Relaxed);
                            continue;
                        }
                        if verbose > 0 {
                            eprintln!("<{slot} new client connection from {peer}");
                        }
                        connections[slot] = Some(Connection {
                            stream,
                            peer,
                            input: BytesMut::with_capacity(4096),
                            output: ReplyBuf::new(),
                            swallow: 0,
                            closing: false,
                            output_blocked: false,
                            wants_write: false,
                            socket_may_have_more: true,
                        });
                        // Data may already be waiting.
                        serve(
                            &mut connections,
                            slot,
                            &ctx,
                            &limits,
                            max_buffer,
                            &setup.poll,
                        );
                    }
                }
                UDP_TOKEN => {
                    if let Some(udp) = setup.udp.as_ref() {
                        serve_udp(udp, &ctx, &limits);
                    }
                }
                Token(slot) => {
                    serve(
                        &mut connections,
                        slot,
                        &ctx,
                        &limits,
                        max_buffer,
                        &setup.poll,
                    );
                }
            }
        }
        // Reap closed connections.
        for (slot, entry) in connections.iter_mut().enumerate() {
            let done = entry
                .as_ref()
                .is_some_and(|c| c.closing && c.output.is_empty());
            if done {
                if let Some(mut conn) = entry.take() {
                    let _ = setup.poll.registry().deregister(&mut conn.stream);
                    if verbose > 0 {
                        eprintln!("<{slot} connection closed ({})", conn.peer);
                    }
                }
                free.push(slot);
                shared.curr_connections.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
    Ok(())
}

/// Handles readiness on one connection: read, execute, write.
fn serve(
    connections: &mut [Option<Connection>],
    slot: usize,
    ctx: &ExecContext<'_>,
    limits: &Limits,
    max_buffer: usize,
    poll: &Poll,
) {
    let Some(Some(conn)) = connections.get_mut(slot) else {
        return;
    };
    while !conn.closing {
        let eof = match read_available(conn, ctx, max_buffer) {
            Ok(eof) => eof,
            Err(_) => {
                close_now(conn);
                return;
            }
        };
        process(conn, ctx, limits);
        if conn.closing {
            break;
        }
        if eof {
            // Answer what was sent before the half-close, then close.
            conn.closing = true;
            break;
        }
        if conn.input.len() >= max_buffer && !conn.output_blocked {
            // A request that cannot fit: memcached would have closed too.
            close_now(conn);
            return;
        }
        flush(conn, ctx);
        if conn.output.len() > OUTPUT_HIGH_WATER {
            conn.output_blocked = true;
            break;
        }
        conn.output_blocked = false;
        // Edge-triggered: keep going until the socket has nothing more.
        if !conn.socket_may_have_more {
            break;
        }
    }
    flush(conn, ctx);
    let want_write = !conn.output.is_empty();
    if want_write != conn.wants_write {
        let interest = if want_write {
            Interest::READABLE | Interest::WRITABLE
        } else {
            Interest::READABLE
        };
        if poll
            .registry()
            .reregister(&mut conn.stream, Token(slot), interest)
            .is_ok()
        {
            conn.wants_write = want_write;
        }
    }
}

/// Reads until the socket would block or the buffer is full. Returns true on EOF.
fn read_available(
    conn: &mut Connection,
    ctx: &ExecContext<'_>,
    max_buffer: usize,
) -> io::Result<bool> {
    conn.socket_may_have_more = false;
    if conn.output_blocked {
        conn.socket_may_have_more = true;
        return Ok(false);
    }
    loop {
        if conn.input.len() >= max_buffer {
            conn.socket_may_have_more = true;
            return Ok(false);
        }
        let room = {
            let default_room = (max_buffer - conn.input.len()).min(READ_CHUNK);
            crate::buffers::next_read_room(&mut conn.input, default_room)
        };
        if room == 0 {
            // Complete requests are buffered: process them first.
            conn.socket_may_have_more = true;
            return Ok(false);
        }
        conn.input.reserve(room);
        let spare = &mut conn.input.spare_capacity_mut()[..room];
        // SAFETY: `read` on a socket only writes into the slice (the kernel
        // copies into it); we expose exactly the `n` bytes it reports written.
        let target =
            unsafe { std::slice::from_raw_parts_mut(spare.as_mut_ptr().cast::<u8>(), spare.len()) };
        match conn.stream.read(target) {
            Ok(0) => return Ok(true),
            Ok(n) => {
                let start = conn.input.len();
                // SAFETY: the first `n` spare bytes were initialised by `read`.
                unsafe { conn.input.set_len(start + n) };
                count_read(ctx.counters, n);
                if conn.swallow > 0 {
                    swallow(conn);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

fn swallow(conn: &mut Connection) {
    let n = conn.swallow.min(conn.input.len());
    conn.input.advance(n);
    conn.swallow -= n;
}

/// Parses and executes every complete request in the input buffer.
fn process(conn: &mut Connection, ctx: &ExecContext<'_>, limits: &Limits) {
    loop {
        if conn.swallow > 0 {
            swallow(conn);
            if conn.swallow > 0 {
                return;
            }
        }
        if conn.output.len() > OUTPUT_HIGH_WATER {
            // Complete requests may still be buffered: once output drains,
            // the serve loop must come back for them (no socket event will).
            conn.output_blocked = true;
            conn.socket_may_have_more = true;
            return;
        }
        if conn.input.is_empty() {
            return;
        }
        match parse_request(&conn.input, limits) {
            Parsed::Incomplete => return,
            Parsed::Complete { value, consumed } => {
                let frame = conn.input.split_to(consumed).freeze();
                if execute(value, &frame, ctx, &mut conn.output) == Flow::Close {
                    conn.closing = true;
                    return;
                }
            }
            Parsed::Invalid { error, consumed } => {
                conn.input.advance(consumed.min(conn.input.len()));
                if error.closes_connection() {
                    conn.closing = true;
                    conn.input.clear();
                    return;
                }
                if let tailtrim_proto::ProtoError::TooLarge {
                    unlink_key: Some(key),
                    ..
                } = &error
                {
                    ctx.shared.store.delete(key, ctx.now);
                }
                reply::error(&mut conn.output, &error);
                conn.swallow = error.swallow();
            }
        }
    }
}

/// Writes as much pending output as the socket takes.
fn flush(conn: &mut Connection, ctx: &ExecContext<'_>) {
    while !conn.output.is_empty() {
        let slices: Vec<IoSlice<'_>> = conn
            .output
            .chunks()
            .take(MAX_IOVECS)
            .map(|c| IoSlice::new(c))
            .collect();
        match conn.stream.write_vectored(&slices) {
            Ok(0) => {
                close_now(conn);
                return;
            }
            Ok(n) => {
                count_written(ctx.counters, n);
                conn.output.advance(n);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => {
                close_now(conn);
                return;
            }
        }
    }
    if conn.output_blocked && conn.output.len() <= OUTPUT_HIGH_WATER / 2 {
        conn.output_blocked = false;
        conn.socket_may_have_more = true;
    }
}

fn close_now(conn: &mut Connection) {
    conn.closing = true;
    conn.output.clear();
    let _ = conn.stream.shutdown(std::net::Shutdown::Both);
}

/// Serves every datagram waiting on the worker's UDP socket.
pub fn serve_udp(socket: &UdpSocket, ctx: &ExecContext<'_>, limits: &Limits) {
    let mut datagram = vec![0u8; 65536];
    loop {
        let (len, peer) = match socket.recv_from(&mut datagram) {
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        count_read(ctx.counters, len);
        let Some(header) = FrameHeader::parse(&datagram[..len]) else {
            continue;
        };
        let mut output = ReplyBuf::new();
        if header.total != 1 || header.sequence != 0 {
            reply::line(
                &mut output,
                b"SERVER_ERROR multi-packet request not supported",
            );
        } else {
            let mut input = BytesMut::from(&datagram[HEADER_LEN..len]);
            while !input.is_empty() {
                match parse_request(&input, limits) {
                    Parsed::Incomplete => break,
                    Parsed::Complete { value, consumed } => {
                        let frame = input.split_to(consumed).freeze();
                        if execute(value, &frame, ctx, &mut output) == Flow::Close {
                            break;
                        }
                    }
                    Parsed::Invalid { error, consumed } => {
                        input.advance(consumed.min(input.len()));
                        reply::error(&mut output, &error);
                        if error.swallow() > 0 || error.closes_connection() {
                            break;
                        }
                    }
                }
            }
        }
        let reply_bytes = output.take_contiguous();
        let Some(grams) = split_reply(header.request_id, &reply_bytes) else {
            continue;
        };
        for gram in grams {
            if let Ok(n) = socket.send_to(&gram, peer) {
                count_written(ctx.counters, n);
            }
        }
    }
}
