//! memcached's `watch` (protocol.txt, "Watchers"): a connection that sent `watch` receives
//! one log line per event from then on and takes no more commands.
//!
//! ```text
//!   worker: get/set ─► fetchers()/mutations()? (one relaxed load; false: nothing else)
//!                         └─► line formatted once ─► each matching watcher's buffer
//!                              (bounded: WATCHER_BUFFER_BYTES; a full one counts skipped)
//!   runtime: `watch` answered OK ─► connection leaves its epoll ─► Watchers::adopt
//!   logger thread: buffer ─► non-blocking write to the watcher; `skipped=N` where lines
//!                  were dropped; a watcher that closed or failed is removed
//! ```
//!
//! Workers never wait for a watcher: they append to its buffer under a short lock or, when
//! it is full, count the line as skipped. A slow watcher costs at most its buffer plus one
//! buffer in flight.
//!
//! Lines: `ts=<sec>.<usec> gid=<n> type=item_get key=<url-encoded> status=found|not_found
//! clsid=<n> cfd=<fd> size=<value bytes>` (fetchers) and `ts=… gid=… type=item_store key=…
//! status=stored|not_stored|exists|not_found cmd=<set|add|…> ttl=<secs> clsid=… cfd=…
//! size=…` (mutations), each ending in `\n` as memcached writes them.

use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tailtrim_proto::WatchTypes;

/// Bytes of log lines a watcher may have waiting; past it, lines are dropped and counted
/// (`skipped=N`).
pub const WATCHER_BUFFER_BYTES: usize = 256 * 1024;

const FETCHERS: u8 = 1;
const MUTATIONS: u8 = 2;

/// What `watch` key fields escape: all but letters, digits and `-._~` (memcached's URI
/// encoding).
pub const KEY_ESCAPES: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

#[derive(Default)]
struct Pending {
    lines: Vec<u8>,
    skipped: u64,
}

/// One watcher's buffer, shared by the workers that fill it and the logger thread.
struct WatchQueue {
    types: u8,
    pending: Mutex<Pending>,
}

impl WatchQueue {
    fn push(&self, line: &[u8]) {
        let mut pending = self.pending.lock();
        if pending.lines.len() + line.len() > WATCHER_BUFFER_BYTES {
            pending.skipped += 1;
        } else {
            pending.lines.extend_from_slice(line);
        }
    }

    /// Everything waiting, with a `skipped=N` line after it when lines were dropped.
    fn take(&self) -> Vec<u8> {
        let mut pending = self.pending.lock();
        let mut lines = std::mem::take(&mut pending.lines);
        if pending.skipped > 0 {
            lines.extend_from_slice(format!("skipped={}\n", pending.skipped).as_bytes());
            pending.skipped = 0;
        }
        lines
    }
}

/// The server's watchers and the event id counter.
#[derive(Default)]
pub struct Watchers {
    active: AtomicU8,
    next_gid: AtomicU64,
    queues: Mutex<Vec<Arc<WatchQueue>>>,
    adopted: Mutex<Vec<(TcpStream, Arc<WatchQueue>)>>,
    /// Where the logger thread sleeps while nobody watches: rung when a watcher is adopted
    /// and at shutdown.
    pub alarm: crate::alarm::Alarm,
}

/// Longest sleep of the logger thread while nobody watches (an adopted watcher or the
/// shutdown wakes it before).
const IDLE_LOGGER_SLEEP: Duration = Duration::from_secs(1);

/// A watcher as the logger thread holds it.
struct Watcher {
    stream: TcpStream,
    queue: Arc<WatchQueue>,
    unwritten: Vec<u8>,
}

impl Watchers {
    /// True when some watcher wants fetches (`item_get` lines).
    #[inline]
    pub fn fetchers(&self) -> bool {
        self.active.load(Ordering::Relaxed) & FETCHERS != 0
    }

    /// True when some watcher wants stores (`item_store` lines).
    #[inline]
    pub fn mutations(&self) -> bool {
        self.active.load(Ordering::Relaxed) & MUTATIONS != 0
    }

    /// How many watchers there are.
    pub fn count(&self) -> usize {
        self.queues.lock().len()
    }

    /// Turns `stream` (whose `OK` is written) into a watcher of `types`.
    pub fn adopt(&self, stream: TcpStream, types: WatchTypes) {
        let mask =
            if types.fetchers { FETCHERS } else { 0 } | if types.mutations { MUTATIONS } else { 0 };
        let queue = Arc::new(WatchQueue {
            types: mask,
            pending: Mutex::new(Pending::default()),
        });
        self.queues.lock().push(Arc::clone(&queue));
        self.active.fetch_or(mask, Ordering::Relaxed);
        self.adopted.lock().push((stream, queue));
        self.alarm.ring();
    }

    fn remove(&self, gone: &Arc<WatchQueue>) {
        let mut queues = self.queues.lock();
        queues.retain(|queue| !Arc::ptr_eq(queue, gone));
        let mask = queues.iter().fold(0, |mask, queue| mask | queue.types);
        self.active.store(mask, Ordering::Relaxed);
    }

