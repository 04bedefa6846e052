//! `cluster status`: one row per node from two `stats` samples an interval apart.
//!
//! ```text
//!   targets (state file | tier file | --proxy ADDR)
//!     ├─ sample 1: `stats` of every node; each proxy's backends (`backend_up:ADDR`) join
//!     │            the servers when the tier did not list them (added without the tier)
//!     ├─ interval
//!     ├─ sample 2: `stats` again, `GET /pool` of each proxy's admin listener
//!     └─ per node: ops/s (difference / interval), hit ratio (of the interval's gets, else
//!        since start), items, memory, connections; per proxy: planner, p99 of its requests,
//!        membership version and phase, each backend up or down
//! ```
//!
//! Counters read: memcached's `cmd_get`, `cmd_set`, `cmd_touch`, `delete_*`, `incr_*`,
//! `decr_*`, `get_hits`, `get_misses`, `curr_items`, `bytes`, `limit_maxbytes`,
//! `curr_connections`; the proxy's `proxy_requests`, `pool_planner`,
//! `pool_latency_us_p99`, `backend_up:ADDR`, `backend_outstanding:ADDR`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::config::TierPlan;
use crate::state::{process_exists, Role, TierState};
use crate::table::Table;
use crate::up::reachable;

/// Default time between the two samples.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);

/// A node to ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Server or proxy.
    pub role: Role,
    /// Label.
    pub name: String,
    /// memcached-protocol address.
    pub address: String,
    /// Admin HTTP address (proxies).
    pub admin: Option<String>,
    /// Process id, when `cluster up` runs it.
    pub pid: Option<u32>,
    /// How it ended, when `cluster up` saw it exit.
    pub exited: Option<String>,
}

/// The nodes of a running tier's state file.
pub fn targets_from_state(state: &TierState) -> Vec<Target> {
    state
        .nodes
        .iter()
        .map(|node| Target {
            role: node.role,
            name: node.name.clone(),
            address: node.address.clone(),
            admin: node.admin.clone(),
            pid: Some(node.pid),
            exited: node
                .exited
                .clone()
                .or_else(|| (!process_exists(node.pid)).then(|| "not running".to_string())),
        })
        .collect()
}

/// The nodes of a tier file, at the addresses it gives.
pub fn targets_from_plan(plan: &TierPlan) -> Vec<Target> {
    let servers = plan.servers.iter().map(|server| Target {
        role: Role::Server,
        name: server.name.clone(),
        address: server.address(),
        admin: None,
        pid: None,
        exited: None,
    });
    let proxies = plan.proxies.iter().map(|proxy| Target {
        role: Role::Proxy,
        name: proxy.name.clone(),
        address: proxy.listen.clone(),
        admin: Some(proxy.admin_listen.clone()),
        pid: None,
        exited: None,
    });
    servers.chain(proxies).collect()
}

/// One proxy's view of one backend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BackendState {
    /// `host:port`.
    pub address: String,
    /// Whether the proxy routes to it (not marked down).
    pub up: bool,
    /// Requests in flight to it.
    pub outstanding: Option<u64>,
}

/// What a proxy adds to its row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProxyStatus {
    /// Multiget planner in use (`pool_planner`).
    pub planner: Option<String>,
    /// p99 of the proxy's requests, µs (`pool_latency_us_p99`).
    pub p99_us: Option<u64>,
    /// Ring version (`GET /pool`).
    pub membership_version: Option<u64>,
    /// `steady` or the warm-up phase of a change (`GET /pool`).
    pub phase: Option<String>,
    /// Each backend as the proxy sees it.
    pub backends: Vec<BackendState>,
}

