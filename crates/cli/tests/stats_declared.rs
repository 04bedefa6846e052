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
