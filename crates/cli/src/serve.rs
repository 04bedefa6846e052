//! `tailtrim serve`: the cache server. The flags and what they do to the configuration are
//! the server crate's ([`tailtrim_server::flags`]); this module runs what they give.

use std::process::ExitCode;

use tailtrim_server::logging;
use tailtrim_server::process::tune_allocator;

pub use tailtrim_server::flags::{expand_memcached_conf, ServeArgs as Args};

/// Runs `tailtrim serve`.
pub fn run(args: Args) -> Result<ExitCode, String> {
    if args.print_version {
        println!("tailtrim {}", tailtrim_lab::meta::VERSION);
        return Ok(ExitCode::SUCCESS);
    }
    if args.print_license {
        println!(
            "tailtrim is licensed under {} (see the repository's license files).",
            env!("CARGO_PKG_LICENSE")
        );
        return Ok(ExitCode::SUCCESS);
    }
    let config = tailtrim_server::flags::load(&args, &mut |warning| {
        eprintln!("tailtrim: warning: {warning}");
    })?;
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
