//! The tier file: one TOML describing the servers and proxies of a tier. One struct per
//! section, every key optional with the default documented beside it (the `DEFAULT_*`
//! consts); `examples/tier.toml` shows them all.
//!
//! ```toml
//! [tier]                 # TierSection: name, run directory
//! [server]               # ServerTemplate: what every server runs unless its entry says else
//! [[servers]]            # ServerNode: one per cache server (port, overrides)
//! [[proxies]]            # ProxyNode: one per proxy (listen and admin addresses)
//! [proxy]                # the proxy's own [proxy] section (tailtrim_proxy::config::ProxySection)
//! [pool]                 # the proxy's own [pool] section; `servers` is filled from [[servers]]
//! [warmup]               # the proxy's own [warmup] section
//! [classes]              # the proxy's own [classes] section (per-class latency bounds)
//! ```
//!
//! The `[proxy]`, `[pool]`, `[warmup]` and `[classes]` sections are the proxy's configuration
//! structs themselves, so a `tailtrim proxy --config` file's sections can be pasted in
//! unchanged. A `[[proxies]]` entry with `program = "nutcracker"` runs Debian's twemproxy
//! instead, from a YAML written from the same pool ([`ProxyPlan::nutcracker_yaml`]): one
//! file then describes the memcached + twemproxy tier a tailtrim tier is compared with.

use std::path::Path;

use serde::{Deserialize, Serialize};
use tailtrim_proxy::classes::ClassesSection;
use tailtrim_proxy::config::{PoolSection, ProxyConfig, ProxySection, RouteSection, WarmupSection};

use crate::error::TierError;

/// Default tier name (shown in `cluster status`).
pub const DEFAULT_NAME: &str = "tier";
/// Default run directory (relative to the working directory): configuration files written
/// for the nodes, their logs, the tier's state file and control socket.
pub const DEFAULT_RUN_DIR: &str = "tier-run";
/// Default seconds a node may take to answer `version` after it was started.
pub const DEFAULT_READY_TIMEOUT_SECS: u64 = 10;
/// Default host servers listen on and proxies reach them at.
pub const DEFAULT_HOST: &str = "127.0.0.1";
/// Default item memory of a server, megabytes (`-m`, memcached's default).
pub const DEFAULT_MEMORY_MB: u64 = 64;
/// Default worker threads of a server (`-t`, memcached's default).
pub const DEFAULT_SERVER_THREADS: usize = 4;
/// Default dispatch of a tailtrim server (`--dispatch`; the server's own default).
pub const DEFAULT_DISPATCH: &str = "pinned";
/// Default ketama weight of a server in the proxies' pool.
pub const DEFAULT_WEIGHT: u32 = 1;
/// Default port of the first server when an entry gives none (memcached's port).
pub const DEFAULT_SERVER_PORT: u16 = 11211;

/// The whole tier file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct TierConfig {
    /// `[tier]`: name and run directory.
    pub tier: TierSection,
    /// `[server]`: the template every `[[servers]]` entry (and `cluster add --start`) uses.
    pub server: ServerTemplate,
    /// `[[servers]]`: the cache servers.
    pub servers: Vec<ServerNode>,
    /// `[[proxies]]`: the proxies, each over all the servers.
    pub proxies: Vec<ProxyNode>,
    /// `[proxy]`: the proxies' front end (`listen` and `admin_listen` come from each
    /// `[[proxies]]` entry).
    pub proxy: ProxySection,
    /// `[pool]`: planner, hash, timeouts, priorities (`backend_window`), ...; `servers` is
    /// filled from `[[servers]]` and must be left out.
    pub pool: PoolSection,
    /// `[warmup]`: how a joining or leaving server is warmed up.
    pub warmup: WarmupSection,
    /// `[[routes]]`: the proxies' routes in front of the pool, outermost first (none by
    /// default; `docs/routes.md`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<RouteSection>,
    /// `[classes]`: the bounds of the proxies' per-class latency (small and large gets,
    /// mice and elephant multigets) that `cluster status` shows.
    pub classes: ClassesSection,
}

