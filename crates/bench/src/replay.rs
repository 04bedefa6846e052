//! Cache-aside replay of a [`Trace`] over one connection, for the miss ratio of a cache at a
//! given size: `get` every key; on a miss, `set` it (the application filling the cache).
//!
//! ```text
//!  Trace ─► batch of up to `batch` requests with distinct keys
//!     write: set <each miss of the previous batch>  get <each key of this batch>
//!     read:  their replies in order ─► hits / misses counted (warm-up or measured pass)
//!  after the last batch: the last misses' sets, so every miss was filled
//! ```
//!
//! A batch holds distinct keys, so a key never misses twice before its fill is sent; the
//! fills of a batch's misses go out ahead of the next batch's gets on the same connection,
//! so the server applies them in that order. Compared with one request at a time this moves
//! each fill behind at most `batch` gets of other keys, the same for every server replayed.
//! No wall clock enters the counts: the same trace against the same deterministic cache
//! gives the same counts.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tailtrim_proto::{parse_response, Parsed, Response};

use crate::trace::{Trace, TraceRequest, TraceSpec};
use crate::BenchError;

/// Bytes of a value's fill pattern (repeated to the value's length).
const FILL: &[u8] = b"tailtrim-trace-value-";
/// Bytes read from the socket at a time.
const READ_CHUNK: usize = 256 * 1024;

/// One replay: the trace and how much of it to send.
#[derive(Clone, Debug)]
pub struct ReplayConfig {
    /// `host:port` of the cache.
    pub server: String,
    /// The trace.
    pub trace: TraceSpec,
    /// Requests of the warm-up pass (counted apart).
    pub warmup_requests: u64,
    /// Requests of the measured pass, after the warm-up.
    pub measured_requests: u64,
    /// Largest number of requests in one pipelined batch.
    pub batch: usize,
    /// Socket timeout (bounds a hang, not a measurement).
    pub timeout: Duration,
}

/// The counts of one pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PassCounts {
    /// `get`s sent.
    pub requests: u64,
    /// `get`s that returned the value.
    pub hits: u64,
    /// `get`s that returned nothing (each followed by a `set`).
    pub misses: u64,
    /// Fills the server refused (`SERVER_ERROR`, `NOT_STORED`).
    pub fills_refused: u64,
    /// Value bytes the fills carried.
    pub fill_bytes: u64,
}

impl PassCounts {
    /// misses / requests (0 for an empty pass).
    #[must_use]
    pub fn miss_ratio(&self) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            self.misses as f64 / self.requests as f64
        }
    }
}

/// What a replay measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplayReport {
    /// The warm-up pass.
    pub warmup: PassCounts,
    /// The measured pass.
    pub measured: PassCounts,
    /// The measured pass's miss ratio.
    pub miss_ratio: f64,
    /// Wall time of the whole replay (information only).
    pub seconds: f64,
}

