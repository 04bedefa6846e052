//! Client-side parser for server replies, one reply item at a time.
//!
//! A multiget reply is a sequence of [`Response::Value`] items closed by
//! [`Response::End`]; a meta reply is one item. Values are reported as a
//! range into the input so the caller can slice its own buffer.

use std::ops::Range;

use bytes::Bytes;

use crate::number::{parse_u32, parse_u64};
use crate::{split_line, tokens, Parsed};

/// Longest reply line accepted before the stream is declared invalid.
pub const MAX_RESPONSE_LINE: usize = 8192;

/// One reply item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// `VALUE <key> <flags> <bytes> [<cas>]` and its data.
    Value {
        /// Where the key lies in the input (offsets, so that a caller holding the input as
        /// `Bytes` can slice it without a copy).
        key: Range<usize>,
        /// Client flags.
        flags: u32,
        /// CAS unique (for `gets`/`gats`).
        cas: Option<u64>,
        /// Where the data lies in the input.
        data: Range<usize>,
    },
    /// `END`
    End,
    /// `STORED`
    Stored,
    /// `NOT_STORED`
    NotStored,
    /// `EXISTS`
    Exists,
    /// `NOT_FOUND`
    NotFound,
    /// `DELETED`
    Deleted,
    /// `TOUCHED`
    Touched,
    /// `OK`
    Ok,
    /// `RESET`
    Reset,
    /// A bare number (incr/decr).
    Number(u64),
    /// `VERSION <text>`
    Version(Bytes),
    /// `STAT <name> <value>`
    Stat {
        /// Statistic name.
        name: Bytes,
        /// Its value as text.
        value: Bytes,
    },
    /// `ERROR`
    Error,
    /// `CLIENT_ERROR <message>`
    ClientError(Bytes),
    /// `SERVER_ERROR <message>`
    ServerError(Bytes),
    /// Meta `VA <size> <flags>` and its data.
    MetaValue {
        /// Return flags as raw text (after the size).
        flags: Bytes,
        /// Where the data lies in the input.
        data: Range<usize>,
    },
    /// Meta status line: `HD`, `NS`, `EX`, `NF`, `EN`, `MN` with return flags.
    MetaStatus {
        /// The two-letter code.
        code: [u8; 2],
        /// Return flags as raw text.
        flags: Bytes,
    },
    /// `ME ...` debug line.
    MetaDebug(Bytes),
}

/// Error-free invalid marker for replies that are not memcached protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed reply from server")]
pub struct MalformedReply;

fn rest_after(line: &[u8], prefix_len: usize) -> Bytes {
    Bytes::copy_from_slice(line.get(prefix_len..).unwrap_or_default())
}

/// Parses one reply item from the front of `buf`.
pub fn parse_response(buf: &[u8]) -> Parsed<Response> {
    let Some((line, line_len)) = split_line(buf) else {
        if buf.len() > MAX_RESPONSE_LINE {
            return malformed(buf.len());
        }
        return Parsed::Incomplete;
    };
    let simple = |value| Parsed::Complete {
        value,
        consumed: line_len,
    };
    match line {
        b"END" => return simple(Response::End),
        b"STORED" => return simple(Response::Stored),
        b"NOT_STORED" => return simple(Response::NotStored),
        b"EXISTS" => return simple(Response::Exists),
        b"NOT_FOUND" => return simple(Response::NotFound),
        b"DELETED" => return simple(Response::Deleted),
        b"TOUCHED" => return simple(Response::Touched),
        b"OK" => return simple(Response::Ok),
        b"RESET" => return simple(Response::Reset),
        b"ERROR" => return simple(Response::Error),
        _ => {}
    }
    if line.starts_with(b"VALUE ") {
        return parse_value(buf, line, line_len);
    }
    if line.starts_with(b"VA ") {
        return parse_meta_value(buf, line, line_len);
    }
    if line.starts_with(b"CLIENT_ERROR") {
        return simple(Response::ClientError(rest_after(line, 13)));
    }
    if line.starts_with(b"SERVER_ERROR") {
        return simple(Response::ServerError(rest_after(line, 13)));
    }
    if line.starts_with(b"VERSION ") {
        return simple(Response::Version(rest_after(line, 8)));
    }
    if line.starts_with(b"STAT ") {
        let body = &line[5..];
        let split = body.iter().position(|&b| b == b' ').unwrap_or(body.len());
        return simple(Response::Stat {
            name: Bytes::copy_from_slice(&body[..split]),
            value: rest_after(body, split + 1),
        });
    }
    if line.starts_with(b"ME ") {
        return simple(Response::MetaDebug(rest_after(line, 3)));
    }
    if line.len() >= 2
        && matches!(&line[..2], b"HD" | b"NS" | b"EX" | b"NF" | b"EN" | b"MN")
        && (line.len() == 2 || line[2] == b' ')
    {
        return simple(Response::MetaStatus {
            code: [line[0], line[1]],
            flags: rest_after(line, 3),
        });
    }
    if !line.is_empty() && line.iter().all(u8::is_ascii_digit) {
        if let Some(n) = parse_u64(line) {
            return simple(Response::Number(n));
        }
    }
    malformed(line_len)
}

