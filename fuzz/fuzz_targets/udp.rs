//! UDP framing: a datagram's 8-byte header and the request it carries, as the server reads
//! it; and any reply split into datagrams reassembles to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tailtrim_proto::udp::{reassemble, split_reply, FrameHeader, HEADER_LEN};
use tailtrim_proto::{parse_request, Limits, Parsed};

fuzz_target!(|data: &[u8]| {
    if let Some(header) = FrameHeader::parse(data) {
        assert_eq!(FrameHeader::parse(&header.encode()), Some(header));
        let payload = &data[HEADER_LEN..];
        if let Parsed::Complete { consumed, .. } | Parsed::Invalid { consumed, .. } =
            parse_request(payload, &Limits::default())
        {
            assert!(consumed <= payload.len());
        }
        if let Some(datagrams) = split_reply(header.request_id, payload) {
            if !payload.is_empty() {
                assert_eq!(reassemble(&datagrams).as_deref(), Some(payload));
            }
        }
    }
    // Arbitrary datagrams (the input cut at every 0xff byte) never panic reassembly.
    let pieces: Vec<Vec<u8>> = data.split(|&b| b == 0xff).map(<[u8]>::to_vec).collect();
    let _ = reassemble(&pieces);
});
