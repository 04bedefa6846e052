//! Server-side reply composition.
//!
//! Replies accumulate in a [`ReplyBuf`]: small pieces are copied into a
//! scratch buffer, large values are appended as shared [`Bytes`] chunks so a
//! 500 KB value is never copied (the socket owner writes the chunks with
//! vectored I/O).

use std::collections::VecDeque;

use bytes::{Buf, Bytes, BytesMut};

use crate::error::ProtoError;

/// Values at least this long are queued by reference instead of copied.
pub const ZERO_COPY_THRESHOLD: usize = 4096;

/// An ordered queue of reply bytes.
#[derive(Debug, Default)]
pub struct ReplyBuf {
    chunks: VecDeque<Bytes>,
    scratch: BytesMut,
    len: usize,
}

impl ReplyBuf {
    /// An empty buffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Total bytes not yet consumed.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes the scratch buffer holds room for (queued small pieces included): what keeping
    /// this buffer for another reply saves allocating.
    pub fn scratch_capacity(&self) -> usize {
        self.scratch.capacity()
    }

    /// Makes room for `additional` more bytes of small pieces at once, so a reply composed
    /// piece by piece grows its buffer once instead of once per doubling.
    pub fn reserve(&mut self, additional: usize) {
        self.scratch.reserve(additional);
    }

    /// Appends a copy of `bytes`.
    pub fn push(&mut self, bytes: &[u8]) {
        self.scratch.extend_from_slice(bytes);
        self.len += bytes.len();
    }

    /// Appends a value, by reference when large.
    pub fn push_value(&mut self, value: &Bytes) {
        if value.len() >= ZERO_COPY_THRESHOLD {
            self.seal();
            self.len += value.len();
            self.chunks.push_back(value.clone());
        } else {
            self.push(value);
        }
    }

    /// Appends a decimal number.
    pub fn push_u64(&mut self, n: u64) {
        self.push(itoa::Buffer::new().format(n).as_bytes());
    }

    /// Appends a signed decimal number.
    pub fn push_i64(&mut self, n: i64) {
        if n < 0 {
            self.push(b"-");
        }
        self.push_u64(n.unsigned_abs());
    }

    /// Moves the scratch bytes into the chunk queue.
    fn seal(&mut self) {
        if !self.scratch.is_empty() {
            self.chunks.push_back(self.scratch.split().freeze());
        }
    }

    /// Appends everything queued in `other`, keeping order. A small reply held in
    /// `other`'s scratch alone is copied behind the scratch bytes already queued, so a
    /// connection's run of small replies stays one contiguous piece, without a chunk (and
    /// its allocation) per reply.
    pub fn append(&mut self, other: &mut ReplyBuf) {
        if other.chunks.is_empty() && other.scratch.len() <= ZERO_COPY_THRESHOLD {
            self.scratch.extend_from_slice(&other.scratch);
            self.len += other.len;
            other.clear();
            return;
        }
        other.seal();
        self.seal();
        self.len += other.len;
        self.chunks.append(&mut other.chunks);
        other.len = 0;
    }

    /// The queued pieces, in order, for vectored writes: the chunks, then the scratch
    /// bytes (not sealed, so writing them costs no allocation).
    pub fn chunks(&self) -> impl Iterator<Item = &[u8]> {
        let scratch = (!self.scratch.is_empty()).then_some(&self.scratch[..]);
        self.chunks.iter().map(|chunk| &chunk[..]).chain(scratch)
    }

    /// Drops the first `n` bytes (after a partial write).
    pub fn advance(&mut self, n: usize) {
        let mut n = n.min(self.len);
        self.len -= n;
        while n > 0 {
            match self.chunks.front_mut() {
                Some(front) if front.len() <= n => {
                    n -= front.len();
                    self.chunks.pop_front();
                }
                Some(front) => {
                    front.advance(n);
                    n = 0;
                }
                None => {
                    // The rest is in scratch (`len` counts chunks and scratch).
                    self.scratch.advance(n);
                    n = 0;
                }
            }
        }
    }

