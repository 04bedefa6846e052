//! Cache-aside load with a simulated database: what an application in front of a cache does,
//! so a membership change of the cache shows up as the miss storm it causes.
//!
//! ```text
//!  Dispatch (open loop: schedule + RequestGenerator, shared by the workers)
//!     │ (index, scheduled time, operation)
//!     ▼
//!  worker 0 … W-1, one blocking TCP connection each, sleep until the scheduled time
//!     read:  get k… ─► hit: check value == Database::value(k, version in the value)
//!                    └► miss: key lock ─► wait db latency ─► version ─► add k value ─► unlock
//!     write: key lock ─► wait db latency ─► version += 1 ─► set k value ─► acked = version ─► unlock
//!     latency = completion - SCHEDULED time (queueing behind busy workers counts)
//!  events thread: at warmup + T ─► HTTP POST|DELETE /pool/servers on the proxy's admin listener
//!     ▼
//!  Records ─► per-second and per-N-request windows (hit ratio, mean, p99) ─► CacheAsideReport
//! ```
//!
//! Every value is a function of its key and a version (`Database::value`), so every read is
//! checked: a value that is not `value(key, v)` for the key it was returned for is *wrong*; a
//! value whose version is older than a write acknowledged before the read was sent is *stale*.
//! Fills and writes of one key hold that key's lock in the bench (a row lock of the database),
//! so a correct cache never returns a stale value: a stale value can only come from the cache
//! system itself (for instance an old owner's copy brought back after a membership change).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tailtrim_proto::{parse_response, Parsed, Response, StoreMode};

use crate::class::{ClassHistograms, ClassSet};
use crate::engine::resolve;
use crate::rng::{splitmix64, Rng};
use crate::schedule::Schedule;
use crate::workload::{KeyRef, OpKind, RequestGenerator, WorkloadSpec};
use crate::BenchError;

/// Default simulated database latency.
pub const DEFAULT_DB_LATENCY: Duration = Duration::from_millis(8);
/// Default number of worker threads (one connection each).
pub const DEFAULT_WORKERS: usize = 64;
/// Default requests per window of the per-request series.
pub const DEFAULT_WINDOW_REQUESTS: usize = 1_000;
/// Default socket timeout: a reply slower than this counts as a client error.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// Stripes of the database's key locks.
const LOCK_STRIPES: usize = 4_096;
/// Bytes of a value's header (`<key id>:<version>:` padded); shorter values are stretched.
const MIN_VALUE_BYTES: usize = 24;
/// Sets in flight per prefill connection.
const PREFILL_WINDOW: usize = 64;

/// A membership change sent to the proxy's admin listener during the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScheduledEvent {
    /// Time after the start of the measured window.
    pub at: Duration,
    /// `add` (POST) or `remove` (DELETE).
    pub action: String,
    /// `host:port[:weight]`.
    pub server: String,
    /// Extra query parameters (`warmup=…`, `share=…`).
    pub params: Vec<(String, String)>,
}

impl std::str::FromStr for ScheduledEvent {
    type Err = BenchError;

    /// Parses `60s:add=HOST:PORT[,warmup=MODE][,share=F]` (also `remove=`).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || {
            BenchError::Config(format!(
                "event must look like 60s:add=HOST:PORT[,warmup=MODE,share=F], got {text:?}"
            ))
        };
        let (time, rest) = text.split_once(':').ok_or_else(bad)?;
        let at = parse_duration(time)?;
        let mut parts = rest.split(',');
        let (action, server) = parts
            .next()
            .and_then(|p| p.split_once('='))
            .ok_or_else(bad)?;
        if action != "add" && action != "remove" {
            return Err(bad());
        }
        if server.is_empty() {
            return Err(bad());
        }
        let params = parts
            .map(|part| {
                part.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .ok_or_else(bad)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            at,
            action: action.to_string(),
            server: server.to_string(),
            params,
        })
    }
}

/// Parses `8ms`, `1.5s`, `500us`, `2m` or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, BenchError> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| BenchError::Config(format!("bad duration {text:?}")))?;
    let seconds = match unit {
        "" | "s" => value,
        "ms" => value / 1e3,
        "us" | "µs" => value / 1e6,
        "m" | "min" => value * 60.0,
        _ => return Err(BenchError::Config(format!("bad duration unit in {text:?}"))),
    };
    Duration::try_from_secs_f64(seconds)
        .map_err(|_| BenchError::Config(format!("bad duration {text:?}")))
}

/// Parameters of a cache-aside run.
#[derive(Clone, Debug)]
pub struct CacheAsideConfig {
    /// The cache (a server or the proxy), `host:port`.
    pub server: String,
    /// The proxy's admin listener, for [`ScheduledEvent`]s.
    pub admin: Option<String>,
    /// Target requests per second (open loop).
    pub rate: f64,
    /// Measured window.
    pub duration: Duration,
    /// Load before the window (not recorded; events count from the window's start).
    pub warmup: Duration,
    /// Time the simulated database takes per read or write.
    pub db_latency: Duration,
    /// Worker threads, one connection each.
    pub workers: usize,
    /// Seed of the schedule and the key choices.
    pub seed: u64,
    /// Requests per window of the per-request series.
    pub window_requests: usize,
    /// Membership changes during the window.
    pub events: Vec<ScheduledEvent>,
    /// Before the run, write every key at version 0, coldest first (so the hottest are the
    /// last written and stay when the cache holds less than the data).
    pub prefill: bool,
    /// The version every key of the database starts at. Runs back to back against one cache
    /// (a soak) give each run a base above every version an earlier run wrote, so the values
    /// those runs left in the cache are checked as older versions, not as values never written.
    pub first_version: u32,
    /// Reply timeout.
    pub timeout: Duration,
}

