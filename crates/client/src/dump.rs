//! Streams the keys a server holds, for preemptive warm-up and drain: memcached's
//! `lru_crawler metadump all`, or `stats cachedump 1 0` where that is refused (`tailtrim
//! serve`), on a connection of its own so a long listing never queues behind requests.
//!
//! ```text
//!   connect ─► "lru_crawler metadump all" ─► BUSY: wait, ask again (bounded)
//!                 │ ERROR / CLIENT_ERROR: "stats cachedump 1 0"
//!                 ▼
//!   line by line (LF or CRLF, each at most DUMP_LINE_MAX bytes) ─► proto::dump::parse_dump_line
//!       ─► each(key, last access) … until END; nothing is buffered beyond one line
//! ```

use std::time::Duration;

use tailtrim_proto::dump::{parse_dump_line, DumpLine, DumpedKey};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::dial::Dialer;
use crate::error::ClientError;

/// Longest listing line accepted (a 250-byte key URL-encoded is 750 bytes, plus the fields).
pub const DUMP_LINE_MAX: usize = 4096;
/// A whole listing must arrive within this.
pub const DUMP_TIMEOUT: Duration = Duration::from_secs(120);
/// Times a busy crawler is asked again.
const BUSY_RETRIES: u32 = 100;
/// Wait before asking a busy crawler again.
const BUSY_STEP: Duration = Duration::from_millis(20);

/// memcached and `tailtrim serve` stop a `stats cachedump` at 2 MB (of output, of keys).
pub const CACHEDUMP_LIMIT_BYTES: usize = 2 * 1024 * 1024;
/// Longest memcached key.
const KEY_MAX: usize = 250;
/// A cachedump line besides its key, at most (`ITEM ` … ` [<bytes> b; <expiry> s]\r\n`).
const CACHEDUMP_LINE_OVERHEAD: usize = 48;

/// What a listing gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListingSummary {
    /// Which listing.
    pub listing: Listing,
    /// Keys listed.
    pub keys: usize,
    /// Their total length.
    pub key_bytes: usize,
}

impl ListingSummary {
    /// False when the listing may have stopped early (a `stats cachedump` near its cap);
    /// a metadump lists every item.
    pub fn complete(&self) -> bool {
        match self.listing {
            Listing::Metadump => true,
            Listing::Cachedump => {
                self.key_bytes + self.keys * CACHEDUMP_LINE_OVERHEAD + KEY_MAX
                    < CACHEDUMP_LIMIT_BYTES
            }
        }
    }
}

/// Which listing a server gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    /// `lru_crawler metadump all` (keys with last access).
    Metadump,
    /// `stats cachedump 1 0` (keys only).
    Cachedump,
}

/// Calls `each` with every key `address` lists, streamed; returns what the listing was. The
/// connection is opened by `dialer` (TLS, the `-Y` login).
pub async fn list_keys(
    address: &str,
    connect_timeout: Duration,
    dialer: &Dialer,
    each: impl FnMut(DumpedKey),
) -> Result<ListingSummary, ClientError> {
    let timeout = || ClientError::Timeout {
        backend: address.to_string(),
        after_ms: DUMP_TIMEOUT.as_millis() as u64,
    };
    let stream = dialer.dial(address, connect_timeout).await?;
    tokio::time::timeout(DUMP_TIMEOUT, stream_listing(address, stream, each))
        .await
        .map_err(|_| timeout())?
}

async fn stream_listing(
    address: &str,
    stream: TcpStream,
    mut each: impl FnMut(DumpedKey),
) -> Result<ListingSummary, ClientError> {
    let lost = |reason: String| ClientError::ConnectionLost {
        backend: address.to_string(),
        reason,
    };
    let mut reader = BufReader::new(stream);
    let mut line = Vec::with_capacity(256);
    let mut listing = Listing::Metadump;
    let mut busy = 0;
    let (mut keys, mut key_bytes) = (0, 0);
    'ask: loop {
        let command: &[u8] = match listing {
            Listing::Metadump => b"lru_crawler metadump all\r\n",
            Listing::Cachedump => b"stats cachedump 1 0\r\n",
        };
        reader
            .get_mut()
            .write_all(command)
            .await
            .map_err(|e| lost(e.to_string()))?;
        let mut first = true;
        loop {
            line.clear();
            let read = (&mut reader)
                .take(DUMP_LINE_MAX as u64)
                .read_until(b'\n', &mut line)
                .await
                .map_err(|e| lost(e.to_string()))?;
            if read == 0 {
                return Err(lost("closed during the key listing".to_string()));
            }
            // memcached ends metadump lines with a bare LF, and END with CRLF.
            if !line.ends_with(b"\n") {
                return Err(ClientError::Protocol {
                    backend: address.to_string(),
                });
            }
            line.pop();
            if line.ends_with(b"\r") {
                line.pop();
            }
            match parse_dump_line(&line) {
                DumpLine::Item(key) => {
                    keys += 1;
                    key_bytes += key.key.len();
                    each(key);
                }
                DumpLine::End => {
                    return Ok(ListingSummary {
                        listing,
                        keys,
                        key_bytes,
                    })
                }
                DumpLine::Busy if first && busy < BUSY_RETRIES => {
                    busy += 1;
                    tokio::time::sleep(BUSY_STEP).await;
                    continue 'ask;
                }
                DumpLine::Refused if first && listing == Listing::Metadump => {
                    listing = Listing::Cachedump;
                    continue 'ask;
                }
                DumpLine::Busy | DumpLine::Refused => {
                    return Err(ClientError::BackendReplied {
                        backend: address.to_string(),
                        line: String::from_utf8_lossy(&line).into_owned(),
                    })
                }
                DumpLine::Other => {}
            }
            first = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{require_binary, start_memcached};

    #[tokio::test]
    async fn memcached_lists_every_key_it_holds_with_metadump() {
        if !require_binary("memcached") {
            return;
        }
        let memcached = start_memcached();
        let address = format!("127.0.0.1:{}", memcached.port);
        let mut stream = BufReader::new(TcpStream::connect(&address).await.unwrap());
        let keys = ["alpha", "b\u{e9}ta", "gamma"];
        for key in keys {
            let request = format!("set {key} 7 0 1\r\nx\r\n");
            stream
                .get_mut()
                .write_all(request.as_bytes())
                .await
                .unwrap();
            let mut line = String::new();
            stream.read_line(&mut line).await.unwrap();
            assert_eq!(line, "STORED\r\n");
        }
        let mut listed = Vec::new();
        let listing = list_keys(
            &address,
            Duration::from_secs(5),
            &Dialer::default(),
            |key| listed.push(key),
        )
        .await
        .unwrap();
        assert_eq!(listing.listing, Listing::Metadump);
        assert_eq!(listing.keys, 3);
        assert!(listing.complete());
        assert!(listed.iter().all(|k| k.last_access.is_some()));
        let mut names: Vec<String> = listed
            .into_iter()
            .map(|k| String::from_utf8(k.key).unwrap())
            .collect();
        names.sort();
        assert_eq!(names, keys);
    }
}
