//! The proxy in front of three memcached backends behaves like one memcached: same replies to
//! good and bad input (compared live against a memcached of its own), bad input never reaches
//! a backend, stats and Prometheus metrics are served.

mod common;

use std::io::{Read, Write};

use common::{
    backend_requests, connect, exchange, once, parse_values, set_command, start, Options,
};
use tailtrim_client::testkit::{require_binary, start_memcached};

/// Replaces cas uniques in `VALUE k f n cas` lines with ordinals, so two servers compare.
fn normalise(reply: &[u8]) -> String {
    let text = String::from_utf8_lossy(reply).into_owned();
    let mut seen: Vec<String> = Vec::new();
    text.split("\r\n")
        .map(|line| {
            let words: Vec<&str> = line.split(' ').collect();
            if words.first() == Some(&"VERSION") {
                return "VERSION *".to_string();
            }
            if words.first() == Some(&"VALUE") && words.len() == 5 {
                let cas = words[4].to_string();
                let ordinal = match seen.iter().position(|c| *c == cas) {
                    Some(index) => index,
                    None => {
                        seen.push(cas);
                        seen.len() - 1
                    }
                };
                return format!(
                    "{} {} {} {} cas{ordinal}",
                    words[0], words[1], words[2], words[3]
                );
            }
            line.to_string()
        })
        .collect::<Vec<_>>()
        .join("\r\n")
}

/// Scripts whose replies must match memcached's byte for byte (after cas normalisation).
const SCRIPTS: &[&[u8]] = &[
    b"set a 5 0 3\r\nabc\r\nget a\r\nget a missing a\r\n",
    b"set a 0 0 1\r\n1\r\nadd a 0 0 1\r\n2\r\nreplace zz 0 0 1\r\n3\r\nappend a 0 0 2\r\nxy\r\nprepend a 0 0 1\r\n_\r\nget a\r\n",
    b"set n 0 0 2\r\n10\r\nincr n 5\r\ndecr n 100\r\nincr missing 1\r\nget n\r\n",
    b"set d 0 0 1\r\nx\r\ndelete d\r\ndelete d\r\nget d\r\n",
    b"set t 0 0 1\r\nx\r\ntouch t 100\r\ntouch nope 100\r\n",
    b"set c 0 0 1\r\nx\r\ngets c\r\ncas c 0 0 1 1\r\ny\r\n",
    b"set q 0 0 1 noreply\r\nx\r\nget q\r\ndelete q noreply\r\nget q\r\n",
    b"set m 3 0 2\r\nhi\r\nmg m v f t\r\nmg missing v\r\nmg missing v q\r\nmg m k v q\r\n",
    b"ms ms1 2\r\nhi\r\nmg ms1 v\r\nmd ms1\r\nmd ms1 q\r\nmg ms1 v\r\nma cnt N0 J13\r\nma cnt\r\n",
    b"set g 0 0 1\r\nx\r\ngat 100 g nope\r\n",
    b"version\r\nverbosity 1\r\n",
    // Pipelined reads are merged into one planned multiget by the proxy; every client
    // request must still get exactly its own reply.
    b"set a 1 0 1\r\nA\r\nset b 2 0 2\r\nBB\r\nget a\r\nget b\r\nget a b zz\r\nget zz\r\ngets a\r\nget b a a\r\nmg a v\r\nget b\r\n",
    // Bad input: answered by the proxy exactly as memcached would.
    b"bogus\r\n",
    b"get\r\n",
    b"\r\n",
    b"set k 0 0 2\r\nabcd\r\n",
    b"set k 0 0 -1\r\n",
    b"set k abc 0 1\r\nx\r\n",
    b"incr k abc\r\n",
    b"delete k 5\r\n",
    b"touch k abc\r\n",
    b"mg k \x01\r\n",
    b"ms k 2 MZ\r\nhi\r\n",
    b"\x00\x01\x02\xff\r\n",
    // `stats` groups whose replies carry no STAT lines (memccapable sends `stats noreply`).
    b"stats noreply\r\n",
    b"stats nosuchgroup\r\n",
    b"stats reset\r\n",
    b"stats detail\r\n",
    b"stats detail on\r\nstats detail off\r\nstats detail dump\r\nstats detail x\r\n",
];