/// `[tier]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TierSection {
    /// Name shown by `cluster status`.
    pub name: String,
    /// Directory for the nodes' configuration files, logs, the state file and the control
    /// socket (relative to the working directory). `cluster up --run-dir` overrides it.
    pub run_dir: String,
    /// Seconds a node may take to answer `version` after it was started.
    pub ready_timeout_secs: u64,
}

impl Default for TierSection {
    fn default() -> Self {
        TierSection {
            name: DEFAULT_NAME.to_string(),
            run_dir: DEFAULT_RUN_DIR.to_string(),
            ready_timeout_secs: DEFAULT_READY_TIMEOUT_SECS,
        }
    }
}

/// Which cache server a node runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Program {
    /// `tailtrim serve`.
    #[default]
    Tailtrim,
    /// Stock memcached from `$PATH` (a baseline tier); `dispatch` does not apply.
    Memcached,
}

impl Program {
    /// The name written in the tier file.
    pub fn name(self) -> &'static str {
        match self {
            Program::Tailtrim => "tailtrim",
            Program::Memcached => "memcached",
        }
    }
}

/// `[server]`: the defaults of every server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerTemplate {
    /// `tailtrim` or `memcached`.
    pub program: Program,
    /// Address the server listens on (`-l`) and the proxies reach it at.
    pub host: String,
    /// Item memory, megabytes (`-m`).
    pub memory_mb: u64,
    /// Worker threads (`-t`).
    pub threads: usize,
    /// `--dispatch` of a tailtrim server: pinned, size-aware, early-binding, late-binding or
    /// stealing.
    pub dispatch: String,
    /// More flags, appended as written (e.g. `["--size-percentile", "95"]`, or memcached's
    /// `["-o", "modern"]`).
    pub extra: Vec<String>,
    /// Ketama weight in the proxies' pool.
    pub weight: u32,
}

impl Default for ServerTemplate {
    fn default() -> Self {
        ServerTemplate {
            program: Program::Tailtrim,
            host: DEFAULT_HOST.to_string(),
            memory_mb: DEFAULT_MEMORY_MB,
            threads: DEFAULT_SERVER_THREADS,
            dispatch: DEFAULT_DISPATCH.to_string(),
            extra: Vec::new(),
            weight: DEFAULT_WEIGHT,
        }
    }
}

/// `[[servers]]`: one server; every key but `port` falls back to `[server]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ServerNode {
    /// Label in status and log file names. Empty: `server-<port>`.
    pub name: String,
    /// TCP port (`-p`). 0: the previous server's port + 1 (11211 for the first).
    pub port: u16,
    /// Overrides `[server] program`.
    pub program: Option<Program>,
    /// Overrides `[server] host`.
    pub host: Option<String>,
    /// Overrides `[server] memory_mb`.
    pub memory_mb: Option<u64>,
    /// Overrides `[server] threads`.
    pub threads: Option<usize>,
    /// Overrides `[server] dispatch`.
    pub dispatch: Option<String>,
    /// Replaces `[server] extra`.
    pub extra: Option<Vec<String>>,
    /// Overrides `[server] weight`.
    pub weight: Option<u32>,
}

/// Which proxy a node runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ProxyProgram {
    /// `tailtrim proxy`.
    #[default]
    Tailtrim,
    /// twemproxy (`nutcracker`, from `$PATH` or `/usr/sbin`), for a baseline tier: its YAML is
    /// written from `[pool]`; `admin_listen` is its stats port (JSON); `[proxy]`, `[warmup]`,
    /// `[classes]`, `[[routes]]` and the planner do not apply, and membership changes need a
    /// restart (nutcracker re-reads no configuration).
    Nutcracker,
}

impl ProxyProgram {
    /// The name a node record shows.
    pub fn name(self) -> &'static str {
        match self {
            ProxyProgram::Tailtrim => "tailtrim proxy",
            ProxyProgram::Nutcracker => "nutcracker",
        }
    }
}

