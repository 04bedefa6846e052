//! `tailtrim serve`: the cache server. Flags follow memcached's where the
//! meaning is the same; a TOML file (`--config`) sets anything, flags win.

use std::process::ExitCode;

use tailtrim_policy::costspec::CostSpec;
use tailtrim_server::config::{parse_size, DispatchPolicy, ServerConfig};
use tailtrim_server::logging;

/// Arguments of `tailtrim serve`.
#[derive(clap::Args, Debug)]
#[command(
    about = "Run the memcached-compatible cache server",
    args_override_self = true
)]
pub struct Args {
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
    print_config: bool,
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
    /// Maximum simultaneous connections (default 1024).
    #[arg(short = 'c', long = "conn-limit")]
    max_connections: Option<usize>,
    /// Maximum item size, bytes or with k/m suffix (default 1m).
    #[arg(short = 'I', long = "max-item-size")]
    item_size_max: Option<String>,
    /// Verbose, as memcached: `-v` start-up and signals, `-vv` every command and reply
    /// (`<FD cmd` / `>FD reply`), `-vvv` connections opened and closed; warnings always.
    #[arg(short = 'v', action = clap::ArgAction::Count)]
    verbose: u8,
    /// Port for Prometheus text metrics over HTTP (default 0, off).
    #[arg(long)]
    admin_port: Option<u16>,
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

fn load(args: &Args) -> Result<ServerConfig, String> {
    let mut config = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            ServerConfig::from_toml(&text).map_err(|e| format!("{}: {e}", path.display()))?
        }
        None => ServerConfig::default(),
    };
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
    if let Some(port) = args.admin_port {
        config.server.admin_port = port;
    }
    if let Some(list) = &args.pin_cpus {
        config.workers.pin_cpus = tailtrim_server::affinity::parse_cpu_list(list)?;
    }
    if let Some(policy) = args.dispatch {
        config.workers.dispatch = policy;
    }
    if args.no_priorities {
        config.workers.priorities = false;
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
    apply_process_flags(args, &mut config);
    for option in args.extended.iter().flat_map(|list| list.split(',')) {
        if option.is_empty() {
            continue;
        }
        if let Some(warning) = config.apply_memcached_option(option)? {
            eprintln!("tailtrim: warning: {warning}");
        }
    }
    config.validate()?;
    Ok(config)
}

fn apply_process_flags(args: &Args, config: &mut ServerConfig) {
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

/// The command-line flags a Debian `/etc/memcached.conf` stands for, as its start script reads
/// it: blank lines and `#` comments skipped, `logfile PATH` becomes `--log-file PATH`, every
/// other line must hold flags (`-m 64`), split on white space.
pub fn memcached_conf_flags(text: &str) -> Result<Vec<String>, String> {
    let mut flags = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(path) = line.strip_prefix("logfile") {
            flags.push("--log-file".to_string());
            flags.push(path.trim().to_string());
        } else if line.starts_with('-') {
            flags.extend(line.split_whitespace().map(str::to_string));
        } else {
            return Err(format!(
                "line {}: {line:?} is neither a flag nor `logfile PATH`",
                number + 1
            ));
        }
    }
    Ok(flags)
}

/// Replaces `--memcached-conf FILE` (or `--memcached-conf=FILE`) in a `serve` command line by
/// the flags the file holds, so that flags after it override the file.
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
        out.extend(memcached_conf_flags(&text).map_err(|e| format!("{path}: {e}"))?);
    }
    Ok(out)
}

/// glibc keeps freed memory of large values in its arenas unless told to
/// return it; with values up to 1 MB churned through the LRU that doubled the
/// resident size over `-m`. Serve large allocations with mmap and trim
/// eagerly, so RSS tracks the item memory (tests/memory.rs holds the bound).
fn tune_allocator() {
    // Values above 32 KiB get their own mapping, returned to the kernel when
    // the item is evicted; a fixed threshold also stops glibc from raising it
    // dynamically after the first large free.
    const MMAP_THRESHOLD: libc::c_int = 32 * 1024;
    const TRIM_THRESHOLD: libc::c_int = 128 * 1024;
    // SAFETY: mallopt only adjusts allocator parameters; called before the
    // server's threads start.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
    }
}

/// Runs `tailtrim serve`.
pub fn run(args: Args) -> Result<ExitCode, String> {
    let config = load(&args)?;
    if args.print_config {
        print!("{}", config.to_toml());
        return Ok(ExitCode::SUCCESS);
    }
    let (_pid_file, warnings) = tailtrim_server::process::prepare(&config.process)?;
    // After `prepare`: stderr is the log file by now, when one is set.
    let _ = logging::init(logging::level_of(config.server.verbose));
    for warning in warnings {
        tracing::warn!("tailtrim: {warning}");
    }
    tune_allocator();
    let (service, network) = (
        config.emulation.service_spec()?,
        config.emulation.network_spec()?,
    );
    if !service.is_zero() || !network.is_zero() {
        tracing::warn!(
            "tailtrim: EXPERIMENTAL emulated time on (service {service}, network {network}): \
             latencies are emulated, not this machine's"
        );
    }
    tailtrim_server::run_until_signal(config).map_err(|e| e.to_string())?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    /// Debian's `/etc/memcached.conf`, verbatim, maps to memcached's flags and every one of
    /// them parses into the configuration it stands for.
    #[test]
    fn debian_memcached_conf_flags() {
        let text = include_str!("../../../tests/fixtures/debian-memcached.conf");
        let flags = memcached_conf_flags(text).expect("parses");
        assert_eq!(
            flags.join(" "),
            "-d --log-file /var/log/memcached.log -m 64 -p 11211 -u memcache -l 127.0.0.1 \
             -P /var/run/memcached/memcached.pid"
        );
        let argv = std::iter::once("serve".to_string()).chain(flags);
        let cli = Cli::try_parse_from(argv).expect("every flag is accepted");
        let config = load(&cli.args).expect("valid configuration");
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
        let config = load(&cli.args).expect("valid");
        assert!(!config.storage.evict_to_free);
        assert!(config.process.lock_memory && config.process.max_core_file);
        assert_eq!(config.storage.crawl_interval_ms, 0);
        assert_eq!(config.server.port, 2, "a later flag wins");
        assert!(memcached_conf_flags("garbage line").is_err());
    }

    #[test]
    fn emulation_flags_are_checked_and_override_the_file() {
        let parse = |argv: &[&str]| {
            let cli = Cli::try_parse_from(argv).expect("accepted by clap");
            load(&cli.args)
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