    /// Takes everything queued as one contiguous buffer (copies; for UDP and tests).
    pub fn take_contiguous(&mut self) -> Vec<u8> {
        self.seal();
        let mut out = Vec::with_capacity(self.len);
        for chunk in self.chunks.drain(..) {
            out.extend_from_slice(&chunk);
        }
        self.len = 0;
        out
    }

    /// Discards everything queued.
    pub fn clear(&mut self) {
        self.chunks.clear();
        self.scratch.clear();
        self.len = 0;
    }
}

/// Longest decimal `u32` (a value's flags).
const U32_DIGITS: usize = 10;
/// Longest decimal `u64` (a length or a CAS).
const U64_DIGITS: usize = 20;

/// `VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n`
pub fn value(out: &mut ReplyBuf, key: &[u8], flags: u32, data: &Bytes, cas: Option<u64>) {
    value_header(out, key, flags, data.len(), cas);
    out.push_value(data);
    out.push(b"\r\n");
}

/// [`value`] for a value lent in place (e.g. by the store under its lock): always copied,
/// so meant for values shorter than [`ZERO_COPY_THRESHOLD`].
pub fn value_copied(out: &mut ReplyBuf, key: &[u8], flags: u32, data: &[u8], cas: Option<u64>) {
    value_header(out, key, flags, data.len(), cas);
    out.push(data);
    out.push(b"\r\n");
}

/// `VALUE <key> <flags> <bytes>[ <cas>]\r\n`, with room reserved for a copied value.
fn value_header(out: &mut ReplyBuf, key: &[u8], flags: u32, len: usize, cas: Option<u64>) {
    // The header's longest form, and a copied value's bytes with their line end: one growth.
    let header = b"VALUE ".len() + key.len() + 1 + U32_DIGITS + 1 + U64_DIGITS + 2;
    let cas_room = cas.map_or(0, |_| 1 + U64_DIGITS);
    let copied = if len < ZERO_COPY_THRESHOLD {
        len + 2
    } else {
        0
    };
    out.reserve(header + cas_room + copied);
    out.push(b"VALUE ");
    out.push(key);
    out.push(b" ");
    out.push_u64(u64::from(flags));
    out.push(b" ");
    out.push_u64(len as u64);
    if let Some(cas) = cas {
        out.push(b" ");
        out.push_u64(cas);
    }
    out.push(b"\r\n");
}

/// A status line such as `STORED`, followed by `\r\n`.
pub fn line(out: &mut ReplyBuf, text: &[u8]) {
    out.push(text);
    out.push(b"\r\n");
}

/// A number line (incr/decr result).
pub fn number(out: &mut ReplyBuf, n: u64) {
    out.push_u64(n);
    out.push(b"\r\n");
}

/// A `STAT <name> <value>` line.
pub fn stat(out: &mut ReplyBuf, name: &str, value: &dyn std::fmt::Display) {
    out.push(format!("STAT {name} {value}\r\n").as_bytes());
}

