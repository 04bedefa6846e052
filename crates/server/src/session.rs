//! One client connection (a *session*) and the bookkeeping every policy
//! shares: the read side (input buffer, swallow, request numbering, kernel
//! receive stamps), the write side (reply slots sequenced by request number,
//! pending output) and the execution queue of requests run on other workers.
//!
//! ```text
//!   reader: read ─► swallow ─► parse ─► seq = next_seq++ ─► execute here / job elsewhere
//!                                                                │
//!   whoever executes seq:  WriteSide::fill(seq, reply) ◄─────────┘
//!        slots [base, base+1, ...] ─► in-order prefix appended to `out` ─► writev
//! ```
//!
//! The sequencing structures ([`WriteSide`], [`ExecQueue`]) are plain data
//! with no I/O, unit-tested here; the runtime locks them per connection.

use std::collections::VecDeque;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tailtrim_proto::meta::Priority;
use tailtrim_proto::reply::{ReplyBuf, ZERO_COPY_THRESHOLD};
use tailtrim_proto::{ProtoError, Request};

use crate::epoll::Epoll;
use crate::rxtime::{Arrival, Sampler};

/// A connection shared by the threads that read it and complete its replies.
pub struct Conn {
    /// Registration token in its epoll.
    pub(crate) id: u64,
    pub(crate) peer: SocketAddr,
    pub(crate) stream: TcpStream,
    pub(crate) epoll: Arc<Epoll>,
    pub(crate) read: Mutex<ReadSide>,
    pub(crate) write: Mutex<WriteSide>,
    pub(crate) exec: Mutex<ExecQueue<PendingJob>>,
    pub(crate) closed: AtomicBool,
    /// Who reads it, where it is registered edge-triggered (`Registration::EdgeTriggered`).
    pub(crate) owner: crate::epoll::ReadOwner,
    /// When the connection last completed a command (or was adopted), in ms of the
    /// runtime's clock: the idle timeout's measure.
    pub(crate) last_command_ms: AtomicU64,
    /// The connection sent `watch`: once its `OK` is written, it leaves the runtime and
    /// becomes a watcher of these types instead of closing.
    pub(crate) watch: Mutex<Option<tailtrim_proto::WatchTypes>>,
    /// The encrypting transport on a TLS listener; `None`: plain TCP. Lock order:
    /// after `read` and `write`.
    pub(crate) tls: Option<Mutex<crate::transport::TlsSession>>,
    /// Its open batch of quiet meta commands, as emulated service time charges it (touched
    /// only when emulating; a leaf lock, never held with another).
    pub(crate) emulated_batch: Mutex<crate::emulate::BatchDraw>,
}

