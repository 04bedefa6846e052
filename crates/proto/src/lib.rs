//! The memcached text and meta protocols, as pure data transformations.
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
//!   `-Y` authentication: auth::Credentials (the file's users), auth::AuthState (the exchange
//!   of an unauthenticated connection), auth::login_request (what a client sends)
//!   `-I` sizes (`1m`, `512k`): size::parse_size
//! ```
//!
//! Parsers keep offsets, never pointers: a storage command reports where its
//! data block lies as a `Range<usize>` into the input slice, so the caller can
//! freeze its read buffer and slice the value out without copying.
//! `parse_request_frame` goes one step further for a server: it splits the
//! request's frame off the buffer itself and cuts the keys from the frame.

pub mod auth;
pub mod compose;
pub mod dump;
pub mod error;
pub mod meta;
pub mod number;
pub mod reply;
pub mod request;
pub mod response;
pub mod size;
pub mod udp;

pub use error::ProtoError;
pub use meta::{MetaFlag, MetaFlags};
pub use reply::ReplyBuf;
pub use request::{
    parse_request, parse_request_frame, FrameScratch, Keys, Request, StoreMode, WatchTypes,
};
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
pub fn tokens(line: &[u8]) -> Tokens<'_> {
    Tokens { rest: line }
}

/// The iterator of [`tokens`]: the end of a token is found eight bytes at a time.
#[derive(Debug, Clone)]
pub struct Tokens<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Tokens<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let start = self.rest.iter().position(|&b| b != b' ')?;
        let rest = &self.rest[start..];
        let end = find_space(rest).unwrap_or(rest.len());
        let (token, after) = rest.split_at(end);
        self.rest = after;
        Some(token)
    }
}

/// Index of the first `' '` in `bytes`. Words of eight bytes are tested at once: in
/// `x - 0x01…01 & !x & 0x80…80` (x the word XOR spaces) the lowest set bit marks the first
/// zero byte of x (a borrow can only set bits above a zero byte, never below it).
fn find_space(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    const SPACES: u64 = u64::from_ne_bytes([b' '; 8]);
    let mut at = 0;
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let mut eight = [0u8; 8];
        eight.copy_from_slice(word);
        let x = u64::from_le_bytes(eight) ^ SPACES;
        let found = x.wrapping_sub(ONES) & !x & HIGHS;
        if found != 0 {
            return Some(at + (found.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    words
        .remainder()
        .iter()
        .position(|&b| b == b' ')
        .map(|index| at + index)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The tokenizer as it was written first: split on every space, drop the empty pieces.
    fn tokens_by_split(line: &[u8]) -> Vec<&[u8]> {
        line.split(|&b| b == b' ')
            .filter(|t| !t.is_empty())
            .collect()
    }

    #[test]
    fn tokens_end_at_spaces_inside_and_across_words() {
        let line = b"get abcdefg hijklmnopqrstu  v    wxyz0123456789 ";
        assert_eq!(tokens(line).collect::<Vec<_>>(), tokens_by_split(line));
        // A space at every offset of a word, and bytes that differ from a space by one bit.
        for at in 0..17 {
            let mut line = vec![b'!'; 17];
            line[at] = b' ';
            line[(at + 5) % 17] = 0xa0;
            assert_eq!(
                tokens(&line).collect::<Vec<_>>(),
                tokens_by_split(&line),
                "{at}"
            );
        }
        assert_eq!(tokens(b"").next(), None);
        assert_eq!(tokens(b"        ").next(), None);
        // NUL is not a separator; many tokens, across many words.
        assert_eq!(
            tokens(b"a\0b c").collect::<Vec<_>>(),
            vec![&b"a\0b"[..], b"c"]
        );
        let long: Vec<u8> = (0..100)
            .flat_map(|i| format!("k{i} ").into_bytes())
            .collect();
        assert_eq!(tokens(&long).collect::<Vec<_>>(), tokens_by_split(&long));
    }

    proptest! {
        #[test]
        fn tokens_match_split_on_spaces(line in proptest::collection::vec(
            prop_oneof![Just(b' '), Just(0x1f_u8), Just(0x21_u8), Just(0xa0_u8), any::<u8>()],
            0..80,
        )) {
            prop_assert_eq!(tokens(&line).collect::<Vec<_>>(), tokens_by_split(&line));
        }
    }
}