/// Replays `config.trace` against `config.server` (see the module doc).
pub fn replay_trace(config: &ReplayConfig) -> Result<ReplayReport, BenchError> {
    let io = |context: &str| {
        let context = format!("{context} {}", config.server);
        move |source| BenchError::Io { context, source }
    };
    let stream = TcpStream::connect(&config.server).map_err(io("connect to"))?;
    stream.set_nodelay(true).map_err(io("set nodelay on"))?;
    stream
        .set_read_timeout(Some(config.timeout))
        .map_err(io("set timeout on"))?;
    let mut connection = Connection {
        stream,
        input: Vec::new(),
        server: config.server.clone(),
    };
    let started = Instant::now();
    let mut trace = Trace::new(config.trace.clone()).peekable();
    let mut passes = [PassCounts::default(); 2];
    let total = config.warmup_requests + config.measured_requests;
    let mut sent = 0u64;
    let mut fills: Vec<TraceRequest> = Vec::new();
    let mut output = Vec::new();
    while sent < total {
        let pass = usize::from(sent >= config.warmup_requests);
        let pass_end = if pass == 0 {
            config.warmup_requests
        } else {
            total
        };
        let mut keys = HashSet::new();
        let mut batch = Vec::new();
        while batch.len() < config.batch.max(1) && sent + (batch.len() as u64) < pass_end {
            let Some(next) = trace.next_if(|request| !keys.contains(&request.rank)) else {
                break;
            };
            keys.insert(next.rank);
            batch.push(next);
        }
        output.clear();
        compose_fills(&fills, &mut output);
        for request in &batch {
            output.extend_from_slice(format!("get {}\r\n", request.key).as_bytes());
        }
        connection.send(&output)?;
        passes[pass].fills_refused += connection.fill_replies(fills.len())?;
        fills.clear();
        for request in batch {
            passes[pass].requests += 1;
            if connection.get_reply()? {
                passes[pass].hits += 1;
            } else {
                passes[pass].misses += 1;
                passes[pass].fill_bytes += request.value_bytes as u64;
                fills.push(request);
            }
            sent += 1;
        }
    }
    output.clear();
    compose_fills(&fills, &mut output);
    connection.send(&output)?;
    passes[1].fills_refused += connection.fill_replies(fills.len())?;
    let [warmup, measured] = passes;
    Ok(ReplayReport {
        warmup,
        measured,
        miss_ratio: measured.miss_ratio(),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Appends a `set` of every request's key with a value of its length.
fn compose_fills(fills: &[TraceRequest], output: &mut Vec<u8>) {
    for request in fills {
        output.extend_from_slice(
            format!("set {} 0 0 {}\r\n", request.key, request.value_bytes).as_bytes(),
        );
        output.extend(FILL.iter().cycle().take(request.value_bytes));
        output.extend_from_slice(b"\r\n");
    }
}

/// The replay's connection and the reply bytes read but not yet parsed.
struct Connection {
    stream: TcpStream,
    input: Vec<u8>,
    server: String,
}

impl Connection {
    fn send(&mut self, bytes: &[u8]) -> Result<(), BenchError> {
        self.stream
            .write_all(bytes)
            .map_err(|source| BenchError::Io {
                context: format!("write to {}", self.server),
                source,
            })
    }

    /// The next whole reply.
    fn reply(&mut self) -> Result<Response, BenchError> {
        loop {
            match parse_response(&self.input) {
                Parsed::Complete { value, consumed } => {
                    self.input.drain(..consumed);
                    return Ok(value);
                }
                Parsed::Invalid { .. } => {
                    return Err(BenchError::Protocol(format!(
                        "{} sent a malformed reply",
                        self.server
                    )))
                }
                Parsed::Incomplete => {
                    let start = self.input.len();
                    self.input.resize(start + READ_CHUNK, 0);
                    let read = self.stream.read(&mut self.input[start..]);
                    let read = read.map_err(|source| BenchError::Io {
                        context: format!("read from {}", self.server),
                        source,
                    })?;
                    self.input.truncate(start + read);
                    if read == 0 {
                        return Err(BenchError::Protocol(format!(
                            "{} closed the connection",
                            self.server
                        )));
                    }
                }
            }
        }
    }

    /// Reads the replies of `count` fills; returns how many were refused.
    fn fill_replies(&mut self, count: usize) -> Result<u64, BenchError> {
        let mut refused = 0;
        for _ in 0..count {
            match self.reply()? {
                Response::Stored => {}
                Response::NotStored | Response::ServerError(_) => refused += 1,
                other => {
                    return Err(BenchError::Protocol(format!(
                        "unexpected reply to a set: {other:?}"
                    )))
                }
            }
        }
        Ok(refused)
    }

    /// Reads one `get`'s reply: true for a hit.
    fn get_reply(&mut self) -> Result<bool, BenchError> {
        match self.reply()? {
            Response::End => Ok(false),
            Response::Value { .. } => match self.reply()? {
                Response::End => Ok(true),
                other => Err(BenchError::Protocol(format!(
                    "expected END after a value, got {other:?}"
                ))),
            },
            other => Err(BenchError::Protocol(format!(
                "unexpected reply to a get: {other:?}"
            ))),
        }
    }
}
