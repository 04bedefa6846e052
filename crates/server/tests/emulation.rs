//! Emulated service and network time (experimental) through the real request path: a held
//! worker makes every policy's reply wait at least the emulated service time; an emulated
//! network delays replies without holding the worker, and keeps each connection's reply order.
//! Only lower bounds and orderings are asserted (no wall-clock upper bounds).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use tailtrim_server::config::DispatchPolicy;
use tailtrim_server::{start, ServerConfig, ServerHandle};

/// Every dispatch policy.
const POLICIES: [DispatchPolicy; 5] = DispatchPolicy::ALL;

fn server(policy: DispatchPolicy, threads: usize, service: &str, network: &str) -> ServerHandle {
    let mut config = ServerConfig::default();
    config.server.listen = "127.0.0.1".into();
    config.server.port = 0;
    config.workers.threads = threads;
    config.workers.dispatch = policy;
    // size-aware: replies above 10 kB go to the one large worker.
    config.sizeaware.fixed_threshold = 10_000;
    config.sizeaware.fixed_small_workers = threads.saturating_sub(1).max(1);
    config.emulation.service = service.into();
    config.emulation.network = network.into();
    start(config).expect("server starts")
}

fn connect(handle: &ServerHandle) -> TcpStream {
    let stream = TcpStream::connect(handle.local_addr()).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    stream
}

/// Reads until the buffer ends with `end`.
fn read_until(stream: &mut TcpStream, end: &[u8]) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    while !got.ends_with(end) {
        let n = stream.read(&mut buf).expect("read");
        assert!(n > 0, "closed early after {} bytes", got.len());
        got.extend_from_slice(&buf[..n]);
    }
    got
}

fn set(stream: &mut TcpStream, key: &str, value: &[u8]) {
    let mut request = format!("set {key} 0 0 {}\r\n", value.len()).into_bytes();
    request.extend_from_slice(value);
    request.extend_from_slice(b"\r\n");
    stream.write_all(&request).expect("write");
    assert_eq!(read_until(stream, b"\r\n"), b"STORED\r\n");
}

fn setting(stream: &mut TcpStream, name: &str) -> String {
    stream.write_all(b"stats settings\r\n").expect("write");
    let text = String::from_utf8(read_until(stream, b"END\r\n")).expect("utf-8");
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("STAT {name} ")).map(str::to_string))
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

/// Every policy, small and (size-aware: handed to the large worker) large replies: the reply
/// comes no earlier than the emulated 2 ms after the request was sent.
#[test]
fn every_policy_holds_the_worker_for_the_emulated_service_time() {
    let cost = Duration::from_millis(2);
    let large = vec![b'v'; 50_000];
    for policy in POLICIES {
        let handle = server(policy, 3, "const=2ms", "off");
        let mut conn = connect(&handle);
        assert_eq!(
            setting(&mut conn, "emulate_service"),
            "const=2000us,dist=fixed"
        );
        assert_eq!(setting(&mut conn, "emulate_network"), "off");
        conn.write_all(b"stats reset\r\n").expect("write");
        assert_eq!(read_until(&mut conn, b"\r\n"), b"RESET\r\n");
        set(&mut conn, "small", b"abc");
        set(&mut conn, "large", &large);
        for (key, len) in [("small", 3), ("large", large.len())] {
            for _ in 0..3 {
                let sent = Instant::now();
                conn.write_all(format!("get {key}\r\n").as_bytes())
                    .expect("write");
                let reply = read_until(&mut conn, b"END\r\n");
                let took = sent.elapsed();
                assert!(reply.len() > len, "{policy:?}: short reply");
                assert!(
                    took >= cost,
                    "{policy:?} {key}: reply after {took:?} < {cost:?}"
                );
            }
        }
        // Every request since the reset was held once (the reset itself, two sets, six gets),
        // and the server measured each hold.
        conn.write_all(b"stats sizeaware\r\n").expect("write");
        let text = String::from_utf8(read_until(&mut conn, b"END\r\n")).expect("utf-8");
        assert!(
            text.contains("STAT emulate_holds 9\r\n"),
            "{policy:?}: {text}"
        );
        assert!(text.contains("STAT emulate_overshoot_p99_us "), "{text}");
        handle.shutdown();
    }
}

