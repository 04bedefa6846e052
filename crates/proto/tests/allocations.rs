//! Heap allocations per parsed request, counted by a global allocator: deterministic, unlike
//! timings. A `get` of one key allocates once (its key), a storage command once (its key), a
//! multiget a bounded few (one copy of the keys' span, its shared header, the key list), never
//! once per key; parsed in place (`parse_request_frame`, keys cut from the request's own
//! bytes), a pipelined batch of gets, sets, deletes, touches and incrs allocates nothing per
//! request (a meta command with flags: its flag list). A `get` hit's reply (`VALUE` line, value,
//! `END`) composed into an empty [`ReplyBuf`] grows its buffer once, not once per doubling.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use bytes::{Bytes, BytesMut};
use tailtrim_proto::reply::{self, ReplyBuf};
use tailtrim_proto::{parse_request, parse_request_frame, FrameScratch, Limits, Parsed, Request};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; only counts calls on the current thread.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|count| count.set(count.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|count| count.set(count.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made while parsing `input` and dropping the result (which must be complete).
fn allocations(input: &[u8]) -> usize {
    let limits = Limits::default();
    let before = ALLOCATIONS.with(Cell::get);
    let parsed = parse_request(input, &limits);
    let after = ALLOCATIONS.with(Cell::get);
    assert!(matches!(parsed, Parsed::Complete { .. }), "{parsed:?}");
    drop(parsed);
    after - before
}

fn multiget(keys: usize, key_len: usize) -> Vec<u8> {
    let keys: Vec<String> = (0..keys).map(|i| format!("{i:0key_len$}")).collect();
    format!("get {}\r\n", keys.join(" ")).into_bytes()
}

#[test]
fn one_key_get_allocates_only_its_key() {
    assert_eq!(allocations(b"get user:1234567890\r\n"), 1);
}

#[test]
fn a_storage_command_allocates_only_its_key() {
    let mut set = b"set user:1234567890 0 0 1024\r\n".to_vec();
    set.extend(std::iter::repeat_n(b'v', 1024));
    set.extend_from_slice(b"\r\n");
    assert_eq!(allocations(&set), 1);
}

#[test]
fn multiget_allocations_do_not_grow_with_its_keys() {
    // The key span, the shared header the first slice creates, the key list.
    assert!(allocations(&multiget(10, 15)) <= 3);
    // Past the line's 24 stack slots the token list grows on the heap (a few doublings).
    assert!(allocations(&multiget(100, 15)) <= 8);
}

#[test]
fn keys_share_one_copy_of_the_line_unless_it_is_long() {
    let limits = Limits::default();
    let keys_of = |input: &[u8]| match parse_request(input, &limits) {
        Parsed::Complete {
            value: Request::Get { keys, .. },
            ..
        } => keys,
        other => panic!("{other:?}"),
    };
    let short = keys_of(&multiget(10, 15));
    assert_eq!(short.len(), 10);
    for (i, pair) in short.windows(2).enumerate() {
        assert_eq!(&pair[0][..], format!("{i:015}").as_bytes());
        // Adjacent on the copied line: one space apart.
        assert_eq!(pair[0].as_ptr() as usize + 16, pair[1].as_ptr() as usize);
    }
    // 200 keys of 200 bytes: a 40 KB span, copied key by key.
    let long = keys_of(&multiget(200, 200));
    assert_eq!(long.len(), 200);
    assert_eq!(&long[199][..], format!("{:0200}", 199).as_bytes());
    assert!(long
        .windows(2)
        .any(|pair| pair[0].as_ptr() as usize + 201 != pair[1].as_ptr() as usize));
}

/// Allocations made while parsing every request of `stream` with [`parse_request_frame`]
/// (frames and requests dropped as they come, as a server does once it has answered).
fn framed_allocations(stream: &[u8], requests: usize) -> usize {
    let limits = Limits::default();
    let mut input = BytesMut::from(stream);
    let mut scratch = FrameScratch::default();
    let before = ALLOCATIONS.with(Cell::get);
    for _ in 0..requests {
        match parse_request_frame(&mut input, &limits, &mut scratch) {
            Parsed::Complete { value, .. } => drop((value, scratch.take_frame())),
            other => panic!("{other:?}"),
        }
    }
    let after = ALLOCATIONS.with(Cell::get);
    assert!(input.is_empty());
    after - before
}

#[test]
fn a_pipelined_batch_parsed_in_place_allocates_nothing_per_request() {
    let mut stream = Vec::new();
    for i in 0..400 {
        stream.extend_from_slice(format!("get user:{i:010}\r\n").as_bytes());
        stream.extend_from_slice(format!("set user:{i:010} 0 0 32\r\n").as_bytes());
        stream.extend(std::iter::repeat_n(b'v', 32));
        stream.extend_from_slice(b"\r\n");
        stream.extend_from_slice(format!("delete user:{i:010}\r\n").as_bytes());
        stream.extend_from_slice(format!("touch user:{i:010} 10\r\n").as_bytes());
        stream.extend_from_slice(format!("incr user:{i:010} 1\r\n").as_bytes());
    }
    // Twice, whatever the number of requests: the buffer becomes shared when the first
    // frame is split off, and the scratch makes room for its first key's place.
    let allocations = framed_allocations(&stream, 2000);
    assert!(
        allocations <= 2,
        "{allocations} allocations for 2000 requests"
    );
}

#[test]
fn a_meta_command_parsed_in_place_allocates_only_its_flag_list() {
    let mut stream = Vec::new();
    for i in 0..500 {
        stream.extend_from_slice(format!("mg user:{i:010} v t\r\n").as_bytes());
    }
    for i in 0..500 {
        stream.extend_from_slice(format!("md user:{i:010}\r\n").as_bytes());
    }
    // One list per `mg` with flags (bare flags copy no token), none for a flagless `md`.
    let allocations = framed_allocations(&stream, 1000);
    assert!(
        (500..=502).contains(&allocations),
        "{allocations} allocations for 500 mg and 500 md"
    );
}

/// Allocations made composing a `get` hit's whole reply for `key` and `value` into an empty
/// reply buffer.
fn reply_allocations(key: &[u8], value: &Bytes, cas: Option<u64>) -> usize {
    let mut out = ReplyBuf::new();
    let before = ALLOCATIONS.with(Cell::get);
    reply::value(&mut out, key, u32::MAX, value, cas);
    reply::line(&mut out, b"END");
    let after = ALLOCATIONS.with(Cell::get);
    assert_eq!(out.chunks().count(), 1, "a small reply is one piece");
    after - before
}

#[test]
fn a_small_value_reply_allocates_its_buffer_once() {
    let value = Bytes::from(vec![b'v'; 32]);
    assert_eq!(reply_allocations(b"key:00000000000000001", &value, None), 1);
    assert_eq!(reply_allocations(b"k", &value, Some(u64::MAX)), 1);
    let value = Bytes::from(vec![b'v'; 4000]);
    assert_eq!(reply_allocations(&[b'k'; 250], &value, Some(1)), 1);
}
