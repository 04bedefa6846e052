//! Reading a nutcracker (twemproxy) proxy for `cluster status`: it answers no `stats`
//! command, so its stats listener's JSON is read and renamed into the `stats` fields the
//! status reads of a tailtrim proxy.
//!
//! ```text
//!   TCP connect to the stats listener (-s/-a) ──> one JSON object, then EOF
//!     "version", "curr_connections"            ──> version (nutcracker-V), curr_connections
//!     pool ─ server "host:port" ─ "requests"   ──> nutcracker_requests (summed)
//!                               ─ "in_queue"   ──> backend_outstanding:ADDR
//!                               ─ "server_ejected_at" 0 ──> backend_up:ADDR 1 (else 0)
//! ```
//!
//! nutcracker aggregates its stats every `-i` milliseconds (the tier starts it with 1000),
//! so its rate is as fresh as that; it counts requests to servers, so a multiget split over
//! three servers counts three.

use std::collections::BTreeMap;
use std::io::Read;
use std::net::TcpStream;

use crate::admin::READ_TIMEOUT;
use crate::up::reachable;

/// The field the requests a nutcracker proxy sent to its servers are summed into.
pub const REQUESTS_FIELD: &str = "nutcracker_requests";

/// The stats of the nutcracker whose stats listener is `address`, as `stats` fields.
pub fn fetch_stats(address: &str) -> Result<BTreeMap<String, String>, String> {
    let mut stream = TcpStream::connect(reachable(address))
        .map_err(|error| format!("unreachable: stats listener {address}: {error}"))?;
    stream
        .set_read_timeout(Some(READ_TIMEOUT))
        .map_err(|error| format!("unreachable: {error}"))?;
    let mut text = String::new();
    stream
        .read_to_string(&mut text)
        .map_err(|error| format!("unreachable: reading stats from {address}: {error}"))?;
    let json: serde_json::Value = serde_json::from_str(&text)
        .map_err(|error| format!("unreachable: stats of {address} are not JSON: {error}"))?;
    Ok(stats_fields(&json))
}

/// The `stats` fields of one nutcracker stats object.
pub fn stats_fields(json: &serde_json::Value) -> BTreeMap<String, String> {
    let mut stats = BTreeMap::new();
    if let Some(version) = json.get("version").and_then(serde_json::Value::as_str) {
        stats.insert("version".to_string(), format!("nutcracker-{version}"));
    }
    if let Some(connections) = json
        .get("curr_connections")
        .and_then(serde_json::Value::as_u64)
    {
        stats.insert("curr_connections".to_string(), connections.to_string());
    }
    let mut requests = 0u64;
    let pools = json.as_object().into_iter().flatten();
    for (_, pool) in pools.filter(|(_, value)| value.is_object()) {
        let servers = pool.as_object().into_iter().flatten();
        for (address, server) in servers.filter(|(_, value)| value.is_object()) {
            let field = |name: &str| server.get(name).and_then(serde_json::Value::as_u64);
            requests += field("requests").unwrap_or(0);
            let up = field("server_ejected_at").unwrap_or(0) == 0;
            stats.insert(format!("backend_up:{address}"), u8::from(up).to_string());
            if let Some(queued) = field("in_queue") {
                stats.insert(format!("backend_outstanding:{address}"), queued.to_string());
            }
        }
    }
    stats.insert(REQUESTS_FIELD.to_string(), requests.to_string());
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stats_object_becomes_stats_fields() {
        // The shape nutcracker 0.5.0 writes (abridged).
        let json: serde_json::Value = serde_json::from_str(
            r#"{"service":"nutcracker", "version":"0.5.0", "uptime":4, "curr_connections":2,
                "alpha": {"client_eof":2, "fragments":0,
                  "127.0.0.1:1": {"server_ejected_at":0, "requests":5, "in_queue":1},
                  "127.0.0.1:2": {"server_ejected_at":17, "requests":3, "in_queue":0}}}"#,
        )
        .expect("JSON");
        let stats = stats_fields(&json);
        assert_eq!(stats["version"], "nutcracker-0.5.0");
        assert_eq!(stats["curr_connections"], "2");
        assert_eq!(stats[REQUESTS_FIELD], "8");
        assert_eq!(stats["backend_up:127.0.0.1:1"], "1");
        assert_eq!(stats["backend_up:127.0.0.1:2"], "0");
        assert_eq!(stats["backend_outstanding:127.0.0.1:1"], "1");
    }
}
