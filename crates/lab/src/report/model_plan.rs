//! `tailtrim model plan`: a workload profile measured on a running tier (`stats` of a
//! `tailtrim serve`, memcached or `tailtrim proxy`) or read from a bench JSON, and the plan's
//! table.
//!
//! ```text
//!   --from-stats HOST:PORT ──stats, sleep, stats──► MeasuredProfile (interval deltas)
//!   --from-bench FILE.json ──────────────────────► MeasuredProfile (the run's totals)
//!        + flags (--rate, --service-us, …) ──► tailtrim_model::plan::plan ──► plan_table | JSON
//!        + --ring / --ring-servers ──► RingSplit: each count's ketama ring (the proxy's code),
//!          the most loaded server's share of the hash circle ──► plan_with_split
//! ```
//!
//! What each source gives (a flag always wins):
//!
//! | | rate | keys/request | value bytes | service time | threads |
//! |---|---|---|---|---|---|
//! | server | requests/s | (cmd_get + cmd_set)/requests | bytes written per hit | `emulate_service` of `stats settings`, else CPU seconds per request | `threads` |
//! | proxy | reads + writes + multigets per s | their keys per request | bytes written per hit | `pool_model_service_us` (the proxy's live estimate) | `pool_model_threads` |
//! | bench | achieved rps | (hits + misses + sets)/requests | — | — | — |

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;
use tailtrim_client::config::ServerSpec;
use tailtrim_model::plan::Plan;
use tailtrim_policy::costspec::{CostSpec, Units};
use tailtrim_policy::ring::{HashFunction, Ring, RingOptions, RingServer};

use crate::process::fetch_stats;
use crate::LabError;

/// A profile as measured, before the flags override it. `None`: the source does not say.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct MeasuredProfile {
    /// Where it came from (`server 127.0.0.1:11211`, `bench run.json`).
    pub source: String,
    /// Requests per second.
    pub request_rate: Option<f64>,
    /// Mean keys per request.
    pub keys_per_request: Option<f64>,
    /// Mean bytes written per hit.
    pub value_bytes: Option<f64>,
    /// Service time of one request at one thread: fixed part, µs.
    pub service_us: Option<f64>,
    /// Service time per key, µs.
    pub per_key_us: Option<f64>,
    /// How the service time was found.
    pub service_from: Option<String>,
    /// Worker threads per server.
    pub threads: Option<u32>,
    /// Servers behind the source (a proxy's backends; 1 for a server).
    pub servers: Option<u32>,
    /// The p99 the source measured, µs (cumulative for `stats`, the run's for a bench).
    pub measured_p99_us: Option<f64>,
}

fn number(stats: &BTreeMap<String, String>, name: &str) -> f64 {
    stats
        .get(name)
        .and_then(|value| value.parse::<f64>().ok())
        .unwrap_or(0.0)
}

fn delta(
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
    names: &[&str],
) -> f64 {
    names
        .iter()
        .map(|name| number(after, name) - number(before, name))
        .sum()
}

/// `stats` twice, `sample` apart, and the profile of the interval between.
pub fn profile_from_stats(address: &str, sample: Duration) -> Result<MeasuredProfile, LabError> {
    let before = fetch_stats(address, None)?;
    let started = Instant::now();
    std::thread::sleep(sample);
    let after = fetch_stats(address, None)?;
    let seconds = started.elapsed().as_secs_f64();
    if before.is_empty() || after.is_empty() {
        return Err(LabError::Process(format!(
            "{address} answered `stats` with nothing"
        )));
    }
    if after.contains_key("proxy_requests") {
        return Ok(proxy_profile(address, &before, &after, seconds));
    }
    let settings = fetch_stats(address, Some("settings"))?;
    Ok(server_profile(address, &before, &after, &settings, seconds))
}

fn positive(value: f64) -> Option<f64> {
    (value.is_finite() && value > 0.0).then_some(value)
}