impl CacheAsideConfig {
    /// Defaults for `server` at `rate` for `duration`.
    #[must_use]
    pub fn new(server: &str, rate: f64, duration: Duration) -> Self {
        Self {
            server: server.to_string(),
            admin: None,
            rate,
            duration,
            warmup: Duration::ZERO,
            db_latency: DEFAULT_DB_LATENCY,
            workers: DEFAULT_WORKERS,
            seed: 1,
            window_requests: DEFAULT_WINDOW_REQUESTS,
            events: Vec::new(),
            prefill: false,
            first_version: 0,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    fn validate(&self) -> Result<(), BenchError> {
        let fail = |message: &str| Err(BenchError::Config(message.to_string()));
        if !(self.rate.is_finite() && self.rate > 0.0) {
            return fail("rate must be positive");
        }
        if self.duration.is_zero() || self.workers == 0 || self.window_requests == 0 {
            return fail("duration, workers and window must be positive");
        }
        if !self.events.is_empty() && self.admin.is_none() {
            return fail("scheduled events need the proxy's admin address (--admin)");
        }
        if let Some(event) = self.events.iter().find(|e| e.at > self.duration) {
            return Err(BenchError::Config(format!(
                "event at {:?} is after the end of the run",
                event.at
            )));
        }
        Ok(())
    }
}

/// The simulated database: a version per key; values are a function of key and version.
pub struct Database {
    spec: Arc<WorkloadSpec>,
    versions: Vec<AtomicU32>,
    acked: Vec<AtomicU32>,
    locks: Vec<Mutex<()>>,
    latency: Duration,
    reads: AtomicU64,
    writes: AtomicU64,
}

/// What a value returned by the cache says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// The right bytes for the version it carries.
    Fresh,
    /// Right bytes, but older than a write acknowledged before the read was sent.
    Stale,
    /// Not the value of this key at any version.
    Wrong,
}

impl Database {
    /// A database over the keys of `spec` (pool 0 and the others, one flat index), every key at
    /// version 0.
    #[must_use]
    pub fn new(spec: Arc<WorkloadSpec>, latency: Duration) -> Self {
        Self::starting_at(spec, latency, 0)
    }

    /// A database whose keys all start at `first_version`: values of lower versions found in
    /// the cache are older values (never stale: no write of this database came before them).
    #[must_use]
    pub fn starting_at(spec: Arc<WorkloadSpec>, latency: Duration, first_version: u32) -> Self {
        let keys = spec.total_keys() as usize;
        Self {
            spec,
            versions: (0..keys).map(|_| AtomicU32::new(first_version)).collect(),
            acked: (0..keys).map(|_| AtomicU32::new(0)).collect(),
            locks: (0..LOCK_STRIPES).map(|_| Mutex::new(())).collect(),
            latency,
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
        }
    }

    fn flat(&self, key: KeyRef) -> usize {
        let before: u64 = self.spec.pools[..key.pool as usize]
            .iter()
            .map(|pool| pool.keys)
            .sum();
        (before + key.id) as usize
    }

    /// The key's bytes.
    #[must_use]
    pub fn key_bytes(&self, key: KeyRef) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        self.spec.write_key(key, &mut out);
        out
    }

    /// The value of `key` at `version`: `<flat id>:<version>:` then bytes derived from both.
    #[must_use]
    pub fn value(&self, key: KeyRef, version: u32) -> Vec<u8> {
        let flat = self.flat(key);
        let length = (self.spec.value_len(key) as usize).max(MIN_VALUE_BYTES);
        let mut out = format!("{flat}:{version}:").into_bytes();
        let mut state = (flat as u64) << 32 | u64::from(version);
        let mut word = splitmix64(&mut state);
        while out.len() < length {
            out.push(b'a' + (word % 26) as u8);
            word /= 26;
            if word < 26 {
                word = splitmix64(&mut state);
            }
        }
        out
    }

    /// Checks a value returned for `key`; `floor` is the version acknowledged before the read.
    #[must_use]
    pub fn check(&self, key: KeyRef, bytes: &[u8], floor: u32) -> Check {
        let mut fields = bytes.splitn(3, |&b| b == b':');
        let parse = |field: Option<&[u8]>| -> Option<u64> {
            std::str::from_utf8(field?).ok()?.parse().ok()
        };
        let (Some(flat), Some(version)) = (parse(fields.next()), parse(fields.next())) else {
            return Check::Wrong;
        };
        let Ok(version) = u32::try_from(version) else {
            return Check::Wrong;
        };
        if flat != self.flat(key) as u64
            || version > self.versions[self.flat(key)].load(Ordering::Acquire)
            || self.value(key, version) != bytes
        {
            return Check::Wrong;
        }
        if version < floor {
            Check::Stale
        } else {
            Check::Fresh
        }
    }

    /// The version whose write the cache acknowledged last.
    #[must_use]
    pub fn acked(&self, key: KeyRef) -> u32 {
        self.acked[self.flat(key)].load(Ordering::Acquire)
    }

