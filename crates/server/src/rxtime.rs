//! Kernel receive timestamps (`SO_TIMESTAMPNS`) for server-side latency.
//!
//! The dispatch runtime measures a request's sojourn from the moment the
//! kernel received the bytes of the read that brought it, not from the moment
//! a worker got round to reading the socket: under load a request waits in
//! the socket buffer, and that wait is exactly what head-of-line blocking
//! makes long. For TCP the kernel reports the receive time of the last
//! segment a `recvmsg` consumed. The kernel turns receive timestamping on
//! from a deferred work item when the first socket asks, so the first bytes
//! after start-up may come unstamped; those are timed from the read.
//!
//! The stamps are sampled: a connection's first read and every
//! [`SAMPLE_EVERY`]th after it go by `recvmsg` with the stamp, the others by
//! a plain `recv` ([`recv_plain`]), and only the requests of sampled reads
//! enter the latency histograms (every request is counted). On a loopback
//! connection a `recvmsg` with the stamp costs about 300 ns of kernel time
//! more than a `recv` (`experiments/throughput/syscall-costs/`), and turning
//! it into an [`std::time::Instant`] and recording it costs user-space work
//! besides (`experiments/throughput/sampled-stamps/`).
//!
//! ```text
//!   read n of a connection ─ n % SAMPLE_EVERY == 0 ─► recvmsg + SO_TIMESTAMPNS ─► Arrival { at: stamp, sampled }
//!                          └ otherwise ─────────────► recv ───────────────────► Arrival { at: now, not sampled }
//! ```

use std::io;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

/// One read in this many of a connection takes the kernel's receive stamp
/// and times its requests (its first read always does). An emulating server
/// (docs/emulation.md) samples every read.
pub const SAMPLE_EVERY: u32 = 16;

/// When a request's first bytes reached the server, for the requests of a
/// sampled read; the others are not timed and read no clock for it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Arrival {
    /// The kernel's receipt of a sampled read's bytes (the read itself when
    /// the kernel gave no stamp); `None` for a read that was not sampled.
    pub at: Option<Instant>,
}

impl Arrival {
    /// A read that was not sampled.
    pub const UNSAMPLED: Arrival = Arrival { at: None };

    /// Arrival of a sampled read's bytes stamped `stamp` (realtime ns; `None`:
    /// timed from now), and the wall clock (realtime ns) read to convert it.
    pub fn sampled(stamp: Option<u64>) -> (Arrival, Option<u64>) {
        let now = Instant::now();
        let Some(arrived_ns) = stamp else {
            return (Arrival { at: Some(now) }, None);
        };
        let wall_ns = realtime_now_ns();
        let waited = wall_ns.saturating_sub(arrived_ns);
        let at = now.checked_sub(Duration::from_nanos(waited)).unwrap_or(now);
        (Arrival { at: Some(at) }, Some(wall_ns))
    }
}

/// A coarse clock (`clock_gettime` of `clock`, a `_COARSE` one: the kernel's
/// tick, read from the vDSO without the time counter), in ms.
fn coarse_ms(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    timespec_ns(&ts) / 1_000_000
}

/// `CLOCK_MONOTONIC_COARSE` in ms (a tick's resolution: the idle timeout's clock).
pub fn monotonic_coarse_ms() -> u64 {
    coarse_ms(libc::CLOCK_MONOTONIC_COARSE)
}

/// Counts a connection's reads down to its next sampled one.
#[derive(Debug, Default, Clone, Copy)]
pub struct Sampler {
    /// Reads left before the next sampled one (0: the next read is).
    until_next: u32,
}

impl Sampler {
    /// Whether the coming read is sampled (one in `every`); counts it.
    pub fn next_read(&mut self, every: u32) -> bool {
        if self.until_next == 0 {
            self.until_next = every.saturating_sub(1);
            true
        } else {
            self.until_next -= 1;
            false
        }
    }
}

