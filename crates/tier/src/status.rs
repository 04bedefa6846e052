//! `cluster status`: one row per node from two `stats` samples an interval apart.
//!
//! ```text
//!   targets (state file | tier file | --proxy ADDR)
//!     ├─ sample 1: `stats` of every node (a nutcracker's stats listener instead: module
//!     │            nutcracker); each proxy's backends (`backend_up:ADDR`) join the servers
//!     │            when the tier did not list them (added without the tier); each tailtrim
//!     │            proxy's hottest keys per backend (`GET /pool/hotkeys`)
//!     ├─ interval
//!     ├─ sample 2: the same again, and `GET /pool` of each proxy's admin listener
//!     └─ per node: ops/s (difference / interval), hit ratio (of the interval's gets, else
//!        since start), items, memory, connections, hot keys (requests/s over the interval,
//!        a server's from every proxy's tracker of it); per proxy: planner in use, p99 of its
//!        requests and the model's predicted p99, p99 per latency class, membership version
//!        and phase, each backend up or down
//! ```
//!
//! Counters read: memcached's `cmd_get`, `cmd_set`, `cmd_touch`, `delete_*`, `incr_*`,
//! `decr_*`, `get_hits`, `get_misses`, `curr_items`, `bytes`, `limit_maxbytes`,
//! `curr_connections`; the proxy's `proxy_requests`, `pool_planner`,
//! `pool_planner_choice` (when the automatic planner runs), `pool_latency_us_p99`,
//! `pool_model_p99_predicted_us` (when the proxy publishes a prediction),
//! `latency_class_us_p99:CLASS`, `backend_up:ADDR`, `backend_outstanding:ADDR`. The
//! per-class and whole p99s are the proxy's histograms since it started; rates and hot keys
//! are the interval's.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::config::{ProxyProgram, TierPlan};
use crate::state::{process_exists, Role, TierState};
use crate::table::Table;
use crate::up::reachable;