/// A multiget sent as one quiet `mg` per key and an `mn` (what the proxy sends a backend that
/// serves priority classes) is charged the emulated fixed cost once, as the same keys in one
/// `get` are: every request is still held, but only the batch's first pays `const`.
#[test]
fn a_batch_of_quiet_meta_gets_pays_the_fixed_cost_once() {
    for (policy, class) in POLICIES
        .iter()
        .map(|policy| (*policy, ""))
        .chain([(DispatchPolicy::LateBinding, " p1a25")])
    {
        let handle = server(policy, 2, "const=1ms,key=100us", "off");
        let mut conn = connect(&handle);
        conn.write_all(
            b"stats reset
",
        )
        .expect("write");
        assert_eq!(read_until(&mut conn, b"\r\n"), b"RESET\r\n");
        for key in ["a", "b", "c"] {
            set(&mut conn, key, b"v");
        }
        let batch: String = ["a", "b", "c"]
            .iter()
            .map(|key| format!("mg {key} v q{class}\r\n"))
            .chain(["mn\r\n".to_string()])
            .collect();
        conn.write_all(batch.as_bytes()).expect("write");
        let reply = String::from_utf8(read_until(&mut conn, b"MN\r\n")).expect("utf-8");
        assert_eq!(reply.matches("VA 1").count(), 3, "{policy:?}: {reply}");
        conn.write_all(b"get a b c\r\n").expect("write");
        let reply = String::from_utf8(read_until(&mut conn, b"END\r\n")).expect("utf-8");
        assert_eq!(reply.matches("VALUE ").count(), 3, "{policy:?}: {reply}");
        let stats = stats_group(&mut conn, "sizeaware");
        let stat = |name: &str| {
            stats
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| panic!("{policy:?}: no {name} in {stats:?}"))
        };
        // Held: the reset, three sets, three mg and the mn, the get (9); the fixed cost: the
        // reset, each set, the batch once, the get (6).
        assert_eq!(stat("emulate_holds"), "9", "{policy:?}{class}");
        assert_eq!(stat("emulate_fixed_charges"), "6", "{policy:?}{class}");
        handle.shutdown();
    }
}

/// One worker, two connections: the first asks for a large value whose emulated network time is
/// long (2 µs per byte of its 200 kB reply), the second for a miss (a few µs). Were the worker
/// held for the network time, the second reply would come after the first; it comes before.
/// The pipelined requests of one connection still get their replies in order, then `quit`
/// closes it.
#[test]
fn network_time_delays_replies_without_holding_the_worker() {
    let handle = server(DispatchPolicy::Pinned, 1, "off", "byte=2us");
    let mut first = connect(&handle);
    assert_eq!(
        setting(&mut first, "emulate_network"),
        "const=0ns,byte=2us,dist=fixed"
    );
    let value = vec![b'x'; 200_000];
    set(&mut first, "big", &value);
    let mut second = connect(&handle);
    let sent = Instant::now();
    first
        .write_all(b"get big\r\nget nothing\r\nquit\r\n")
        .expect("write");
    // Both connections are read at once, each noting when its reply was complete.
    let reader = std::thread::spawn(move || {
        let mut reply = Vec::new();
        first
            .read_to_end(&mut reply)
            .expect("read until the server closes");
        (reply, sent.elapsed())
    });
    std::thread::sleep(Duration::from_millis(20));
    second.write_all(b"get nothing\r\n").expect("write");
    assert_eq!(read_until(&mut second, b"END\r\n"), b"END\r\n");
    let second_done = sent.elapsed();
    let (reply, first_done) = reader.join().expect("reader");
    let mut expected = b"VALUE big 0 200000\r\n".to_vec();
    expected.extend_from_slice(&value);
    expected.extend_from_slice(b"\r\nEND\r\nEND\r\n");
    assert!(
        reply == expected,
        "replies out of order or cut ({} bytes)",
        reply.len()
    );
    // 200 020 reply bytes at 2 µs each: at least 400 ms.
    assert!(first_done >= Duration::from_millis(400), "{first_done:?}");
    assert!(
        second_done < first_done,
        "the second connection waited for the first one's network time \
         ({second_done:?} vs {first_done:?})"
    );
    handle.shutdown();
}

/// `stats group`'s pairs.
fn stats_group(stream: &mut TcpStream, group: &str) -> Vec<(String, String)> {
    stream
        .write_all(format!("stats {group}\r\n").as_bytes())
        .expect("write");
    let text = String::from_utf8(read_until(stream, b"END\r\n")).expect("utf-8");
    text.lines()
        .filter_map(|l| l.strip_prefix("STAT "))
        .filter_map(|l| l.split_once(' '))
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect()
}

