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

use tailtrim_proto::{parse_request, Limits, Parsed};

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
    let limits = Limits::default();
    let mut consumed = 0usize;
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