fn server_profile(
    address: &str,
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
    settings: &BTreeMap<String, String>,
    seconds: f64,
) -> MeasuredProfile {
    // `dispatch_*_requests` count requests (a multiget once); memcached has none, so its
    // gets and sets stand in (a multiget then counts once per key).
    let keys = delta(before, after, &["cmd_get", "cmd_set"]);
    let counted = delta(
        before,
        after,
        &["dispatch_small_requests", "dispatch_large_requests"],
    );
    let requests = if counted > 0.0 { counted } else { keys };
    let value_bytes = positive(delta(before, after, &["bytes_written"]))
        .zip(positive(delta(before, after, &["get_hits"])))
        .map(|(bytes, hits)| bytes / hits);
    let keys_per_request = positive(keys / requests).map(|keys| keys.max(1.0));
    let emulated = settings
        .get("emulate_service")
        .filter(|spec| spec.as_str() != "off")
        .and_then(|spec| CostSpec::parse(spec).ok().map(|cost| (spec.clone(), cost)));
    let (service_us, per_key_us, service_from) = match emulated {
        Some((spec, cost)) => {
            let reply_bytes = value_bytes.unwrap_or(0.0) * keys_per_request.unwrap_or(1.0);
            let fixed = cost.mean_nanos(Units {
                keys: 0,
                bytes: reply_bytes.round() as u64,
            }) / 1e3;
            let one_key = cost.mean_nanos(Units { keys: 1, bytes: 0 })
                - cost.mean_nanos(Units { keys: 0, bytes: 0 });
            (
                Some(fixed),
                Some(one_key / 1e3),
                Some(format!("emulate_service {spec}")),
            )
        }
        None => {
            let cpu = delta(before, after, &["rusage_user", "rusage_system"]);
            let per_request = positive(cpu / requests).map(|seconds| seconds * 1e6);
            (
                per_request,
                per_request.map(|_| 0.0),
                per_request.map(|_| "CPU seconds per request (rusage)".to_string()),
            )
        }
    };
    MeasuredProfile {
        source: format!("server {address}"),
        request_rate: positive(requests / seconds),
        keys_per_request,
        value_bytes,
        service_us,
        per_key_us,
        service_from,
        threads: positive(number(after, "threads")).map(|threads| threads as u32),
        servers: Some(1),
        measured_p99_us: positive(number(after, "dispatch_small_p99_us")),
    }
}

fn proxy_profile(
    address: &str,
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
    seconds: f64,
) -> MeasuredProfile {
    let requests = delta(
        before,
        after,
        &["pool_reads", "pool_writes", "pool_multigets"],
    );
    let keys = delta(
        before,
        after,
        &["pool_reads", "pool_writes", "pool_multiget_keys"],
    );
    let backends = after
        .keys()
        .filter(|name| name.starts_with("backend_up:"))
        .count();
    let service_us = positive(number(after, "pool_model_service_us"));
    MeasuredProfile {
        source: format!("proxy {address}"),
        request_rate: positive(requests / seconds),
        keys_per_request: positive(keys / requests).map(|keys| keys.max(1.0)),
        value_bytes: positive(delta(before, after, &["bytes_written"]))
            .zip(positive(delta(before, after, &["get_hits"])))
            .map(|(bytes, hits)| bytes / hits),
        service_us,
        per_key_us: service_us.map(|_| 0.0),
        service_from: service_us.map(|_| "pool_model_service_us (the proxy's estimate)".into()),
        threads: positive(number(after, "pool_model_threads")).map(|threads| threads as u32),
        servers: u32::try_from(backends).ok().filter(|count| *count > 0),
        measured_p99_us: positive(number(after, "pool_latency_us_p99")),
    }
}

/// The profile of a `tailtrim bench --json` run.
pub fn profile_from_bench(path: &Path) -> Result<MeasuredProfile, LabError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| LabError::io(format!("reading {}", path.display()), source))?;
    let run: Value = serde_json::from_str(&text)
        .map_err(|error| LabError::Results(format!("{}: {error}", path.display())))?;
    let field = |pointer: &str| run.pointer(pointer).and_then(Value::as_f64);
    let requests = field("/classes/all/count").unwrap_or(0.0);
    let keys = field("/hits").unwrap_or(0.0)
        + field("/misses").unwrap_or(0.0)
        + field("/classes/set/count").unwrap_or(0.0);
    let rate = field("/achieved_rps");
    if rate.is_none() {
        return Err(LabError::Results(format!(
            "{}: not a bench JSON (no achieved_rps; a sweep's runs are planned one at a time)",
            path.display()
        )));
    }
    Ok(MeasuredProfile {
        source: format!("bench {}", path.display()),
        request_rate: rate.and_then(positive),
        keys_per_request: positive(keys / requests).map(|keys| keys.max(1.0)),
        measured_p99_us: field("/classes/all/p99_us").and_then(positive),
        ..MeasuredProfile::default()
    })
}

