//! Preload phase: writes every key of the workload once, with its size, over
//! a few TCP connections with a bounded pipeline window, so GETs hit.
//!
//! ```text
//!   keys (i % P == c) ──> connection c: write up to WINDOW sets (≤ 1 MiB),
//!                         read as many replies, repeat
//! ```

use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::engine::resolve;
use crate::wire::{compose_set, parse_reply_item, ParseResult, ReplyItem};
use crate::workload::{KeyRef, WorkloadSpec};
use crate::BenchError;

/// Sets in flight per preload connection.
pub const PRELOAD_WINDOW: usize = 64;
/// Largest batch of bytes written before waiting for replies.
pub const PRELOAD_BATCH_BYTES: usize = 1 << 20;

/// Result of a preload.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PreloadReport {
    /// Keys written.
    pub keys: u64,
    /// Replies other than `STORED`.
    pub errors: u64,
    /// Wall time.
    pub seconds: f64,
}

/// Writes every key of `workload` to `server` over `connections` connections.
///
/// `progress` receives the number of keys written so far (from the calling
/// thread, about every 100 ms).
pub fn preload(
    workload: &WorkloadSpec,
    server: &str,
    connections: usize,
    progress: &mut dyn FnMut(u64),
) -> Result<PreloadReport, BenchError> {
    workload.validate()?;
    let address = resolve(server)?;
    let connections = connections.max(1);
    let started = Instant::now();
    let written = AtomicU64::new(0);
    let errors = AtomicU64::new(0);
    let done = AtomicU64::new(0);
    let results: Vec<Result<(), BenchError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..connections)
            .map(|connection| {
                let (written, errors, done) = (&written, &errors, &done);
                scope.spawn(move || {
                    let keys = workload
                        .all_keys()
                        .enumerate()
                        .filter(|(index, _)| index % connections == connection)
                        .map(|(_, key)| key);
                    let result = preload_connection(workload, address, keys, written, errors);
                    done.fetch_add(1, Ordering::Release);
                    result
                })
            })
            .collect();
        while done.load(Ordering::Acquire) < connections as u64 {
            std::thread::sleep(Duration::from_millis(100));
            progress(written.load(Ordering::Relaxed));
        }
        handles
            .into_iter()
            .map(|handle| {
                handle
                    .join()
                    .unwrap_or_else(|_| Err(BenchError::Config("a preload thread panicked".into())))
            })
            .collect()
    });
    for result in results {
        result?;
    }
    Ok(PreloadReport {
        keys: written.load(Ordering::Relaxed),
        errors: errors.load(Ordering::Relaxed),
        seconds: started.elapsed().as_secs_f64(),
    })
}

fn preload_connection(
    workload: &WorkloadSpec,
    address: std::net::SocketAddr,
    keys: impl Iterator<Item = KeyRef>,
    written: &AtomicU64,
    errors: &AtomicU64,
) -> Result<(), BenchError> {
    let io_error = |context: &'static str| {
        move |source| BenchError::Io {
            context: format!("preload: {context} {address}"),
            source,
        }
    };
    let mut stream = std::net::TcpStream::connect_timeout(&address, Duration::from_secs(5))
        .map_err(io_error("connecting to"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(io_error("setting a timeout on"))?;
    let _ = stream.set_nodelay(true);
    let mut keys = keys.peekable();
    let mut output = Vec::with_capacity(PRELOAD_BATCH_BYTES + 4096);
    let mut input: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut chunk = vec![0u8; 64 * 1024];
    while keys.peek().is_some() {
        output.clear();
        let mut batch = 0usize;
        while batch < PRELOAD_WINDOW && output.len() < PRELOAD_BATCH_BYTES {
            let Some(key) = keys.next() else {
                break;
            };
            compose_set(workload, key, &mut output);
            batch += 1;
        }
        stream.write_all(&output).map_err(io_error("writing to"))?;
        let mut replies = 0usize;
        while replies < batch {
            let mut parsed = 0usize;
            loop {
                match parse_reply_item(&input[parsed..]) {
                    ParseResult::Complete { item, consumed } => {
                        parsed += consumed;
                        replies += 1;
                        if item != ReplyItem::Stored {
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    ParseResult::Incomplete => break,
                    ParseResult::Invalid => {
                        return Err(BenchError::Protocol(format!(
                            "preload: unexpected reply from {address}"
                        )))
                    }
                }
            }
            input.drain(..parsed);
            if replies >= batch {
                break;
            }
            let count = stream.read(&mut chunk).map_err(io_error("reading from"))?;
            if count == 0 {
                return Err(BenchError::Protocol(format!(
                    "preload: {address} closed the connection"
                )));
            }
            input.extend_from_slice(&chunk[..count]);
        }
        written.fetch_add(batch as u64, Ordering::Relaxed);
    }
    Ok(())
}