    fn lock(&self, key: KeyRef) -> std::sync::MutexGuard<'_, ()> {
        let stripe = self.flat(key) % LOCK_STRIPES;
        self.locks[stripe]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Database reads so far.
    #[must_use]
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Database writes so far.
    #[must_use]
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }
}

/// A blocking connection to the cache with a reply parser.
struct CacheConnection {
    address: std::net::SocketAddr,
    timeout: Duration,
    stream: Option<TcpStream>,
    input: Vec<u8>,
    output: Vec<u8>,
}

/// One parsed reply item, owned.
enum Item {
    Value {
        key: Vec<u8>,
        data: Vec<u8>,
    },
    End,
    Stored,
    NotStored,
    /// Any other reply (an error line), as text.
    Other(String),
}

impl CacheConnection {
    fn new(address: std::net::SocketAddr, timeout: Duration) -> Self {
        Self {
            address,
            timeout,
            stream: None,
            input: Vec::with_capacity(16 * 1024),
            output: Vec::with_capacity(16 * 1024),
        }
    }

    fn stream(&mut self) -> std::io::Result<&mut TcpStream> {
        if self.stream.is_none() {
            let stream = TcpStream::connect_timeout(&self.address, self.timeout)?;
            stream.set_nodelay(true)?;
            stream.set_read_timeout(Some(self.timeout))?;
            stream.set_write_timeout(Some(self.timeout))?;
            self.input.clear();
            self.stream = Some(stream);
        }
        self.stream
            .as_mut()
            .ok_or_else(|| std::io::Error::other("not connected"))
    }

    /// Sends what `compose` appends; on any failure the connection is dropped.
    fn send(&mut self) -> std::io::Result<()> {
        let output = std::mem::take(&mut self.output);
        let result = self.stream().and_then(|stream| stream.write_all(&output));
        self.output = output;
        self.output.clear();
        if result.is_err() {
            self.stream = None;
        }
        result
    }

    /// Reads one reply item.
    fn item(&mut self) -> std::io::Result<Item> {
        loop {
            match parse_response(&self.input) {
                Parsed::Complete { value, consumed } => {
                    let item = match value {
                        Response::Value { key, data, .. } => Item::Value {
                            key: self.input[key].to_vec(),
                            data: self.input[data].to_vec(),
                        },
                        Response::End => Item::End,
                        Response::Stored => Item::Stored,
                        Response::NotStored | Response::Exists | Response::NotFound => {
                            Item::NotStored
                        }
                        Response::Error => Item::Other("ERROR".into()),
                        Response::ClientError(text) => {
                            Item::Other(format!("CLIENT_ERROR {}", String::from_utf8_lossy(&text)))
                        }
                        Response::ServerError(text) => {
                            Item::Other(format!("SERVER_ERROR {}", String::from_utf8_lossy(&text)))
                        }
                        other => Item::Other(format!("{other:?}")),
                    };
                    self.input.drain(..consumed);
                    return Ok(item);
                }
                Parsed::Invalid { .. } => {
                    self.stream = None;
                    return Err(std::io::Error::other("invalid reply"));
                }
                Parsed::Incomplete => {}
            }
            let mut chunk = [0u8; 16 * 1024];
            let read = match self.stream.as_mut() {
                Some(stream) => stream.read(&mut chunk),
                None => Err(std::io::Error::other("not connected")),
            };
            match read {
                Ok(0) => {
                    self.stream = None;
                    return Err(std::io::Error::other("connection closed"));
                }
                Ok(count) => self.input.extend_from_slice(&chunk[..count]),
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                Err(error) => {
                    self.stream = None;
                    return Err(error);
                }
            }
        }
    }

    /// Stores `value` under `key` with `mode`; Ok when the cache answered STORED or
    /// NOT_STORED (for `add`: someone stored it first).
    fn store(&mut self, mode: StoreMode, key: &[u8], value: &[u8]) -> std::io::Result<()> {
        tailtrim_proto::compose::store(&mut self.output, mode, key, 0, 0, value, 0, false);
        self.send()?;
        match self.item()? {
            Item::Stored | Item::NotStored => Ok(()),
            Item::Other(text) => Err(std::io::Error::other(text)),
            _ => Err(std::io::Error::other("unexpected reply to a store")),
        }
    }
}

/// One request's record.
#[derive(Clone, Copy, Debug, Default)]
struct Record {
    index: u64,
    scheduled_nanos: u64,
    latency_nanos: u64,
    hits: u32,
    misses: u32,
    wrong: u32,
    stale: u32,
    error: bool,
    write: bool,
    /// Small/large, mice/elephant, get/set (the workload's thresholds).
    classes: ClassSet,
}

/// The shared open-loop dispatcher.
struct Dispatch {
    schedule: Schedule,
    generator: RequestGenerator,
    next_index: u64,
    end_nanos: u64,
}

struct Worker<'a> {
    database: &'a Database,
    connection: CacheConnection,
    records: Vec<Record>,
    error_kinds: BTreeMap<String, u64>,
}

/// A short name for a client error.
fn error_kind(error: &std::io::Error) -> String {
    match error.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => "timeout".into(),
        _ => error.to_string().chars().take(80).collect(),
    }
}

