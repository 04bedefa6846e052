//! The encrypting transport of a session on a TLS listener (`-Z`): a rustls
//! [`ServerConnection`] between the socket and the session's plaintext buffers, driven
//! without blocking from the runtime's epoll loop.
//!
//! ```text
//!   socket ─recv─► read_tls ─► process_new_packets ─► reader() ─► ReadSide::input
//!   WriteSide::out ─(≤ ssl_wbuf_size at a time)─► writer() ─► write_tls ─send─► socket
//! ```
//!
//! Output accounting: plaintext handed to rustls stays at the front of the session's
//! output (`encrypted_ahead` bytes of it) until all of its ciphertext is written, so
//! "output pending" means the same for both transports and the runtime's checks of
//! `out` need no TLS case. Memory per connection is bounded: rustls holds at most one
//! record of unprocessed input and its plaintext limit, and at most one `ssl_wbuf_size`
//! chunk of output; a handshake that never finishes completes no command, so the idle
//! timeout closes it, and `-c` bounds how many there are.

use std::io::{self, Read, Write};
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;

use tailtrim_proto::reply::ReplyBuf;
use tailtrim_tls::rustls::HandshakeKind;
use tailtrim_tls::ServerConnection;

use crate::shared::Shared;

/// How a write attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Everything was written.
    Done,
    /// The socket is full; the rest waits.
    WouldBlock,
    /// The peer is gone (an error, or a write that took nothing): close.
    Failed,
}

/// A session's TLS state (behind the connection's `tls` lock, taken after `read` and
/// `write`, never before them).
pub struct TlsSession {
    conn: ServerConnection,
    /// Bytes at the front of the session's output already handed to rustls; dropped from
    /// the output once their ciphertext is all written.
    encrypted_ahead: usize,
    /// Most plaintext handed to rustls at once (`ssl_wbuf_size`).
    chunk: usize,
    /// The handshake finished (counted once).
    established: bool,
    /// Kernel receive time of the latest ciphertext read.
    latest_arrival: Option<u64>,
}

/// A socket as `io::Read` for `read_tls`, keeping the kernel receive stamp.
struct SocketReader {
    fd: RawFd,
    arrival: Option<u64>,
}

impl Read for SocketReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let (n, arrival) = crate::rxtime::recv_with_arrival(self.fd, buf)?;
        if arrival.is_some() {
            self.arrival = arrival;
        }
        Ok(n)
    }
}

/// A socket as `io::Write` for `write_tls`.
struct SocketWriter(RawFd);