impl Conn {
    pub(crate) fn new(
        id: u64,
        peer: SocketAddr,
        stream: TcpStream,
        epoll: Arc<Epoll>,
        tls: Option<crate::transport::TlsSession>,
    ) -> Conn {
        Conn {
            id,
            peer,
            stream,
            epoll,
            read: Mutex::new(ReadSide::default()),
            write: Mutex::new(WriteSide::default()),
            exec: Mutex::new(ExecQueue::default()),
            closed: AtomicBool::new(false),
            owner: crate::epoll::ReadOwner::default(),
            last_command_ms: AtomicU64::new(0),
            watch: Mutex::new(None),
            tls: tls.map(Mutex::new),
            emulated_batch: Mutex::new(crate::emulate::BatchDraw::default()),
        }
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.stream.as_raw_fd()
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Notes a completed command at `now_ms`.
    pub(crate) fn touch(&self, now_ms: u64) {
        self.last_command_ms.store(now_ms, Ordering::Relaxed);
    }
}

/// The reading half of a connection (one reader at a time).
#[derive(Default)]
pub struct ReadSide {
    pub(crate) input: BytesMut,
    /// The last read stopped to let complete requests be processed first.
    pub(crate) more_pending: bool,
    /// Bytes of a rejected data block still to discard.
    pub(crate) swallow: usize,
    pub(crate) next_seq: u64,
    pub(crate) eof: bool,
    /// Arrival of the request at the front of `input`: the read that brought
    /// its first bytes (its kernel receive time if that read was sampled,
    /// converted to an [`Instant`] once per read).
    pub(crate) arrived_at: Option<Arrival>,
    /// Arrival of the latest read: the requests after the front one came with
    /// it (or earlier, if reads stopped to process: then this under-reports
    /// their wait).
    pub(crate) latest_at: Option<Arrival>,
    /// Which of the connection's reads take the kernel's receive stamp.
    pub(crate) sampler: Sampler,
    /// The parser's scratch: the last request's frame, its keys' places.
    pub(crate) scratch: tailtrim_proto::FrameScratch,
    /// Authentication (`-Y`): until it succeeds, input is read by
    /// [`crate::auth::AuthState::step`], never parsed as requests.
    pub(crate) auth: crate::auth::AuthState,
}

impl ReadSide {
    /// Discards what is left of a rejected data block. True when done.
    pub(crate) fn swallow_buffered(&mut self) -> bool {
        use bytes::Buf;
        let n = self.swallow.min(self.input.len());
        self.input.advance(n);
        self.swallow -= n;
        self.swallow == 0
    }

    /// Numbers the next request.
    pub(crate) fn take_seq(&mut self) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }
}

/// The writing half: reply slots in request order and the output not yet
/// written.
#[derive(Default)]
pub struct WriteSide {
    /// Sequence number of `slots[0]`.
    pub(crate) base: u64,
    pub(crate) slots: VecDeque<Option<ReplyBuf>>,
    pub(crate) out: ReplyBuf,
    /// Close once every reply up to this request is written.
    pub(crate) close_after_seq: Option<u64>,
    /// Replies in order but held back until their instant (emulated network
    /// time); the instants never decrease, so they leave in order.
    pub(crate) held: VecDeque<(Instant, ReplyBuf)>,
    /// Bytes in `held`.
    pub(crate) held_bytes: usize,
    /// The reader stopped because held output reached the high-water mark:
    /// whoever releases it must bring a reader back.
    pub(crate) wake_reader: bool,
    /// The client closed its side (end of input was read): the connection waits
    /// only for writability from now on, since a closed side is always readable.
    pub(crate) read_closed: bool,
    /// The interest registered, where registrations stay armed
    /// ([`crate::epoll::Epoll::add_armed`]); unused with one-shot registrations.
    pub(crate) armed_interest: u32,
    /// An emptied reply buffer kept for the connection's next reply
    /// ([`WriteSide::take_spare`]): no allocation and regrowth per small reply.
    spare: ReplyBuf,
}

/// Largest reply buffer kept as a connection's spare: what a small reply needs, so an idle
/// connection holds at most this much for it.
const SPARE_REPLY_MAX: usize = 4096;

impl WriteSide {
    /// An empty reply buffer to compose the next reply in: the last small reply's buffer,
    /// emptied when it was queued, or a new one.
    pub fn take_spare(&mut self) -> ReplyBuf {
        std::mem::take(&mut self.spare)
    }

    /// Stores `seq`'s reply and moves every reply now in order to the
    /// output. Returns true when the connection should close after writing
    /// (a `quit` or end of input reached its turn).
    pub fn fill(&mut self, seq: u64, reply: ReplyBuf) -> bool {
        self.fill_held(seq, reply, |_| None)
    }

