//! Parses one of the criterion bench's inputs a fixed number of times, for instruction counts
//! that do not depend on the machine's load:
//!
//! ```sh
//! cargo build --release -p tailtrim-proto --example parse_cost
//! valgrind --tool=callgrind target/release/examples/parse_cost multiget10 100000
//! ```
//!
//! (total instructions ÷ iterations, less a run with 0 iterations, is the cost of one parse
//! and the drop of its result).
//!
//! A third argument picks how: `copy` (the default: `parse_request` on a slice, keys
//! copied), `in-place` (`parse_request_frame` over one pipelined buffer of `iterations`
//! requests, as the server parses), `copy-split` (the same buffer parsed with
//! `parse_request`, each request's frame then split off: what the server did before
//! `parse_request_frame`) or `setup` (only builds that buffer: subtract it from the two).

use bytes::BytesMut;
use tailtrim_proto::{parse_request, parse_request_frame, FrameScratch, Limits, Parsed};

fn main() {
    let mut args = std::env::args().skip(1);
    let case = args.next().unwrap_or_else(|| "get".into());
    let iterations: u64 = args.next().and_then(|n| n.parse().ok()).unwrap_or(100_000);
    let input: Vec<u8> = match case.as_str() {
        "get" => b"get user:1234567890\r\n".to_vec(),
        "multiget10" => {
            let keys: Vec<String> = (0..10).map(|i| format!("user:{i:010}")).collect();
            format!("get {}\r\n", keys.join(" ")).into_bytes()
        }
        "set1k" => {
            let mut set = b"set user:1234567890 0 0 1024\r\n".to_vec();
            set.extend(std::iter::repeat_n(b'v', 1024));
            set.extend_from_slice(b"\r\n");
            set
        }
        other => {
            eprintln!("parse_cost: unknown case {other} (get, multiget10, set1k)");
            std::process::exit(2);
        }
    };
    let mode = args.next().unwrap_or_else(|| "copy".into());
    let limits = Limits::default();
    let mut consumed = 0usize;
    if matches!(mode.as_str(), "in-place" | "copy-split" | "setup") {
        let mut buffer = BytesMut::from(&input.repeat(iterations as usize)[..]);
        let mut scratch = FrameScratch::default();
        if mode == "in-place" {
            for _ in 0..iterations {
                if let Parsed::Complete { consumed: n, .. } =
                    parse_request_frame(&mut buffer, &limits, &mut scratch)
                {
                    consumed += n;
                }
            }
        }
        if mode == "copy-split" {
            for _ in 0..iterations {
                if let Parsed::Complete { value, consumed: n } = parse_request(&buffer, &limits) {
                    let frame = buffer.split_to(n).freeze();
                    consumed += n;
                    drop(std::hint::black_box((value, frame)));
                }
            }
        }
        println!("{case} {mode}: {iterations} requests, {consumed} bytes consumed");
        return;
    }
    for _ in 0..iterations {
        if let Parsed::Complete { consumed: n, .. } =
            parse_request(std::hint::black_box(&input), &limits)
        {
            consumed += n;
        }
    }
    println!(
        "{case}: {iterations} parses, {consumed} bytes consumed ({} bytes per Parsed<Request>)",
        std::mem::size_of::<Parsed<tailtrim_proto::Request>>()
    );
}
