//! A minimal, thread-safe epoll wrapper for the dispatch runtime.
//!
//! Unlike mio's `Poll`, one [`Epoll`] may be waited on by several threads at
//! once. Sockets are registered level-triggered with `EPOLLONESHOT`: an event
//! goes to exactly one waiting thread and the socket stays disarmed until that
//! thread (or whoever took over the connection) re-arms it. That is what lets
//! any small worker read any connection while keeping one reader at a time.
//! Where only one thread ever waits on an epoll (`pinned`), connections stay
//! armed instead ([`Epoll::add_armed`]) and the interest changes only when it
//! must (output to write, reading paused): no `epoll_ctl` per request.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Readable (and peer hang-up).
pub const READABLE: u32 = (libc::EPOLLIN | libc::EPOLLRDHUP) as u32;
/// Writable.
pub const WRITABLE: u32 = libc::EPOLLOUT as u32;

/// One epoll instance.
#[derive(Debug)]
pub struct Epoll {
    fd: OwnedFd,
}

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

impl Epoll {
    /// Creates an epoll instance.
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: plain syscall; the result is checked before use.
        let fd = check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: `fd` is a fresh descriptor we own.
        Ok(Epoll {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, token: u64, events: u32) -> io::Result<()> {
        let mut event = libc::epoll_event { events, u64: token };
        // SAFETY: `event` outlives the call; the kernel copies it.
        check(unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut event) })?;
        Ok(())
    }

    /// Registers `fd` one-shot with `interest` ([`READABLE`] | [`WRITABLE`]).
    pub fn add_oneshot(&self, fd: RawFd, token: u64, interest: u32) -> io::Result<()> {
        self.ctl(
            libc::EPOLL_CTL_ADD,
            fd,
            token,
            interest | libc::EPOLLONESHOT as u32,
        )
    }

    /// Registers `fd` level-triggered without one-shot (wake-up descriptors).
    pub fn add_persistent(&self, fd: RawFd, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, token, libc::EPOLLIN as u32)
    }

    /// Registers `fd` level-triggered with `interest`, armed until changed: for an
    /// epoll only one thread waits on, where one-shot would cost an `epoll_ctl` per event.
    pub fn add_armed(&self, fd: RawFd, token: u64, interest: u32) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, token, interest)
    }

    /// Changes the interest of a registration made by [`Epoll::add_armed`].
    pub fn modify_armed(&self, fd: RawFd, token: u64, interest: u32) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, token, interest)
    }

    /// Re-arms a one-shot registration.
    pub fn rearm(&self, fd: RawFd, token: u64, interest: u32) -> io::Result<()> {
        self.ctl(
            libc::EPOLL_CTL_MOD,
            fd,
            token,
            interest | libc::EPOLLONESHOT as u32,
        )
    }

    /// Removes `fd`.
    pub fn delete(&self, fd: RawFd) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0)
    }

    /// Waits up to `timeout_ms` (-1 forever) and returns the ready tokens.
    pub fn wait(&self, tokens: &mut Vec<u64>, max: usize, timeout_ms: i32) -> io::Result<()> {
        tokens.clear();
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 16];
        let max = max.clamp(1, events.len());
        // SAFETY: `events` has room for `max` entries.
        let rc = unsafe {
            libc::epoll_wait(
                self.fd.as_raw_fd(),
                events.as_mut_ptr(),
                max as libc::c_int,
                timeout_ms,
            )
        };
        match check(rc) {
            Ok(n) => {
                tokens.extend(events[..n as usize].iter().map(|e| e.u64));
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// An eventfd used to wake a thread blocked in [`Epoll::wait`].
#[derive(Debug)]
pub struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    /// Creates a non-blocking eventfd.
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: plain syscall; checked.
        let fd = check(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
        // SAFETY: fresh descriptor we own.
        Ok(EventFd {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// The descriptor, for registration.
    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Signals the eventfd.
    pub fn notify(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64.
        let _ = unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Clears pending signals.
    pub fn drain(&self) {
        let mut value: u64 = 0;
        // SAFETY: reads 8 bytes into a valid u64.
        let _ = unsafe { libc::read(self.fd.as_raw_fd(), (&mut value as *mut u64).cast(), 8) };
    }
}

/// Blocks until `fd` is ready for `events` (`libc::POLLIN`/`POLLOUT`) or the
/// timeout passes. Returns true when ready.
pub fn wait_fd(fd: RawFd, events: libc::c_short, timeout_ms: i32) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let rc = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
    rc > 0
}
