//! The cost profiler: times the server's own request path, in-process, for GETs of
//! chosen value sizes (what `tailtrim sim profile` fits its cost model to).
//!
//! ```text
//!   Profiler::start ─► store + config (pinned, one worker) ─► Runtime (no threads of its own)
//!                      loopback TCP pair: the server side adopted by the runtime,
//!                      a thread drains (and discards) the replies on the client side
//!   time_gets(size)  ─► `set` the value through the same path, then per GET:
//!                      write the request, drive the worker's turns (epoll wait, recvmsg,
//!                      parse, execute, sequenced writev, re-arm) until the whole reply is
//!                      written (the worker's `bytes_written` counter) ─► one time in ns
//! ```
//!
//! The caller keeps the statistics (medians, the fit); this module only runs the server.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use tailtrim_store::{Store, StoreConfig};

use crate::config::DispatchPolicy;
use crate::runtime::Runtime;
use crate::{ServerConfig, ServerError, Shared};

/// Memory of the profiler's store: room for the largest values it is asked to time.
const STORE_BYTES: u64 = 256 << 20;

/// Moved bytes per size at most (fewer GETs for large values), with at least
/// [`MIN_GETS_PER_SIZE`] GETs.
const MAX_BYTES_PER_SIZE: u64 = 1_000_000_000;

/// The fewest GETs timed per size.
const MIN_GETS_PER_SIZE: usize = 50;

/// Worker turns (of up to one second each) without progress before the profiler gives up.
const MAX_IDLE_TURNS: u32 = 10;

/// The times of the GETs of one value size.
#[derive(Debug, Clone, PartialEq)]
pub struct GetTimings {
    /// The value's size in bytes.
    pub value_bytes: u64,
    /// The whole reply's size in bytes (`VALUE` line, value, `END`).
    pub reply_bytes: u64,
    /// Each timed GET, request written → reply written, nanoseconds (the first tenth of the
    /// GETs warm the caches and is not in here).
    pub nanos: Vec<f64>,
}

/// A server runtime (the `pinned` policy, one worker) driven turn by turn over one loopback
/// connection.
pub struct Profiler {
    shared: Arc<Shared>,
    runtime: Arc<Runtime>,
    client: TcpStream,
    drain: Option<JoinHandle<()>>,
}

impl Profiler {
    /// Starts the store, the runtime and the loopback connection.
    pub fn start() -> Result<Profiler, ServerError> {
        let store = Store::new(StoreConfig {
            max_bytes: STORE_BYTES,
            ..StoreConfig::default()
        })
        .map_err(|error| ServerError::Config(error.to_string()))?;
        let mut config = ServerConfig::default();
        config.workers.threads = 1;
        config.workers.dispatch = DispatchPolicy::Pinned;
        let shared = Arc::new(Shared::new(store, config));
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let client = TcpStream::connect(listener.local_addr()?)?;
        let (server, peer) = listener.accept()?;
        client.set_nodelay(true)?;
        let runtime = Runtime::new(Arc::clone(&shared), Vec::new())?;
        runtime.adopt_std(server, peer);
        let mut reader = client.try_clone()?;
        let drain = std::thread::spawn(move || {
            let mut sink = vec![0u8; 1 << 20];
            while matches!(reader.read(&mut sink), Ok(n) if n > 0) {}
        });
        Ok(Profiler {
            shared,
            runtime,
            client,
            drain: Some(drain),
        })
    }

    /// Stores a value of `value_bytes` (a `set` through the same path), then times `gets`
    /// GETs of it (fewer for large values: at most ~1 GB moved, at least 50 GETs), plus a
    /// tenth more first that are not kept.
    pub fn time_gets(&mut self, value_bytes: u64, gets: usize) -> Result<GetTimings, ServerError> {
        let key = format!("profile:{value_bytes}");
        let mut set = format!("set {key} 0 0 {value_bytes}\r\n").into_bytes();
        set.extend(std::iter::repeat_n(b'v', value_bytes as usize));
        set.extend_from_slice(b"\r\n");
        self.client.write_all(&set)?;
        self.serve_one(b"STORED\r\n".len())?;
        let get = format!("get {key}\r\n").into_bytes();
        let get_reply = format!("VALUE {key} 0 {value_bytes}\r\n").len()
            + value_bytes as usize
            + b"\r\nEND\r\n".len();
        let gets = gets
            .min((MAX_BYTES_PER_SIZE / value_bytes.max(1)) as usize)
            .max(MIN_GETS_PER_SIZE);
        let warming = gets / 10;
        let mut nanos = Vec::with_capacity(gets);
        let mut reply_bytes = 0;
        for round in 0..gets + warming {
            self.client.write_all(&get)?;
            let started = Instant::now();
            reply_bytes = self.serve_one(get_reply)?;
            let elapsed = started.elapsed().as_nanos() as f64;
            if round >= warming {
                nanos.push(elapsed);
            }
        }
        Ok(GetTimings {
            value_bytes,
            reply_bytes,
            nanos,
        })
    }

    /// Runs the worker's turns until `reply_len` more reply bytes have been written (the
    /// whole reply of the request just sent); the bytes written.
    fn serve_one(&self, reply_len: usize) -> Result<u64, ServerError> {
        let written = || {
            self.shared.counters[0]
                .bytes_written
                .load(Ordering::Relaxed)
        };
        let before = written();
        let mut idle_turns = 0;
        while written() - before < reply_len as u64 {
            if self.runtime.serve_ready(0, 1000) {
                idle_turns = 0;
            } else {
                idle_turns += 1;
                if idle_turns > MAX_IDLE_TURNS {
                    return Err(ServerError::Io(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the server runtime answered nothing for 10 s",
                    )));
                }
            }
        }
        Ok(written() - before)
    }
}

impl Drop for Profiler {
    fn drop(&mut self) {
        let _ = self.client.shutdown(Shutdown::Both);
        // The runtime sees the end of input and closes its side.
        for _ in 0..100 {
            if !self.runtime.serve_ready(0, 10) {
                break;
            }
        }
        if let Some(drain) = self.drain.take() {
            let _ = drain.join();
        }
    }
}