/// Hashes both nutcracker and the tailtrim proxy know by the same name.
const NUTCRACKER_HASHES: [&str; 8] = [
    "md5",
    "crc32",
    "crc32a",
    "fnv1_64",
    "fnv1a_64",
    "fnv1_32",
    "fnv1a_32",
    "one_at_a_time",
];
/// Distributions both know.
const NUTCRACKER_DISTRIBUTIONS: [&str; 2] = ["ketama", "modula"];
/// How often a nutcracker proxy aggregates its stats (`-i`, ms): its default is 30 s, too
/// coarse for `cluster status`.
pub const NUTCRACKER_STATS_INTERVAL_MS: u64 = 1000;

/// `[[proxies]]`: one proxy over every server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProxyNode {
    /// Label in status and log file names. Empty: `proxy-<port>`.
    pub name: String,
    /// `tailtrim` (`tailtrim proxy`) or `nutcracker` (twemproxy, a baseline tier).
    pub program: ProxyProgram,
    /// Client listen address (`host:port`).
    pub listen: String,
    /// Admin listen address (`host:port`): `GET /metrics`, `GET /pool` and the membership
    /// changes `cluster add/remove` send. A tier's proxies always have one.
    pub admin_listen: String,
}

impl Default for ProxyNode {
    fn default() -> Self {
        ProxyNode {
            name: String::new(),
            program: ProxyProgram::Tailtrim,
            listen: tailtrim_proxy::config::DEFAULT_LISTEN.to_string(),
            admin_listen: tailtrim_proxy::config::DEFAULT_ADMIN_LISTEN.to_string(),
        }
    }
}

/// How `cluster up` numbers the ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortChoice {
    /// The ports the file gives.
    AsWritten,
    /// Consecutive ports from this one: the servers in order, then each proxy's client and
    /// admin ports.
    Base(u16),
    /// A free port for every listener (chosen by binding port 0 and releasing it).
    Free,
}

/// A server as it will run: the template applied, its port chosen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerPlan {
    /// Label.
    pub name: String,
    /// Which server.
    pub program: Program,
    /// Listen host.
    pub host: String,
    /// Listen port.
    pub port: u16,
    /// `-m`.
    pub memory_mb: u64,
    /// `-t`.
    pub threads: usize,
    /// `--dispatch` (tailtrim only).
    pub dispatch: String,
    /// Flags appended.
    pub extra: Vec<String>,
    /// Pool weight.
    pub weight: u32,
}

impl ServerPlan {
    /// `host:port`.
    pub fn address(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// The entry of the proxies' `[pool] servers` list: `host:port:weight`.
    pub fn pool_entry(&self) -> String {
        format!("{}:{}:{}", self.host, self.port, self.weight)
    }

    /// The server's command-line arguments (after the executable; `tailtrim serve`'s start
    /// with `serve`). `as_root` adds memcached's `-u root`, which it needs to start as root.
    pub fn arguments(&self, as_root: bool) -> Vec<String> {
        let mut arguments = Vec::new();
        if self.program == Program::Tailtrim {
            arguments.push("serve".to_string());
        }
        arguments.extend([
            "-p".to_string(),
            self.port.to_string(),
            "-l".to_string(),
            self.host.clone(),
            "-t".to_string(),
            self.threads.to_string(),
            "-m".to_string(),
            self.memory_mb.to_string(),
            "-U".to_string(),
            "0".to_string(),
        ]);
        match self.program {
            Program::Tailtrim => {
                arguments.extend(["--dispatch".to_string(), self.dispatch.clone()]);
            }
            Program::Memcached if as_root => {
                arguments.extend(["-u".to_string(), "root".to_string()]);
            }
            Program::Memcached => {}
        }
        arguments.extend(self.extra.iter().cloned());
        arguments
    }
}

/// A proxy as it will run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProxyPlan {
    /// Label.
    pub name: String,
    /// Which proxy.
    pub program: ProxyProgram,
    /// Client listen address.
    pub listen: String,
    /// Admin listen address.
    pub admin_listen: String,
    /// The whole configuration file it is started with.
    pub config: ProxyConfig,
}