/// One row of the status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeStatus {
    /// `server` or `proxy`.
    pub role: Role,
    /// Label.
    pub name: String,
    /// memcached-protocol address.
    pub address: String,
    /// Process id, when `cluster up` runs it.
    pub pid: Option<u32>,
    /// `up`, `unreachable: …`, `exited: …`.
    pub state: String,
    /// `version` of `stats`.
    pub version: Option<String>,
    /// Requests per second over the interval.
    pub ops_per_sec: Option<f64>,
    /// get hits / gets, over the interval when it had gets, else since start.
    pub hit_ratio: Option<f64>,
    /// `curr_items`.
    pub items: Option<u64>,
    /// `bytes`.
    pub bytes: Option<u64>,
    /// `limit_maxbytes`.
    pub limit_maxbytes: Option<u64>,
    /// `curr_connections`.
    pub connections: Option<u64>,
    /// Proxies only.
    pub proxy: Option<ProxyStatus>,
}

/// The whole status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TierStatus {
    /// Tier name (empty when only a proxy was given).
    pub name: String,
    /// Milliseconds between the two samples.
    pub interval_ms: u64,
    /// The nodes: the tier's, then servers only the proxies know.
    pub nodes: Vec<NodeStatus>,
}

type Stats = BTreeMap<String, String>;

fn fetch(target: &Target) -> Result<Stats, String> {
    if let Some(exited) = &target.exited {
        return Err(format!("exited: {exited}"));
    }
    tailtrim_lab::process::fetch_stats(&reachable(&target.address), None)
        .map_err(|error| format!("unreachable: {error}"))
        .and_then(|stats| {
            if stats.is_empty() {
                Err("unreachable: empty stats".to_string())
            } else {
                Ok(stats)
            }
        })
}

fn number(stats: &Stats, name: &str) -> Option<u64> {
    stats.get(name).and_then(|value| value.parse().ok())
}

/// Requests counted by a node: the proxy's `proxy_requests`, else memcached's commands.
fn operations(role: Role, stats: &Stats) -> u64 {
    if role == Role::Proxy {
        if let Some(requests) = number(stats, "proxy_requests") {
            return requests;
        }
    }
    [
        "cmd_get",
        "cmd_set",
        "cmd_touch",
        "delete_hits",
        "delete_misses",
        "incr_hits",
        "incr_misses",
        "decr_hits",
        "decr_misses",
    ]
    .iter()
    .filter_map(|name| number(stats, name))
    .sum()
}

/// Whether `operations` counted `proxy_requests`, which includes the `stats` that read it.
fn stats_counted(stats: &Stats) -> bool {
    stats.contains_key("proxy_requests")
}

/// The backends a proxy's `stats` lists.
fn backends(stats: &Stats) -> Vec<BackendState> {
    stats
        .iter()
        .filter_map(|(name, value)| {
            let address = name.strip_prefix("backend_up:")?;
            Some(BackendState {
                address: address.to_string(),
                up: value == "1",
                outstanding: number(stats, &format!("backend_outstanding:{address}")),
            })
        })
        .collect()
}

/// Samples every target (and the servers only the proxies list) twice, `interval` apart.
pub fn sample(name: &str, mut targets: Vec<Target>, interval: Duration) -> TierStatus {
    // Servers first, then proxies, each in the order given.
    targets.sort_by_key(|target| target.role == Role::Proxy);
    let mut first: Vec<Result<Stats, String>> = targets.iter().map(fetch).collect();
    let started = Instant::now();
    let mut discovered = Vec::new();
    for stats in first.iter().flatten() {
        for backend in backends(stats) {
            let known = targets.iter().chain(&discovered).any(|target: &Target| {
                target.address == backend.address || reachable(&target.address) == backend.address
            });
            if !known {
                discovered.push(Target {
                    role: Role::Server,
                    name: backend.address.clone(),
                    address: backend.address.clone(),
                    admin: None,
                    pid: None,
                    exited: None,
                });
            }
        }
    }
    // Servers only the proxies know go after the tier's servers, before the proxies.
    let proxies_from = targets
        .iter()
        .position(|target| target.role == Role::Proxy)
        .unwrap_or(targets.len());
    let discovered_stats: Vec<Result<Stats, String>> = discovered.iter().map(fetch).collect();
    first.splice(proxies_from..proxies_from, discovered_stats);
    targets.splice(proxies_from..proxies_from, discovered);
    std::thread::sleep(interval.saturating_sub(started.elapsed()));
    let seconds = started.elapsed().as_secs_f64().max(1e-3);
    let nodes = targets
        .iter()
        .zip(first)
        .map(|(target, first)| {
            let second = first
                .as_ref()
                .map_err(Clone::clone)
                .and_then(|_| fetch(target));
            node_status(target, first.ok().as_ref(), second, seconds)
        })
        .collect();
    TierStatus {
        name: name.to_string(),
        interval_ms: u64::try_from(interval.as_millis()).unwrap_or(u64::MAX),
        nodes,
    }
}

