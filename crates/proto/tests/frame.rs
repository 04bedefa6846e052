//! [`parse_request_frame`] against [`parse_request`]: on every input the two make the same
//! decision (same request, same error, same bytes consumed); the frame is exactly the bytes
//! consumed and the input keeps the rest; the frame's keys are slices of the frame, not copies.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use tailtrim_proto::{parse_request, parse_request_frame, FrameScratch, Limits, Parsed, Request};

/// Parses `stream` request by request both ways and checks they agree at every step.
fn agree(stream: &[u8], limits: &Limits) {
    let mut input = BytesMut::from(stream);
    let mut scratch = FrameScratch::default();
    let mut rest = stream;
    loop {
        let copied = parse_request(rest, limits);
        let framed = parse_request_frame(&mut input, limits, &mut scratch);
        match (copied, framed) {
            (Parsed::Incomplete, Parsed::Incomplete) => {
                assert_eq!(&input[..], rest, "an incomplete parse keeps the input");
                return;
            }
            (
                Parsed::Complete { value, consumed },
                Parsed::Complete {
                    value: request,
                    consumed: framed_consumed,
                },
            ) => {
                let frame = scratch.take_frame();
                assert_eq!(request, value, "on {:?}", &rest[..consumed]);
                assert_eq!(framed_consumed, consumed);
                assert_eq!(
                    &frame[..],
                    &rest[..consumed],
                    "the frame is what was consumed"
                );
                assert_eq!(&input[..], &rest[consumed..], "the input keeps the rest");
                for key in request.keys() {
                    assert_key_in_frame(key, &frame, &request);
                }
                rest = &rest[consumed..];
            }
            (
                Parsed::Invalid { error, consumed },
                Parsed::Invalid {
                    error: framed_error,
                    consumed: framed_consumed,
                },
            ) => {
                assert_eq!(framed_error, error);
                assert_eq!(framed_consumed, consumed);
                assert_eq!(
                    &input[..],
                    rest,
                    "an invalid parse leaves the input to the caller"
                );
                if error.closes_connection() || consumed == 0 {
                    return;
                }
                let skip = (consumed + error.swallow()).min(rest.len());
                rest = &rest[skip..];
                let _ = input.split_to(skip);
            }
            (copied, framed) => panic!("disagree on {rest:?}: {copied:?} vs {framed:?}"),
        }
    }
}

/// A key the line carried as it is lies inside the frame's bytes (a slice, not a copy);
/// only a base64 key (`b` flag) is decoded into bytes of its own.
fn assert_key_in_frame(key: &Bytes, frame: &Bytes, request: &Request) {
    let base64 = match request {
        Request::MetaGet { flags, .. }
        | Request::MetaSet { flags, .. }
        | Request::MetaDelete { flags, .. }
        | Request::MetaArithmetic { flags, .. } => flags.has(b'b'),
        Request::MetaDebug { .. } => true, // `me k b` decodes; checked by content above
        _ => false,
    };
    if base64 {
        return;
    }
    let start = frame.as_ptr() as usize;
    let at = key.as_ptr() as usize;
    assert!(
        at >= start && at + key.len() <= start + frame.len(),
        "key {key:?} is not a slice of its frame"
    );
}

#[test]
fn known_commands_agree() {
    let limits = Limits::default();
    let small = Limits { item_size_max: 100 };
    let cases: &[&[u8]] = &[
        b"get a\r\n",
        b"get a b c\r\ngets x\r\n",
        b"gat 10 a b\r\ngats 0 k\r\n",
        b"set k 1 2 3\r\nabc\r\nadd k 0 0 1 noreply\r\nx\r\n",
        b"cas k 0 0 1 77\r\nx\r\nappend k 0 0 2\r\nxy\r\nprepend k 0 0 0\r\n\r\n",
        b"set k 0 0 3\r\nabcd\r\nget k\r\n",
        b"set k 0 0 200\r\n",
        b"delete k\r\ndelete k 0 noreply\r\ndelete k 1\r\n",
        b"incr k 5\r\ndecr k 1 noreply\r\nincr k x\r\n",
        b"touch k 10\r\nflush_all\r\nflush_all 10 noreply\r\nversion\r\nverbosity 1\r\n",
        b"stats\r\nstats items\r\nmn\r\nquit\r\n",
        b"mg k v t\r\nmg a2V5 b v\r\nmd k q\r\nma k N0 J13\r\nme k\r\nme a2V5 b\r\n",
        b"ms k 2 T10\r\nhi\r\nms a2V5 2 b\r\nhi\r\nms k 200 T1\r\n",
        b"bget k\r\nslabs automove 1\r\nslabs reassign 1 2\r\n",
        b"bogus\r\nget\r\n\r\nGET k\r\nset k 0 0 -1\r\nget k\r\n",
        b"get k\0junk\r\nmg\r\nms k\r\n",
        b"get k",
    ];
    for case in cases {
        agree(case, &limits);
        agree(case, &small);
    }
    let keys: Vec<String> = (0..100).map(|i| format!("user:{i:010}")).collect();
    agree(format!("get {}\r\n", keys.join(" ")).as_bytes(), &limits);
    agree(format!("get {}\r\n", "k".repeat(251)).as_bytes(), &limits);
}

/// Command-shaped lines from a small grammar, so that most inputs reach the parsers of
/// real commands rather than `ERROR`.
fn command() -> impl Strategy<Value = Vec<u8>> {
    let word = prop_oneof![
        Just("get"),
        Just("gets"),
        Just("gat"),
        Just("set"),
        Just("add"),
        Just("cas"),
        Just("append"),
        Just("delete"),
        Just("incr"),
        Just("touch"),
        Just("mg"),
        Just("ms"),
        Just("md"),
        Just("ma"),
        Just("me"),
        Just("mn"),
        Just("flush_all"),
        Just("stats"),
        Just("noreply"),
        Just("0"),
        Just("1"),
        Just("3"),
        Just("-1"),
        Just("b"),
        Just("v"),
        Just("T5"),
        Just("a2V5"),
        Just("key"),
        Just("k"),
    ];
    (
        proptest::collection::vec(word, 1..8),
        proptest::collection::vec(any::<u8>(), 0..6),
        any::<bool>(),
    )
        .prop_map(|(words, tail, data)| {
            let mut line = words.join(" ").into_bytes();
            line.extend_from_slice(b"\r\n");
            if data {
                line.extend_from_slice(b"abc\r\n");
            }
            line.extend_from_slice(&tail);
            line
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn streams_of_commands_agree(parts in proptest::collection::vec(command(), 1..6), small in any::<bool>()) {
        let stream = parts.concat();
        let limits = if small { Limits { item_size_max: 70 } } else { Limits::default() };
        agree(&stream, &limits);
    }

    #[test]
    fn arbitrary_bytes_agree(stream in proptest::collection::vec(any::<u8>(), 0..300)) {
        agree(&stream, &Limits::default());
    }
}
