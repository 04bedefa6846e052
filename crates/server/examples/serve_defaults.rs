//! Starts a server with default settings on the port given as the first
//! argument (handy for poking at the runtime without the CLI).

fn main() {
    let mut config = tailtrim_server::ServerConfig::default();
    config.server.listen = "127.0.0.1".into();
    config.server.port = std::env::args()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(11211);
    config.workers.threads = 2;
    if let Err(e) = tailtrim_server::run_until_signal(config) {
        eprintln!("{e}");
        std::process::exit(1);
    }
}