impl Worker<'_> {
    /// Runs one operation; returns (hits, misses, wrong, stale, error).
    fn execute(&mut self, kind: OpKind, keys: &[KeyRef], record: &mut Record) {
        match kind {
            OpKind::Get => self.read(keys, record),
            OpKind::Set => {
                record.write = true;
                for key in keys {
                    if let Err(error) = self.write(*key) {
                        self.fail(record, &error);
                    }
                }
            }
        }
    }

    fn fail(&mut self, record: &mut Record, error: &std::io::Error) {
        record.error = true;
        *self.error_kinds.entry(error_kind(error)).or_default() += 1;
    }

    fn read(&mut self, keys: &[KeyRef], record: &mut Record) {
        let database = self.database;
        let floors: Vec<u32> = keys.iter().map(|key| database.acked(*key)).collect();
        let names: Vec<Vec<u8>> = keys.iter().map(|key| database.key_bytes(*key)).collect();
        tailtrim_proto::compose::get(&mut self.connection.output, &names, false);
        let mut found = vec![false; keys.len()];
        let outcome: std::io::Result<()> = (|| {
            self.connection.send()?;
            loop {
                match self.connection.item()? {
                    Item::Value { key, data } => {
                        let Some(position) = names.iter().position(|name| *name == key) else {
                            record.wrong += 1;
                            continue;
                        };
                        found[position] = true;
                        match database.check(keys[position], &data, floors[position]) {
                            Check::Fresh => {}
                            Check::Stale => record.stale += 1,
                            Check::Wrong => record.wrong += 1,
                        }
                    }
                    Item::End => return Ok(()),
                    Item::Other(text) => return Err(std::io::Error::other(text)),
                    _ => return Err(std::io::Error::other("unexpected reply to get")),
                }
            }
        })();
        if let Err(error) = outcome {
            self.fail(record, &error);
            return;
        }
        record.hits = found.iter().filter(|hit| **hit).count() as u32;
        record.misses = keys.len() as u32 - record.hits;
        let missing: Vec<usize> = (0..keys.len()).filter(|&i| !found[i]).collect();
        if missing.is_empty() {
            return;
        }
        // One database round trip for all the missing keys, each under its row lock.
        let mut stripes: Vec<usize> = missing
            .iter()
            .map(|&i| database.flat(keys[i]) % LOCK_STRIPES)
            .collect();
        stripes.sort_unstable();
        stripes.dedup();
        let _guards: Vec<_> = stripes
            .iter()
            .map(|&stripe| {
                database.locks[stripe]
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
            })
            .collect();
        std::thread::sleep(database.latency);
        database.reads.fetch_add(1, Ordering::Relaxed);
        for &i in &missing {
            let version = database.versions[database.flat(keys[i])].load(Ordering::Acquire);
            let value = database.value(keys[i], version);
            if let Err(error) = self.connection.store(StoreMode::Add, &names[i], &value) {
                self.fail(record, &error);
            }
        }
    }

    fn write(&mut self, key: KeyRef) -> std::io::Result<()> {
        let database = self.database;
        let _guard = database.lock(key);
        std::thread::sleep(database.latency);
        database.writes.fetch_add(1, Ordering::Relaxed);
        let flat = database.flat(key);
        let version = database.versions[flat].fetch_add(1, Ordering::AcqRel) + 1;
        let value = database.value(key, version);
        let name = database.key_bytes(key);
        self.connection.store(StoreMode::Set, &name, &value)?;
        database.acked[flat].fetch_max(version, Ordering::AcqRel);
        Ok(())
    }
}

/// What happened to a scheduled event.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    /// `add` or `remove`.
    pub action: String,
    /// The server.
    pub server: String,
    /// Extra parameters sent.
    pub params: Vec<(String, String)>,
    /// Scheduled time, seconds after the window's start.
    pub at_s: f64,
    /// When the request was sent (seconds after the window's start).
    pub sent_s: f64,
    /// When the proxy answered (after any preemptive copying: the switch).
    pub answered_s: f64,
    /// HTTP status line's code (0 when the request failed).
    pub status: u16,
    /// The proxy's JSON answer (or the error).
    pub answer: String,
}

/// One request of the measured window: when it was scheduled and how long it took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestTime {
    /// Scheduled time, nanoseconds after the window's start.
    pub scheduled_ns: u64,
    /// Completion minus the scheduled time, nanoseconds.
    pub latency_ns: u64,
}

/// One window of the time series.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WindowSample {
    /// First request index (per-request series) or second (per-second series).
    pub start: u64,
    /// Scheduled time of the window's first request, seconds after the window's start.
    pub time_s: f64,
    /// Requests in the window.
    pub requests: u64,
    /// Keys found.
    pub hits: u64,
    /// Keys missed (each a database read).
    pub misses: u64,
    /// `hits / (hits + misses)` (1 without reads).
    pub hit_ratio: f64,
    /// Mean latency.
    pub mean_us: f64,
    /// 99th percentile latency.
    pub p99_us: f64,
    /// Client errors.
    pub errors: u64,
    /// Wrong or stale values.
    pub bad_values: u64,
}