fn node_status(
    target: &Target,
    first: Option<&Stats>,
    second: Result<Stats, String>,
    seconds: f64,
) -> NodeStatus {
    let mut status = NodeStatus {
        role: target.role,
        name: target.name.clone(),
        address: target.address.clone(),
        pid: target.pid,
        state: "up".to_string(),
        version: None,
        ops_per_sec: None,
        hit_ratio: None,
        items: None,
        bytes: None,
        limit_maxbytes: None,
        connections: None,
        proxy: None,
    };
    let stats = match (first, second) {
        (Some(first), Ok(second)) => {
            let mut done =
                operations(target.role, &second).saturating_sub(operations(target.role, first));
            if target.role == Role::Proxy && stats_counted(&second) {
                // The second sample's own `stats` request is among the proxy's requests.
                done = done.saturating_sub(1);
            }
            status.ops_per_sec = Some(done as f64 / seconds);
            let hits = |stats: &Stats| number(stats, "get_hits").unwrap_or(0);
            let misses = |stats: &Stats| number(stats, "get_misses").unwrap_or(0);
            let window_hits = hits(&second).saturating_sub(hits(first));
            let window_gets = window_hits + misses(&second).saturating_sub(misses(first));
            let all_gets = hits(&second) + misses(&second);
            status.hit_ratio = if window_gets > 0 {
                Some(window_hits as f64 / window_gets as f64)
            } else if all_gets > 0 {
                Some(hits(&second) as f64 / all_gets as f64)
            } else {
                None
            };
            second
        }
        (_, Err(problem)) => {
            status.state = problem;
            return status;
        }
        (None, Ok(_)) => {
            status.state = "unreachable at the first sample".to_string();
            return status;
        }
    };
    status.version = stats.get("version").cloned();
    status.items = number(&stats, "curr_items");
    status.bytes = number(&stats, "bytes");
    status.limit_maxbytes = number(&stats, "limit_maxbytes");
    status.connections = number(&stats, "curr_connections");
    if target.role == Role::Proxy {
        let pool = target
            .admin
            .as_deref()
            .and_then(|admin| crate::admin::pool(admin).ok());
        status.proxy = Some(ProxyStatus {
            planner: stats.get("pool_planner").cloned(),
            p99_us: number(&stats, "pool_latency_us_p99"),
            membership_version: pool
                .as_ref()
                .and_then(|pool| pool.get("version"))
                .and_then(serde_json::Value::as_u64),
            phase: pool
                .as_ref()
                .and_then(|pool| pool.get("phase"))
                .and_then(serde_json::Value::as_str)
                .map(str::to_string),
            backends: backends(&stats),
        });
    }
    status
}

fn megabytes(bytes: u64) -> String {
    let value = bytes as f64 / (1024.0 * 1024.0);
    if value < 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.0}")
    }
}

