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

/// Values at least this large are received into their own buffer and stored
/// without copying; smaller ones are copied.
pub const OWN_BUFFER_MIN: usize = 64 * 1024;

/// How many bytes the next `read` may take, preparing an exactly-sized
/// buffer when a large storage request is in progress.
pub fn next_read_room(input: &mut BytesMut, default_room: usize) -> usize {
    let Some(total) = declared_total(input) else {
        return default_room;
    };
    if total < OWN_BUFFER_MIN || input.len() >= total {
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
    fn small_requests_keep_default_room() {
        let mut input = BytesMut::from(&b"set k 0 0 5\r\nhe"[..]);
        assert_eq!(next_read_room(&mut input, 1234), 1234);
        let mut empty = BytesMut::new();
        assert_eq!(next_read_room(&mut empty, 99), 99);
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