    /// [`WriteSide::fill`], where `hold(len)` says until when a reply of
    /// `len` bytes that reaches its turn is held back (`None`: not held).
    /// A reply behind a held one is held at least as long, so output keeps
    /// request order. Returns true when the connection should close: its
    /// last reply reached its turn and nothing is held.
    pub fn fill_held(
        &mut self,
        seq: u64,
        mut reply: ReplyBuf,
        mut hold: impl FnMut(usize) -> Option<Instant>,
    ) -> bool {
        if self.slots.is_empty() && seq == self.base {
            // The common case: the reply is next in line.
            self.emit(&mut reply, &mut hold);
            self.base += 1;
        } else {
            let index = seq.saturating_sub(self.base) as usize;
            while self.slots.len() <= index {
                self.slots.push_back(None);
            }
            self.slots[index] = Some(reply);
            while let Some(Some(_)) = self.slots.front() {
                if let Some(Some(mut done)) = self.slots.pop_front() {
                    self.emit(&mut done, &mut hold);
                }
                self.base += 1;
            }
        }
        self.closing()
    }

    fn emit(&mut self, reply: &mut ReplyBuf, hold: &mut impl FnMut(usize) -> Option<Instant>) {
        let until = hold(reply.len());
        let behind = self.held.back().map(|(at, _)| *at);
        let until = match (until, behind) {
            (None, None) => {
                // A reply under the zero-copy threshold is one piece of its own buffer (no
                // shared chunk): copied out, the buffer can serve the next reply.
                let small = reply.len() < ZERO_COPY_THRESHOLD;
                self.out.append(reply);
                let room = reply.scratch_capacity();
                if small && room <= SPARE_REPLY_MAX && room > self.spare.scratch_capacity() {
                    self.spare = std::mem::take(reply);
                }
                return;
            }
            (Some(at), Some(last)) => at.max(last),
            (Some(at), None) | (None, Some(at)) => at,
        };
        self.held_bytes += reply.len();
        let mut taken = ReplyBuf::new();
        taken.append(reply);
        self.held.push_back((until, taken));
    }

    /// Moves the held replies whose instant has come to the output. Returns
    /// the instant of the next one still held.
    pub fn release(&mut self, now: Instant) -> Option<Instant> {
        while let Some((at, _)) = self.held.front() {
            if *at > now {
                return Some(*at);
            }
            if let Some((_, mut reply)) = self.held.pop_front() {
                self.held_bytes -= reply.len();
                self.out.append(&mut reply);
            }
        }
        None
    }

    /// The instant of the first held reply.
    pub fn next_release(&self) -> Option<Instant> {
        self.held.front().map(|(at, _)| *at)
    }

    /// Output not yet written, held replies included.
    pub fn pending_len(&self) -> usize {
        self.out.len() + self.held_bytes
    }

    /// The last reply before closing reached its turn and nothing is held.
    pub fn closing(&self) -> bool {
        self.held.is_empty() && self.close_after_seq.is_some_and(|last| self.base > last)
    }
}

/// Execution order of one connection's requests when they run on other
/// workers (early and late binding).
///
/// Late binding runs them one at a time (any idle worker may take the next,
/// so two requests for one key could otherwise race). Early binding lets
/// single-key requests run side by side on their keys' workers: requests for
/// one key go to one worker's FIFO, so they still execute in order, and
/// replies are sequenced anyway. Everything else (multi-key gets, keyless
/// commands, error replies) is a *barrier*: it waits for every earlier
/// request and runs alone.
///
/// It also bounds what one connection may have outstanding (released or
/// queued, not finished): past [`MAX_OUTSTANDING_REQUESTS`] requests or
/// [`MAX_OUTSTANDING_BYTES`] bytes of request frames its reader stops reading
/// until the backlog is down to half of both, so memory stays bounded whatever
/// a client pipelines (a reader faster than the workers would otherwise queue
/// the whole stream).
pub struct ExecQueue<J> {
    /// Requests released to a worker and not yet finished.
    in_flight: usize,
    /// The request in flight is a barrier.
    barrier: bool,
    pending: VecDeque<(J, bool)>,
    /// Frame bytes of the requests released or queued and not finished.
    outstanding_bytes: usize,
    /// The reader stopped on the backlog bound: whoever brings the backlog
    /// below the resume mark must bring a reader back.
    reader_paused: bool,
}