/// Default time between the two samples.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);
/// Keys asked of each proxy's tracker of each backend, at both samples.
pub const HOT_KEYS_READ: usize = 32;
/// The table's titles of the per-class p99 columns, in [`LATENCY_CLASSES`] order.
const CLASS_COLUMNS: [&str; 4] = ["SMALL P99", "LARGE P99", "MICE P99", "ELEPH P99"];
/// Hot keys kept per node.
pub const HOT_KEYS_SHOWN: usize = 3;
/// The latency classes of the proxy's `latency_class_us` histograms, in column order.
pub const LATENCY_CLASSES: [&str; 4] = ["small_get", "large_get", "mice", "elephant"];

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
    /// A nutcracker proxy: read from its stats listener (`admin`), not with `stats`.
    pub nutcracker: bool,
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
            nutcracker: node.program == ProxyProgram::Nutcracker.name(),
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
        nutcracker: false,
    });
    let proxies = plan.proxies.iter().map(|proxy| Target {
        role: Role::Proxy,
        name: proxy.name.clone(),
        address: proxy.listen.clone(),
        admin: Some(proxy.admin_listen.clone()),
        pid: None,
        exited: None,
        nutcracker: proxy.program == ProxyProgram::Nutcracker,
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

/// A hot key and its request rate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HotKeyRate {
    /// The key (lossy UTF-8).
    pub key: String,
    /// The server that owns it.
    pub backend: String,
    /// Requests per second over the interval, as the proxies' sampled trackers estimate
    /// them (summed over the proxies for a server's row).
    pub per_sec: f64,
}

/// What a proxy adds to its row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProxyStatus {
    /// Multiget planner in use: the automatic planner's current choice
    /// (`pool_planner_choice`), else the configured one (`pool_planner`).
    pub planner: Option<String>,
    /// p99 of the proxy's requests, µs (`pool_latency_us_p99`).
    pub p99_us: Option<u64>,
    /// The model's predicted p99 for the current load, µs (`pool_model_p99_predicted_us`), when
    /// the proxy publishes one.
    pub predicted_p99_us: Option<u64>,
    /// p99 of client reads per latency class (`small_get`, `large_get`, `mice`,
    /// `elephant`), µs, for the classes that saw requests.
    pub class_p99_us: BTreeMap<String, u64>,
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
    /// The hottest keys over the interval, hottest first (a tailtrim proxy's over its
    /// backends; a server's from every proxy's tracker of it).
    pub hot_keys: Vec<HotKeyRate>,
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
    if target.nutcracker {
        let admin = target
            .admin
            .as_deref()
            .ok_or("unreachable: a nutcracker proxy without a stats listener")?;
        return crate::nutcracker::fetch_stats(admin);
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

/// Requests counted by a node: the proxy's `proxy_requests` (a nutcracker's requests to
/// its servers), else memcached's commands.
fn operations(role: Role, stats: &Stats) -> u64 {
    if role == Role::Proxy {
        let requests = number(stats, "proxy_requests")
            .or_else(|| number(stats, crate::nutcracker::REQUESTS_FIELD));
        if let Some(requests) = requests {
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

/// Hot-key counts of one proxy: (backend, key) -> estimated requests so far.
type HotCounts = BTreeMap<(String, String), u64>;

/// The hot-key counts of a tailtrim proxy's trackers of each backend its `stats` lists
/// (none for a nutcracker, or without an admin listener).
fn hot_counts(target: &Target, stats: Option<&Stats>) -> HotCounts {
    let (Some(admin), Some(stats)) = (target.admin.as_deref(), stats) else {
        return HotCounts::new();
    };
    if target.role != Role::Proxy || target.nutcracker {
        return HotCounts::new();
    }
    let mut counts = HotCounts::new();
    for backend in backends(stats) {
        let keys =
            crate::admin::hot_keys(admin, &backend.address, HOT_KEYS_READ).unwrap_or_default();
        for (key, count) in keys {
            counts.insert((backend.address.clone(), key), count);
        }
    }
    counts
}

/// The hottest keys by rate: a key's count at the second reading less its count at the
/// first (a key not held then counted from zero), per second; hottest first.
fn hot_rates(first: &HotCounts, second: &HotCounts, seconds: f64) -> Vec<HotKeyRate> {
    let mut rates: Vec<HotKeyRate> = second
        .iter()
        .filter_map(|((backend, key), count)| {
            let before = first
                .get(&(backend.clone(), key.clone()))
                .copied()
                .unwrap_or(0);
            let done = count.saturating_sub(before);
            (done > 0).then(|| HotKeyRate {
                key: key.clone(),
                backend: backend.clone(),
                per_sec: done as f64 / seconds,
            })
        })
        .collect();
    rank(&mut rates);
    rates
}

/// Hottest first (ties by key), at most [`HOT_KEYS_SHOWN`].
fn rank(rates: &mut Vec<HotKeyRate>) {
    rates.sort_by(|a, b| {
        b.per_sec
            .total_cmp(&a.per_sec)
            .then_with(|| a.key.cmp(&b.key))
    });
    rates.truncate(HOT_KEYS_SHOWN);
}

/// A server's hot keys: what every proxy measured of it, summed per key.
fn server_hot_keys(address: &str, proxy_rates: &[Vec<HotKeyRate>]) -> Vec<HotKeyRate> {
    let mut summed: BTreeMap<String, f64> = BTreeMap::new();
    for rate in proxy_rates.iter().flatten() {
        if rate.backend == address || reachable(&rate.backend) == reachable(address) {
            *summed.entry(rate.key.clone()).or_default() += rate.per_sec;
        }
    }
    let mut rates: Vec<HotKeyRate> = summed
        .into_iter()
        .map(|(key, per_sec)| HotKeyRate {
            key,
            backend: address.to_string(),
            per_sec,
        })
        .collect();
    rank(&mut rates);
    rates
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
                    nutcracker: false,
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
    let hot_started = Instant::now();
    let first_hot: Vec<HotCounts> = targets
        .iter()
        .zip(&first)
        .map(|(target, stats)| hot_counts(target, stats.as_ref().ok()))
        .collect();
    std::thread::sleep(interval.saturating_sub(started.elapsed()));
    let seconds = started.elapsed().as_secs_f64().max(1e-3);
    let mut nodes: Vec<NodeStatus> = Vec::with_capacity(targets.len());
    let mut seconds_stats: Vec<Option<Stats>> = Vec::with_capacity(targets.len());
    for (target, first) in targets.iter().zip(first) {
        let second = first
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|_| fetch(target));
        seconds_stats.push(second.as_ref().ok().cloned());
        nodes.push(node_status(target, first.ok().as_ref(), second, seconds));
    }
    let hot_seconds = hot_started.elapsed().as_secs_f64().max(1e-3);
    let proxy_rates: Vec<Vec<HotKeyRate>> = targets
        .iter()
        .zip(&seconds_stats)
        .zip(&first_hot)
        .map(|((target, stats), first)| {
            hot_rates(first, &hot_counts(target, stats.as_ref()), hot_seconds)
        })
        .collect();
    for (node, rates) in nodes.iter_mut().zip(&proxy_rates) {
        node.hot_keys = match node.role {
            Role::Proxy => rates.clone(),
            Role::Server => server_hot_keys(&node.address, &proxy_rates),
        };
    }
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
        hot_keys: Vec::new(),
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
            .filter(|_| !target.nutcracker)
            .and_then(|admin| crate::admin::pool(admin).ok());
        let class_p99_us = LATENCY_CLASSES
            .iter()
            .filter(|class| {
                number(&stats, &format!("latency_class_us_count:{class}")).unwrap_or(0) > 0
            })
            .filter_map(|class| {
                let p99 = number(&stats, &format!("latency_class_us_p99:{class}"))?;
                Some((class.to_string(), p99))
            })
            .collect();
        status.proxy = Some(ProxyStatus {
            planner: stats
                .get("pool_planner_choice")
                .or_else(|| stats.get("pool_planner"))
                .cloned(),
            p99_us: number(&stats, "pool_latency_us_p99"),
            // 0 until the proxy's model has seen an interval with traffic.
            predicted_p99_us: number(&stats, "pool_model_p99_predicted_us").filter(|p99| *p99 > 0),
            class_p99_us,
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
        let mut header = vec![
            "ROLE",
            "NAME",
            "ADDRESS",
            "PID",
            "STATE",
            "OPS/S",
            "HIT%",
            "ITEMS",
            "MEM MB",
            "CONNS",
            "PLANNER",
            "P99 US",
            "MODEL P99",
        ];
        header.extend(CLASS_COLUMNS);
        header.extend(["HOT KEY", "BACKENDS"]);
        let mut table = Table::new(&header);
        let dash = || "-".to_string();
        for node in &self.nodes {
            let proxy = node.proxy.as_ref();
            let micros = |value: Option<u64>| value.map_or_else(dash, |p99| p99.to_string());
            let mut row = vec![
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
                micros(proxy.and_then(|proxy| proxy.p99_us)),
                micros(proxy.and_then(|proxy| proxy.predicted_p99_us)),
            ];
            for class in LATENCY_CLASSES {
                row.push(micros(
                    proxy.and_then(|proxy| proxy.class_p99_us.get(class).copied()),
                ));
            }
            row.push(
                node.hot_keys
                    .first()
                    .map_or_else(dash, |hot| format!("{} {:.0}/s", hot.key, hot.per_sec)),
            );
            row.push(proxy.map_or_else(dash, |proxy| {
                let up = proxy.backends.iter().filter(|backend| backend.up).count();
                format!("{up}/{} up", proxy.backends.len())
            }));
            table.push(row);
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
        let hot: Vec<String> = self
            .nodes
            .iter()
            .filter(|node| node.role == Role::Server && !node.hot_keys.is_empty())
            .map(|node| {
                let keys: Vec<String> = node
                    .hot_keys
                    .iter()
                    .map(|hot| format!("{} {:.0}/s", hot.key, hot.per_sec))
                    .collect();
                format!("  {}: {}", node.name, keys.join(", "))
            })
            .collect();
        if !hot.is_empty() {
            text.push_str(&format!(
                "\nhot keys (requests/s the proxies sampled):\n{}\n",
                hot.join("\n")
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
            nutcracker: false,
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