/// Result of a cache-aside run (the `--json` document).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CacheAsideReport {
    /// Workload name.
    pub workload: String,
    /// Cache address.
    pub server: String,
    /// Target rate.
    pub target_rps: f64,
    /// Requests completed in the window per second.
    pub achieved_rps: f64,
    /// Window length.
    pub duration_s: f64,
    /// Unrecorded load before the window.
    pub warmup_s: f64,
    /// Simulated database latency.
    pub db_latency_ms: f64,
    /// Worker threads.
    pub workers: usize,
    /// Keys of the workload.
    pub keys: u64,
    /// Requests in the window.
    pub requests: u64,
    /// Reads among them.
    pub reads: u64,
    /// Writes among them.
    pub writes: u64,
    /// Keys found.
    pub hits: u64,
    /// Keys missed.
    pub misses: u64,
    /// Overall hit ratio.
    pub hit_ratio: f64,
    /// Mean latency.
    pub mean_us: f64,
    /// p50 latency (from [`CacheAsideReport::latency_ns`]).
    pub p50_us: f64,
    /// p99 latency (from [`CacheAsideReport::latency_ns`]).
    pub p99_us: f64,
    /// Every request's latency in the window, nanoseconds (three significant digits), which
    /// the whole run's p50 and p99 come from; not part of the `--json` document (an
    /// experiment keeps it serialized beside the report).
    #[serde(skip)]
    pub latency_ns: Option<hdrhistogram::Histogram<u64>>,
    /// The same per request class (small/large, mice/elephant, get/set); not part of the
    /// `--json` document either.
    #[serde(skip)]
    pub class_latency_ns: Option<ClassHistograms>,
    /// When the measured window started (the instant every request's scheduled time counts
    /// from, plus the warm-up), to place requests against events timed by the caller; not part
    /// of the `--json` document.
    #[serde(skip)]
    pub window_start: Option<Instant>,
    /// Every request of the window in schedule order: its scheduled time after the window's
    /// start and its latency (16 bytes a request); not part of the `--json` document.
    #[serde(skip)]
    pub request_times: Vec<RequestTime>,
    /// Values not equal to their key's value at any version (must be 0).
    pub wrong_values: u64,
    /// Values older than a write acknowledged before the read (must be 0).
    pub stale_values: u64,
    /// Client errors: timeouts, closed connections, error replies (must be 0).
    pub errors: u64,
    /// Client errors by kind (`timeout`, the error reply, ...).
    #[serde(default)]
    pub error_kinds: BTreeMap<String, u64>,
    /// Keys written by the prefill.
    pub prefilled: u64,
    /// Requests per window of `per_request`.
    pub window_requests: usize,
    /// Membership changes and what the proxy answered.
    pub events: Vec<EventRecord>,
    /// Per second of scheduled time.
    pub per_second: Vec<WindowSample>,
    /// Per `window_requests` requests in schedule order.
    pub per_request: Vec<WindowSample>,
}

impl CacheAsideReport {
    /// A plain-text summary.
    #[must_use]
    pub fn to_table(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "cache-aside {} via {}: {} requests in {:.0} s ({:.0} rps of {:.0}), database {} ms",
            self.workload,
            self.server,
            self.requests,
            self.duration_s,
            self.achieved_rps,
            self.target_rps,
            self.db_latency_ms
        );
        let _ = writeln!(
            out,
            "hit ratio {:.4} ({} hits, {} misses), mean {:.0} µs, p50 {:.0} µs, p99 {:.0} µs",
            self.hit_ratio, self.hits, self.misses, self.mean_us, self.p50_us, self.p99_us
        );
        let _ = writeln!(
            out,
            "wrong values {}, stale values {}, client errors {}",
            self.wrong_values, self.stale_values, self.errors
        );
        for (kind, count) in &self.error_kinds {
            let _ = writeln!(out, "  {count} × {kind}");
        }
        for event in &self.events {
            let _ = writeln!(
                out,
                "event {} {} at {:.1} s: answered at {:.2} s, HTTP {} {}",
                event.action,
                event.server,
                event.at_s,
                event.answered_s,
                event.status,
                event.answer
            );
        }
        out
    }

    /// True when every value was right and no request failed.
    #[must_use]
    pub fn clean(&self) -> bool {
        self.wrong_values == 0 && self.stale_values == 0 && self.errors == 0
    }
}