#[test]
fn replies_match_memcached_for_good_and_bad_input() {
    if !require_binary("memcached") {
        return;
    }
    let harness = start(Options::default());
    let reference = start_memcached();
    let reference_address = format!("127.0.0.1:{}", reference.port)
        .parse()
        .expect("address");
    for script in SCRIPTS {
        for address in [harness.address, reference_address] {
            once(address, b"flush_all\r\n");
        }
        let (proxied, _) = once(harness.address, script);
        let (direct, _) = once(reference_address, script);
        assert_eq!(
            normalise(&proxied),
            normalise(&direct),
            "script {:?}",
            String::from_utf8_lossy(script)
        );
    }
    // A key longer than 250 bytes.
    let long_get = format!("get {}\r\n", "k".repeat(251));
    assert_eq!(
        once(harness.address, long_get.as_bytes()).0,
        once(reference_address, long_get.as_bytes()).0
    );
}

#[test]
fn bad_input_is_not_forwarded_and_too_large_values_are_refused_locally() {
    if !require_binary("memcached") {
        return;
    }
    let harness = start(Options::default());
    let before = backend_requests(&harness);
    for script in [
        &b"bogus\r\n"[..],
        b"get\r\n",
        b"set k 0 0 2\r\nabcd\r\n",
        b"incr k abc\r\n",
        b"mg k \x01\r\n",
    ] {
        once(harness.address, script);
    }
    assert_eq!(
        backend_requests(&harness),
        before,
        "bad input reached a backend"
    );
    // A value over item_size_max: SERVER_ERROR from the proxy, data swallowed, connection
    // still usable, and (as memcached does) the old value of the key is dropped.
    let mut stream = connect(harness.address);
    assert_eq!(exchange(&mut stream, &set_command("big")), b"STORED\r\n");
    let size = 2 * 1024 * 1024;
    let mut request = format!("set big 0 0 {size}\r\n").into_bytes();
    request.extend(std::iter::repeat_n(b'x', size));
    request.extend_from_slice(b"\r\nget big\r\n");
    let reply = exchange(&mut stream, &request);
    assert_eq!(reply, b"SERVER_ERROR object too large for cache\r\nEND\r\n");
}

#[test]
fn multiget_reassembles_in_client_key_order_across_backends() {
    if !require_binary("memcached") {
        return;
    }
    let harness = start(Options::default());
    let mut stream = connect(harness.address);
    let keys: Vec<String> = (0..60).map(|i| format!("order:{i}")).collect();
    let mut sets = Vec::new();
    for key in &keys {
        sets.extend(set_command(key));
    }
    let stored = exchange(&mut stream, &sets);
    assert_eq!(stored, "STORED\r\n".repeat(keys.len()).into_bytes());
    let owners: std::collections::HashSet<usize> = keys
        .iter()
        .map(|key| common::owner(&harness, key))
        .collect();
    assert_eq!(owners.len(), 3, "keys should span all backends");
    let mut asked: Vec<String> = keys.iter().rev().cloned().collect();
    asked.insert(7, "not-there".to_string());
    asked.push(keys[0].clone());
    let reply = exchange(
        &mut stream,
        format!("get {}\r\n", asked.join(" ")).as_bytes(),
    );
    let values = parse_values(&reply).expect("VALUE…END reply");
    let expected: Vec<&String> = asked.iter().filter(|key| *key != "not-there").collect();
    assert_eq!(values.len(), expected.len());
    for ((key, data), wanted) in values.iter().zip(expected) {
        assert_eq!(key, wanted, "reply out of the client's key order");
        assert_eq!(data, common::value_for(key).as_bytes());
    }
}

