//! The client's response parser fed a backend's byte stream: parse, drop what was
//! consumed, repeat. Checks progress within the input (a reply can neither hang the client's
//! connection nor read past its buffer).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tailtrim_proto::{parse_response, Parsed};

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    while !rest.is_empty() {
        match parse_response(rest) {
            Parsed::Incomplete => break,
            Parsed::Complete { consumed, .. } => {
                assert!(
                    consumed > 0 && consumed <= rest.len(),
                    "consumed {consumed}"
                );
                rest = &rest[consumed..];
            }
            Parsed::Invalid { consumed, .. } => {
                assert!(
                    consumed <= rest.len(),
                    "consumed {consumed} of {}",
                    rest.len()
                );
                if consumed == 0 {
                    // The client closes the backend connection on an invalid reply.
                    break;
                }
                rest = &rest[consumed..];
            }
        }
    }
});
