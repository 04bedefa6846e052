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
//!
//! Where several threads wait on one epoll and a re-arm per request is too dear
//! (`size-aware`), connections are registered edge-triggered and stay armed
//! ([`Epoll::add_edge`]); one reader at a time is then kept by the connection's
//! [`ReadOwner`], not by the registration:
//!
//! ```text
//!  event ─► claim: idle ─► owned (serve) ─► release: owned ─► idle ... done
//!                │                                 └ more ─► owned: serve again
//!                └ owned ─► more (the owner reads again before it lets go)
//! ```
//!
//! An edge announces only what arrives after it, so an owner reads until the socket is
//! empty (a short read) and whatever re-enables an event without new input (reading
//! resumed, output to write, a large receive handed back) changes the registration
//! ([`Epoll::modify_edge`]), which reports at once what is already ready.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU8, Ordering};

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

    /// Registers `fd` edge-triggered with `interest`, armed until changed: for an epoll
    /// several threads wait on, with the connection's [`ReadOwner`] keeping one reader.
    pub fn add_edge(&self, fd: RawFd, token: u64, interest: u32) -> io::Result<()> {
        self.ctl(
            libc::EPOLL_CTL_ADD,
            fd,
            token,
            interest | libc::EPOLLET as u32,
        )
    }

    /// Changes the interest of a registration made by [`Epoll::add_edge`]; what is ready
    /// for the new interest is reported at once, as by a fresh edge.
    pub fn modify_edge(&self, fd: RawFd, token: u64, interest: u32) -> io::Result<()> {
        self.ctl(
            libc::EPOLL_CTL_MOD,
            fd,
            token,
            interest | libc::EPOLLET as u32,
        )
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

/// Who reads an edge-triggered connection: one thread at a time, and none lost of the
/// events that come while it reads (see the module's diagram).
#[derive(Debug, Default)]
pub struct ReadOwner(AtomicU8);

const IDLE: u8 = 0;
const OWNED: u8 = 1;
/// Owned, and an event came meanwhile: the owner reads again before it lets go.
const MORE: u8 = 2;

impl ReadOwner {
    /// An event for the connection: true if the caller now owns reading; false if a
    /// reader owns it already (it is told to read again).
    pub fn claim(&self) -> bool {
        let mut state = self.0.load(Ordering::Acquire);
        loop {
            let next = match state {
                IDLE => OWNED,
                OWNED => MORE,
                _ => return false,
            };
            match self
                .0
                .compare_exchange_weak(state, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return state == IDLE,
                Err(now) => state = now,
            }
        }
    }

    /// The owner has read what it found: true if it let go; false if an event came while
    /// it read (it still owns the connection and reads again).
    pub fn release(&self) -> bool {
        match self
            .0
            .compare_exchange(OWNED, IDLE, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(_) => {
                self.0.store(OWNED, Ordering::Release);
                false
            }
        }
    }

    /// Lets go whatever came meanwhile: for an owner that hands reading back to the event
    /// loop by changing the registration (which reports what is ready at once).
    pub fn hand_back(&self) {
        self.0.store(IDLE, Ordering::Release);
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::ReadOwner;

    #[test]
    fn one_reader_at_a_time_and_an_event_while_it_reads_makes_it_read_again() {
        let owner = ReadOwner::default();
        assert!(owner.claim(), "an idle connection is claimed");
        assert!(!owner.claim(), "an owned one is not");
        assert!(!owner.claim(), "nor one already told to read again");
        assert!(!owner.release(), "an event came: the owner reads again");
        assert!(owner.release(), "none came since: it lets go");
        assert!(owner.claim());
        owner.hand_back();
        assert!(owner.claim(), "handed back: the next event claims it");
    }

    /// Threads deliver events while owners read: every event is followed by a read that
    /// started after it (none is lost), and no two threads read at once.
    #[test]
    fn no_event_is_lost_and_no_two_threads_read_at_once() {
        let owner = Arc::new(ReadOwner::default());
        let events = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(AtomicUsize::new(0));
        let reading = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (owner, events, seen, reading) = (
                    Arc::clone(&owner),
                    Arc::clone(&events),
                    Arc::clone(&seen),
                    Arc::clone(&reading),
                );
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        // New input, then its edge.
                        events.fetch_add(1, Ordering::SeqCst);
                        if !owner.claim() {
                            continue;
                        }
                        loop {
                            assert_eq!(reading.fetch_add(1, Ordering::SeqCst), 0);
                            // A read takes everything that arrived before it.
                            seen.store(events.load(Ordering::SeqCst), Ordering::SeqCst);
                            reading.fetch_sub(1, Ordering::SeqCst);
                            if owner.release() {
                                break;
                            }
                        }
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("reader");
        }
        assert_eq!(seen.load(Ordering::SeqCst), events.load(Ordering::SeqCst));
    }
}