/// Reads into `buf` with a plain `recv(2)` (no stamp asked for).
pub fn recv_plain(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is valid for writes of `buf.len()` bytes for the call.
    let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Asks the kernel to timestamp what `fd` receives.
pub fn enable(fd: RawFd) -> io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: plain setsockopt on a descriptor we own, with a c_int argument.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `CLOCK_REALTIME` in nanoseconds (the clock the kernel stamps with).
pub fn realtime_now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    timespec_ns(&ts)
}

fn timespec_ns(ts: &libc::timespec) -> u64 {
    (ts.tv_sec.max(0) as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec.max(0) as u64)
}

/// Control-message room for one `timespec`.
const CMSG_ROOM: usize = 64;

/// Reads into `buf` like `read(2)`, and returns the kernel's receive time of
/// the data (realtime ns) when the socket reports one.
pub fn recv_with_arrival(fd: RawFd, buf: &mut [u8]) -> io::Result<(usize, Option<u64>)> {
    let mut control = [0u64; CMSG_ROOM / 8];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain data; zeroed is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = CMSG_ROOM as _;
    // SAFETY: every pointer in `msg` points into buffers that outlive the call.
    let n = unsafe { libc::recvmsg(fd, &mut msg, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut arrival = None;
    // SAFETY: the CMSG macros walk the control buffer the kernel filled,
    // bounded by msg_controllen.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            let header = &*cmsg;
            if header.cmsg_level == libc::SOL_SOCKET && header.cmsg_type == libc::SO_TIMESTAMPNS {
                let ts = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::timespec>());
                arrival = Some(timespec_ns(&ts));
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok((n as usize, arrival))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    #[test]
    fn timestamp_is_when_the_kernel_received_not_when_we_read() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        enable(server.as_raw_fd()).unwrap();
        // The kernel switches timestamping on from a deferred work item.
        std::thread::sleep(std::time::Duration::from_millis(50));
        client.write_all(b"get k\r\n").unwrap();
        let sent = realtime_now_ns();
        std::thread::sleep(std::time::Duration::from_millis(30));
        let mut buf = [0u8; 64];
        let (n, arrival) = recv_with_arrival(server.as_raw_fd(), &mut buf).unwrap();
        let read_at = realtime_now_ns();
        assert_eq!(&buf[..n], b"get k\r\n");
        let arrival = arrival.expect("SO_TIMESTAMPNS gave no timestamp");
        // Stamped on receipt (around the send), not at our read 30 ms later.
        assert!(arrival <= sent + 5_000_000, "arrival {arrival} sent {sent}");
        assert!(read_at - arrival >= 25_000_000);
    }

    #[test]
    fn a_connection_samples_its_first_read_and_one_in_sample_every() {
        let mut sampler = Sampler::default();
        let sampled: Vec<bool> = (0..2 * SAMPLE_EVERY)
            .map(|_| sampler.next_read(SAMPLE_EVERY))
            .collect();
        let at: Vec<usize> = (0..sampled.len()).filter(|&i| sampled[i]).collect();
        assert_eq!(at, vec![0, SAMPLE_EVERY as usize]);
        let mut every = Sampler::default();
        assert!((0..5).all(|_| every.next_read(1)));
    }

    #[test]
    fn a_plain_recv_reads_like_read() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        enable(server.as_raw_fd()).unwrap();
        client.write_all(b"get k\r\n").unwrap();
        let mut buf = [0u8; 64];
        let n = recv_plain(server.as_raw_fd(), &mut buf).unwrap();
        assert_eq!(&buf[..n], b"get k\r\n");
        drop(client);
        assert_eq!(recv_plain(server.as_raw_fd(), &mut buf).unwrap(), 0);
    }

    #[test]
    fn without_enable_there_is_no_timestamp() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        client.write_all(b"x").unwrap();
        let mut buf = [0u8; 8];
        let (n, arrival) = recv_with_arrival(server.as_raw_fd(), &mut buf).unwrap();
        assert_eq!(n, 1);
        assert_eq!(arrival, None);
    }
}
