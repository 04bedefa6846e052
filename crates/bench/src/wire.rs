//! The bench's view of the memcached text protocol: composing the requests a
//! workload issues and following replies item by item until a request is
//! complete. Parsing of one reply item is incremental (incomplete vs invalid
//! vs complete with the bytes consumed).

use std::io::Write;

use crate::workload::{OpKind, Operation, WorkloadSpec};

/// Appends the text-protocol request for `operation` to `out`.
pub fn compose_request(spec: &WorkloadSpec, operation: &Operation, out: &mut Vec<u8>) {
    match operation.kind {
        OpKind::Get => {
            out.extend_from_slice(b"get");
            for key in &operation.keys {
                out.push(b' ');
                spec.write_key(*key, out);
            }
            out.extend_from_slice(b"\r\n");
        }
        OpKind::Set => {
            for key in &operation.keys {
                compose_set(spec, *key, out);
            }
        }
    }
}

/// Appends `set <key> 0 0 <len>\r\n<value>\r\n` for `key` with its workload size.
pub fn compose_set(spec: &WorkloadSpec, key: crate::workload::KeyRef, out: &mut Vec<u8>) {
    let length = spec.value_len(key);
    out.extend_from_slice(b"set ");
    spec.write_key(key, out);
    // Writing to a Vec cannot fail.
    let _ = write!(out, " 0 0 {length}\r\n");
    out.resize(out.len() + length as usize, b'v');
    out.extend_from_slice(b"\r\n");
}

/// One reply item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyItem {
    /// `VALUE key flags bytes [cas]` with its data block.
    Value,
    /// `END`.
    End,
    /// `STORED`.
    Stored,
    /// `NOT_STORED`, `EXISTS` or `NOT_FOUND`.
    NotStored,
    /// `ERROR`, `CLIENT_ERROR ...` or `SERVER_ERROR ...`.
    Error,
}

/// Result of parsing the front of a receive buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParseResult {
    /// More bytes are needed.
    Incomplete,
    /// The bytes are not a memcached reply.
    Invalid,
    /// One item and the number of bytes it occupies.
    Complete {
        /// The item.
        item: ReplyItem,
        /// Bytes consumed.
        consumed: usize,
    },
}

/// Parses one reply item from the front of `buffer`.
#[must_use]
pub fn parse_reply_item(buffer: &[u8]) -> ParseResult {
    let Some(newline) = buffer.iter().position(|byte| *byte == b'\n') else {
        return if buffer.len() > 2048 {
            ParseResult::Invalid
        } else {
            ParseResult::Incomplete
        };
    };
    let line_end = newline + 1;
    let line = buffer[..newline]
        .strip_suffix(b"\r")
        .unwrap_or(&buffer[..newline]);
    let complete = |item| ParseResult::Complete {
        item,
        consumed: line_end,
    };
    if let Some(rest) = line.strip_prefix(b"VALUE ") {
        let mut fields = rest.split(|byte| *byte == b' ').filter(|f| !f.is_empty());
        let (Some(_key), Some(_flags), Some(length)) =
            (fields.next(), fields.next(), fields.next())
        else {
            return ParseResult::Invalid;
        };
        let Some(length) = parse_decimal(length) else {
            return ParseResult::Invalid;
        };
        let total = line_end + length + 2;
        if buffer.len() < total {
            return ParseResult::Incomplete;
        }
        if &buffer[total - 2..total] != b"\r\n" {
            return ParseResult::Invalid;
        }
        return ParseResult::Complete {
            item: ReplyItem::Value,
            consumed: total,
        };
    }
    match line {
        b"END" => complete(ReplyItem::End),
        b"STORED" => complete(ReplyItem::Stored),
        b"NOT_STORED" | b"EXISTS" | b"NOT_FOUND" => complete(ReplyItem::NotStored),
        _ if line.starts_with(b"ERROR")
            || line.starts_with(b"CLIENT_ERROR")
            || line.starts_with(b"SERVER_ERROR") =>
        {
            complete(ReplyItem::Error)
        }
        _ => ParseResult::Invalid,
    }
}

