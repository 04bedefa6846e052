//! The flags of `tailtrim proxy` and the effective configuration they give: `--config FILE`
//! (TOML, see `config/proxy.example.toml`) or `--twemproxy FILE.yml`, else the defaults, then
//! the flags override it. The clap definition lives here, beside the configuration sections
//! it overrides (`[proxy]`, `[pool]`, `[tls]`).
//!
//! ```text
//!   ProxyArgs ──effective_config──> file (TOML | twemproxy YAML | defaults)
//!                                   → flags → admin token (flag, else environment)
//!                                   → -o ssl_* → ProxyConfig (warnings to the caller)
//! ```

use std::path::PathBuf;

use tailtrim_proto::size::parse_size;

use crate::ProxyConfig;

/// Arguments of `tailtrim proxy`.
#[derive(clap::Args, Debug)]
pub struct ProxyArgs {
    /// TOML configuration file (sections `[proxy]` and `[pool]`). `-c` is the configuration
    /// file as in nutcracker (twemproxy); in `tailtrim serve` and memcached, `-c` is the
    /// connection limit, here `--conn-limit`.
    #[arg(
        short = 'c',
        long = "config",
        visible_alias = "conf-file",
        value_name = "FILE"
    )]
    pub config: Option<PathBuf>,
    /// A twemproxy (nutcracker) YAML configuration instead of `--config`: every key of the
    /// pool is mapped or refused with a reason (see the proxy crate's `twemproxy` module).
    #[arg(long = "twemproxy", value_name = "FILE.yml", conflicts_with = "config")]
    pub twemproxy: Option<PathBuf>,
    /// The pool of the `--twemproxy` file to serve, when it has several.
    #[arg(long = "twemproxy-pool", value_name = "NAME", requires = "twemproxy")]
    pub twemproxy_pool: Option<String>,
    /// Client listen address, e.g. 127.0.0.1:22122.
    #[arg(short = 'l', long = "listen", value_name = "ADDR")]
    pub listen: Option<String>,
    /// Admin (Prometheus /metrics) listen address; "off" disables it.
    #[arg(long = "admin", value_name = "ADDR")]
    pub admin: Option<String>,
    /// File holding the token that admin membership changes (POST/DELETE /pool/servers) must
    /// send as `Authorization: Bearer <token>`; the environment variable
    /// TAILTRIM_ADMIN_TOKEN gives the token itself instead. Without a token, membership
    /// changes are allowed on a loopback admin listener only.
    #[arg(long = "admin-token-file", value_name = "FILE")]
    pub admin_token_file: Option<PathBuf>,
    /// memcached's ASCII authentication on the client listener, as memcached's and `serve`'s
    /// `-Y`: a file of `user:password` lines; a client must send `set <key> 0 0 <bytes>` with
    /// `user password` as its data first, every other request answers `CLIENT_ERROR
    /// unauthenticated`. SIGHUP re-reads the file.
    #[arg(short = 'Y', long = "auth-file", value_name = "FILE")]
    pub auth_file: Option<PathBuf>,
    /// TLS on the client listener, as memcached's and `serve`'s `-Z`: the certificate comes
    /// from `-o ssl_chain_cert=FILE,ssl_key=FILE` (or the config file's `[tls]` section).
    #[arg(short = 'Z', long = "enable-ssl")]
    pub enable_ssl: bool,
    /// memcached's TLS options for the client listener, comma separated, as memcached's
    /// `-o`: ssl_chain_cert, ssl_key, ssl_ca_cert, ssl_verify_mode, ssl_min_version, …
    /// (other `-o` items are refused).
    #[arg(short = 'o', long = "extended", value_name = "LIST")]
    pub extended: Vec<String>,
    /// Credentials toward backends that run with memcached's `-Y`: a file whose first line is
    /// the `user:password` the proxy logs in with on every new backend connection (a memcached
    /// auth file works). `[pool] username`/`password` in the config file do the same.
    #[arg(long = "backend-auth-file", value_name = "FILE")]
    pub backend_auth_file: Option<PathBuf>,
    /// Backends, comma separated, twemproxy syntax: `host:port[:weight] [name]`.
    #[arg(
        short = 's',
        long = "servers",
        value_name = "LIST",
        value_delimiter = ','
    )]
    pub servers: Option<Vec<String>>,
    /// Key hash (md5, fnv1a_64, fnv1_64, fnv1a_32, fnv1_32, one_at_a_time, crc32, crc32a).
    #[arg(long = "hash")]
    pub hash: Option<String>,
    /// Distribution: ketama, modula or jump.
    #[arg(long = "distribution")]
    pub distribution: Option<String>,
    /// Copies of each key.
    #[arg(short = 'r', long = "replicas")]
    pub replicas: Option<usize>,
    /// Multiget planner: batch, chisel, rein-sbf, rein-sds or tailx.
    #[arg(long = "planner")]
    pub planner: Option<String>,
    /// Setup time added before every multiget backend query, µs (emulated client overhead).
    #[arg(long = "inject-overhead", value_name = "US")]
    pub inject_overhead: Option<u64>,
    /// Sleep the injected setup time instead of spinning (an emulated overhead, no CPU).
    #[arg(long = "inject-overhead-sleep")]
    pub inject_overhead_sleep: bool,
    /// Multiget backend queries in flight at once (0 = unbounded).
    #[arg(long = "query-threads")]
    pub query_threads: Option<usize>,
    /// Chisel: fixed "B,L" instead of the online analyzer's choice.
    #[arg(long = "chisel-fixed", value_name = "B,L")]
    pub chisel_fixed: Option<String>,
    /// Requests in flight per backend before the proxy queues them by priority class
    /// (0: no bound; default 2 for rein-sbf/rein-sds, else no bound).
    #[arg(long = "backend-window")]
    pub backend_window: Option<usize>,
    /// Order in which requests waiting for a backend's window are served: strict (strict
    /// priority by class) or drr (deficit round robin over the classes). Overrides `[pool]
    /// priority_order`; default: the planner's own.
    #[arg(long = "priority-order", value_name = "ORDER", value_parser = ["strict", "drr"])]
    pub priority_order: Option<String>,
    /// Backend request timeout in milliseconds.
    #[arg(long = "timeout-ms")]
    pub timeout_ms: Option<u64>,
    /// Pipelined connections per backend.
    #[arg(long = "server-connections")]
    pub server_connections: Option<usize>,
    /// Which of a backend's connections carries the next request: round-robin (twemproxy's
    /// way), least-loaded (fewest requests in flight) or avoid-slow (round robin, skipping a
    /// connection stuck behind a late reply). Overrides `[pool] connection_choice`; default:
    /// round-robin.
    #[arg(long = "connection-choice", value_name = "CHOICE",
          value_parser = tailtrim_policy::lanes::ConnectionChoice::NAMES)]
    pub connection_choice: Option<String>,
    /// How batch, Rein and the cost planners pick each key's replica: c3 (the cheapest by
    /// C3's cost), spread (the one holding the fewest of the request's keys so far) or cover
    /// (the request's keys gathered on few backends, weighed by their backlog).
    /// Overrides `[pool] replica_choice`; default: c3.
    #[arg(long = "replica-choice", value_name = "CHOICE",
          value_parser = tailtrim_policy::spread::ReplicaChoice::NAMES)]
    pub replica_choice: Option<String>,
    /// The fixed cost of one request at a backend, in keys, for the cover choice's estimate of
    /// each backend's work in flight. Overrides `[pool] fetch_cost_keys`; default: 3.
    #[arg(long = "fetch-cost-keys", value_name = "KEYS")]
    pub fetch_cost_keys: Option<f64>,
    /// cost-rel and auto: later arrivals that may overtake a demoted fetch per class (their
    /// ageing). Overrides `[pool] cost_rel_overtakes`; default: 400.
    #[arg(long = "cost-rel-overtakes", value_name = "ARRIVALS")]
    pub cost_rel_overtakes: Option<u64>,
    /// size-rel: later arrivals that may overtake a demoted fetch per class (its ageing).
    /// Overrides `[pool] size_rel_overtakes`; default: 25.
    #[arg(long = "size-rel-overtakes", value_name = "ARRIVALS")]
    pub size_rel_overtakes: Option<u64>,
    /// Consecutive failures that mark a backend down.
    #[arg(long = "server-failure-limit")]
    pub server_failure_limit: Option<u32>,
    /// Milliseconds before a down backend is probed again.
    #[arg(long = "server-retry-timeout-ms")]
    pub server_retry_timeout_ms: Option<u64>,
    /// Runtime worker threads.
    #[arg(short = 't', long = "threads")]
    pub threads: Option<usize>,
    /// Client connections at most; past it memcached's "ERROR Too many open connections"
    /// (memcached's and `serve`'s `-c`, which here is `--config`; 0: no limit).
    #[arg(long = "conn-limit", value_name = "N")]
    pub max_connections: Option<usize>,
    /// Close a client that completes no command for this many seconds (0: never).
    #[arg(long = "idle-timeout", value_name = "SECS")]
    pub idle_timeout: Option<u64>,
    /// Largest value accepted from clients, bytes or with a k/m suffix (memcached's -I, as
    /// `serve -I`: `2m`, `512k`, `1048576`).
    #[arg(short = 'I', long = "max-item-size", value_name = "SIZE")]
    pub item_size_max: Option<String>,
    /// Print the effective configuration as TOML and exit.
    #[arg(long = "print-config")]
    pub print_config: bool,
    /// More log output: membership changes, ejections and start-up are logged by default;
    /// `-v` adds debug, `-vv` trace lines. SIGTTIN / SIGTTOU step the level while running.
    #[arg(short = 'v', action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Append log output (stderr) to this file; SIGHUP reopens it.
    #[arg(long = "log-file", value_name = "FILE")]
    pub log_file: Option<String>,
}

