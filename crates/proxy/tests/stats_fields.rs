//! The proxy's `stats` reply, field by field: the names and their order are pinned, so a
//! field that disappears (or moves, or appears unannounced) fails here. The values are not:
//! they depend on time, pids and traffic.
//!
//! ```text
//!   in-process proxy over 2 memcached ──stats──► STAT <name> <value> lines
//!     names, backend addresses replaced by B0/B1 ──compare──► PINNED
//! ```

mod common;

use common::{connect, exchange, start, Options};

/// Every `stats` field of a `batch` proxy over two backends, in order (`B0`, `B1`: the
/// backends' addresses). Update it together with the metrics declared in
/// `crates/proxy/src/metrics.rs` when a field is added on purpose.
const PINNED: &str = "
pid uptime time version curr_connections total_connections rejected_connections idle_kicks
auth_cmds auth_errors ssl_handshake_errors threads
cmd_get cmd_set cmd_flush cmd_touch get_hits get_misses get_expired get_flushed delete_misses
delete_hits incr_misses incr_hits decr_misses decr_hits cas_misses cas_hits cas_badval
touch_hits touch_misses bytes_read bytes_written limit_maxbytes curr_items total_items
expired_unfetched evicted_unfetched evictions reclaimed bytes backends_unreachable
pool_planner pool_priorities backend_priorities:B0 backend_priorities:B1
proxy_curr_connections proxy_connections proxy_requests proxy_client_errors
proxy_rejected_connections proxy_idle_kicks proxy_auth_cmds proxy_auth_errors
proxy_server_errors pool_reads pool_writes pool_multigets pool_multiget_keys pool_fetches
pool_failovers pool_unavailable pool_queries pool_query_keys pool_delay_queue_length
pool_delay_queued pool_backend_window pool_model_p99_predicted_us pool_model_service_us
pool_model_utilization_permille pool_model_threads cluster_version cluster_tracker_bytes cluster_changes
cluster_copies cluster_copy_misses cluster_fallback_reads cluster_fallback_hits
cluster_fenced_writes cluster_former_owner_deletes cluster_leftovers_deleted
cluster_history_gaps
backend_requests:B0 backend_errors:B0 backend_timeouts:B0 backend_fail_fast:B0
backend_marked_down:B0 backend_revived:B0 backend_connects:B0 backend_stuck_skips:B0
backend_outstanding:B0 backend_serves_priorities:B0 backend_up:B0
backend_requests:B1 backend_errors:B1 backend_timeouts:B1 backend_fail_fast:B1
backend_marked_down:B1 backend_revived:B1 backend_connects:B1 backend_stuck_skips:B1
backend_outstanding:B1 backend_serves_priorities:B1 backend_up:B1
HISTOGRAMS
";

/// The summaries after the counters: each as `_count`, the quantiles and `_max`.
const HISTOGRAMS: [&str; 22] = [
    "pool_latency_us",
    "pool_multiget_latency_us",
    "pool_mice_latency_us",
    "pool_elephant_latency_us",
    "pool_delay_granted_us",
    "pool_multiget_class_latency_us:class0",
    "pool_fetch_priority_latency_us:class0",
    "pool_multiget_class_latency_us:class1",
    "pool_fetch_priority_latency_us:class1",
    "pool_multiget_class_latency_us:class2",
    "pool_fetch_priority_latency_us:class2",
    "pool_multiget_class_latency_us:class3",
    "pool_fetch_priority_latency_us:class3",
    "pool_multiget_class_latency_us:class4",
    "pool_fetch_priority_latency_us:class4",
    "backend_latency_us:B0",
    "backend_latency_us:B1",
    "latency_class_us:small_get",
    "latency_class_us:large_get",
    "latency_class_us:mice",
    "latency_class_us:elephant",
    "",
];

fn pinned_names() -> Vec<String> {
    let mut names = Vec::new();
    for word in PINNED.split_whitespace() {
        if word != "HISTOGRAMS" {
            names.push(word.to_string());
            continue;
        }
        for histogram in HISTOGRAMS.iter().filter(|name| !name.is_empty()) {
            let (stem, label) = match histogram.split_once(':') {
                Some((stem, label)) => (stem, format!(":{label}")),
                None => (*histogram, String::new()),
            };
            for part in ["count", "p50", "p90", "p99", "p999", "max"] {
                names.push(format!("{stem}_{part}{label}"));
            }
        }
    }
    names
}

#[test]
fn stats_fields_are_pinned() {
    let harness = start(Options {
        backends: 2,
        ..Options::default()
    });
    let backends: Vec<String> = harness
        .backends
        .iter()
        .map(|backend| format!("127.0.0.1:{}", backend.port))
        .collect();
    let mut stream = connect(harness.address);
    exchange(&mut stream, b"set k 0 0 1\r\nv\r\nget k\r\nget k j\r\n");
    let reply = String::from_utf8(exchange(&mut stream, b"stats\r\n")).expect("utf8");
    assert!(reply.ends_with("END\r\n"), "{reply}");
    let names: Vec<String> = reply
        .lines()
        .filter_map(|line| line.strip_prefix("STAT "))
        .map(|line| {
            let name = line.split(' ').next().unwrap_or_default();
            let mut name = name.to_string();
            for (index, address) in backends.iter().enumerate() {
                name = name.replace(address.as_str(), &format!("B{index}"));
            }
            name
        })
        .collect();
    let pinned = pinned_names();
    let missing: Vec<&String> = pinned.iter().filter(|name| !names.contains(name)).collect();
    let unpinned: Vec<&String> = names.iter().filter(|name| !pinned.contains(name)).collect();
    assert!(
        missing.is_empty() && unpinned.is_empty(),
        "missing: {missing:?}\nnot pinned: {unpinned:?}"
    );
    assert_eq!(names, pinned, "the fields moved");
}
