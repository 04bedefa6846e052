//! Priority classes (`mg … p<class>`) honoured by the server's own queue: strict priority
//! (the default, Rein as published) or deficit round robin (`priority_order = drr`) over the
//! classes across connections where requests wait for a worker (late binding, one worker,
//! emulated service time so that a backlog exists). Only orders and counts are
//! asserted: how many low-class requests the server executed before a high-class one, read
//! from its own per-class counters, never wall-clock bounds.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use tailtrim_server::config::{DispatchPolicy, PriorityOrder};
use tailtrim_server::{start, ServerConfig, ServerHandle};

const WEIGHTS: [u64; 5] = [5, 4, 3, 2, 1];

fn server(policy: DispatchPolicy, service: &str) -> ServerHandle {
    server_ordered(policy, service, PriorityOrder::Strict)
}

fn server_ordered(policy: DispatchPolicy, service: &str, order: PriorityOrder) -> ServerHandle {
    let mut config = ServerConfig::default();
    config.workers.priority_order = order;
    config.server.listen = "127.0.0.1".into();
    config.server.port = 0;
    config.workers.threads = 1;
    config.workers.dispatch = policy;
    config.emulation.service = service.into();
    start(config).expect("server starts")
}

fn connect(handle: &ServerHandle) -> TcpStream {
    let stream = TcpStream::connect(handle.local_addr()).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    stream
}

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

fn stats(stream: &mut TcpStream, group: &str) -> Vec<(String, String)> {
    let line = if group.is_empty() {
        "stats\r\n".to_string()
    } else {
        format!("stats {group}\r\n")
    };
    stream.write_all(line.as_bytes()).expect("write");
    let text = String::from_utf8(read_until(stream, b"END\r\n")).expect("utf-8");
    text.lines()
        .filter_map(|l| l.strip_prefix("STAT "))
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn stat(pairs: &[(String, String)], name: &str) -> String {
    pairs
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("no {name} in {pairs:?}"))
}

/// `priority_class<N>_requests` for every class.
fn executed(stream: &mut TcpStream) -> [u64; 5] {
    let pairs = stats(stream, "");
    std::array::from_fn(|c| {
        stat(&pairs, &format!("priority_class{c}_requests"))
            .parse()
            .expect("number")
    })
}

/// `count` pipelined `mg` requests of `class` on `stream` (their replies are read later).
fn send_backlog(stream: &mut TcpStream, class: usize, count: usize) {
    let mut bytes = Vec::new();
    for i in 0..count {
        bytes.extend_from_slice(format!("mg k{class}-{i} v p{class}\r\n").as_bytes());
    }
    stream.write_all(&bytes).expect("write");
}

/// Reads the `count` misses a backlog gets.
fn drain(stream: &mut TcpStream, count: usize) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while got.len() < 4 * count {
        let n = stream.read(&mut buf).expect("read");
        assert!(n > 0, "closed early after {} bytes", got.len());
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(got, b"EN\r\n".repeat(count));
}

#[test]
fn the_server_announces_priorities_and_counts_flagged_requests_under_every_policy() {
    for (policy, how) in [
        (DispatchPolicy::Pinned, "fifo"),
        (DispatchPolicy::SizeAware, "fifo"),
        (DispatchPolicy::EarlyBinding, "strict"),
        (DispatchPolicy::Stealing, "fifo"),
        (DispatchPolicy::LateBinding, "strict"),
    ] {
        let handle = server(policy, "off");
        let mut conn = connect(&handle);
        let settings = stats(&mut conn, "settings");
        assert_eq!(stat(&settings, "dispatch"), policy.name());
        assert_eq!(stat(&settings, "priorities"), how, "{policy:?}");
        assert_eq!(stat(&settings, "priority_classes"), "5");
        conn.write_all(b"set k 3 0 2\r\nhi\r\nmg k v f p3\r\nmg k v p0 k\r\nmg k v\r\n")
            .expect("write");
        assert_eq!(
            read_until(&mut conn, b"VA 2\r\nhi\r\n"),
            b"STORED\r\nVA 2 f3\r\nhi\r\nVA 2 kk\r\nhi\r\nVA 2\r\nhi\r\n"
        );
        // Bad classes: memcached's reply for a bad token; the connection goes on.
        conn.write_all(b"mg k v p5\r\nmg k v p\r\nmg k p1 p2\r\nmn\r\n")
            .expect("write");
        assert_eq!(
            read_until(&mut conn, b"MN\r\n"),
            b"CLIENT_ERROR bad token in command line format\r\n\
              CLIENT_ERROR bad token in command line format\r\n\
              CLIENT_ERROR duplicate flag\r\nMN\r\n"
        );
        assert_eq!(executed(&mut conn), [1, 0, 0, 1, 0], "{policy:?}");
    }
}

