//! Starts a server on 127.0.0.1 with default settings (handy for poking at
//! the runtime without the CLI): `serve_defaults [PORT] [DISPATCH] [THREADS]`,
//! DISPATCH one of pinned, size-aware, early-binding, stealing, late-binding.

use tailtrim_server::config::DispatchPolicy;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mut config = tailtrim_server::ServerConfig::default();
    config.server.listen = "127.0.0.1".into();
    config.server.port = args.get(1).and_then(|p| p.parse().ok()).unwrap_or(11211);
    if let Some(policy) = args.get(2) {
        match policy.parse::<DispatchPolicy>() {
            Ok(p) => config.workers.dispatch = p,
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(2);
            }
        }
    }
    config.workers.threads = args.get(3).and_then(|t| t.parse().ok()).unwrap_or(2);
    if let Err(e) = tailtrim_server::run_until_signal(config) {
        eprintln!("{e}");
        std::process::exit(1);
    }
}
