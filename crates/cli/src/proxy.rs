//! `tailtrim proxy`: a memcached-protocol proxy over a pool of backends. The flags and the
//! effective configuration they give are the proxy crate's ([`tailtrim_proxy::effective`]);
//! this module sets up logging and runs the proxy.

use std::process::ExitCode;

use tailtrim_server::logging;

pub use tailtrim_proxy::effective::ProxyArgs as Args;

/// Runs `tailtrim proxy`.
pub fn run(args: Args) -> Result<ExitCode, String> {
    let config = tailtrim_proxy::effective::effective_config(&args, &mut |warning| {
        eprintln!("tailtrim: warning: {warning}");
    })?;
    if args.print_config {
        print!("{}", config.to_toml().map_err(|error| error.to_string())?);
        return Ok(ExitCode::SUCCESS);
    }
    let hooks = log_hooks(&args)?;
    tailtrim_proxy::run_blocking(&config, args.config.as_deref(), hooks)
        .map_err(|error| error.to_string())?;
    Ok(ExitCode::SUCCESS)
}

/// Points stderr at `--log-file`, installs the log subscriber (INFO, one step more per `-v`)
/// and hands the proxy what its signals need to reopen the file and step the level.
fn log_hooks(args: &Args) -> Result<tailtrim_proxy::LogHooks, String> {
    if let Some(path) = &args.log_file {
        tailtrim_server::process::reopen_log_file(path)?;
    }
    let mut hooks = tailtrim_proxy::LogHooks::default();
    if let Some(level) = logging::init(logging::level_of(args.verbose.saturating_add(1))) {
        hooks.step_level = Some(Box::new(move |up| {
            let level = if up { level.raise() } else { level.lower() };
            level.to_string()
        }));
    }
    if let Some(path) = args.log_file.clone() {
        hooks.reopen_log = Some(Box::new(move || {
            tailtrim_server::process::reopen_log_file(&path)
        }));
    }
    Ok(hooks)
}