fn decoded(encoded: &str) -> hdrhistogram::Histogram<u64> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .expect("base64");
    hdrhistogram::serialization::Deserializer::new()
        .deserialize(&mut bytes.as_slice())
        .expect("a V2 histogram")
}

/// Whether `reported` is `histogram`'s value at `quantile` give or take one sample (the stats
/// request that read the percentiles may itself have been recorded before the histograms were
/// read).
fn within_one_sample(
    histogram: &hdrhistogram::Histogram<u64>,
    quantile: f64,
    reported: u64,
) -> bool {
    let n = histogram.len() as f64;
    let low = histogram.value_at_quantile(((quantile * n - 1.0) / n).max(0.0));
    let high = histogram.value_at_quantile(((quantile * n + 1.0) / n).min(1.0));
    (low..=high).contains(&reported)
}

/// `stats histograms` hands out the histograms behind `stats sizeaware`'s percentiles: the
/// same counts and the same p50/p99 (give or take the stats request itself, which a policy
/// may record between the two reads), and the emulated holds' overshoot.
#[test]
fn stats_histograms_are_the_ones_behind_the_reported_percentiles() {
    for policy in POLICIES {
        let handle = server(policy, 2, "const=200us", "off");
        let mut conn = connect(&handle);
        set(&mut conn, "k", b"value");
        for _ in 0..40 {
            conn.write_all(b"get k\r\n").expect("write");
            read_until(&mut conn, b"END\r\n");
        }
        let stats = stats_group(&mut conn, "sizeaware");
        let histograms = stats_group(&mut conn, "histograms");
        let stat = |name: &str| -> u64 {
            let value = &stats.iter().find(|(n, _)| n == name).expect(name).1;
            value.parse::<f64>().expect(name) as u64
        };
        let histogram = |name: &str| {
            decoded(
                &histograms
                    .iter()
                    .find(|(n, _)| n == name)
                    .unwrap_or_else(|| panic!("{policy:?}: no {name} in {histograms:?}"))
                    .1,
            )
        };
        let small = histogram("small_latency_us");
        assert!(small.len() >= 40, "{policy:?}: {} small", small.len());
        assert!(
            (0..=1).contains(&(small.len() - stat("small_requests"))),
            "{policy:?}: {} in the histogram, {} reported",
            small.len(),
            stat("small_requests")
        );
        for (quantile, name) in [(0.5, "small_p50_us"), (0.99, "small_p99_us")] {
            assert!(
                within_one_sample(&small, quantile, stat(name)),
                "{policy:?}: {name} {} is not the histogram's",
                stat(name)
            );
        }
        assert_eq!(histogram("large_latency_us").len(), stat("large_requests"));
        let overshoot = histogram("emulate_overshoot_ns");
        assert!(
            (0..=1).contains(&(overshoot.len() - stat("emulate_holds"))),
            "{policy:?}: {} holds in the histogram, {} reported",
            overshoot.len(),
            stat("emulate_holds")
        );
        handle.shutdown();
    }
}

/// Without emulation the latency histograms hold a sample: a connection's first read and one
/// read in `SAMPLE_EVERY` after it take the kernel's receive stamp and are timed, while every
/// request is counted (`small_requests`). One worker, one request per read: exact.
#[test]
fn without_emulation_one_read_in_sample_every_is_timed_and_every_request_counted() {
    use tailtrim_server::rxtime::SAMPLE_EVERY;
    let handle = server(DispatchPolicy::Pinned, 1, "off", "off");
    let mut conn = connect(&handle);
    set(&mut conn, "k", b"value");
    // Reads 0 (the set) .. 2 × SAMPLE_EVERY: three of them are sampled.
    for _ in 0..2 * SAMPLE_EVERY {
        conn.write_all(b"get k\r\n").expect("write");
        read_until(&mut conn, b"END\r\n");
    }
    let stats = stats_group(&mut conn, "sizeaware");
    let histograms = stats_group(&mut conn, "histograms");
    let requests = &stats
        .iter()
        .find(|(n, _)| n == "small_requests")
        .expect("count")
        .1;
    assert_eq!(requests, &(2 * SAMPLE_EVERY + 1).to_string());
    let small = histograms
        .iter()
        .find(|(n, _)| n == "small_latency_us")
        .expect("histogram");
    assert_eq!(decoded(&small.1).len(), 3);
    handle.shutdown();
}
