//! The configuration readers: `tailtrim serve`'s TOML, `tailtrim proxy`'s TOML and a
//! nutcracker YAML. Any text is either refused with an error or yields a configuration;
//! a valid server configuration survives a print-and-read round trip unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tailtrim_proxy::ProxyConfig;
use tailtrim_server::ServerConfig;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(config) = ServerConfig::from_toml(&text) {
        if config.validate().is_ok() {
            let again = ServerConfig::from_toml(&config.to_toml());
            assert_eq!(
                again.ok().as_ref(),
                Some(&config),
                "serve config round trip"
            );
        }
    }
    if let Ok(config) = ProxyConfig::from_toml(&text) {
        let _ = config.pool_config();
        let _ = config.to_toml();
    }
    if let Ok((config, _warnings)) = tailtrim_proxy::twemproxy::from_yaml(&text, None) {
        let _ = config.pool_config();
    }
});
