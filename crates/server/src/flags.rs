//! The flags of `tailtrim serve` and what they do to a [`ServerConfig`]. Flags follow
//! memcached's where the meaning is the same; a TOML file (`--config`) sets anything, flags
//! win. The clap definition lives here, beside the configuration it overrides, so that a
//! `memcached.conf` line is checked by the same parser and the same rules as the command line.
//!
//! ```text
//!   argv ──expand_memcached_conf──> argv (the file's lines, each checked) ──clap──> ServeArgs
//!   ServeArgs ──load──> --config file (or defaults) → flags → -o options → validate
//!                       (warnings of flags accepted without effect to the caller)
//! ```
//!
//! Every flag of `memcached -h` (1.6) is accepted: implemented where tailtrim has the
//! mechanism, otherwise accepted with a one-line warning that it has no effect here. Flags
//! that ask for protection tailtrim cannot give (SASL, a UNIX socket instead of the
//! network) stop the server with an error naming the flag instead of running without it.
//! TLS (`-Z`, `-o ssl_*`, `-l notls:…`) is served as memcached serves it.

use tailtrim_policy::costspec::CostSpec;

use crate::config::{parse_size, DispatchPolicy, PriorityOrder, ServerConfig};
use crate::process::memcached_conf_lines;

/// Arguments of `tailtrim serve`.
#[derive(clap::Args, Debug)]
#[command(
    about = "Run the memcached-compatible cache server",
    args_override_self = true
)]
pub struct ServeArgs {
    /// Read memcached flags from a Debian-style `/etc/memcached.conf` (one flag per line,
    /// `#` comments, `logfile PATH`); flags given after it on the command line win.
    #[arg(long, value_name = "FILE")]
    memcached_conf: Option<std::path::PathBuf>,
    /// Run as a daemon (memcached's `-d`).
    #[arg(short = 'd', long = "daemon")]
    daemon: bool,
    /// When started as root, run as this user (memcached's `-u`; ignored otherwise).
    #[arg(short = 'u', long = "user", value_name = "USER")]
    user: Option<String>,
    /// Write the process id to FILE (memcached's `-P`).
    #[arg(short = 'P', long = "pidfile", value_name = "FILE")]
    pid_file: Option<String>,
    /// Append output to FILE (the `logfile` line of Debian's memcached.conf).
    #[arg(long, value_name = "FILE")]
    log_file: Option<String>,
    /// Return `SERVER_ERROR out of memory storing object` instead of evicting (memcached's `-M`).
    #[arg(short = 'M', long = "disable-evictions")]
    disable_evictions: bool,
    /// Lock all paged memory (memcached's `-k`).
    #[arg(short = 'k', long = "lock-memory")]
    lock_memory: bool,
    /// Raise the core file limit to its maximum (memcached's `-r`).
    #[arg(short = 'r', long = "enable-coredumps")]
    enable_coredumps: bool,
    /// memcached's extended options, comma separated (`-o lru_crawler,idle_timeout=60`);
    /// unknown ones are warned about and ignored.
    #[arg(short = 'o', long = "extended", value_name = "OPTS", action = clap::ArgAction::Append)]
    extended: Vec<String>,
    /// TOML configuration file (sections `[server]`, `[storage]`, `[workers]`, `[sizeaware]`).
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    /// Print the effective configuration as TOML and exit.
    #[arg(long)]
    pub print_config: bool,
    /// TCP port to listen on (default 11211; 0 picks a free port).
    #[arg(short = 'p', long = "port")]
    port: Option<u16>,
    /// UDP port to listen on (default 0, off).
    #[arg(short = 'U', long = "udp-port")]
    udp_port: Option<u16>,
    /// Interface to listen on (default 0.0.0.0).
    #[arg(short = 'l', long = "listen")]
    listen: Option<String>,
    /// Item memory in megabytes (default 64).
    #[arg(short = 'm', long = "memory-limit")]
    memory_mb: Option<u64>,
    /// Number of worker threads (default 4).
    #[arg(short = 't', long = "threads")]
    threads: Option<usize>,
    /// Maximum simultaneous connections (default 1024; memcached's `-c`. In `tailtrim proxy`,
    /// `-c` is the configuration file, as nutcracker's).
    #[arg(short = 'c', long = "conn-limit")]
    max_connections: Option<usize>,
    /// Maximum item size, bytes or with k/m suffix (default 1m).
    #[arg(short = 'I', long = "max-item-size")]
    item_size_max: Option<String>,
    /// Verbose, as memcached: `-v` start-up and signals, `-vv` every command and reply
    /// (`<FD cmd` / `>FD reply`), `-vvv` connections opened and closed; warnings always.
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count)]
    verbose: u8,
    /// Print the version and exit (memcached's `-V`).
    #[arg(short = 'V', long = "version")]
    pub print_version: bool,
    /// Print the license and exit (memcached's `-i`).
    #[arg(short = 'i', long = "license")]
    pub print_license: bool,
    /// Enable the ASCII `shutdown` command (memcached's `-A`).
    #[arg(short = 'A', long = "enable-shutdown")]
    enable_shutdown: bool,
    /// Answer `flush_all` with `CLIENT_ERROR flush_all not allowed` (memcached's `-F`).
    #[arg(short = 'F', long = "disable-flush-all")]
    disable_flush_all: bool,
    /// Answer `stats cachedump` with `CLIENT_ERROR stats cachedump not allowed` (memcached's `-X`).
    #[arg(short = 'X', long = "disable-dumping")]
    disable_dumping: bool,
    /// Disable CAS: CAS values read 0 and compare-and-swap answers `EXISTS` (memcached's `-C`).
    #[arg(short = 'C', long = "disable-cas")]
    disable_cas: bool,
    /// Listen backlog (memcached's `-b`, default 1024).
    #[arg(short = 'b', long = "listen-backlog", value_name = "N")]
    listen_backlog: Option<i32>,
    /// Require memcached's ASCII authentication: FILE holds `user:password` lines; a client
    /// authenticates with `set <any key> 0 0 <bytes>` carrying `user password`. SIGHUP
    /// re-reads the file. Needs UDP off (memcached's `-Y`; docs/security.md).
    #[arg(short = 'Y', long = "auth-file", value_name = "FILE")]
    auth_file: Option<String>,
    /// Answer `watch` with `CLIENT_ERROR watch commands not allowed` (memcached's `-W`).
    #[arg(short = 'W', long = "disable-watch")]
    disable_watch: bool,
    /// memcached's `-R`: accepted without effect (tailtrim bounds a connection by the
    /// requests it has outstanding, not per event).
    #[arg(short = 'R', long = "max-reqs-per-event", value_name = "N")]
    max_reqs_per_event: Option<u32>,
    /// memcached's `-B`: `ascii` (what tailtrim speaks) or `auto`; `binary` is refused.
    #[arg(short = 'B', long = "protocol", value_name = "NAME")]
    protocol: Option<String>,
    /// memcached's `-f` (slab growth factor): accepted without effect, no slab allocator here.
    #[arg(short = 'f', long = "slab-growth-factor", value_name = "FACTOR")]
    slab_growth_factor: Option<f64>,
    /// memcached's `-n` (slab minimum size): accepted without effect, no slab allocator here.
    #[arg(short = 'n', long = "slab-min-size", value_name = "BYTES")]
    slab_min_size: Option<u64>,
    /// memcached's `-L` (large pages): accepted without effect.
    #[arg(short = 'L', long = "enable-largepages")]
    enable_largepages: bool,
    /// memcached's `-D` (prefix delimiter of `stats detail`): accepted without effect.
    #[arg(short = 'D', value_name = "CHAR")]
    prefix_delimiter: Option<String>,
    /// memcached's `-e` (restartable cache in a memory file): accepted without effect.
    #[arg(short = 'e', long = "memory-file", value_name = "FILE")]
    memory_file: Option<String>,
    /// memcached's `-N` (NAPI ids): accepted without effect.
    #[arg(short = 'N', long = "napi_ids", value_name = "N")]
    napi_ids: Option<u32>,
    /// memcached's `-a` (UNIX socket mask): accepted without effect, as `-s` is refused.
    #[arg(short = 'a', long = "unix-mask", value_name = "MASK")]
    unix_mask: Option<String>,
    /// memcached's `-s` (UNIX socket, no network): refused, tailtrim listens on TCP only.
    #[arg(short = 's', long = "unix-socket", value_name = "FILE")]
    unix_socket: Option<String>,
    /// memcached's `-S` (SASL): refused, tailtrim has no SASL (see `-Y`).
    #[arg(short = 'S', long = "enable-sasl")]
    enable_sasl: bool,
    /// TLS on every TCP listener not prefixed `notls:` (memcached's `-Z`); certificates
    /// with `-o ssl_chain_cert=FILE,ssl_key=FILE` (also `ssl_ca_cert`, `ssl_verify_mode`,
    /// `ssl_min_version`; see docs/security.md). UDP stays plain.
    #[arg(short = 'Z', long = "enable-ssl")]
    enable_ssl: bool,
    /// Port for Prometheus text metrics over HTTP, `GET /metrics` (default 0, off).
    #[arg(long)]
    admin_port: Option<u16>,
    /// Address of the admin listener (default 127.0.0.1; another than loopback prints a
    /// warning).
    #[arg(long, value_name = "ADDR")]
    admin_listen: Option<String>,
    /// Pin worker i to CPU LIST[i % len], e.g. `0-1` or `0,1` (default: not pinned).
    #[arg(long, value_name = "LIST")]
    pin_cpus: Option<String>,
    /// How requests reach workers (default pinned, memcached's model).
    #[arg(long, value_parser = dispatch_parser())]
    dispatch: Option<DispatchPolicy>,
    /// Serve every queued request first come, first served, ignoring the priority classes
    /// `mg … p<class>` carries (`stats settings`: `priorities off`).
    #[arg(long)]
    no_priorities: bool,
    /// Order of the priority classes in the job queue (early and late binding): strict
    /// (Rein as published: a class runs only when no higher one waits) or drr (deficit round
    /// robin, weights 5..1). Default strict.
    #[arg(long, value_name = "ORDER")]
    priority_order: Option<PriorityOrder>,
    /// size-aware: fixed size threshold in bytes instead of the learned one.
    #[arg(long, value_name = "BYTES")]
    size_threshold: Option<String>,
    /// size-aware: fixed number of small workers instead of the learned split.
    #[arg(long, value_name = "N")]
    small_workers: Option<usize>,
    /// size-aware: percentile of accessed sizes that sets the threshold (default 99).
    #[arg(long, value_name = "P")]
    size_percentile: Option<f64>,
    /// size-aware: controller epoch in milliseconds (default 1000).
    #[arg(long, value_name = "MS")]
    epoch_ms: Option<u64>,
    /// size-aware: what the learned split follows, `packets` (Minos, the default) or `busy`
    /// (the small workers' share of the CPU time the workers measured).
    #[arg(long, value_name = "RULE")]
    split_by: Option<String>,
    /// size-aware: idle large workers (nothing in the large queue) also serve the small
    /// workers' connections (`[sizeaware] large_workers_help`, default true; `false` is
    /// Minos as published). The flag alone means true.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    large_workers_help: Option<bool>,
    /// EXPERIMENTAL: after running a request, hold its worker (sleeping, no CPU) until this
    /// emulated service time has passed since it started, e.g. `const=1ms,packet=100us,dist=exp`
    /// (docs/emulation.md; default off).
    #[arg(long, value_name = "SPEC")]
    emulate_service: Option<String>,
    /// EXPERIMENTAL: hold every reply (not the worker) for this emulated network time before it
    /// is written, e.g. `const=500us,byte=10ns` (default off).
    #[arg(long, value_name = "SPEC")]
    emulate_network: Option<String>,
    /// Hot-key tracking (`stats hotkeys`): record one read in N (0 turns it off; default 8).
    #[arg(long, value_name = "N")]
    hotkeys_sample_every: Option<u32>,
    /// Hot-key tracking: keys tracked at most, bounding its memory (default 1024).
    #[arg(long, value_name = "N")]
    hotkeys_capacity: Option<usize>,
}