/// The key hash a ring is planned with when none is given: the proxy's default (`md5`,
/// libmemcached's ketama hash).
pub const RING_DEFAULT_HASH: &str = "md5";
/// The first server of a ring planned without `--ring-servers`: where `tailtrim cluster`
/// puts a tier's first server by default (the next ones at the following ports).
pub const RING_DEFAULT_FIRST_SERVER: &str = "127.0.0.1:11211";

/// The ketama rings a plan is made on: the pool's servers in order, and past the end of the
/// list more on the last one's host at the following ports (weight 1), as `cluster add`
/// would name them.
#[derive(Debug, Clone, PartialEq)]
pub struct RingSplit {
    servers: Vec<ServerSpec>,
    options: RingOptions,
}

impl RingSplit {
    /// `servers`: comma separated, each `host:port[:weight] [name]` (the pool's syntax);
    /// `hash`: the pool's key hash.
    pub fn parse(servers: &str, hash: &str) -> Result<RingSplit, String> {
        let servers = servers
            .split(',')
            .map(|entry| ServerSpec::parse(entry.trim()).map_err(|error| error.to_string()))
            .collect::<Result<Vec<ServerSpec>, String>>()?;
        let hash = HashFunction::from_name(hash).map_err(|error| error.to_string())?;
        if hash == HashFunction::Crc32 {
            // Its 15-bit values fall on the first 2^-17 of the circle: no arc share says
            // where keys go.
            return Err(
                "--ring-hash crc32: the plan reads shares of the 32-bit circle, \
                        which crc32's 15-bit hash does not cover"
                    .to_string(),
            );
        }
        Ok(RingSplit {
            servers,
            options: RingOptions {
                hash,
                ..RingOptions::default()
            },
        })
    }

    /// The first `count` servers of the pool.
    pub fn servers(&self, count: u32) -> Result<Vec<ServerSpec>, String> {
        let mut servers: Vec<ServerSpec> =
            self.servers.iter().take(count as usize).cloned().collect();
        while servers.len() < count as usize {
            let Some(last) = servers.last() else {
                return Err("a ring needs at least one server".to_string());
            };
            let port = last
                .port
                .checked_add(1)
                .ok_or_else(|| format!("{count} servers run past port 65535"))?;
            servers.push(ServerSpec {
                host: last.host.clone(),
                port,
                weight: 1,
                name: None,
            });
        }
        Ok(servers)
    }

    /// The ketama ring of the first `count` servers, as the proxy builds it.
    pub fn ring(&self, count: u32) -> Result<Ring, String> {
        let servers: Vec<RingServer> = self
            .servers(count)?
            .iter()
            .map(ServerSpec::ring_server)
            .collect();
        Ring::new(&servers, self.options).map_err(|error| error.to_string())
    }

    /// The most loaded server's share over the mean share `1/count` on the ring of `count`
    /// servers (the tier model's `imbalance`; keys spread evenly over the hash circle).
    pub fn imbalance(&self, count: u32) -> Result<f64, String> {
        let shares = circle_shares(&self.ring(count)?);
        let heaviest = shares.iter().copied().fold(0.0, f64::max);
        Ok((heaviest * shares.len() as f64).max(1.0))
    }
}

/// Each server's share of the 32-bit hash circle on a ketama ring: a hash goes to the first
/// point at or above it, so a point owns the arc from its predecessor (exclusive) to itself,
/// the first point the arc that wraps past the last. One server owns the whole circle.
pub fn circle_shares(ring: &Ring) -> Vec<f64> {
    let mut owned = vec![0u64; ring.server_count()];
    let points = ring.continuum();
    if let Some(last) = points.last() {
        let mut previous = u64::from(last.value);
        for (index, point) in points.iter().enumerate() {
            let value = u64::from(point.value);
            let arc = if index == 0 {
                value + (1u64 << 32) - previous
            } else {
                value - previous
            };
            if let Some(share) = owned.get_mut(point.server as usize) {
                *share += arc;
            }
            previous = value;
        }
    }
    if ring.server_count() == 1 || owned.iter().all(|&arc| arc == 0) {
        return vec![1.0 / ring.server_count().max(1) as f64; ring.server_count()];
    }
    let circle = (1u64 << 32) as f64;
    owned.iter().map(|&arc| arc as f64 / circle).collect()
}