impl ProxyPlan {
    /// The configuration file's text (TOML, as `tailtrim proxy --config` reads it).
    pub fn config_text(&self) -> Result<String, TierError> {
        toml::to_string(&self.config)
            .map_err(|error| TierError::Config(format!("proxy {}: {error}", self.name)))
    }

    /// The nutcracker YAML of this proxy: one pool named after the tier's `[pool] name`,
    /// listening on `listen`, over the same servers, hash, distribution, hash tag, timeouts
    /// and failure handling as the tailtrim proxies (`auto_eject_hosts: false`, as tailtrim).
    pub fn nutcracker_yaml(&self) -> String {
        let pool = &self.config.pool;
        let mut yaml = format!(
            "{}:\n  listen: {}\n  hash: {}\n  distribution: {}\n  timeout: {}\n  server_connections: {}\n  server_failure_limit: {}\n  server_retry_timeout: {}\n  auto_eject_hosts: false\n  preconnect: true\n",
            pool.name,
            self.listen,
            pool.hash,
            pool.distribution,
            pool.timeout_ms,
            pool.server_connections,
            pool.server_failure_limit,
            pool.server_retry_timeout_ms,
        );
        if !pool.hash_tag.is_empty() {
            yaml.push_str(&format!("  hash_tag: \"{}\"\n", pool.hash_tag));
        }
        yaml.push_str("  servers:\n");
        for server in &pool.servers {
            yaml.push_str(&format!("    - {server}\n"));
        }
        yaml
    }

    /// `nutcracker`'s arguments (after the executable) with its YAML at `config_path`: the
    /// stats listener on `admin_listen`, aggregated every [`NUTCRACKER_STATS_INTERVAL_MS`],
    /// and its log to `log_path`.
    pub fn nutcracker_arguments(
        &self,
        config_path: &Path,
        log_path: &Path,
    ) -> Result<Vec<String>, TierError> {
        let (stats_host, stats_port) = split_address(&self.admin_listen)?;
        Ok(vec![
            "-c".to_string(),
            config_path.display().to_string(),
            "-s".to_string(),
            stats_port.to_string(),
            "-a".to_string(),
            stats_host,
            "-i".to_string(),
            NUTCRACKER_STATS_INTERVAL_MS.to_string(),
            "-o".to_string(),
            log_path.display().to_string(),
        ])
    }
}

/// A tier as it will run: every port chosen, every default applied.
#[derive(Debug, Clone, PartialEq)]
pub struct TierPlan {
    /// Name.
    pub name: String,
    /// Seconds a node may take to become ready.
    pub ready_timeout_secs: u64,
    /// The servers, in file order.
    pub servers: Vec<ServerPlan>,
    /// The proxies, in file order.
    pub proxies: Vec<ProxyPlan>,
}