fn malformed(consumed: usize) -> Parsed<Response> {
    Parsed::Invalid {
        error: crate::ProtoError::UnknownCommand,
        consumed,
    }
}

fn with_data(
    buf: &[u8],
    line_len: usize,
    len: usize,
    make: impl FnOnce(Range<usize>) -> Response,
) -> Parsed<Response> {
    let total = line_len + len + 2;
    if buf.len() < total {
        return Parsed::Incomplete;
    }
    if &buf[line_len + len..total] != b"\r\n" {
        return malformed(total);
    }
    Parsed::Complete {
        value: make(line_len..line_len + len),
        consumed: total,
    }
}

fn parse_value(buf: &[u8], line: &[u8], line_len: usize) -> Parsed<Response> {
    // At most 5 tokens (VALUE key flags bytes [cas]); a sixth makes the line malformed.
    let mut toks: [&[u8]; 5] = [&[]; 5];
    let mut count = 0;
    for token in tokens(line) {
        if count == toks.len() {
            return malformed(line_len);
        }
        toks[count] = token;
        count += 1;
    }
    if count != 4 && count != 5 {
        return malformed(line_len);
    }
    let (Some(flags), Some(len)) = (parse_u32(toks[2]), parse_u64(toks[3])) else {
        return malformed(line_len);
    };
    let cas = if count == 5 {
        match parse_u64(toks[4]) {
            Some(c) => Some(c),
            None => return malformed(line_len),
        }
    } else {
        None
    };
    // The line is a prefix of `buf`, and the key a slice of the line.
    let key_start = toks[1].as_ptr() as usize - buf.as_ptr() as usize;
    let key = key_start..key_start + toks[1].len();
    with_data(buf, line_len, len as usize, |data| Response::Value {
        key,
        flags,
        cas,
        data,
    })
}

fn parse_meta_value(buf: &[u8], line: &[u8], line_len: usize) -> Parsed<Response> {
    let body = &line[3..];
    let split = body.iter().position(|&b| b == b' ').unwrap_or(body.len());
    let Some(len) = parse_u64(&body[..split]) else {
        return malformed(line_len);
    };
    let flags = rest_after(body, split + 1);
    with_data(buf, line_len, len as usize, |data| Response::MetaValue {
        flags,
        data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multiget_reply_items() {
        let buf = b"VALUE a 3 2 77\r\nhi\r\nVALUE b 0 0\r\n\r\nEND\r\n";
        let Parsed::Complete { value, consumed } = parse_response(buf) else {
            panic!()
        };
        let Response::Value {
            key,
            flags,
            cas,
            data,
        } = value
        else {
            panic!()
        };
        assert_eq!((&buf[key], flags, cas), (&b"a"[..], 3, Some(77)));
        assert_eq!(&buf[data], b"hi");
        let rest = &buf[consumed..];
        let Parsed::Complete {
            value,
            consumed: c2,
        } = parse_response(rest)
        else {
            panic!()
        };
        assert!(matches!(value, Response::Value { ref data, .. } if data.is_empty()));
        assert_eq!(
            parse_response(&rest[c2..]),
            Parsed::Complete {
                value: Response::End,
                consumed: 5
            }
        );
    }

    #[test]
    fn partial_value_is_incomplete() {
        assert_eq!(parse_response(b"VALUE a 0 5\r\nhel"), Parsed::Incomplete);
        assert_eq!(parse_response(b"STOR"), Parsed::Incomplete);
    }

    #[test]
    fn status_lines() {
        for (input, expected) in [
            (&b"STORED\r\n"[..], Response::Stored),
            (b"NOT_FOUND\r\n", Response::NotFound),
            (b"42\r\n", Response::Number(42)),
            (b"ERROR\r\n", Response::Error),
            (
                b"SERVER_ERROR out of memory\r\n",
                Response::ServerError(Bytes::from("out of memory")),
            ),
            (
                b"HD c5\r\n",
                Response::MetaStatus {
                    code: *b"HD",
                    flags: Bytes::from("c5"),
                },
            ),
            (
                b"EN\r\n",
                Response::MetaStatus {
                    code: *b"EN",
                    flags: Bytes::new(),
                },
            ),
        ] {
            match parse_response(input) {
                Parsed::Complete { value, consumed } => {
                    assert_eq!(value, expected);
                    assert_eq!(consumed, input.len());
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(matches!(
            parse_response(b"BOGUS\r\n"),
            Parsed::Invalid { .. }
        ));
    }

    #[test]
    fn meta_value() {
        let buf = b"VA 2 s2 t-1\r\nhi\r\n";
        let Parsed::Complete {
            value: Response::MetaValue { flags, data },
            ..
        } = parse_response(buf)
        else {
            panic!()
        };
        assert_eq!(flags.as_ref(), b"s2 t-1");
        assert_eq!(&buf[data], b"hi");
    }
}