/// The reply for a protocol error, unless memcached would stay silent.
pub fn error(out: &mut ReplyBuf, err: &ProtoError) {
    if err.silent() || err.closes_connection() {
        return;
    }
    out.push(err.reply_line().as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_replies_append_as_one_piece_and_write_in_order() {
        let mut queued = ReplyBuf::new();
        for key in [&b"a"[..], b"bb", b"ccc"] {
            let mut reply = ReplyBuf::new();
            value(&mut reply, key, 0, &Bytes::from_static(b"v"), None);
            queued.append(&mut reply);
            assert!(reply.is_empty());
        }
        assert_eq!(queued.chunks().count(), 1, "small replies share one piece");
        let mut large = ReplyBuf::new();
        value(&mut large, b"big", 0, &Bytes::from(vec![b'x'; 5000]), None);
        queued.append(&mut large);
        line(&mut queued, b"END");
        let expected = [
            &b"VALUE a 0 1\r\nv\r\nVALUE bb 0 1\r\nv\r\nVALUE ccc 0 1\r\nv\r\n"[..],
            b"VALUE big 0 5000\r\n",
            &[b'x'; 5000],
            b"\r\nEND\r\n",
        ]
        .concat();
        assert_eq!(queued.len(), expected.len());
        // Written in uneven pieces, as partial writes leave it.
        let mut written = Vec::new();
        while !queued.is_empty() {
            let piece = queued.chunks().next().map(|c| c[..c.len().min(7)].to_vec());
            let piece = piece.unwrap_or_default();
            written.extend_from_slice(&piece);
            queued.advance(piece.len());
        }
        assert_eq!(written, expected);
        assert_eq!(queued.chunks().count(), 0);
    }

    #[test]
    fn value_line_and_zero_copy() {
        let mut out = ReplyBuf::new();
        value(&mut out, b"k", 5, &Bytes::from_static(b"hi"), Some(9));
        assert_eq!(out.take_contiguous(), b"VALUE k 5 2 9\r\nhi\r\n");

        let big = Bytes::from(vec![7u8; 10_000]);
        value(&mut out, b"big", 0, &big, None);
        line(&mut out, b"END");
        let ptrs: Vec<*const u8> = out.chunks().map(|c| c.as_ptr()).collect();
        assert!(
            ptrs.contains(&big.as_ptr()),
            "large value must not be copied"
        );
        assert_eq!(out.len(), "VALUE big 0 10000\r\n".len() + 10_000 + 2 + 5);
    }

    #[test]
    fn advance_across_chunks() {
        let mut out = ReplyBuf::new();
        out.push(b"abc");
        out.push_value(&Bytes::from(vec![b'x'; ZERO_COPY_THRESHOLD]));
        out.push(b"def");
        out.advance(2);
        out.advance(ZERO_COPY_THRESHOLD);
        assert_eq!(out.len(), 4);
        assert_eq!(out.take_contiguous(), b"xdef");
    }

    #[test]
    fn numbers() {
        let mut out = ReplyBuf::new();
        out.push_u64(0);
        out.push(b" ");
        out.push_u64(u64::MAX);
        out.push(b" ");
        out.push_i64(-1);
        assert_eq!(out.take_contiguous(), b"0 18446744073709551615 -1");
    }

    #[test]
    fn silent_errors() {
        let mut out = ReplyBuf::new();
        error(&mut out, &ProtoError::BadCommandLine { noreply: true });
        assert!(out.is_empty());
        error(&mut out, &ProtoError::UnknownCommand);
        assert_eq!(out.take_contiguous(), b"ERROR\r\n");
    }
}

/// memcached's whole reply to `stats detail [arg]`, for a server or proxy that keeps no
/// per-prefix statistics: `on` and `off` are acknowledged, `dump` lists no prefixes, and
/// anything else gets the usage error.
pub fn stats_detail(arg: Option<&[u8]>) -> &'static [u8] {
    match arg {
        Some(b"on" | b"off") => b"OK\r\n",
        Some(b"dump") => b"END\r\n",
        _ => b"CLIENT_ERROR usage: stats detail on|off|dump\r\n",
    }
}

#[cfg(test)]
mod stats_detail_tests {
    use super::stats_detail;

    #[test]
    fn answers_as_memcached() {
        assert_eq!(stats_detail(Some(b"on")), b"OK\r\n");
        assert_eq!(stats_detail(Some(b"off")), b"OK\r\n");
        assert_eq!(stats_detail(Some(b"dump")), b"END\r\n");
        for arg in [None, Some(&b"x"[..]), Some(&b"ON"[..])] {
            assert_eq!(
                stats_detail(arg),
                b"CLIENT_ERROR usage: stats detail on|off|dump\r\n"
            );
        }
    }
}