/// Class-4 requests executed between a class-0 request's arrival behind a backlog of class-4
/// requests on `CONNS` connections and its reply (one worker, late binding, 3 ms each).
fn overtaken_by(priorities: bool) -> u64 {
    let mut config = ServerConfig::default();
    config.server.listen = "127.0.0.1".into();
    config.server.port = 0;
    config.workers.threads = 1;
    config.workers.dispatch = DispatchPolicy::LateBinding;
    config.workers.priorities = priorities;
    config.emulation.service = "const=3ms".into();
    let handle = start(config).expect("server starts");
    let mut low: Vec<TcpStream> = (0..CONNS).map(|_| connect(&handle)).collect();
    let mut high = connect(&handle);
    let expected = if priorities { "strict" } else { "off" };
    assert_eq!(stat(&stats(&mut high, "settings"), "priorities"), expected);
    for conn in &mut low {
        send_backlog(conn, 4, EACH);
    }
    // Answered once the dispatcher has queued what came before it.
    let before = executed(&mut high);
    high.write_all(b"mg h v p0\r\n").expect("write");
    assert_eq!(read_until(&mut high, b"\r\n"), b"EN\r\n");
    let after = executed(&mut high);
    assert_eq!(after[0], 1);
    assert!(
        after[4] < (CONNS * EACH) as u64,
        "the backlog was gone before the high-class request arrived: {after:?}"
    );
    for conn in &mut low {
        drain(conn, EACH);
    }
    assert_eq!(executed(&mut high)[4], (CONNS * EACH) as u64);
    after[4] - before[4]
}

const CONNS: usize = 12;
const EACH: usize = 4;

/// A backlog of class-4 requests on many connections waits in the queue; a class-0 request
/// that arrives behind it runs after at most the one in progress and the next (strict
/// priority), where first come, first served (`priorities = false`) runs every queued one
/// first.
#[test]
fn a_high_class_request_overtakes_a_queued_low_class_backlog() {
    let with = overtaken_by(true);
    assert!(
        with <= 3,
        "{with} low-class requests ran between the high-class one's arrival and its reply"
    );
    let without = overtaken_by(false);
    assert!(
        without >= CONNS as u64 / 2,
        "first come, first served ran only {without} of the {CONNS} queued before it"
    );
}

/// Every class backlogged on several connections: the server serves them in proportion to
/// the weights 5:4:3:2:1 (within one round), not one connection after another.
#[test]
fn backlogged_classes_are_served_by_weight_under_drr() {
    let handle = server_ordered(DispatchPolicy::LateBinding, "const=1ms", PriorityOrder::Drr);
    const CONNS_PER_CLASS: usize = 4;
    const EACH: usize = 40;
    let mut conns: Vec<(usize, TcpStream)> = Vec::new();
    for class in 0..5 {
        for _ in 0..CONNS_PER_CLASS {
            conns.push((class, connect(&handle)));
        }
    }
    for (class, conn) in &mut conns {
        send_backlog(conn, *class, EACH);
    }
    let mut observer = connect(&handle);
    let mut counts = executed(&mut observer);
    // Long enough to see several rounds; every class stays backlogged until class 0 has run
    // its EACH × CONNS_PER_CLASS requests.
    while counts.iter().sum::<u64>() < 90 {
        std::thread::sleep(Duration::from_millis(20));
        counts = executed(&mut observer);
    }
    assert!(
        counts[0] < (EACH * CONNS_PER_CLASS) as u64,
        "class 0 ran dry before the check: {counts:?}"
    );
    let total: u64 = counts.iter().sum();
    for (class, &count) in counts.iter().enumerate() {
        let fair = WEIGHTS[class] * total;
        let got = 15 * count;
        // Within one round of the class's weight (plus the observer's own `stats`).
        let slack = 15 * (WEIGHTS[class] + 1);
        assert!(
            got.abs_diff(fair) <= slack,
            "class {class}: {count} of {total} executed, weights 5..1 give {:.1} ({counts:?})",
            fair as f64 / 15.0
        );
    }
    for (_, conn) in &mut conns {
        drain(conn, EACH);
    }
}