impl TierConfig {
    /// Reads and checks a tier file.
    pub fn read(path: &Path) -> Result<TierConfig, TierError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| TierError::io(format!("reading {}", path.display()), source))?;
        let config: TierConfig = toml::from_str(&text).map_err(|source| TierError::Parse {
            path: path.display().to_string(),
            source,
        })?;
        config.check()?;
        Ok(config)
    }

    /// Refuses what a tier file cannot say: pool members of its own (they come from
    /// `[[servers]]`) and secrets the proxies' written configuration files would lose.
    pub fn check(&self) -> Result<(), TierError> {
        let bad = |message: &str| Err(TierError::Config(message.to_string()));
        if !self.pool.servers.is_empty() {
            return bad("[pool] servers comes from the [[servers]] entries; leave it out");
        }
        if !self.pool.password.is_empty() {
            return bad(
                "[pool] password is not written into the proxies' files: use [pool] auth_file",
            );
        }
        if self.pool.tls.is_some() {
            return bad("[pool.tls] is not supported in a tier file: run the proxies with their own --config");
        }
        if !self.proxy.admin_token.is_empty() {
            return bad("[proxy] admin_token is not written into the proxies' files: use [proxy] admin_token_file");
        }
        if self.server.program == Program::Memcached && self.server.dispatch != DEFAULT_DISPATCH {
            return bad("[server] dispatch applies to tailtrim servers only");
        }
        for node in &self.servers {
            let program = node.program.unwrap_or(self.server.program);
            if program == Program::Memcached && node.dispatch.is_some() {
                return bad("a [[servers]] entry with program = \"memcached\" takes no dispatch");
            }
        }
        if self
            .proxies
            .iter()
            .any(|node| node.program == ProxyProgram::Nutcracker)
        {
            if !NUTCRACKER_HASHES.contains(&self.pool.hash.as_str()) {
                return bad("[pool] hash: nutcracker and tailtrim share md5, crc32, crc32a, fnv1_64, fnv1a_64, fnv1_32, fnv1a_32 and one_at_a_time");
            }
            if !NUTCRACKER_DISTRIBUTIONS.contains(&self.pool.distribution.as_str()) {
                return bad("[pool] distribution: nutcracker knows ketama and modula");
            }
            if !self.pool.auth_file.is_empty() || !self.pool.username.is_empty() {
                return bad("[pool] login: nutcracker cannot log in to -Y servers");
            }
        }
        Ok(())
    }

    /// The server a new node runs when `cluster add --start` starts it on `host:port`: the
    /// `[server]` template.
    pub fn server_from_template(&self, name: &str, host: &str, port: u16) -> ServerPlan {
        let template = &self.server;
        ServerPlan {
            name: name.to_string(),
            program: template.program,
            host: host.to_string(),
            port,
            memory_mb: template.memory_mb,
            threads: template.threads,
            dispatch: template.dispatch.clone(),
            extra: template.extra.clone(),
            weight: template.weight,
        }
    }

    /// The tier as it will run, ports chosen by `ports` (`free_port` picks one free port).
    pub fn plan(
        &self,
        ports: PortChoice,
        mut free_port: impl FnMut() -> Result<u16, TierError>,
    ) -> Result<TierPlan, TierError> {
        self.check()?;
        let mut next_base = match ports {
            PortChoice::Base(base) => Some(base),
            _ => None,
        };
        let mut take = |written: u16| -> Result<u16, TierError> {
            match ports {
                PortChoice::AsWritten => Ok(written),
                PortChoice::Free => free_port(),
                PortChoice::Base(_) => {
                    let port = next_base.ok_or_else(|| {
                        TierError::Config("--base-port leaves no ports for every node".into())
                    })?;
                    next_base = port.checked_add(1);
                    Ok(port)
                }
            }
        };
        let mut servers = Vec::with_capacity(self.servers.len());
        let mut previous_port: Option<u16> = None;
        for node in &self.servers {
            let written = match (node.port, previous_port) {
                (0, None) => DEFAULT_SERVER_PORT,
                (0, Some(previous)) => previous
                    .checked_add(1)
                    .ok_or_else(|| TierError::Config("server ports run past 65535".to_string()))?,
                (port, _) => port,
            };
            previous_port = Some(written);
            let port = take(written)?;
            let template = &self.server;
            let name = if node.name.is_empty() {
                format!("server-{port}")
            } else {
                node.name.clone()
            };
            servers.push(ServerPlan {
                name,
                program: node.program.unwrap_or(template.program),
                host: node.host.clone().unwrap_or_else(|| template.host.clone()),
                port,
                memory_mb: node.memory_mb.unwrap_or(template.memory_mb),
                threads: node.threads.unwrap_or(template.threads),
                dispatch: node
                    .dispatch
                    .clone()
                    .unwrap_or_else(|| template.dispatch.clone()),
                extra: node.extra.clone().unwrap_or_else(|| template.extra.clone()),
                weight: node.weight.unwrap_or(template.weight),
            });
        }
        let pool_servers: Vec<String> = servers.iter().map(ServerPlan::pool_entry).collect();
        let mut proxies = Vec::with_capacity(self.proxies.len());
        for node in &self.proxies {
            let (listen_host, listen_port) = split_address(&node.listen)?;
            let (admin_host, admin_port) = split_address(&node.admin_listen)?;
            let listen = format!("{listen_host}:{}", take(listen_port)?);
            let admin_listen = format!("{admin_host}:{}", take(admin_port)?);
            let name = if node.name.is_empty() {
                let port = listen.rsplit(':').next().unwrap_or_default();
                format!("proxy-{port}")
            } else {
                node.name.clone()
            };
            let mut proxy = self.proxy.clone();
            proxy.listen = listen.clone();
            proxy.admin_listen = admin_listen.clone();
            let mut pool = self.pool.clone();
            pool.servers = pool_servers.clone();
            proxies.push(ProxyPlan {
                name,
                program: node.program,
                listen,
                admin_listen,
                config: ProxyConfig {
                    proxy,
                    pool,
                    warmup: self.warmup.clone(),
                    tls: Default::default(),
                    routes: self.routes.clone(),
                    classes: self.classes,
                    model: Default::default(),
                },
            });
        }
        disambiguate_names(&mut servers, &mut proxies);
        let mut names: Vec<&str> = servers
            .iter()
            .map(|server| server.name.as_str())
            .chain(proxies.iter().map(|proxy| proxy.name.as_str()))
            .collect();
        names.sort_unstable();
        if let Some(pair) = names.windows(2).find(|pair| pair[0] == pair[1]) {
            return Err(TierError::Config(format!(
                "two nodes are named {:?}",
                pair[0]
            )));
        }
        Ok(TierPlan {
            name: self.tier.name.clone(),
            ready_timeout_secs: self.tier.ready_timeout_secs,
            servers,
            proxies,
        })
    }
}

