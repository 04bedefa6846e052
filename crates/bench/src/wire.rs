//! The bench's view of the memcached text protocol: composing the requests a
//! workload issues and following replies item by item until a request is
//! complete. Parsing of one reply item is incremental (incomplete vs invalid
//! vs complete with the bytes consumed) and is delegated to `tailtrim-proto`.

use tailtrim_proto::udp::FrameHeader;
use tailtrim_proto::{Parsed, Response};

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

/// Value bytes shared by every SET (values are sliced from it).
static VALUE_BYTES: [u8; 1 << 20] = [b'v'; 1 << 20];

/// Appends `set <key> 0 0 <len>\r\n<value>\r\n` for `key` with its workload size.
pub fn compose_set(spec: &WorkloadSpec, key: crate::workload::KeyRef, out: &mut Vec<u8>) {
    let length = (spec.value_len(key) as usize).min(VALUE_BYTES.len());
    let mut key_bytes = Vec::with_capacity(64);
    spec.write_key(key, &mut key_bytes);
    tailtrim_proto::compose::set(out, &key_bytes, 0, 0, &VALUE_BYTES[..length]);
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

/// Parses one reply item from the front of `buffer` with
/// [`tailtrim_proto::parse_response`], keeping only what the bench needs.
#[must_use]
pub fn parse_reply_item(buffer: &[u8]) -> ParseResult {
    match tailtrim_proto::parse_response(buffer) {
        Parsed::Incomplete => ParseResult::Incomplete,
        Parsed::Invalid { .. } => ParseResult::Invalid,
        Parsed::Complete { value, consumed } => {
            let item = match value {
                Response::Value { .. } => ReplyItem::Value,
                Response::End => ReplyItem::End,
                Response::Stored => ReplyItem::Stored,
                Response::NotStored | Response::Exists | Response::NotFound => ReplyItem::NotStored,
                Response::Error | Response::ClientError(_) | Response::ServerError(_) => {
                    ReplyItem::Error
                }
                // Meta, stats, numbers: never a reply to what the bench sends.
                _ => return ParseResult::Invalid,
            };
            ParseResult::Complete { item, consumed }
        }
    }
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
pub const UDP_HEADER_BYTES: usize = tailtrim_proto::udp::HEADER_LEN;

/// Writes the UDP frame header for a single-datagram request.
pub fn write_udp_header(request_id: u16, out: &mut Vec<u8>) {
    let header = FrameHeader {
        request_id,
        sequence: 0,
        total: 1,
        reserved: 0,
    };
    out.extend_from_slice(&header.encode());
}

/// Parsed UDP frame header `(request id, sequence number, datagram count)`.
#[must_use]
pub fn read_udp_header(datagram: &[u8]) -> Option<(u16, u16, u16)> {
    FrameHeader::parse(datagram).map(|header| (header.request_id, header.sequence, header.total))
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