/// `--dispatch`: one of the policy names (listed in `--help`), case-insensitive.
fn dispatch_parser() -> impl clap::builder::TypedValueParser<Value = DispatchPolicy> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(DispatchPolicy::NAMES)
        .try_map(|name| name.parse::<DispatchPolicy>())
}

/// The effective configuration: the `--config` file (or the defaults), then the flags,
/// validated. Each warning of a flag accepted without effect goes to `warn` before the
/// configuration is validated.
pub fn load(args: &ServeArgs, warn: &mut dyn FnMut(String)) -> Result<ServerConfig, String> {
    let mut config = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            ServerConfig::from_toml(&text).map_err(|e| format!("{}: {e}", path.display()))?
        }
        None => ServerConfig::default(),
    };
    for warning in apply_flags(args, &mut config)? {
        warn(warning);
    }
    config.validate()?;
    Ok(config)
}

/// Refuses the flags that ask for protection tailtrim does not have.
fn refuse_unprotected(args: &ServeArgs) -> Result<(), String> {
    if args.enable_sasl {
        return Err(
            "SASL is not supported: -S/--enable-sasl (for ASCII authentication \
             use -Y FILE)"
                .into(),
        );
    }
    if let Some(path) = &args.unix_socket {
        return Err(format!(
            "UNIX sockets are not supported: -s/--unix-socket {path} (memcached then listens \
             on no network port; tailtrim would listen on TCP instead, so it refuses)"
        ));
    }
    if let Some(protocol) = &args.protocol {
        match protocol.as_str() {
            "ascii" | "auto" => {}
            "binary" => {
                return Err(
                    "-B binary: the binary protocol is not supported (ASCII and meta \
                     commands only)"
                        .into(),
                )
            }
            other => {
                return Err(format!(
                    "-B {other}: unknown protocol (ascii, binary or auto)"
                ))
            }
        }
    }
    Ok(())
}