    fn header(&self, line: &mut String, kind: &str, key: &[u8]) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let gid = self.next_gid.fetch_add(1, Ordering::Relaxed) + 1;
        let _ = write!(
            line,
            "ts={}.{:06} gid={gid} type={kind} key={}",
            now.as_secs(),
            now.subsec_micros(),
            percent_encoding::percent_encode(key, KEY_ESCAPES)
        );
    }

    fn publish(&self, kind: u8, line: &str) {
        for queue in self.queues.lock().iter() {
            if queue.types & kind != 0 {
                queue.push(line.as_bytes());
            }
        }
    }

    /// A fetch of `key` by the client on descriptor `client_fd`: `hit` holds the item's slab
    /// class and value length when found.
    pub fn item_get(&self, key: &[u8], hit: Option<(u32, usize)>, client_fd: i32) {
        let mut line = String::with_capacity(128);
        self.header(&mut line, "item_get", key);
        let (status, class, size) = match hit {
            Some((class, size)) => ("found", class, size),
            None => ("not_found", 0, 0),
        };
        let _ = writeln!(
            line,
            " status={status} clsid={class} cfd={client_fd} size={size}"
        );
        self.publish(FETCHERS, &line);
    }

    /// A store of `key` (`command`: set, add, …) that ended in `status` (stored, not_stored,
    /// exists, not_found); `ttl` in seconds (0: never expires).
    pub fn item_store(&self, store: ItemStore<'_>) {
        let mut line = String::with_capacity(160);
        self.header(&mut line, "item_store", store.key);
        let _ = writeln!(
            line,
            " status={} cmd={} ttl={} clsid={} cfd={} size={}",
            store.status, store.command, store.ttl, store.class, store.client_fd, store.size
        );
        self.publish(MUTATIONS, &line);
    }

    /// The logger thread: writes each watcher's lines until `stopping` says so.
    pub fn run(&self, stopping: impl Fn() -> bool) {
        let mut watchers: Vec<Watcher> = Vec::new();
        let mut scratch = [0u8; 1024];
        while !stopping() {
            watchers.extend(
                self.adopted
                    .lock()
                    .drain(..)
                    .map(|(stream, queue)| Watcher {
                        stream,
                        queue,
                        unwritten: Vec::new(),
                    }),
            );
            let mut wrote = false;
            watchers.retain_mut(|watcher| {
                let alive = serve_watcher(watcher, &mut scratch, &mut wrote);
                if !alive {
                    self.remove(&watcher.queue);
                    let _ = watcher.stream.shutdown(std::net::Shutdown::Both);
                }
                alive
            });
            if watchers.is_empty() {
                // Nobody watches: sleep until a watcher is adopted or the server stops.
                self.alarm.sleep(IDLE_LOGGER_SLEEP);
                continue;
            }
            std::thread::sleep(Duration::from_millis(if wrote { 1 } else { 10 }));
        }
    }
}

/// What [`Watchers::item_store`] logs.
pub struct ItemStore<'a> {
    /// The key.
    pub key: &'a [u8],
    /// `stored`, `not_stored`, `exists` or `not_found`.
    pub status: &'a str,
    /// The command: `set`, `add`, `replace`, `append`, `prepend`, `cas`.
    pub command: &'a str,
    /// Seconds to live, 0 for never.
    pub ttl: u64,
    /// The item's slab class.
    pub class: u32,
    /// The client's descriptor.
    pub client_fd: i32,
    /// The value's length.
    pub size: usize,
}

/// Moves a watcher's lines to its socket without blocking. False when the watcher is gone
/// (closed its side, or a write failed).
fn serve_watcher(watcher: &mut Watcher, scratch: &mut [u8], wrote: &mut bool) -> bool {
    // A watcher takes no commands: what it sends is read and dropped; end of input ends it.
    loop {
        match watcher.stream.read(scratch) {
            Ok(0) => return false,
            Ok(_) => continue,
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return false,
        }
    }
    if watcher.unwritten.is_empty() {
        watcher.unwritten = watcher.queue.take();
    }
    while !watcher.unwritten.is_empty() {
        match watcher.stream.write(&watcher.unwritten) {
            Ok(0) => return false,
            Ok(n) => {
                watcher.unwritten.drain(..n);
                *wrote = true;
            }
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_buffer_counts_skipped_lines_and_reports_them_after_the_kept_ones() {
        let queue = WatchQueue {
            types: FETCHERS,
            pending: Mutex::new(Pending::default()),
        };
        let line = vec![b'x'; 1000];
        let fits = WATCHER_BUFFER_BYTES / line.len();
        for _ in 0..fits + 5 {
            queue.push(&line);
        }
        let taken = queue.take();
        assert_eq!(taken.len(), fits * line.len() + "skipped=5\n".len());
        assert!(taken.ends_with(b"skipped=5\n"));
        assert!(queue.take().is_empty(), "the count is reported once");
    }

    #[test]
    fn events_reach_only_watchers_of_their_type() {
        let watchers = Watchers::default();
        assert!(!watchers.fetchers() && !watchers.mutations());
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let stream = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        watchers.adopt(
            stream,
            WatchTypes {
                fetchers: true,
                ..WatchTypes::default()
            },
        );
        assert!(watchers.fetchers() && !watchers.mutations());
        watchers.item_get(b"a b", Some((1, 3)), 7);
        watchers.item_store(ItemStore {
            key: b"a",
            status: "stored",
            command: "set",
            ttl: 0,
            class: 1,
            client_fd: 7,
            size: 3,
        });
        let queue = Arc::clone(&watchers.queues.lock()[0]);
        let text = String::from_utf8(queue.take()).expect("text");
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(
            text.contains(" gid=1 type=item_get key=a%20b status=found clsid=1 cfd=7 size=3\n"),
            "{text}"
        );
        watchers.remove(&queue);
        assert!(!watchers.fetchers());
    }
}
