//! `tailtrim serve`: the cache server. Flags follow memcached's where the
//! meaning is the same; a TOML file (`--config`) sets anything, flags win.

use std::process::ExitCode;

use tailtrim_server::config::{parse_size, DispatchPolicy, ServerConfig};

/// Arguments of `tailtrim serve`.
#[derive(clap::Args, Debug)]
#[command(about = "Run the memcached-compatible cache server")]
pub struct Args {
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
    /// Verbose: log connections and start-up (repeat for more).
    #[arg(short = 'v', action = clap::ArgAction::Count)]
    verbose: u8,
    /// Port for Prometheus text metrics over HTTP (default 0, off).
    #[arg(long)]
    admin_port: Option<u16>,
    /// Pin worker i to CPU LIST[i % len], e.g. `0-1` or `0,1` (default: not pinned).
    #[arg(long, value_name = "LIST")]
    pin_cpus: Option<String>,
    /// How requests reach workers (default pinned, memcached's model).
    #[arg(long, value_enum)]
    dispatch: Option<DispatchPolicy>,
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
    if let Some(threshold) = &args.size_threshold {
        config.sizeaware.fixed_threshold = parse_size(threshold)?;
    }
    if let Some(small) = args.small_workers {
        config.sizeaware.fixed_small_workers = small;
    }
    if let Some(p) = args.size_percentile {
        config.sizeaware.percentile = p;
    }
    if let Some(ms) = args.epoch_ms {
        config.sizeaware.epoch_ms = ms;
    }
    config.validate()?;
    Ok(config)
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
    tune_allocator();
    tailtrim_server::run_until_signal(config).map_err(|e| e.to_string())?;
    Ok(ExitCode::SUCCESS)
}