/// One line each for the memcached flags given that have no effect in tailtrim.
fn no_effect_warnings(args: &ServeArgs) -> Vec<String> {
    let ignored = |flag: &str, why: &str| format!("{flag}: no effect in tailtrim ({why})");
    let mut warnings = Vec::new();
    if args.protocol.as_deref() == Some("auto") {
        warnings.push(ignored(
            "-B auto",
            "the binary protocol is not supported, ASCII only",
        ));
    }
    if args.max_reqs_per_event.is_some() {
        warnings.push(ignored(
            "-R",
            "a connection is bounded by its outstanding requests, not per event",
        ));
    }
    if args.slab_growth_factor.is_some() {
        warnings.push(ignored("-f", "no slab allocator"));
    }
    if args.slab_min_size.is_some() {
        warnings.push(ignored("-n", "no slab allocator"));
    }
    if args.enable_largepages {
        warnings.push(ignored("-L", "no large page allocation"));
    }
    if args.prefix_delimiter.is_some() {
        warnings.push(ignored("-D", "no per-prefix stats"));
    }
    if args.memory_file.is_some() {
        warnings.push(ignored("-e", "the cache is not restartable"));
    }
    if args.napi_ids.is_some() {
        warnings.push(ignored("-N", "no NAPI id tracking"));
    }
    if args.unix_mask.is_some() {
        warnings.push(ignored("-a", "no UNIX socket"));
    }
    warnings
}

