//! The request parser (text and meta commands) fed a client's byte stream, the way a
//! connection consumes it: parse, drop what was consumed (and what an error says to swallow),
//! repeat until more input is needed. Checks that every step makes progress within the input,
//! so no input can hang a connection or read past its buffer, and that the zero-copy parse
//! (`parse_request_frame`) decides every step exactly as the copying one.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tailtrim_proto::{parse_request, parse_request_frame, FrameScratch, Limits, Parsed};

fuzz_target!(|data: &[u8]| {
    // The first byte picks a small or the default `-I`, to reach the too-large paths.
    let Some((&choice, stream)) = data.split_first() else {
        return;
    };
    let limits = if choice & 1 == 0 {
        Limits::default()
    } else {
        Limits {
            item_size_max: 64 + usize::from(choice),
        }
    };
    let mut rest = stream;
    let mut scratch = FrameScratch::default();
    while !rest.is_empty() {
        let _ = tailtrim_proto::request::declared_total(rest);
        let parsed = parse_request(rest, &limits);
        let mut input = bytes::BytesMut::from(rest);
        match (&parsed, parse_request_frame(&mut input, &limits, &mut scratch)) {
            (Parsed::Incomplete, Parsed::Incomplete) => {}
            (
                Parsed::Complete { value, consumed },
                Parsed::Complete {
                    value: framed,
                    consumed: framed_consumed,
                },
            ) => {
                let frame = scratch.take_frame();
                assert_eq!(value, &framed);
                assert_eq!((*consumed, &rest[..*consumed]), (framed_consumed, &frame[..]));
            }
            (
                Parsed::Invalid { error, consumed },
                Parsed::Invalid {
                    error: framed_error,
                    consumed: framed_consumed,
                },
            ) => assert_eq!((error, *consumed), (&framed_error, framed_consumed)),
            (copied, framed) => panic!("the two parses disagree: {copied:?} vs {framed:?}"),
        }
        match parsed {
            Parsed::Incomplete => break,
            Parsed::Complete { value, consumed } => {
                assert!(
                    consumed > 0 && consumed <= rest.len(),
                    "consumed {consumed}"
                );
                let _ = value.single_key();
                let _ = value.data_len();
                rest = &rest[consumed..];
            }
            Parsed::Invalid { error, consumed } => {
                assert!(
                    consumed <= rest.len(),
                    "consumed {consumed} of {}",
                    rest.len()
                );
                let _ = error.reply_line();
                if error.closes_connection() {
                    break;
                }
                assert!(
                    consumed > 0,
                    "an error that keeps the connection consumed nothing"
                );
                rest = &rest[consumed..];
                let swallow = error.swallow().min(rest.len());
                rest = &rest[swallow..];
            }
        }
    }
});