/// Requests of one connection outstanding at which its reader stops.
pub const MAX_OUTSTANDING_REQUESTS: usize = 256;
/// Bytes of request frames of one connection outstanding at which its reader
/// stops.
pub const MAX_OUTSTANDING_BYTES: usize = 4 * 1024 * 1024;

impl<J> Default for ExecQueue<J> {
    fn default() -> Self {
        ExecQueue {
            in_flight: 0,
            barrier: false,
            pending: VecDeque::new(),
            outstanding_bytes: 0,
            reader_paused: false,
        }
    }
}

/// What [`ExecQueue::submit`] decided.
#[derive(Debug, PartialEq, Eq)]
pub enum Admit<J> {
    /// Release the job now; `alone` when nothing else of the connection is
    /// in flight.
    Run {
        /// The job.
        job: J,
        /// Nothing else in flight.
        alone: bool,
    },
    /// Queued behind earlier requests.
    Queued,
}

impl<J> ExecQueue<J> {
    /// Admits `job` of `bytes` frame bytes: runnable now, or queued behind
    /// earlier requests.
    pub fn submit(&mut self, job: J, barrier: bool, bytes: usize) -> Admit<J> {
        self.outstanding_bytes += bytes;
        let runnable =
            self.pending.is_empty() && !self.barrier && (!barrier || self.in_flight == 0);
        if !runnable {
            self.pending.push_back((job, barrier));
            return Admit::Queued;
        }
        let alone = self.in_flight == 0;
        self.in_flight += 1;
        self.barrier = barrier;
        Admit::Run { job, alone }
    }

    /// Requests outstanding: released and not finished, or queued.
    pub fn outstanding(&self) -> usize {
        self.in_flight + self.pending.len()
    }

    /// The backlog reached the bound: the reader must stop (and is marked
    /// stopped, so that [`ExecQueue::take_resume`] brings it back).
    pub fn pause_if_full(&mut self) -> bool {
        if self.outstanding() >= MAX_OUTSTANDING_REQUESTS
            || self.outstanding_bytes >= MAX_OUTSTANDING_BYTES
        {
            self.reader_paused = true;
        }
        self.reader_paused
    }

    /// The reader is stopped on the backlog bound.
    pub fn reader_paused(&self) -> bool {
        self.reader_paused
    }

    /// True once, when a stopped reader may go on: the backlog is down to
    /// half of both bounds.
    pub fn take_resume(&mut self) -> bool {
        let low = self.outstanding() <= MAX_OUTSTANDING_REQUESTS / 2
            && self.outstanding_bytes <= MAX_OUTSTANDING_BYTES / 2;
        if self.reader_paused && low {
            self.reader_paused = false;
            return true;
        }
        false
    }

    /// One released job of `bytes` frame bytes finished: returns the queued
    /// jobs that may run now.
    pub fn finish(&mut self, bytes: usize) -> Vec<J> {
        let mut ready = Vec::new();
        self.outstanding_bytes = self.outstanding_bytes.saturating_sub(bytes);
        self.in_flight = self.in_flight.saturating_sub(1);
        if self.in_flight == 0 {
            self.barrier = false;
        }
        while !self.barrier {
            let Some((_, barrier)) = self.pending.front() else {
                break;
            };
            if *barrier && self.in_flight > 0 {
                break;
            }
            let Some((job, barrier)) = self.pending.pop_front() else {
                break;
            };
            self.in_flight += 1;
            self.barrier = barrier;
            ready.push(job);
        }
        ready
    }
}

/// A job queued on a connection's [`ExecQueue`]: where it goes and what.
pub struct PendingJob {
    pub(crate) target: usize,
    pub(crate) job: Job,
}