/// Applies the flags of `args` to `config` (not validated) and returns the warnings of the
/// flags accepted without effect.
fn apply_flags(args: &ServeArgs, config: &mut ServerConfig) -> Result<Vec<String>, String> {
    refuse_unprotected(args)?;
    let mut warnings = no_effect_warnings(args);
    if let Some(port) = args.port {
        config.server.port = port;
    }
    if let Some(port) = args.udp_port {
        config.server.udp_port = port;
    }
    if let Some(listen) = &args.listen {
        config.server.listen = listen.clone();
    }
    if let Some(mb) = args.memory_mb {
        config.storage.memory_mb = mb;
    }
    if let Some(threads) = args.threads {
        config.workers.threads = threads;
    }
    if let Some(max) = args.max_connections {
        config.server.max_connections = max;
    }
    if let Some(size) = &args.item_size_max {
        config.storage.item_size_max = parse_size(size)?;
        let needed = config.storage.item_size_max as usize + 64 * 1024;
        if config.server.max_connection_buffer < needed {
            config.server.max_connection_buffer = needed;
        }
    }
    if args.verbose > 0 {
        config.server.verbose = args.verbose;
    }
    let server = &mut config.server;
    server.enable_shutdown |= args.enable_shutdown;
    server.disable_flush_all |= args.disable_flush_all;
    server.disable_dumping |= args.disable_dumping;
    server.disable_cas |= args.disable_cas;
    server.disable_watch |= args.disable_watch;
    if let Some(backlog) = args.listen_backlog {
        server.listen_backlog = backlog;
    }
    if let Some(path) = &args.auth_file {
        server.auth_file = path.clone();
    }
    if let Some(port) = args.admin_port {
        config.server.admin_port = port;
    }
    if let Some(address) = &args.admin_listen {
        config.server.admin_listen = address.clone();
    }
    if let Some(list) = &args.pin_cpus {
        config.workers.pin_cpus = crate::affinity::parse_cpu_list(list)?;
    }
    if let Some(policy) = args.dispatch {
        config.workers.dispatch = policy;
    }
    if args.no_priorities {
        config.workers.priorities = false;
    }
    if let Some(order) = args.priority_order {
        config.workers.priority_order = order;
    }
    if let Some(threshold) = &args.size_threshold {
        config.sizeaware.fixed_threshold = parse_size(threshold)?;
    }
    if let Some(small) = args.small_workers {
        config.sizeaware.fixed_small_workers = small;
    }
    if let Some(rule) = &args.split_by {
        config.sizeaware.split_by = rule.clone();
    }
    if let Some(help) = args.large_workers_help {
        config.sizeaware.large_workers_help = help;
    }
    if let Some(p) = args.size_percentile {
        config.sizeaware.percentile = p;
    }
    if let Some(ms) = args.epoch_ms {
        config.sizeaware.epoch_ms = ms;
    }
    for (flag, spec, field) in [
        (
            "--emulate-service",
            &args.emulate_service,
            &mut config.emulation.service,
        ),
        (
            "--emulate-network",
            &args.emulate_network,
            &mut config.emulation.network,
        ),
    ] {
        if let Some(spec) = spec {
            CostSpec::parse(spec).map_err(|e| format!("{flag}: {e}"))?;
            *field = spec.clone();
        }
    }
    match args.hotkeys_sample_every {
        Some(0) => config.hotkeys.enabled = false,
        Some(every) => {
            config.hotkeys.enabled = true;
            config.hotkeys.sample_every = every;
        }
        None => {}
    }
    if let Some(capacity) = args.hotkeys_capacity {
        config.hotkeys.capacity = capacity;
    }
    apply_process_flags(args, config);
    config.tls.enabled |= args.enable_ssl;
    for option in args.extended.iter().flat_map(|list| list.split(',')) {
        if option.is_empty() {
            continue;
        }
        if let Some(warning) = config.apply_memcached_option(option)? {
            warnings.push(warning);
        }
    }
    Ok(warnings)
}