impl TierStatus {
    /// The table: one row per node, then one line per proxy with its backends.
    pub fn render(&self) -> String {
        let mut table = Table::new(&[
            "ROLE", "NAME", "ADDRESS", "PID", "STATE", "OPS/S", "HIT%", "ITEMS", "MEM MB", "CONNS",
            "PLANNER", "P99 US", "BACKENDS",
        ]);
        let dash = || "-".to_string();
        for node in &self.nodes {
            let proxy = node.proxy.as_ref();
            table.push(vec![
                node.role.name().to_string(),
                node.name.clone(),
                node.address.clone(),
                node.pid.map_or_else(dash, |pid| pid.to_string()),
                node.state.clone(),
                node.ops_per_sec
                    .map_or_else(dash, |rate| format!("{rate:.0}")),
                node.hit_ratio
                    .map_or_else(dash, |ratio| format!("{:.1}", ratio * 100.0)),
                node.items.map_or_else(dash, |items| items.to_string()),
                match (node.bytes, node.limit_maxbytes) {
                    (Some(used), Some(limit)) => {
                        format!("{}/{}", megabytes(used), megabytes(limit))
                    }
                    _ => dash(),
                },
                node.connections
                    .map_or_else(dash, |count| count.to_string()),
                proxy
                    .and_then(|proxy| proxy.planner.clone())
                    .unwrap_or_else(dash),
                proxy
                    .and_then(|proxy| proxy.p99_us)
                    .map_or_else(dash, |p99| p99.to_string()),
                proxy.map_or_else(dash, |proxy| {
                    let up = proxy.backends.iter().filter(|backend| backend.up).count();
                    format!("{up}/{} up", proxy.backends.len())
                }),
            ]);
        }
        let mut text = format!(
            "tier {}: {} nodes, rates over {} ms\n\n{}",
            if self.name.is_empty() {
                "-"
            } else {
                &self.name
            },
            self.nodes.len(),
            self.interval_ms,
            table.render()
        );
        for node in &self.nodes {
            let Some(proxy) = &node.proxy else { continue };
            let backends: Vec<String> = proxy
                .backends
                .iter()
                .map(|backend| {
                    format!(
                        "{} {}{}",
                        backend.address,
                        if backend.up { "up" } else { "DOWN" },
                        backend
                            .outstanding
                            .map_or_else(String::new, |count| format!(" ({count} in flight)"))
                    )
                })
                .collect();
            text.push_str(&format!(
                "\n{}: pool version {}, {}; backends: {}\n",
                node.name,
                proxy
                    .membership_version
                    .map_or_else(|| "?".to_string(), |version| version.to_string()),
                proxy
                    .phase
                    .as_deref()
                    .unwrap_or("phase unknown (no admin listener)"),
                backends.join(", ")
            ));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(pairs: &[(&str, &str)]) -> Stats {
        pairs
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect()
    }

    #[test]
    fn rates_and_hit_ratios_come_from_the_interval() {
        let target = Target {
            role: Role::Server,
            name: "a".into(),
            address: "127.0.0.1:1".into(),
            admin: None,
            pid: None,
            exited: None,
        };
        let first = stats(&[
            ("cmd_get", "10"),
            ("cmd_set", "5"),
            ("get_hits", "10"),
            ("get_misses", "0"),
        ]);
        let second = stats(&[
            ("cmd_get", "30"),
            ("cmd_set", "15"),
            ("get_hits", "25"),
            ("get_misses", "5"),
            ("curr_items", "7"),
        ]);
        let status = node_status(&target, Some(&first), Ok(second), 2.0);
        assert_eq!(status.ops_per_sec, Some(15.0));
        assert_eq!(status.hit_ratio, Some(0.75));
        assert_eq!(status.items, Some(7));
        assert_eq!(status.state, "up");
        let down = node_status(&target, Some(&first), Err("unreachable: x".into()), 1.0);
        assert_eq!(down.state, "unreachable: x");
    }

    #[test]
    fn a_proxy_lists_its_backends() {
        let proxy = stats(&[
            ("backend_up:127.0.0.1:1", "1"),
            ("backend_up:127.0.0.1:2", "0"),
            ("backend_outstanding:127.0.0.1:2", "3"),
        ]);
        let listed = backends(&proxy);
        assert_eq!(listed.len(), 2);
        assert!(listed[0].up && !listed[1].up);
        assert_eq!(listed[1].outstanding, Some(3));
    }
}