/// Large values in pipelined multigets, read by a client that lets the proxy's socket fill
/// first: the replies leave as gathered segments (each value as the backend sent it), so the
/// writes stop part-way through segments; every byte must still arrive once, in order.
#[test]
fn large_multiget_values_reach_a_slow_reader_whole_and_in_order() {
    if !require_binary("memcached") {
        return;
    }
    const SIZE: usize = 300_000;
    let harness = start(Options::default());
    let mut stream = connect(harness.address);
    let keys: Vec<String> = (0..24).map(|i| format!("large:{i}")).collect();
    let value_of = |index: usize| vec![b'a' + (index % 26) as u8; SIZE - index];
    for (index, key) in keys.iter().enumerate() {
        let value = value_of(index);
        let mut set = format!("set {key} 0 0 {}\r\n", value.len()).into_bytes();
        set.extend_from_slice(&value);
        set.extend_from_slice(b"\r\n");
        assert_eq!(exchange(&mut stream, &set), b"STORED\r\n");
    }
    // Two gets in one write (merged into one planned read) and a third of every key.
    let (first, second) = keys.split_at(10);
    let request = format!(
        "get {}\r\nget {} missing\r\nget {}\r\n",
        first.join(" "),
        second.join(" "),
        keys.join(" ")
    );
    let mut expected = Vec::new();
    for asked in [first, second, &keys[..]] {
        for key in asked {
            let index = keys
                .iter()
                .position(|k| k == key)
                .expect("a key of the test");
            let value = value_of(index);
            expected.extend_from_slice(format!("VALUE {key} 0 {}\r\n", value.len()).as_bytes());
            expected.extend_from_slice(&value);
            expected.extend_from_slice(b"\r\n");
        }
        expected.extend_from_slice(b"END\r\n");
    }
    stream.write_all(request.as_bytes()).expect("write");
    // Several MB of replies against the sockets' buffers: the proxy blocks part-way.
    std::thread::sleep(std::time::Duration::from_millis(200));
    let mut reply = vec![0u8; expected.len()];
    stream.read_exact(&mut reply).expect("the whole reply");
    if let Some(at) = reply
        .iter()
        .zip(&expected)
        .position(|(got, want)| got != want)
    {
        panic!(
            "the reply differs from the values set at byte {at} of {}",
            expected.len()
        );
    }
}

#[test]
fn stats_and_prometheus_report_per_backend_counters() {
    if !require_binary("memcached") {
        return;
    }
    let harness = start(Options::default());
    let mut stream = connect(harness.address);
    for i in 0..30 {
        exchange(&mut stream, &set_command(&format!("s{i}")));
    }
    exchange(&mut stream, b"get s1 s2 s3 s4 s5\r\n");
    let stats = String::from_utf8(exchange(&mut stream, b"stats\r\n")).expect("utf8");
    assert!(stats.ends_with("END\r\n"));
    assert!(stats.contains("STAT pool_writes 30\r\n"), "{stats}");
    assert!(stats.contains("STAT pool_multigets 1\r\n"), "{stats}");
    for backend in &harness.backends {
        assert!(stats.contains(&format!(
            "STAT backend_requests:127.0.0.1:{} ",
            backend.port
        )));
        assert!(stats.contains(&format!(
            "STAT backend_latency_us_p99:127.0.0.1:{} ",
            backend.port
        )));
    }
    let admin = harness.admin.expect("admin listener");
    let mut http = connect(admin);
    http.write_all(b"GET /metrics HTTP/1.1\r\n\r\n")
        .expect("write");
    let mut body = String::new();
    http.read_to_string(&mut body).expect("read");
    assert!(body.starts_with("HTTP/1.1 200 OK\r\n"), "{body}");
    assert!(body.contains("# TYPE tailtrim_backend_requests_total counter"));
    let writes_line = body
        .lines()
        .find(|line| line.starts_with("tailtrim_pool_writes_total{pool=\"default\"}"))
        .expect("pool writes metric");
    assert!(writes_line.ends_with(" 30"), "{writes_line}");
    assert!(body.contains("tailtrim_backend_latency_seconds{pool=\"default\",backend=\"127.0.0.1:"));
    let mut missing = connect(admin);
    missing
        .write_all(b"GET /nope HTTP/1.1\r\n\r\n")
        .expect("write");
    let mut body = String::new();
    missing.read_to_string(&mut body).expect("read");
    assert!(body.starts_with("HTTP/1.1 404"));
}

/// With the default config a backend gets one connection, as in twemproxy: the fetches of
/// several clients' multigets to one backend share it (one read for what arrived together at
/// memcached, one reader at the proxy), where two connections round robin split them.
#[test]
fn a_backend_gets_one_connection_by_default() {
    if !require_binary("memcached") {
        return;
    }
    let harness = start(Options::default());
    let mut clients: Vec<_> = (0..3).map(|_| connect(harness.address)).collect();
    for (i, client) in clients.iter_mut().enumerate() {
        for j in 0..4 {
            let keys: Vec<String> = (0..10).map(|k| format!("c{i}r{j}k{k}")).collect();
            let reply = exchange(client, format!("get {}\r\n", keys.join(" ")).as_bytes());
            assert_eq!(reply, b"END\r\n");
        }
    }
    let pool = harness.shared.pool.current();
    for backend in pool.backends() {
        assert!(
            backend.stats().requests.get() >= 2,
            "every backend was asked twice or more"
        );
        assert_eq!(
            backend.stats().connects.get(),
            1,
            "connections opened to a backend"
        );
    }
}
