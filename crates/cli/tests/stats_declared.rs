//! The general `stats` reply is rendered from declarations
//! (`tailtrim_server::report::general_stat_names`): its field names are the declared names
//! in declared order, memcached 1.6.18's own `stats` names appear among them in memcached's
//! order, and the rest are exactly tailtrim's own fields. A declaration dropped, moved or
//! renamed fails here.

mod common;

use std::io::Write;
use std::time::Duration;

use common::{read_until, require_memcached, Program, Server};

/// tailtrim's fields that memcached does not have, in reply order (`--dispatch pinned`).
const OWN_FIELDS: &[&str] = &[
    "idle_kicks",
    "item_size_max",
    "priority_class0_requests",
    "priority_class1_requests",
    "priority_class2_requests",
    "priority_class3_requests",
    "priority_class4_requests",
    "dispatch",
    "dispatch_small_workers",
    "dispatch_large_workers",
    "dispatch_threshold_bytes",
    "dispatch_handoffs",
    "dispatch_steals",
    "dispatch_small_requests",
    "dispatch_small_p99_us",
    "dispatch_large_requests",
    "dispatch_large_p99_us",
];

/// The TLS fields, declared but only in the reply with TLS on.
fn is_tls_field(name: &str) -> bool {
    name.starts_with("ssl_") || name == "time_since_server_cert_refresh"
}

/// The field names of a general `stats` reply, in order.
fn stat_names(server: &Server) -> Vec<String> {
    let mut stream = server.connect();
    stream.write_all(b"stats\r\n").expect("send stats");
    let reply = read_until(&mut stream, b"END\r\n", Duration::from_secs(20));
    let text = String::from_utf8_lossy(&reply);
    assert!(text.ends_with("END\r\n"), "stats: {text:?}");
    text.lines()
        .filter_map(|line| line.strip_prefix("STAT "))
        .filter_map(|rest| rest.split_once(' ').map(|(name, _)| name.to_string()))
        .collect()
}

#[test]
fn general_stats_are_the_declared_fields_in_order() {
    let server = Server::start_under_test(&["-t", "1", "--dispatch", "pinned"]);
    let names = stat_names(&server);
    let declared: Vec<&str> = tailtrim_server::report::general_stat_names()
        .into_iter()
        .filter(|name| !is_tls_field(name))
        .collect();
    assert_eq!(names, declared);
}

#[test]
fn memcached_fields_keep_their_order_and_the_rest_are_tailtrims_own() {
    if !require_memcached("memcached_fields_keep_their_order") {
        return;
    }
    let memcached = Server::start(Program::Memcached, &["-t", "1"]);
    let reference = stat_names(&memcached);
    let declared = tailtrim_server::report::general_stat_names();
    let mut rest = declared.iter().copied().filter(|name| !is_tls_field(name));
    let mut own = Vec::new();
    for name in &reference {
        // memcached's fields in memcached's order; whatever is skipped on the way is own.
        loop {
            match rest.next() {
                Some(next) if next == name => break,
                Some(next) => own.push(next),
                None => panic!("memcached's {name} is not declared (or out of order)"),
            }
        }
    }
    own.extend(rest);
    assert_eq!(own, OWN_FIELDS);
}

/// `hash_bytes` is what the key index holds: a record location and a control byte per
/// bucket, not the key handles of an index that stored keys (41 bytes a bucket).
#[test]
fn hash_bytes_counts_the_index_the_store_keeps() {
    let server = Server::start_under_test(&["-t", "1", "-m", "64"]);
    let mut stream = server.connect();
    let mut batch = Vec::new();
    for index in 0..20_000 {
        batch.extend_from_slice(format!("set key:{index:08} 0 0 4 noreply\r\nabcd\r\n").as_bytes());
    }
    batch.extend_from_slice(b"mn\r\n");
    stream.write_all(&batch).expect("send sets");
    read_until(&mut stream, b"MN\r\n", Duration::from_secs(20));
    let stats = server.stats();
    let items: u64 = stats["curr_items"].parse().expect("curr_items");
    let hash_bytes: u64 = stats["hash_bytes"].parse().expect("hash_bytes");
    assert_eq!(items, 20_000);
    // A u32 location and a control byte per bucket, the table at most 8/7 x 2 (one
    // doubling) larger than its entries: ≤ 5 × 16/7 ≈ 11.5 bytes an item.
    assert!(
        hash_bytes <= items * 12,
        "hash_bytes {hash_bytes} for {items} items"
    );
    assert!(
        hash_bytes >= items * 5,
        "hash_bytes {hash_bytes} for {items} items"
    );
}