fn micros(value: f64) -> String {
    if value.is_finite() {
        format!("{value:.0}")
    } else {
        "unbounded".to_string()
    }
}

/// How far the recommended shape's predicted p99 is under the objective: the error of the
/// model (and, planned without `--ring`, the imbalance of a ring not yet built) it can absorb.
fn headroom(plan: &Plan) -> Option<String> {
    let at = plan
        .neighbours
        .iter()
        .find(|neighbour| neighbour.servers == plan.recommended.servers)?
        .prediction?;
    let slo = plan.request.slo_p99.as_micros();
    let p99 = at.p99.as_micros();
    Some(format!(
        " (p99 {p99:.0} µs: a measured p99 up to {:.2}x the model's still meets the objective)",
        slo / p99
    ))
}

/// The plan as a table; `ring`: the rings it was planned on (each row then shows its
/// ring's imbalance).
pub fn plan_table(plan: &Plan, measured: &MeasuredProfile, ring: Option<&RingSplit>) -> String {
    let mut out = String::new();
    let profile = &plan.request.profile;
    let _ = writeln!(out, "profile from {}", measured.source);
    let _ = writeln!(
        out,
        "  rate {:.0} req/s{}, {:.2} keys/request, service {:.1} µs + {:.2} µs/key ({}), ξ {}, network {:.0} µs{}",
        profile.request_rate,
        measured
            .request_rate
            .map_or_else(String::new, |rate| format!(" (measured {rate:.0})")),
        profile.keys_per_request,
        profile.service.fixed.as_micros(),
        profile.service.per_key.as_micros(),
        measured.service_from.as_deref().unwrap_or("given"),
        profile.burst_degree,
        profile.network.as_micros(),
        measured
            .value_bytes
            .map_or_else(String::new, |bytes| format!(", {bytes:.0} B per hit")),
    );
    match ring {
        Some(ring) => {
            let _ = writeln!(
                out,
                "  {} client connections read in order; each count on its ketama ring ({}, servers from {})",
                profile.client_connections,
                ring.options.hash.name(),
                ring.servers.first().map_or_else(String::new, ToString::to_string)
            );
        }
        None if profile.client_connections > 0 || profile.imbalance > 1.0 => {
            let _ = writeln!(
                out,
                "  {} client connections read in order, most loaded server {:.3}x the mean share",
                profile.client_connections, profile.imbalance
            );
        }
        None => {}
    }
    if let Some(p99) = measured.measured_p99_us {
        let _ = writeln!(out, "  measured p99 at the source: {p99:.0} µs");
    }
    let _ = writeln!(
        out,
        "objective: p99 <= {:.0} µs",
        plan.request.slo_p99.as_micros()
    );
    let _ = writeln!(
        out,
        "recommended: {} servers x {} threads{}",
        plan.recommended.servers,
        plan.recommended.threads,
        headroom(plan).unwrap_or_default()
    );
    let _ = writeln!(
        out,
        "{:>8} {:>8} {:>7} {:>12} {:>7} {:>10} {:>10}  meets{}",
        "servers",
        "threads",
        "fanout",
        "queries/s",
        "ρ",
        "p50 µs",
        "p99 µs",
        if ring.is_some() { "  heaviest" } else { "" }
    );
    for neighbour in &plan.neighbours {
        let verdict = if neighbour.meets { "yes" } else { "no" };
        let last = if ring.is_some() {
            format!("{verdict:<5}  {:.3}x", neighbour.imbalance)
        } else {
            verdict.to_string()
        };
        match &neighbour.prediction {
            Some(prediction) => {
                let _ = writeln!(
                    out,
                    "{:>8} {:>8} {:>7.2} {:>12.0} {:>7.3} {:>10} {:>10}  {last}",
                    neighbour.servers,
                    prediction.shape.threads,
                    prediction.fanout,
                    prediction.query_rate,
                    prediction.utilization,
                    micros(prediction.p50.as_micros()),
                    micros(prediction.p99.as_micros()),
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "{:>8} {:>8} {:>7} {:>12} {:>7} {:>10} {:>10}  {last}",
                    neighbour.servers,
                    plan.recommended.threads,
                    "-",
                    "-",
                    ">= 1",
                    "unstable",
                    "unstable"
                );
            }
        }
    }
    if plan.options.len() > 1 {
        let _ = writeln!(out, "per thread count:");
        for option in &plan.options {
            let _ = match (option.servers, option.p99) {
                (Some(servers), Some(p99)) => writeln!(
                    out,
                    "  {} threads: {} servers ({} threads in all), p99 {} µs",
                    option.threads,
                    servers,
                    u64::from(servers) * u64::from(option.threads),
                    micros(p99.as_micros())
                ),
                _ => writeln!(out, "  {} threads: none within the search", option.threads),
            };
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::{circle_shares, proxy_profile, server_profile, RingSplit};

    fn stats(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect()
    }

    #[test]
    fn server_profile_reads_the_emulated_service_time() {
        let before = stats(&[("cmd_get", "0"), ("dispatch_small_requests", "0")]);
        let after = stats(&[
            ("cmd_get", "4000"),
            ("dispatch_small_requests", "1000"),
            ("threads", "4"),
        ]);
        let settings = stats(&[("emulate_service", "const=1ms,key=100us,dist=exp")]);
        let profile = server_profile("here", &before, &after, &settings, 2.0);
        assert_eq!(profile.request_rate, Some(500.0));
        assert_eq!(profile.keys_per_request, Some(4.0));
        assert_eq!(profile.threads, Some(4));
        let fixed = profile.service_us.unwrap_or(0.0);
        let per_key = profile.per_key_us.unwrap_or(0.0);
        assert!((fixed - 1_000.0).abs() < 1e-6 && (per_key - 100.0).abs() < 1e-6);
    }

    #[test]
    fn proxy_profile_counts_backends_and_keys() {
        let before = stats(&[]);
        let after = stats(&[
            ("proxy_requests", "10"),
            ("pool_multigets", "100"),
            ("pool_multiget_keys", "1000"),
            ("backend_up:127.0.0.1:1", "1"),
            ("backend_up:127.0.0.1:2", "1"),
            ("pool_model_service_us", "250"),
        ]);
        let profile = proxy_profile("here", &before, &after, 1.0);
        assert_eq!(profile.servers, Some(2));
        assert_eq!(profile.keys_per_request, Some(10.0));
        assert_eq!(profile.service_us, Some(250.0));
    }

    #[test]
    fn circle_shares_are_where_the_ring_sends_keys() {
        let split = RingSplit::parse("127.0.0.1:11211", "md5").expect("a ring");
        let ring = split.ring(3).expect("three servers");
        let shares = circle_shares(&ring);
        assert!(
            (shares.iter().sum::<f64>() - 1.0).abs() < 1e-12,
            "{shares:?}"
        );
        // The proxy's own lookup over many keys lands where the arcs say.
        let keys = 200_000;
        let mut counted = [0u32; 3];
        for id in 0..keys {
            counted[ring.server_for(format!("key:{id}").as_bytes())] += 1;
        }
        for (share, count) in shares.iter().zip(counted) {
            let seen = f64::from(count) / f64::from(keys);
            assert!((share - seen).abs() < 0.005, "{shares:?} vs {counted:?}");
        }
        let heaviest = shares.iter().copied().fold(0.0, f64::max);
        let imbalance = split.imbalance(3).expect("an imbalance");
        assert!((imbalance - 3.0 * heaviest).abs() < 1e-12 && imbalance > 1.0);
        assert_eq!(split.imbalance(1), Ok(1.0));
    }

    #[test]
    fn ring_servers_go_on_past_the_list_at_the_following_ports() {
        let split =
            RingSplit::parse("10.0.0.1:11211:2 alpha, 10.0.0.2:11300", "fnv1a_64").expect("a list");
        let named: Vec<String> = split
            .servers(4)
            .expect("four servers")
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            named,
            [
                "10.0.0.1:11211:2 alpha",
                "10.0.0.2:11300:1",
                "10.0.0.2:11301:1",
                "10.0.0.2:11302:1"
            ]
        );
        assert!(RingSplit::parse("10.0.0.1:65535", "md5")
            .and_then(|split| split.servers(2))
            .is_err());
        assert!(RingSplit::parse("10.0.0.1:11211", "crc32").is_err());
        assert!(RingSplit::parse("10.0.0.1:11211", "sha1").is_err());
        assert!(RingSplit::parse("10.0.0.1:11211:0", "md5").is_err());
    }
}
