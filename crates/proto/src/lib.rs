//! The memcached text and meta protocols as pure data transformations.
//!
//! No I/O happens here: callers hand in the bytes they have buffered and get
//! back either a decoded message and how many bytes it used, a signal that
//! more bytes are needed, or the exact error memcached would reply with.
//!
//! ```text
//!   server side                               client side
//!   -----------                               -----------
//!   socket bytes ──► request::parse ──► Request       compose::* ──► bytes ──► socket
//!   (BytesMut ──► parse_request_frame ──► Request + its frame, keys sliced from the frame)
//!                         │                                                     │
//!                    ProtoError (reply text)          socket bytes ──► response::parse ──► Response
//!   Request ──► (server executes on store) ──► reply::* ──► ReplyBuf (Bytes chunks, zero-copy values)
//!   key listings (lru_crawler metadump, stats cachedump) ──► dump::parse_dump_line ──► DumpLine
//!   UDP: udp::FrameHeader on each datagram; udp::split_reply cuts replies into ≤ 1400-byte datagrams
//! ```
//!
//! Parsers keep offsets, never pointers: a storage command reports where its
//! data block lies as a `Range<usize>` into the input slice, so the caller can
//! freeze its read buffer and slice the value out without copying.
//! `parse_request_frame` goes one step further for a server: it splits the
//! request's frame off the buffer itself and cuts the keys from the frame.

pub mod compose;
pub mod dump;
pub mod error;
pub mod meta;
pub mod number;
pub mod reply;
pub mod request;
pub mod response;
pub mod udp;

pub use error::ProtoError;
pub use meta::{MetaFlag, MetaFlags};
pub use reply::ReplyBuf;
pub use request::{parse_request, parse_request_frame, FrameScratch, Keys, Request, StoreMode};
pub use response::{parse_response, Response};

/// Longest key memcached accepts (`KEY_MAX_LENGTH`).
pub const MAX_KEY_LEN: usize = 250;

/// Default largest item (`-I`), 1 MiB like memcached.
pub const DEFAULT_ITEM_SIZE_MAX: usize = 1024 * 1024;

/// A command line longer than this without a newline closes the connection,
/// unless it is a `get`/`gets` line (memcached: 2048 bytes).
pub const MAX_LINE_WITHOUT_NEWLINE: usize = 2048;

/// Hard bound on a `get`/`gets` line, so memory stays bounded whatever a
/// client sends (about 8192 keys of maximum length).
pub const MAX_GET_LINE: usize = 2 * 1024 * 1024;

/// Limits the request parser enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest value accepted by storage commands, in bytes (`-I`).
    pub item_size_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            item_size_max: DEFAULT_ITEM_SIZE_MAX,
        }
    }
}

/// Outcome of an incremental parse over a byte buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed<T> {
    /// More bytes are needed; nothing was consumed.
    Incomplete,
    /// A whole message was decoded from the first `consumed` bytes.
    Complete {
        /// The decoded message.
        value: T,
        /// How many bytes of the input it used.
        consumed: usize,
    },
    /// The input is invalid; `consumed` bytes should be dropped and the error
    /// replied (unless `noreply` applies, see [`ProtoError::silent`]).
    Invalid {
        /// What memcached would say about it.
        error: ProtoError,
        /// How many bytes to drop before parsing again.
        consumed: usize,
    },
}

impl<T> Parsed<T> {
    /// Maps the decoded value, keeping the other outcomes.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Parsed<U> {
        match self {
            Parsed::Incomplete => Parsed::Incomplete,
            Parsed::Complete { value, consumed } => Parsed::Complete {
                value: f(value),
                consumed,
            },
            Parsed::Invalid { error, consumed } => Parsed::Invalid { error, consumed },
        }
    }
}

/// Finds the end of the first line: returns `(line_without_eol, bytes_including_eol)`.
/// Accepts `\n` alone like memcached, stripping a preceding `\r`.
pub fn split_line(buf: &[u8]) -> Option<(&[u8], usize)> {
    let newline = memchr::memchr(b'\n', buf)?;
    let mut line = &buf[..newline];
    if let [head @ .., b'\r'] = line {
        line = head;
    }
    Some((line, newline + 1))
}

/// Splits a command line into tokens on spaces, as memcached's tokenizer does
/// (only `' '` separates; empty tokens are skipped).
pub fn tokens(line: &[u8]) -> impl Iterator<Item = &[u8]> {
    line.split(|&b| b == b' ').filter(|t| !t.is_empty())
}
