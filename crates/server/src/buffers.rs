//! Read-buffer policy that keeps stored values from pinning read buffers.
//!
//! A value sliced out of a connection's read buffer shares that buffer's
//! allocation for as long as the item lives. Two rules bound the overhead:
//! - values under [`OWN_BUFFER_MIN`] are copied into their own allocation
//!   when stored (a memcpy of at most 64 KiB), so small items never pin a
//!   large read buffer;
//! - a storage request whose declared size reaches [`OWN_BUFFER_MIN`] is
//!   received into a buffer of exactly its size, and reads stop at its end,
//!   so the large value is stored without a copy and pins only itself.

use bytes::{Bytes, BytesMut};
use tailtrim_proto::request::declared_total;
use tailtrim_proto::split_line;

/// Values at least this large are received into their own buffer and stored
/// without copying; smaller ones are copied.
pub const OWN_BUFFER_MIN: usize = 64 * 1024;

/// How many bytes the next `read` may take. Zero means "stop reading and
/// process first": the buffer already starts with a complete request.
/// Reading one chunk at a time, then processing, keeps a large value at the
/// front of the buffer when its header arrives; it is then received into a
/// buffer of exactly its size, so the stored value pins nothing else (reading
/// on would append it to a shared, growing buffer that it would pin whole).
pub fn next_read_room(input: &mut BytesMut, default_room: usize) -> usize {
    let total = match declared_total(input) {
        Some(total) => total,
        // A complete line that is not a storage command: process it first.
        None if split_line(input).is_some() => return 0,
        None => return default_room,
    };
    if input.len() >= total {
        return 0;
    }
    if total < OWN_BUFFER_MIN {
        return default_room;
    }
    if input.capacity() < total || input.capacity() > total + 4096 {
        let mut exact = BytesMut::with_capacity(total);
        exact.extend_from_slice(input);
        *input = exact;
    }
    total - input.len()
}

/// The value to store: a copy for small values, a zero-copy slice otherwise.
pub fn stored_value(frame: &Bytes, range: std::ops::Range<usize>) -> Bytes {
    if range.len() < OWN_BUFFER_MIN {
        Bytes::copy_from_slice(&frame[range])
    } else {
        frame.slice(range)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_request_gets_exact_buffer_and_bounded_reads() {
        let header = b"set big 0 0 100000\r\n";
        let mut input = BytesMut::with_capacity(1 << 20);
        input.extend_from_slice(header);
        input.extend_from_slice(&[b'x'; 1000]);
        let room = next_read_room(&mut input, 64 * 1024);
        let total = header.len() + 100_000 + 2;
        assert_eq!(room, total - header.len() - 1000);
        assert!(input.capacity() >= total && input.capacity() <= total + 4096);
        assert_eq!(&input[..header.len()], header);
    }

    #[test]
    fn complete_large_request_stops_reading() {
        let header = b"set big 0 0 70000\r\n";
        let mut input = BytesMut::new();
        input.extend_from_slice(header);
        input.extend_from_slice(&[b'x'; 70_000]);
        input.extend_from_slice(b"\r\n");
        assert_eq!(next_read_room(&mut input, 4096), 0);
    }

    #[test]
    fn small_requests_keep_default_room() {
        let mut input = BytesMut::from(&b"set k 0 0 5\r\nhe"[..]);
        assert_eq!(next_read_room(&mut input, 1234), 1234);
        let mut empty = BytesMut::new();
        assert_eq!(next_read_room(&mut empty, 99), 99);
        let mut partial_line = BytesMut::from(&b"get ab"[..]);
        assert_eq!(next_read_room(&mut partial_line, 99), 99);
        let mut complete_get = BytesMut::from(&b"get a\r\nget b"[..]);
        assert_eq!(next_read_room(&mut complete_get, 99), 0);
    }

    #[test]
    fn small_values_are_copied_large_are_shared() {
        let frame = Bytes::from(vec![1u8; OWN_BUFFER_MIN + 10]);
        let small = stored_value(&frame, 0..10);
        assert_ne!(small.as_ptr(), frame.as_ptr());
        let large = stored_value(&frame, 0..OWN_BUFFER_MIN);
        assert_eq!(large.as_ptr(), frame.as_ptr());
    }
}
