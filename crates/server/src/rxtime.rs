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

use std::io;
use std::os::fd::RawFd;

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