fn parse_decimal(text: &[u8]) -> Option<usize> {
    if text.is_empty() || text.len() > 12 {
        return None;
    }
    text.iter().try_fold(0usize, |value, byte| {
        byte.is_ascii_digit()
            .then(|| value * 10 + usize::from(byte - b'0'))
    })
}

/// Outcome of a finished request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Values returned.
    pub hits: u32,
    /// Keys asked for but not returned.
    pub misses: u32,
    /// Whether the server replied with an error.
    pub error: bool,
}

/// Progress of one request's reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplyState {
    kind: OpKind,
    keys: u32,
    values: u32,
}

impl ReplyState {
    /// State for a request of `kind` over `keys` keys.
    #[must_use]
    pub fn new(kind: OpKind, keys: u32) -> Self {
        Self {
            kind,
            keys,
            values: 0,
        }
    }

    /// Feeds one item; returns the outcome once the reply is complete.
    pub fn feed(&mut self, item: ReplyItem) -> Option<Outcome> {
        match (self.kind, item) {
            (_, ReplyItem::Error) => Some(Outcome {
                error: true,
                ..Outcome::default()
            }),
            (OpKind::Get, ReplyItem::Value) => {
                self.values += 1;
                None
            }
            (OpKind::Get, ReplyItem::End) => Some(Outcome {
                hits: self.values,
                misses: self.keys.saturating_sub(self.values),
                error: false,
            }),
            (OpKind::Set, ReplyItem::Stored) => Some(Outcome::default()),
            // Anything else is a reply that does not fit the request.
            _ => Some(Outcome {
                error: true,
                ..Outcome::default()
            }),
        }
    }
}

/// Size of the memcached UDP frame header.
pub const UDP_HEADER_BYTES: usize = 8;

/// Writes the UDP frame header for a single-datagram request.
pub fn write_udp_header(request_id: u16, out: &mut Vec<u8>) {
    out.extend_from_slice(&request_id.to_be_bytes());
    out.extend_from_slice(&0u16.to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes());
    out.extend_from_slice(&0u16.to_be_bytes());
}

/// Parsed UDP frame header `(request id, sequence number, datagram count)`.
#[must_use]
pub fn read_udp_header(datagram: &[u8]) -> Option<(u16, u16, u16)> {
    if datagram.len() < UDP_HEADER_BYTES {
        return None;
    }
    let field = |index: usize| u16::from_be_bytes([datagram[index], datagram[index + 1]]);
    Some((field(0), field(2), field(4)))
}

#[cfg(test)]
mod tests {
    use super::{parse_reply_item, ParseResult, ReplyItem, ReplyState};
    use crate::workload::OpKind;

    #[test]
    fn value_items_wait_for_their_data_block() {
        let full = b"VALUE k 0 5\r\nhello\r\nEND\r\n";
        for cut in 0..20 {
            assert_eq!(
                parse_reply_item(&full[..cut]),
                ParseResult::Incomplete,
                "cut {cut}"
            );
        }
        assert_eq!(
            parse_reply_item(full),
            ParseResult::Complete {
                item: ReplyItem::Value,
                consumed: 20
            }
        );
        assert_eq!(
            parse_reply_item(&full[20..]),
            ParseResult::Complete {
                item: ReplyItem::End,
                consumed: 5
            }
        );
        assert_eq!(
            parse_reply_item(b"VALUE k 0 5\r\nhelloXX"),
            ParseResult::Invalid
        );
        assert_eq!(parse_reply_item(b"WHAT\r\n"), ParseResult::Invalid);
    }

    #[test]
    fn multiget_counts_hits_and_misses() {
        let mut state = ReplyState::new(OpKind::Get, 3);
        assert_eq!(state.feed(ReplyItem::Value), None);
        let outcome = state.feed(ReplyItem::End).unwrap_or_default();
        assert_eq!((outcome.hits, outcome.misses, outcome.error), (1, 2, false));
        let mut set = ReplyState::new(OpKind::Set, 1);
        assert!(set
            .feed(ReplyItem::Error)
            .is_some_and(|outcome| outcome.error));
    }
}