/// A unit of work handed between threads.
pub enum Job {
    /// Execute a parsed request (early- and late-binding).
    Execute {
        /// Its connection.
        conn: Arc<Conn>,
        /// Its reply slot.
        seq: u64,
        /// The request.
        request: Request,
        /// The bytes it was parsed from.
        frame: Bytes,
        /// When its bytes reached the server (sampled or not).
        arrived_at: Arrival,
        /// Its priority class and ageing (`mg … p<class>[a<overtakes>]`; class 0 without the
        /// flag).
        priority: Priority,
    },
    /// Send an already composed large reply (size-aware).
    Send {
        /// Its connection.
        conn: Arc<Conn>,
        /// Its reply slot.
        seq: u64,
        /// The reply.
        reply: ReplyBuf,
        /// What it costs in emulated service time.
        units: tailtrim_policy::costspec::Units,
        /// When its bytes reached the server (sampled or not).
        arrived_at: Arrival,
    },
    /// Receive the rest of a large value and keep reading the connection (size-aware).
    Receive {
        /// The connection taken over.
        conn: Arc<Conn>,
    },
    /// Reply to invalid input, in order with the connection's other requests.
    Reject {
        /// Its connection.
        conn: Arc<Conn>,
        /// Its reply slot.
        seq: u64,
        /// What was wrong.
        error: ProtoError,
    },
}