/// Writes every key at its current version (0, or the database's first version), coldest
/// (highest id) first, over `connections` connections.
pub fn prefill(
    database: &Database,
    server: &str,
    connections: usize,
    timeout: Duration,
) -> Result<u64, BenchError> {
    let address = resolve(server)?;
    let mut keys: Vec<KeyRef> = database.spec.all_keys().collect();
    keys.reverse();
    let connections = connections.max(1);
    let chunks: Vec<Vec<KeyRef>> = (0..connections)
        .map(|c| keys.iter().skip(c).step_by(connections).copied().collect())
        .collect();
    let results: Vec<Result<u64, BenchError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = chunks
            .iter()
            .map(|chunk| {
                scope.spawn(move || {
                    let mut connection = CacheConnection::new(address, timeout);
                    let io = |source| BenchError::Io {
                        context: format!("prefilling {server}"),
                        source,
                    };
                    for batch in chunk.chunks(PREFILL_WINDOW) {
                        for key in batch {
                            let name = database.key_bytes(*key);
                            let version =
                                database.versions[database.flat(*key)].load(Ordering::Acquire);
                            let value = database.value(*key, version);
                            tailtrim_proto::compose::set(
                                &mut connection.output,
                                &name,
                                0,
                                0,
                                &value,
                            );
                        }
                        connection.send().map_err(io)?;
                        for _ in batch {
                            if !matches!(connection.item().map_err(io)?, Item::Stored) {
                                return Err(BenchError::Protocol(
                                    "prefill: a set was not stored".into(),
                                ));
                            }
                        }
                    }
                    Ok(chunk.len() as u64)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| {
                handle
                    .join()
                    .unwrap_or_else(|_| Err(BenchError::Config("a prefill thread panicked".into())))
            })
            .collect()
    });
    results.into_iter().sum()
}

/// Sends one admin request; returns (status, body).
pub fn admin_request(
    admin: &str,
    method: &str,
    path_and_query: &str,
    timeout: Duration,
) -> Result<(u16, String), BenchError> {
    let io = |source| BenchError::Io {
        context: format!("admin request to {admin}"),
        source,
    };
    let address = resolve(admin)?;
    let mut stream = TcpStream::connect_timeout(&address, timeout).map_err(io)?;
    stream.set_read_timeout(Some(timeout)).map_err(io)?;
    let request = format!(
        "{method} {path_and_query} HTTP/1.1\r\nHost: {admin}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).map_err(io)?;
    let mut response = String::new();
    stream.read_to_string(&mut response).map_err(io)?;
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.trim().to_string())
        .unwrap_or_default();
    Ok((status, body))
}

/// `%`-encodes a query value.
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b':' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn send_event(admin: &str, event: &ScheduledEvent) -> (u16, String) {
    let method = if event.action == "add" {
        "POST"
    } else {
        "DELETE"
    };
    let mut query = format!("server={}", encode(&event.server));
    for (key, value) in &event.params {
        query.push_str(&format!("&{}={}", encode(key), encode(value)));
    }
    // A preemptive warm-up answers after its copies: allow it time.
    match admin_request(
        admin,
        method,
        &format!("/pool/servers?{query}"),
        Duration::from_secs(300),
    ) {
        Ok(answer) => answer,
        Err(error) => (0, error.to_string()),
    }
}

/// Runs a cache-aside measurement: optional prefill, warm-up load, then the measured window
/// with its events.
pub fn run_cache_aside(
    workload: &Arc<WorkloadSpec>,
    config: &CacheAsideConfig,
    observer: &mut dyn FnMut(Duration, u64),
) -> Result<CacheAsideReport, BenchError> {
    config.validate()?;
    workload.validate()?;
    let address = resolve(&config.server)?;
    let database = Database::starting_at(
        Arc::clone(workload),
        config.db_latency,
        config.first_version,
    );
    let prefilled = if config.prefill {
        prefill(&database, &config.server, 4, config.timeout)?
    } else {
        0
    };
    let rng = Rng::new(config.seed);
    let start = Instant::now() + Duration::from_millis(20);
    let window_start_nanos = config.warmup.as_nanos() as u64;
    let end_nanos = (config.warmup + config.duration).as_nanos() as u64;
    let dispatch = Mutex::new(Dispatch {
        schedule: Schedule::new(&workload.arrival, config.rate, rng.fork(1)),
        generator: RequestGenerator::new(Arc::clone(workload), rng.fork(2)),
        next_index: 0,
        end_nanos,
    });
    let completed = AtomicU64::new(0);
    let finished = AtomicBool::new(false);
    let worker_records = std::thread::scope(|scope| {
        let events_handle = scope.spawn(|| {
            let mut records = Vec::new();
            let Some(admin) = config.admin.as_deref() else {
                return records;
            };
            let mut events = config.events.clone();
            events.sort_by_key(|event| event.at);
            for event in events {
                let due = start + config.warmup + event.at;
                while Instant::now() < due && !finished.load(Ordering::Relaxed) {
                    std::thread::sleep(
                        due.saturating_duration_since(Instant::now())
                            .min(Duration::from_millis(50)),
                    );
                }
                if finished.load(Ordering::Relaxed) {
                    break;
                }
                let window = start + config.warmup;
                let sent = Instant::now();
                let (status, answer) = send_event(admin, &event);
                let seconds = |at: Instant| at.saturating_duration_since(window).as_secs_f64();
                records.push(EventRecord {
                    action: event.action.clone(),
                    server: event.server.clone(),
                    params: event.params.clone(),
                    at_s: event.at.as_secs_f64(),
                    sent_s: seconds(sent),
                    answered_s: seconds(Instant::now()),
                    status,
                    answer,
                });
            }
            records
        });
        let handles: Vec<_> = (0..config.workers)
            .map(|_| {
                let (database, dispatch, completed) = (&database, &dispatch, &completed);
                scope.spawn(move || {
                    let mut worker = Worker {
                        database,
                        connection: CacheConnection::new(address, config.timeout),
                        records: Vec::new(),
                        error_kinds: BTreeMap::new(),
                    };
                    loop {
                        let next = {
                            let mut guard = dispatch
                                .lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner);
                            let at = guard.schedule.next_nanos();
                            if at >= guard.end_nanos {
                                guard.end_nanos = 0;
                                None
                            } else {
                                let operation = guard.generator.next_operation();
                                let index = guard.next_index;
                                guard.next_index += 1;
                                Some((index, at, operation))
                            }
                        };
                        let Some((index, at, operation)) = next else {
                            break;
                        };
                        let scheduled = start + Duration::from_nanos(at);
                        let now = Instant::now();
                        if scheduled > now {
                            std::thread::sleep(scheduled - now);
                        }
                        let mut record = Record {
                            index,
                            scheduled_nanos: at,
                            classes: operation.classes,
                            ..Record::default()
                        };
                        worker.execute(operation.kind, &operation.keys, &mut record);
                        record.latency_nanos = Instant::now()
                            .saturating_duration_since(scheduled)
                            .as_nanos() as u64;
                        completed.fetch_add(1, Ordering::Relaxed);
                        if at >= window_start_nanos {
                            worker.records.push(record);
                        }
                    }
                    (worker.records, worker.error_kinds)
                })
            })
            .collect();
        let workers = handles.len();
        loop {
            std::thread::sleep(Duration::from_millis(100));
            observer(
                Instant::now().saturating_duration_since(start),
                completed.load(Ordering::Relaxed),
            );
            if handles.iter().filter(|h| h.is_finished()).count() == workers {
                break;
            }
        }
        finished.store(true, Ordering::Relaxed);
        let mut records: Vec<Record> = Vec::new();
        let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
        for handle in handles {
            let (worker_records, worker_kinds) = handle.join().unwrap_or_default();
            records.extend(worker_records);
            for (kind, count) in worker_kinds {
                *kinds.entry(kind).or_default() += count;
            }
        }
        let events = events_handle.join().unwrap_or_default();
        (records, events, kinds)
    });
    let (mut records, events, error_kinds) = worker_records;
    records.sort_unstable_by_key(|record| record.index);
    let mut report = summarize(
        workload,
        config,
        &records,
        events,
        prefilled,
        window_start_nanos,
    );
    report.error_kinds = error_kinds;
    report.window_start = Some(start + config.warmup);
    Ok(report)
}