/// The environment variable that gives the admin token (after `--admin-token-file`, before
/// the configuration file's `admin_token`/`admin_token_file`; empty counts as unset).
pub const ADMIN_TOKEN_VARIABLE: &str = "TAILTRIM_ADMIN_TOKEN";

/// Builds the effective configuration: file (or defaults), then flags (the admin token from
/// `--admin-token-file`, else from the environment). Warnings (keys of a twemproxy file
/// mapped with a caveat, TLS options) go to `warn`.
pub fn effective_config(
    args: &ProxyArgs,
    warn: &mut dyn FnMut(String),
) -> Result<ProxyConfig, String> {
    let mut config = match (&args.config, &args.twemproxy) {
        (Some(path), _) => ProxyConfig::from_file(path).map_err(|error| error.to_string())?,
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path)
                .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
            let (config, warnings) =
                crate::twemproxy::from_yaml(&text, args.twemproxy_pool.as_deref())
                    .map_err(|error| format!("{}: {error}", path.display()))?;
            for warning in warnings {
                warn(warning);
            }
            config
        }
        (None, None) => ProxyConfig::default(),
    };
    if let Some(listen) = &args.listen {
        config.proxy.listen = listen.clone();
    }
    if let Some(admin) = &args.admin {
        config.proxy.admin_listen = if admin == "off" {
            String::new()
        } else {
            admin.clone()
        };
    }
    if let Some(path) = &args.admin_token_file {
        config.proxy.admin_token_file = path.display().to_string();
        config.proxy.admin_token.clear();
    } else if let Some(token) =
        std::env::var_os(ADMIN_TOKEN_VARIABLE).filter(|token| !token.is_empty())
    {
        config.proxy.admin_token = token
            .into_string()
            .map_err(|_| format!("{ADMIN_TOKEN_VARIABLE} is not valid UTF-8"))?;
        config.proxy.admin_token_file.clear();
    }
    if let Some(path) = &args.auth_file {
        config.proxy.auth_file = path.display().to_string();
    }
    if args.enable_ssl {
        config.tls.enabled = true;
    }
    for list in &args.extended {
        for item in list.split(',').filter(|item| !item.is_empty()) {
            let (name, value) = match item.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None => (item, None),
            };
            match config
                .tls
                .apply_extended(name, value)
                .map_err(|error| format!("-o {item}: {error}"))?
            {
                tailtrim_tls::Applied::Taken => {}
                tailtrim_tls::Applied::TakenWithWarning(warning) => warn(warning),
                tailtrim_tls::Applied::NotTls => {
                    return Err(format!(
                        "-o {item}: the proxy takes memcached's ssl_* options only"
                    ))
                }
            }
        }
    }
    if let Some(path) = &args.backend_auth_file {
        config.pool.auth_file = path.display().to_string();
        config.pool.username.clear();
        config.pool.password.clear();
    }
    if let Some(threads) = args.threads {
        config.proxy.threads = threads;
    }
    if let Some(max) = args.max_connections {
        config.proxy.max_connections = max;
    }
    if let Some(secs) = args.idle_timeout {
        config.proxy.idle_timeout_secs = secs;
    }
    if let Some(size) = &args.item_size_max {
        let bytes = parse_size(size).map_err(|error| format!("-I: {error}"))?;
        config.proxy.item_size_max =
            usize::try_from(bytes).map_err(|_| format!("-I {size}: too large for this machine"))?;
    }
    if let Some(servers) = &args.servers {
        config.pool.servers = servers.iter().map(|s| s.trim().to_string()).collect();
    }
    if let Some(hash) = &args.hash {
        config.pool.hash = hash.clone();
    }
    if let Some(distribution) = &args.distribution {
        config.pool.distribution = distribution.clone();
    }
    if let Some(replicas) = args.replicas {
        config.pool.replicas = replicas;
    }
    if let Some(planner) = &args.planner {
        config.pool.planner = planner.clone();
    }
    if let Some(overhead) = args.inject_overhead {
        config.pool.inject_overhead_us = overhead;
    }
    if args.inject_overhead_sleep {
        config.pool.inject_overhead_sleep = true;
    }
    if let Some(threads) = args.query_threads {
        config.pool.query_threads = threads;
    }
    if let Some(fixed) = &args.chisel_fixed {
        config.pool.chisel_fixed = fixed.clone();
    }
    if let Some(window) = args.backend_window {
        config.pool.backend_window = Some(window);
    }
    if let Some(order) = &args.priority_order {
        config.pool.priority_order = Some(order.clone());
    }
    if let Some(timeout) = args.timeout_ms {
        config.pool.timeout_ms = timeout;
    }
    if let Some(connections) = args.server_connections {
        config.pool.server_connections = connections;
    }
    if let Some(choice) = &args.connection_choice {
        config.pool.connection_choice = choice.clone();
    }
    if let Some(choice) = &args.replica_choice {
        config.pool.replica_choice = choice.clone();
    }
    if let Some(keys) = args.fetch_cost_keys {
        config.pool.fetch_cost_keys = keys;
    }
    if let Some(overtakes) = args.cost_rel_overtakes {
        config.pool.cost_rel_overtakes = overtakes;
    }
    if let Some(overtakes) = args.size_rel_overtakes {
        config.pool.size_rel_overtakes = overtakes;
    }
    if let Some(limit) = args.server_failure_limit {
        config.pool.server_failure_limit = limit;
    }
    if let Some(retry) = args.server_retry_timeout_ms {
        config.pool.server_retry_timeout_ms = retry;
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use tailtrim_policy::serverq::Discipline;

    use super::{effective_config, ProxyArgs};
    use crate::ProxyConfig;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ProxyArgs,
    }

    fn parse(argv: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("proxy").chain(argv.iter().copied()))
    }

    fn config(argv: &[&str]) -> Result<ProxyConfig, String> {
        let cli = parse(argv).map_err(|error| error.to_string())?;
        effective_config(&cli.args, &mut |_| {})
    }

    /// `--priority-order` overrides `[pool] priority_order` and reaches the pool's discipline.
    #[test]
    fn priority_order_flag_overrides_the_pool_key() {
        let directory =
            std::env::temp_dir().join(format!("tailtrim-effective-{}", std::process::id()));
        std::fs::create_dir_all(&directory).expect("temporary directory");
        let file = directory.join("proxy.toml");
        std::fs::write(&file, "[pool]\npriority_order = \"strict\"\n").expect("config file");
        let file = file.to_string_lossy().to_string();
        let from_file = config(&["-c", &file]).expect("valid");
        let overridden =
            config(&["-c", &file, "-s", "127.0.0.1:1", "--priority-order", "drr"]).expect("valid");
        let _ = std::fs::remove_dir_all(&directory);
        assert_eq!(from_file.pool.priority_order.as_deref(), Some("strict"));
        assert_eq!(overridden.pool.priority_order.as_deref(), Some("drr"));
        let pool = overridden.pool_config().expect("pool");
        assert_eq!(pool.priority_order, Some(Discipline::Drr));
        assert_eq!(config(&[]).expect("valid").pool.priority_order, None);
        assert!(parse(&["--priority-order", "fair"]).is_err());
    }

    #[test]
    fn flags_override_the_defaults() {
        let config = config(&[
            "-l",
            "127.0.0.1:1",
            "--admin",
            "off",
            "-s",
            "127.0.0.1:2, 127.0.0.1:3",
            "-I",
            "2m",
            "--backend-window",
            "0",
        ])
        .expect("valid");
        assert_eq!(config.proxy.listen, "127.0.0.1:1");
        assert!(config.proxy.admin_listen.is_empty());
        assert_eq!(config.pool.servers, ["127.0.0.1:2", "127.0.0.1:3"]);
        assert_eq!(config.proxy.item_size_max, 2 * 1024 * 1024);
        assert_eq!(config.pool.backend_window, Some(0));
    }

    #[test]
    fn bad_values_name_their_flag() {
        let error = config(&["-I", "lots"]).unwrap_err();
        assert!(error.starts_with("-I: invalid size"), "{error}");
        let error = config(&["-o", "idle_timeout=5"]).unwrap_err();
        assert!(error.contains("ssl_* options only"), "{error}");
    }
}