impl Job {
    /// The priority a job waits in ([`crate::priority::ClassQueue`]): a request's own, class 0
    /// in the server's own order for everything else.
    pub(crate) fn priority(&self) -> Priority {
        match self {
            Job::Execute { priority, .. } => *priority,
            _ => Priority::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(text: &str) -> ReplyBuf {
        let mut out = ReplyBuf::new();
        out.push(text.as_bytes());
        out
    }

    fn output(write: &mut WriteSide) -> Vec<u8> {
        write.out.take_contiguous()
    }

    #[test]
    fn replies_leave_in_request_order_whatever_order_they_finish() {
        let mut write = WriteSide::default();
        assert!(!write.fill(2, reply("c")));
        assert!(!write.fill(1, reply("b")));
        assert!(output(&mut write).is_empty(), "0 has not finished");
        assert!(!write.fill(0, reply("a")));
        assert_eq!(output(&mut write), b"abc");
        assert_eq!(write.base, 3);
        assert!(!write.fill(3, reply("d")));
        assert_eq!(output(&mut write), b"d");
        assert!(write.slots.is_empty());
    }

    #[test]
    fn a_small_reply_leaves_its_buffer_for_the_next_and_a_large_one_does_not() {
        let mut write = WriteSide::default();
        assert!(!write.fill(0, reply("VALUE k 0 1\r\nv\r\nEND\r\n")));
        let spare = write.take_spare();
        assert!(spare.is_empty());
        assert!(spare.scratch_capacity() >= 21, "the reply's buffer is kept");
        assert_eq!(write.take_spare().scratch_capacity(), 0, "taken once");
        let mut large = spare;
        large.push(&[b'x'; SPARE_REPLY_MAX + 1]);
        assert!(!write.fill(1, large));
        assert_eq!(
            write.take_spare().scratch_capacity(),
            0,
            "a large buffer is not kept"
        );
        let written = output(&mut write);
        assert_eq!(written.len(), 21 + SPARE_REPLY_MAX + 1);
    }

    #[test]
    fn close_waits_for_the_last_reply_before_it() {
        let mut write = WriteSide {
            close_after_seq: Some(1),
            ..WriteSide::default()
        };
        assert!(!write.fill(1, reply("quit-slot")));
        assert!(write.fill(0, reply("a")));
    }

    #[test]
    fn held_replies_leave_in_order_at_their_instants() {
        let start = Instant::now();
        let at = |ms: u64| start + std::time::Duration::from_millis(ms);
        let mut write = WriteSide {
            close_after_seq: Some(2),
            ..WriteSide::default()
        };
        // Reply 0 held 10 ms, reply 1 only 2 ms: 1 still waits behind 0.
        assert!(!write.fill_held(0, reply("a"), |_| Some(at(10))));
        assert!(!write.fill_held(1, reply("bb"), |_| Some(at(2))));
        assert_eq!(write.pending_len(), 3);
        assert_eq!(write.release(at(5)), Some(at(10)));
        assert!(output(&mut write).is_empty());
        // A reply not held itself still waits behind held ones; the close
        // waits for them too.
        assert!(!write.fill_held(2, reply("c"), |_| None));
        assert_eq!(write.release(at(10)), None);
        assert_eq!(output(&mut write), b"abbc");
        assert!(write.closing());
        assert_eq!(write.pending_len(), 0);
    }

    #[test]
    fn single_key_jobs_run_side_by_side_barriers_alone() {
        let mut queue = ExecQueue::default();
        assert_eq!(
            queue.submit(1, false, 0),
            Admit::Run {
                job: 1,
                alone: true
            }
        );
        assert_eq!(
            queue.submit(2, false, 0),
            Admit::Run {
                job: 2,
                alone: false
            }
        );
        // A barrier waits for both, and what follows waits for the barrier.
        assert_eq!(queue.submit(3, true, 0), Admit::Queued);
        assert_eq!(queue.submit(4, false, 0), Admit::Queued);
        assert!(queue.finish(0).is_empty(), "2 is still in flight");
        assert_eq!(queue.finish(0), vec![3]);
        assert_eq!(queue.finish(0), vec![4]);
        assert!(queue.finish(0).is_empty());
        assert_eq!(
            queue.submit(5, true, 0),
            Admit::Run {
                job: 5,
                alone: true
            }
        );
    }

    #[test]
    fn queued_non_barriers_are_released_together_up_to_the_next_barrier() {
        let mut queue = ExecQueue::default();
        assert_eq!(
            queue.submit(1, true, 0),
            Admit::Run {
                job: 1,
                alone: true
            }
        );
        for job in [2, 3] {
            assert_eq!(queue.submit(job, false, 0), Admit::Queued);
        }
        assert_eq!(queue.submit(4, true, 0), Admit::Queued);
        assert_eq!(queue.finish(0), vec![2, 3]);
        assert!(queue.finish(0).is_empty());
        assert_eq!(queue.finish(0), vec![4]);
    }

    #[test]
    fn a_backlog_past_the_request_bound_stops_the_reader_until_half_is_done() {
        let mut queue = ExecQueue::default();
        for job in 0..MAX_OUTSTANDING_REQUESTS - 1 {
            queue.submit(job, true, 10);
            assert!(!queue.pause_if_full(), "paused at {job}");
        }
        queue.submit(MAX_OUTSTANDING_REQUESTS, true, 10);
        assert!(queue.pause_if_full());
        assert!(queue.reader_paused());
        let mut finished = 0;
        while !queue.take_resume() {
            queue.finish(10);
            finished += 1;
            assert!(finished <= MAX_OUTSTANDING_REQUESTS, "never resumed");
        }
        assert_eq!(queue.outstanding(), MAX_OUTSTANDING_REQUESTS / 2);
        assert!(!queue.reader_paused());
        assert!(!queue.take_resume(), "resumes once");
    }

    #[test]
    fn a_backlog_past_the_byte_bound_stops_the_reader() {
        let mut queue = ExecQueue::default();
        let big = MAX_OUTSTANDING_BYTES / 4;
        for job in 0..3 {
            queue.submit(job, false, big);
            assert!(!queue.pause_if_full());
        }
        queue.submit(3, false, big);
        assert!(queue.pause_if_full());
        queue.finish(big);
        assert!(!queue.take_resume(), "3/4 of the bound is still above half");
        queue.finish(big);
        assert!(queue.take_resume());
    }
}