fn apply_process_flags(args: &ServeArgs, config: &mut ServerConfig) {
    let process = &mut config.process;
    process.daemonize |= args.daemon;
    process.lock_memory |= args.lock_memory;
    process.max_core_file |= args.enable_coredumps;
    if let Some(user) = &args.user {
        process.user = user.clone();
    }
    if let Some(path) = &args.pid_file {
        process.pid_file = path.clone();
    }
    if let Some(path) = &args.log_file {
        process.log_file = path.clone();
    }
    if args.disable_evictions {
        config.storage.evict_to_free = false;
    }
}

/// The flags of one `memcached.conf` line, checked alone: parsed as `serve` parses them and
/// applied to a default configuration. An error names the flag and says what is wrong.
fn check_conf_line(flags: &[String]) -> Result<(), String> {
    #[derive(clap::Parser)]
    #[command(name = "serve", no_binary_name = true)]
    struct Line {
        #[command(flatten)]
        args: ServeArgs,
    }
    let first = flags.first().map_or("", String::as_str);
    let line = <Line as clap::Parser>::try_parse_from(flags).map_err(|error| {
        use clap::error::{ContextKind, ContextValue, ErrorKind};
        match (error.kind(), error.get(ContextKind::InvalidArg)) {
            (ErrorKind::UnknownArgument, Some(ContextValue::String(flag))) => {
                format!("{flag}: unknown flag")
            }
            (ErrorKind::DisplayHelp | ErrorKind::DisplayVersion, _) => {
                format!("{first}: not a server setting")
            }
            _ => {
                let rendered = error.render().to_string();
                let message = rendered.lines().next().unwrap_or_default();
                format!("{first}: {}", message.trim_start_matches("error: "))
            }
        }
    })?;
    let args = &line.args;
    if args.print_version || args.print_license || args.print_config {
        return Err(format!("{first}: not a server setting"));
    }
    apply_flags(args, &mut ServerConfig::default())
        .map(drop)
        .map_err(|error| format!("{first}: {error}"))
}