/// Default names (`server-<port>`, `proxy-<port>`) that two nodes on different hosts share
/// become `server-<host>-<port>`, `proxy-<host>-<port>`.
fn disambiguate_names(servers: &mut [ServerPlan], proxies: &mut [ProxyPlan]) {
    let count = |name: &str, servers: &[ServerPlan], proxies: &[ProxyPlan]| {
        servers.iter().filter(|server| server.name == name).count()
            + proxies.iter().filter(|proxy| proxy.name == name).count()
    };
    let shared: Vec<bool> = servers
        .iter()
        .map(|server| {
            server.name == format!("server-{}", server.port)
                && count(&server.name, servers, proxies) > 1
        })
        .collect();
    for (server, shared) in servers.iter_mut().zip(shared) {
        if shared {
            server.name = format!("server-{}-{}", server.host, server.port);
        }
    }
    let shared: Vec<bool> = proxies
        .iter()
        .map(|proxy| {
            let port = proxy.listen.rsplit(':').next().unwrap_or_default();
            proxy.name == format!("proxy-{port}") && count(&proxy.name, servers, proxies) > 1
        })
        .collect();
    for (proxy, shared) in proxies.iter_mut().zip(shared) {
        if shared {
            proxy.name = format!("proxy-{}", proxy.listen.replace(':', "-"));
        }
    }
}