fn window(records: &[Record], start: u64, window_start_nanos: u64) -> WindowSample {
    let mut latencies: Vec<u64> = records.iter().map(|r| r.latency_nanos).collect();
    latencies.sort_unstable();
    let hits: u64 = records.iter().map(|r| u64::from(r.hits)).sum();
    let misses: u64 = records.iter().map(|r| u64::from(r.misses)).sum();
    let mean = if latencies.is_empty() {
        0.0
    } else {
        latencies.iter().sum::<u64>() as f64 / latencies.len() as f64
    };
    WindowSample {
        start,
        time_s: records
            .first()
            .map(|r| r.scheduled_nanos.saturating_sub(window_start_nanos) as f64 / 1e9)
            .unwrap_or(0.0),
        requests: records.len() as u64,
        hits,
        misses,
        hit_ratio: if hits + misses == 0 {
            1.0
        } else {
            hits as f64 / (hits + misses) as f64
        },
        mean_us: mean / 1e3,
        p99_us: percentile(&latencies, 0.99) / 1e3,
        errors: records.iter().filter(|r| r.error).count() as u64,
        bad_values: records.iter().map(|r| u64::from(r.wrong + r.stale)).sum(),
    }
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[u64], quantile: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((quantile * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1] as f64
}

fn summarize(
    workload: &WorkloadSpec,
    config: &CacheAsideConfig,
    records: &[Record],
    events: Vec<EventRecord>,
    prefilled: u64,
    window_start_nanos: u64,
) -> CacheAsideReport {
    let whole = window(records, 0, window_start_nanos);
    // Up to an hour; `saturating_record` clamps anything longer to it (it never resizes).
    let mut latency_ns = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3)
        .unwrap_or_else(|_| unreachable!("valid bounds and digits"));
    let mut class_latency_ns = ClassHistograms::default();
    for record in records {
        latency_ns.saturating_record(record.latency_nanos.max(1));
        class_latency_ns.record(record.classes, record.latency_nanos);
    }
    let whole_us = |quantile: f64| {
        if latency_ns.is_empty() {
            0.0
        } else {
            latency_ns.value_at_quantile(quantile) as f64 / 1e3
        }
    };
    let per_request = records
        .chunks(config.window_requests)
        .enumerate()
        .map(|(i, chunk)| {
            window(
                chunk,
                (i * config.window_requests) as u64,
                window_start_nanos,
            )
        })
        .collect();
    let seconds = config.duration.as_secs_f64().ceil() as usize;
    let mut by_second: Vec<Vec<Record>> = vec![Vec::new(); seconds.max(1)];
    for record in records {
        let second =
            (record.scheduled_nanos.saturating_sub(window_start_nanos) / 1_000_000_000) as usize;
        if let Some(bucket) = by_second.get_mut(second) {
            bucket.push(*record);
        }
    }
    let per_second = by_second
        .iter()
        .enumerate()
        .map(|(second, bucket)| {
            let mut sample = window(bucket, second as u64, window_start_nanos);
            sample.time_s = second as f64;
            sample
        })
        .collect();
    CacheAsideReport {
        workload: workload.name.clone(),
        server: config.server.clone(),
        target_rps: config.rate,
        achieved_rps: records.len() as f64 / config.duration.as_secs_f64(),
        duration_s: config.duration.as_secs_f64(),
        warmup_s: config.warmup.as_secs_f64(),
        db_latency_ms: config.db_latency.as_secs_f64() * 1e3,
        workers: config.workers,
        keys: workload.total_keys(),
        requests: records.len() as u64,
        reads: records.iter().filter(|r| !r.write).count() as u64,
        writes: records.iter().filter(|r| r.write).count() as u64,
        hits: whole.hits,
        misses: whole.misses,
        hit_ratio: whole.hit_ratio,
        mean_us: whole.mean_us,
        p50_us: whole_us(0.5),
        p99_us: whole_us(0.99),
        latency_ns: Some(latency_ns),
        class_latency_ns: Some(class_latency_ns),
        window_start: None,
        request_times: records
            .iter()
            .map(|record| RequestTime {
                scheduled_ns: record.scheduled_nanos.saturating_sub(window_start_nanos),
                latency_ns: record.latency_nanos,
            })
            .collect(),
        wrong_values: records.iter().map(|r| u64::from(r.wrong)).sum(),
        stale_values: records.iter().map(|r| u64::from(r.stale)).sum(),
        errors: whole.errors,
        error_kinds: BTreeMap::new(),
        prefilled,
        window_requests: config.window_requests,
        events,
        per_second,
        per_request,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(keys: u64) -> Arc<WorkloadSpec> {
        let mut spec = WorkloadSpec::preset("uniform").unwrap_or_else(|e| panic!("{e}"));
        spec.pools.truncate(1);
        spec.pools[0].keys = keys;
        Arc::new(spec)
    }

    #[test]
    fn values_are_checked_against_key_and_version() {
        let database = Database::new(spec(100), Duration::ZERO);
        let key = KeyRef { pool: 0, id: 7 };
        let other = KeyRef { pool: 0, id: 8 };
        let value = database.value(key, 0);
        assert!(value.len() >= MIN_VALUE_BYTES);
        assert_eq!(database.check(key, &value, 0), Check::Fresh);
        assert_eq!(database.check(other, &value, 0), Check::Wrong);
        let mut corrupted = value.clone();
        let last = corrupted.len() - 1;
        corrupted[last] ^= 1;
        assert_eq!(database.check(key, &corrupted, 0), Check::Wrong);
        // A version the database never reached is wrong; an old one after a newer ack is stale.
        assert_eq!(
            database.check(key, &database.value(key, 3), 0),
            Check::Wrong
        );
        database.versions[7].store(2, Ordering::Release);
        assert_eq!(
            database.check(key, &database.value(key, 1), 2),
            Check::Stale
        );
        assert_eq!(
            database.check(key, &database.value(key, 2), 2),
            Check::Fresh
        );
    }

    #[test]
    fn a_later_run_reads_an_earlier_runs_values_as_older_versions() {
        // Run 1 left version 5 of key 7 in the cache; run 2 starts its database above it.
        let earlier = Database::new(spec(100), Duration::ZERO);
        let key = KeyRef { pool: 0, id: 7 };
        let left = earlier.value(key, 5);
        let fresh_start = Database::new(spec(100), Duration::ZERO);
        assert_eq!(fresh_start.check(key, &left, 0), Check::Wrong);
        let later = Database::starting_at(spec(100), Duration::ZERO, 1_000);
        assert_eq!(later.check(key, &left, 0), Check::Fresh);
        assert_eq!(later.check(key, &later.value(key, 1_001), 0), Check::Wrong);
        // Once run 2 acknowledged a write, run 1's value is stale.
        later.versions[7].store(1_001, Ordering::Release);
        assert_eq!(later.check(key, &left, 1_001), Check::Stale);
    }

    #[test]
    fn events_and_durations_parse() {
        let event: ScheduledEvent = "60s:add=127.0.0.1:11214,warmup=preemptive+fallback,share=0.2"
            .parse()
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(event.at, Duration::from_secs(60));
        assert_eq!(event.action, "add");
        assert_eq!(event.server, "127.0.0.1:11214");
        assert_eq!(event.params.len(), 2);
        assert!("90s:remove=h:1".parse::<ScheduledEvent>().is_ok());
        assert!("90s:move=h:1".parse::<ScheduledEvent>().is_err());
        assert!("soon:add=h:1".parse::<ScheduledEvent>().is_err());
        assert_eq!(parse_duration("8ms").ok(), Some(Duration::from_millis(8)));
        assert_eq!(
            parse_duration("1.5").ok(),
            Some(Duration::from_millis(1_500))
        );
        assert_eq!(encode("preemptive+fallback"), "preemptive%2Bfallback");
    }

    #[test]
    fn windows_cut_the_run_by_request_count() {
        let records: Vec<Record> = (0..2_500u64)
            .map(|index| Record {
                index,
                scheduled_nanos: index * 1_000_000,
                latency_nanos: if index % 100 == 0 { 8_000_000 } else { 100_000 },
                hits: u32::from(index % 100 != 0),
                misses: u32::from(index % 100 == 0),
                ..Record::default()
            })
            .collect();
        let mut config = CacheAsideConfig::new("127.0.0.1:1", 1_000.0, Duration::from_secs(3));
        config.window_requests = 1_000;
        let report = summarize(&spec(10), &config, &records, Vec::new(), 0, 0);
        assert_eq!(report.per_request.len(), 3);
        assert_eq!(report.per_request[0].requests, 1_000);
        assert!((report.per_request[0].hit_ratio - 0.99).abs() < 1e-9);
        assert!((report.per_request[0].mean_us - 179.0).abs() < 1e-6);
        assert_eq!(report.per_second.len(), 3);
        assert_eq!(report.per_second[2].requests, 500);
        assert!((report.hit_ratio - 0.99).abs() < 1e-9);
    }
}