/// Every class backlogged: strict priority (the default) runs class 0's whole backlog before
/// any lower class, apart from the requests already running when the backlogs arrived.
#[test]
fn backlogged_classes_are_served_in_strict_order_by_default() {
    let handle = server(DispatchPolicy::LateBinding, "const=1ms");
    const CONNS_PER_CLASS: usize = 4;
    const EACH: usize = 20;
    let mut conns: Vec<(usize, TcpStream)> = Vec::new();
    // Lowest class first, so that strict order has to overtake what was queued earlier.
    for class in (0..5).rev() {
        for _ in 0..CONNS_PER_CLASS {
            conns.push((class, connect(&handle)));
        }
    }
    for (class, conn) in &mut conns {
        send_backlog(conn, *class, EACH);
    }
    let mut observer = connect(&handle);
    let class0 = (EACH * CONNS_PER_CLASS) as u64;
    let mut counts = executed(&mut observer);
    while counts[0] < class0 {
        std::thread::sleep(Duration::from_millis(20));
        counts = executed(&mut observer);
    }
    // Lower classes ran only before the class-0 backlog was queued: each connection's first
    // request can be dispatched before the next connection's backlog arrives, so at most one
    // per connection of classes 1–4 (far fewer than their weights would give under DRR).
    let lower: u64 = counts[1..].iter().sum();
    assert!(
        lower <= (4 * CONNS_PER_CLASS) as u64,
        "{lower} lower-class requests ran before class 0's {class0}: {counts:?}"
    );
    for (_, conn) in &mut conns {
        drain(conn, EACH);
    }
}

/// Class-0 requests executed before a class-4 request carrying `low_priority` (a `p` token)
/// was answered, queued behind a steady stream of class-0 requests carrying `high_priority`
/// on `STREAMS` connections (one worker, late binding, 2 ms each; every connection keeps one
/// request queued until its `STREAM_EACH` are done).
fn class0_before_the_low_request(high_priority: &str, low_priority: &str) -> u64 {
    const STREAMS: usize = 12;
    const STREAM_EACH: usize = 10;
    let handle = server(DispatchPolicy::LateBinding, "const=2ms");
    let mut high: Vec<TcpStream> = (0..STREAMS).map(|_| connect(&handle)).collect();
    let mut low = connect(&handle);
    let mut observer = connect(&handle);
    for (n, conn) in high.iter_mut().enumerate() {
        let mut bytes = Vec::new();
        for i in 0..STREAM_EACH {
            bytes.extend_from_slice(format!("mg h{n}-{i} v {high_priority}\r\n").as_bytes());
        }
        conn.write_all(&bytes).expect("write");
    }
    low.write_all(format!("mg low v {low_priority}\r\n").as_bytes())
        .expect("write");
    assert_eq!(read_until(&mut low, b"\r\n"), b"EN\r\n");
    let class0 = executed(&mut observer)[0];
    for conn in &mut high {
        drain(conn, STREAM_EACH);
    }
    assert_eq!(executed(&mut observer)[0], (STREAMS * STREAM_EACH) as u64);
    class0
}

/// `cost-sbf`'s order on the wire: requests carry their class and the ageing of the order
/// (`p<class>a<overtakes>`), and a server whose own order is strict ages them as the
/// simulator's servers do: a class-4 request is overtaken by at most 4 × 2 later class-0
/// arrivals (plus the stream's requests queued before it and those that ran before the
/// observer's `stats` did), where without the ageing the whole stream of 120 goes first.
#[test]
fn requests_carrying_an_ageing_are_served_in_the_aged_order() {
    let aged = class0_before_the_low_request("p0a2", "p4a2");
    assert!(
        aged <= 12 + 4 * 2 + 12 + 2,
        "{aged} class-0 requests ran before the aged class-4 one was answered"
    );
    let strict = class0_before_the_low_request("p0", "p4");
    assert_eq!(strict, 120, "strict priority serves the whole stream first");
}