/// Replaces `--memcached-conf FILE` (or `--memcached-conf=FILE`) in a `serve` command line by
/// the flags the file holds, so that flags after it override the file. Each line is checked
/// first, so an error names the file and the line (`/etc/memcached.conf:7: -Q: unknown flag`).
pub fn expand_memcached_conf(argv: Vec<String>) -> Result<Vec<String>, String> {
    let mut out = Vec::with_capacity(argv.len());
    let mut args = argv.into_iter();
    while let Some(arg) = args.next() {
        let path = if arg == "--memcached-conf" {
            args.next().ok_or("--memcached-conf needs a file name")?
        } else if let Some(path) = arg.strip_prefix("--memcached-conf=") {
            path.to_string()
        } else {
            out.push(arg);
            continue;
        };
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("cannot read {path}: {e}"))?;
        for (number, flags) in memcached_conf_lines(&text).map_err(|e| format!("{path}:{e}"))? {
            check_conf_line(&flags).map_err(|e| format!("{path}:{number}: {e}"))?;
            out.extend(flags);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ServeArgs,
    }

    /// The configuration `args` give; the warnings of flags without effect are dropped.
    fn load_quietly(args: &ServeArgs) -> Result<ServerConfig, String> {
        load(args, &mut |_| {})
    }

    /// Debian's `/etc/memcached.conf`, verbatim, maps to memcached's flags and every one of
    /// them parses into the configuration it stands for.
    #[test]
    fn debian_memcached_conf_flags() {
        let text = include_str!("../../../tests/fixtures/debian-memcached.conf");
        let flags: Vec<String> = memcached_conf_lines(text)
            .expect("parses")
            .into_iter()
            .flat_map(|(_, flags)| flags)
            .collect();
        assert_eq!(
            flags.join(" "),
            "-d --log-file /var/log/memcached.log -m 64 -p 11211 -u memcache -l 127.0.0.1 \
             -P /var/run/memcached/memcached.pid"
        );
        let argv = std::iter::once("serve".to_string()).chain(flags);
        let cli = Cli::try_parse_from(argv).expect("every flag is accepted");
        let config = load_quietly(&cli.args).expect("valid configuration");
        let process = &config.process;
        assert!(process.daemonize);
        assert_eq!(process.user, "memcache");
        assert_eq!(process.pid_file, "/var/run/memcached/memcached.pid");
        assert_eq!(process.log_file, "/var/log/memcached.log");
        assert_eq!(config.storage.memory_mb, 64);
        assert_eq!(config.server.listen, "127.0.0.1");
        assert!(config.storage.evict_to_free);
    }

    #[test]
    fn memcached_operational_flags() {
        let argv = [
            "serve",
            "-M",
            "-k",
            "-r",
            "-vv",
            "-c",
            "10",
            "-o",
            "modern,no_lru_crawler",
            "-o",
            "idle_timeout=5",
            "-p",
            "1",
            "-p",
            "2",
        ];
        let cli = Cli::try_parse_from(argv).expect("accepted");
        let config = load_quietly(&cli.args).expect("valid");
        assert!(!config.storage.evict_to_free);
        assert!(config.process.lock_memory && config.process.max_core_file);
        assert_eq!(config.storage.crawl_interval_ms, 0);
        assert_eq!(config.server.port, 2, "a later flag wins");
        assert!(memcached_conf_lines("garbage line").is_err());
    }

    #[test]
    fn emulation_flags_are_checked_and_override_the_file() {
        let parse = |argv: &[&str]| {
            let cli = Cli::try_parse_from(argv).expect("accepted by clap");
            load_quietly(&cli.args)
        };
        let config = parse(&["serve", "--emulate-service", "const=2ms,dist=exp"]).expect("valid");
        assert_eq!(config.emulation.service, "const=2ms,dist=exp");
        assert_eq!(config.emulation.network, "off");
        let error = parse(&["serve", "--emulate-network", "const=fast"]).unwrap_err();
        assert!(
            error.starts_with("--emulate-network: bad cost spec \"const=fast\""),
            "{error}"
        );
    }
}