/// `host:port` split at the last colon (an IPv6 host in brackets keeps them).
pub fn split_address(address: &str) -> Result<(String, u16), TierError> {
    let bad = || TierError::Config(format!("{address:?} is not host:port"));
    let (host, port) = address.rsplit_once(':').ok_or_else(bad)?;
    let port = port.parse().map_err(|_| bad())?;
    if host.is_empty() {
        return Err(bad());
    }
    Ok((host.to_string(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = include_str!("../../../examples/tier.toml");

    fn example() -> TierConfig {
        let config: TierConfig = toml::from_str(EXAMPLE).expect("the example parses");
        config.check().expect("the example is valid");
        config
    }

    #[test]
    fn the_example_plans_as_written() {
        let plan = example()
            .plan(PortChoice::AsWritten, || unreachable!())
            .expect("plan");
        assert_eq!(plan.servers.len(), 3);
        assert_eq!(plan.proxies.len(), 1);
        let proxy = &plan.proxies[0];
        assert_eq!(
            proxy.config.pool.servers,
            plan.servers
                .iter()
                .map(ServerPlan::pool_entry)
                .collect::<Vec<_>>()
        );
        assert_eq!(proxy.config.proxy.listen, proxy.listen);
        assert_eq!(proxy.config.proxy.admin_listen, proxy.admin_listen);
        // The written file is one the proxy reads back to the same configuration.
        let text = proxy.config_text().expect("serialize");
        let read: ProxyConfig = toml::from_str(&text).expect("the proxy reads it");
        assert_eq!(read, proxy.config);
    }

    #[test]
    fn a_base_port_numbers_servers_then_proxies() {
        let plan = example()
            .plan(PortChoice::Base(30000), || unreachable!())
            .unwrap();
        let ports: Vec<u16> = plan.servers.iter().map(|server| server.port).collect();
        assert_eq!(ports, [30000, 30001, 30002]);
        assert_eq!(plan.proxies[0].listen, "127.0.0.1:30003");
        assert_eq!(plan.proxies[0].admin_listen, "127.0.0.1:30004");
    }

    #[test]
    fn entries_override_the_template() {
        let config: TierConfig = toml::from_str(
            r#"
            [server]
            threads = 2
            [[servers]]
            port = 5000
            [[servers]]
            threads = 3
            dispatch = "size-aware"
            [[servers]]
            program = "memcached"
            name = "baseline"
            "#,
        )
        .unwrap();
        let plan = config
            .plan(PortChoice::AsWritten, || unreachable!())
            .unwrap();
        let servers = &plan.servers;
        assert_eq!(servers[0].threads, 2);
        assert_eq!((servers[1].port, servers[1].threads), (5001, 3));
        assert_eq!(servers[1].arguments(false)[..2], ["serve", "-p"]);
        assert!(servers[1]
            .arguments(false)
            .ends_with(&["--dispatch".to_string(), "size-aware".to_string()]));
        assert_eq!(servers[2].name, "baseline");
        assert_eq!(servers[2].arguments(false)[0], "-p");
        assert!(servers[2]
            .arguments(true)
            .ends_with(&["-u".to_string(), "root".to_string()]));
    }

    #[test]
    fn what_a_tier_file_cannot_say_is_refused() {
        for text in [
            "[pool]\nservers = [\"127.0.0.1:1\"]",
            "[pool]\npassword = \"x\"",
            "[proxy]\nadmin_token = \"x\"",
            "[[servers]]\nprogram = \"memcached\"\ndispatch = \"stealing\"",
        ] {
            let config: TierConfig = toml::from_str(text).unwrap();
            assert!(config.check().is_err(), "{text}");
        }
        assert!(toml::from_str::<TierConfig>("[tier]\nnope = 1").is_err());
        let twins: TierConfig =
            toml::from_str("[[servers]]\nname = \"a\"\n[[servers]]\nname = \"a\"").unwrap();
        assert!(twins
            .plan(PortChoice::AsWritten, || unreachable!())
            .is_err());
        // Default names of nodes on different hosts with the same port stay apart.
        let machines: TierConfig =
            toml::from_str(include_str!("../../../examples/systemd/tier.toml")).unwrap();
        let plan = machines
            .plan(PortChoice::AsWritten, || unreachable!())
            .unwrap();
        assert_eq!(plan.servers[1].name, "server-10.0.0.12-11211");
        assert_eq!(plan.proxies[2].name, "proxy-10.0.0.13-22122");
    }
}