impl Write for SocketWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // SAFETY: `buf` is valid for `buf.len()` bytes; MSG_NOSIGNAL keeps a closed peer
        // from raising SIGPIPE.
        let sent = unsafe {
            libc::send(
                self.0,
                buf.as_ptr().cast::<libc::c_void>(),
                buf.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if sent < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(sent as usize)
        }
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        // SAFETY: `IoSlice` is ABI-compatible with `iovec`; the message only points at them.
        let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
        message.msg_iov = bufs.as_ptr() as *mut libc::iovec;
        message.msg_iovlen = bufs.len() as _;
        // SAFETY: `message` points at `bufs`, valid for this call.
        let sent = unsafe { libc::sendmsg(self.0, &message, libc::MSG_NOSIGNAL) };
        if sent < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(sent as usize)
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl TlsSession {
    /// A session that has not shaken hands yet, handing at most `chunk` bytes of
    /// plaintext to TLS at a time.
    pub fn new(mut conn: ServerConnection, chunk: usize) -> TlsSession {
        // Ciphertext buffered for sending stays within about one chunk.
        conn.set_buffer_limit(Some(chunk * 2));
        TlsSession {
            conn,
            encrypted_ahead: 0,
            chunk: chunk.max(1024),
            established: false,
            latest_arrival: None,
        }
    }

    /// True while the handshake is under way.
    pub fn is_handshaking(&self) -> bool {
        self.conn.is_handshaking()
    }

    /// True when TLS has bytes of its own to send (handshake, alert, tickets) that no
    /// plaintext output stands for.
    pub fn wants_write(&self) -> bool {
        self.conn.wants_write()
    }

    /// Reads plaintext into `target` the way `recv` would: `Ok((0, _))` at the end of
    /// input, `Ok((n, arrival))` with `n` plaintext bytes and the kernel receive stamp of
    /// the ciphertext, `WouldBlock` when neither buffered plaintext nor socket input is
    /// there. A TLS error (a bad handshake, a plaintext client) is an `InvalidData`
    /// error; the alert rustls wants to send is written first, best effort.
    pub fn recv(
        &mut self,
        fd: RawFd,
        target: &mut [u8],
        shared: &Shared,
    ) -> io::Result<(usize, Option<u64>)> {
        loop {
            match self.conn.reader().read(target) {
                Ok(0) => return Ok((0, None)),
                Ok(n) => return Ok((n, self.latest_arrival)),
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => return Ok((0, None)),
                Err(error) => return Err(error),
            }
            let mut socket = SocketReader { fd, arrival: None };
            match self.conn.read_tls(&mut socket) {
                Ok(0) => return Ok((0, None)),
                Ok(_) => {
                    if socket.arrival.is_some() {
                        self.latest_arrival = socket.arrival;
                    }
                }
                Err(error) => return Err(error),
            }
            if let Err(error) = self.conn.process_new_packets() {
                if self.conn.is_handshaking() {
                    shared.ssl_handshake_errors.fetch_add(1, Ordering::Relaxed);
                }
                // The alert, if rustls made one; the connection closes either way.
                let mut writer = SocketWriter(fd);
                while self.conn.wants_write() {
                    if self.conn.write_tls(&mut writer).is_err() {
                        break;
                    }
                }
                return Err(io::Error::new(io::ErrorKind::InvalidData, error));
            }
            if !self.established && !self.conn.is_handshaking() {
                self.established = true;
                self.count_new_session(shared);
            }
        }
    }

    fn count_new_session(&self, shared: &Shared) {
        let resumed = matches!(self.conn.handshake_kind(), Some(HandshakeKind::Resumed));
        let caching = shared
            .tls
            .as_ref()
            .is_some_and(|tls| tls.options().session_cache);
        if caching && !resumed {
            shared.ssl_new_sessions.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Writes pending ciphertext, then encrypts and writes `out` chunk by chunk until it
    /// is all written or the socket would block. `written` is told the plaintext bytes
    /// whose ciphertext has left.
    pub fn flush(
        &mut self,
        fd: RawFd,
        out: &mut ReplyBuf,
        mut written: impl FnMut(usize),
    ) -> WriteOutcome {
        let mut socket = SocketWriter(fd);
        loop {
            while self.conn.wants_write() {
                match self.conn.write_tls(&mut socket) {
                    Ok(0) => return WriteOutcome::Failed,
                    Ok(_) => {}
                    Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                        return WriteOutcome::WouldBlock
                    }
                    Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return WriteOutcome::Failed,
                }
            }
            if self.encrypted_ahead > 0 {
                let sent = self.encrypted_ahead.min(out.len());
                out.advance(sent);
                written(sent);
                self.encrypted_ahead = 0;
            }
            if out.is_empty() {
                return WriteOutcome::Done;
            }
            if self.conn.is_handshaking() {
                // No request is read before the handshake ends, so no reply waits on it.
                return WriteOutcome::WouldBlock;
            }
            let mut taken = 0;
            let mut writer = self.conn.writer();
            for piece in out.chunks() {
                let want = piece.len().min(self.chunk - taken);
                match writer.write(&piece[..want]) {
                    Ok(n) => taken += n,
                    Err(_) => return WriteOutcome::Failed,
                }
                if taken >= self.chunk || taken < want {
                    break;
                }
            }
            if taken == 0 {
                return WriteOutcome::Failed;
            }
            self.encrypted_ahead = taken;
        }
    }

    /// Queues a `close_notify` and writes what the socket takes now (best effort).
    pub fn close(&mut self, fd: RawFd) {
        self.conn.send_close_notify();
        let mut socket = SocketWriter(fd);
        while self.conn.wants_write() {
            if self.conn.write_tls(&mut socket).is_err() {
                break;
            }
        }
    }
}
