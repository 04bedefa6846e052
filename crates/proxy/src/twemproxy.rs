//! Reading a twemproxy (nutcracker) YAML configuration as a drop-in: every key of the pool
//! is mapped onto [`ProxyConfig`] or refused with a message that says why.
//!
//! ```text
//!   nutcracker.yml ──parse (the YAML subset nutcracker configs use: pools of `key: value`
//!                   and a `servers:` list)──> pools ──pick one (by name if several)──>
//!   map key by key ──> ProxyConfig + warnings        (or an error naming the key)
//! ```
//!
//! | nutcracker key           | tailtrim                                                  |
//! |--------------------------|-----------------------------------------------------------|
//! | `listen`                 | `proxy.listen` (a unix socket path is refused)            |
//! | `hash`                   | `pool.hash` (hsieh, murmur, jenkins, crc16 are refused)   |
//! | `hash_tag`               | `pool.hash_tag`                                           |
//! | `distribution`           | `pool.distribution` (ketama, modula; random is refused)   |
//! | `servers`                | `pool.servers` (same `host:port:weight [name]` syntax)    |
//! | `timeout`                | `pool.timeout_ms`                                         |
//! | `server_retry_timeout`   | `pool.server_retry_timeout_ms`                            |
//! | `server_failure_limit`   | `pool.server_failure_limit`                               |
//! | `server_connections`     | `pool.server_connections`                                 |
//! | `auto_eject_hosts`       | false: as tailtrim. true: accepted with a warning — a down |
//! |                          | host's keys fail fast instead of moving to other hosts    |
//! | `preconnect`             | accepted with a warning when true (connections are lazy)  |
//! | `backlog`                | accepted with a warning (the OS default backlog is used)  |
//! | `redis`                  | false accepted; true refused (memcached protocol only)    |
//! | `client_connections`     | `proxy.max_connections` (0 or absent: no limit, as there) |
//! | `tailtrim_username`,     | `pool.username`, `pool.password`, `pool.auth_file`: the   |
//! | `tailtrim_password`,     | login toward `-Y` backends (tailtrim's extension keys;    |
//! | `tailtrim_auth_file`     | nutcracker itself refuses them)                           |
//! | anything else            | refused                                                   |

use crate::config::ProxyConfig;
use crate::error::ProxyError;

/// One pool as written in the file: its name, `key: value` pairs and servers, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NutcrackerPool {
    /// The pool's name (the top-level key).
    pub name: String,
    /// `key: value` pairs other than `servers`, with surrounding quotes removed.
    pub settings: Vec<(String, String)>,
    /// The `servers:` list entries.
    pub servers: Vec<String>,
}

fn config_error(message: String) -> ProxyError {
    ProxyError::Config(message)
}

fn unquote(value: &str) -> &str {
    let value = value.trim();
    for quote in ['"', '\''] {
        if let Some(inner) = value
            .strip_prefix(quote)
            .and_then(|v| v.strip_suffix(quote))
        {
            return inner;
        }
    }
    value
}

/// Strips a `#` comment that is not inside quotes.
fn strip_comment(line: &str) -> &str {
    let mut quote = None;
    for (index, ch) in line.char_indices() {
        match (ch, quote) {
            ('"' | '\'', None) => quote = Some(ch),
            (c, Some(q)) if c == q => quote = None,
            ('#', None) => return &line[..index],
            _ => {}
        }
    }
    line
}

/// Parses the YAML subset nutcracker configurations use. Anything outside it is an error
/// naming the line.
pub fn parse_pools(text: &str) -> Result<Vec<NutcrackerPool>, ProxyError> {
    let mut pools: Vec<NutcrackerPool> = Vec::new();
    let mut in_servers = false;
    for (number, raw) in text.lines().enumerate() {
        let line = strip_comment(raw).trim_end();
        if line.trim().is_empty() || line.trim() == "---" {
            continue;
        }
        let at = |what: &str| config_error(format!("line {}: {what}: {raw:?}", number + 1));
        let indented = line.starts_with([' ', '\t']);
        let content = line.trim();
        if !indented {
            let name = content
                .strip_suffix(':')
                .ok_or_else(|| at("expected a pool name followed by ':'"))?;
            pools.push(NutcrackerPool {
                name: unquote(name).to_string(),
                settings: Vec::new(),
                servers: Vec::new(),
            });
            in_servers = false;
            continue;
        }
        let pool = pools
            .last_mut()
            .ok_or_else(|| at("indented line before any pool name"))?;
        if let Some(item) = content
            .strip_prefix("- ")
            .or(content.strip_prefix('-').filter(|r| r.is_empty()))
        {
            if !in_servers {
                return Err(at("a list item outside `servers:`"));
            }
            pool.servers.push(unquote(item).to_string());
            continue;
        }
        let (key, value) = content
            .split_once(':')
            .ok_or_else(|| at("expected `key: value`"))?;
        let (key, value) = (key.trim(), unquote(value));
        in_servers = key == "servers";
        if in_servers {
            if !value.is_empty() {
                return Err(at(
                    "`servers:` must be followed by a list of `- host:port:weight`",
                ));
            }
            continue;
        }
        pool.settings.push((key.to_string(), value.to_string()));
    }
    if pools.is_empty() {
        return Err(config_error(
            "no pool in the nutcracker configuration".into(),
        ));
    }
    Ok(pools)
}

fn number<T: std::str::FromStr>(key: &str, value: &str) -> Result<T, ProxyError> {
    value
        .parse()
        .map_err(|_| config_error(format!("{key}: {value:?} is not a number")))
}

fn boolean(key: &str, value: &str) -> Result<bool, ProxyError> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(config_error(format!(
            "{key}: {value:?} is not true or false"
        ))),
    }
}

/// Maps one pool onto a proxy configuration; returns it with warnings for accepted keys whose
/// behaviour differs from nutcracker's.
pub fn map_pool(pool: &NutcrackerPool) -> Result<(ProxyConfig, Vec<String>), ProxyError> {
    let mut config = ProxyConfig::default();
    // nutcracker limits client connections only when `client_connections` says so.
    config.proxy.max_connections = 0;
    let mut warnings = Vec::new();
    let refuse =
        |key: &str, why: &str| Err(config_error(format!("pool {}: {key}: {why}", pool.name)));
    config.pool.name = pool.name.clone();
    // nutcracker's defaults where tailtrim's differ: fnv1a_64 hash, ketama, no hash tag.
    config.pool.hash = "fnv1a_64".to_string();
    config.pool.distribution = "ketama".to_string();
    for (key, value) in &pool.settings {
        let key = key.as_str();
        let value = value.as_str();
        match key {
            "listen" => {
                if value.starts_with('/') {
                    return refuse(key, "unix socket listeners are not supported; use host:port");
                }
                config.proxy.listen = value.to_string();
            }
            "hash" => match value {
                "fnv1_64" | "fnv1a_64" | "fnv1_32" | "fnv1a_32" | "md5" | "one_at_a_time"
                | "crc32" | "crc32a" => config.pool.hash = value.to_string(),
                _ => return refuse(key, &format!("{value} is not supported (fnv1_64, fnv1a_64, fnv1_32, fnv1a_32, md5, one_at_a_time, crc32, crc32a are)")),
            },
            "hash_tag" => config.pool.hash_tag = value.to_string(),
            "distribution" => match value {
                "ketama" | "modula" => config.pool.distribution = value.to_string(),
                _ => return refuse(key, &format!("{value} is not supported (ketama, modula are)")),
            },
            "timeout" => config.pool.timeout_ms = number(key, value)?,
            "server_retry_timeout" => config.pool.server_retry_timeout_ms = number(key, value)?,
            "server_failure_limit" => config.pool.server_failure_limit = number(key, value)?,
            "server_connections" => config.pool.server_connections = number(key, value)?,
            "auto_eject_hosts" => {
                if boolean(key, value)? {
                    warnings.push(format!(
                        "pool {}: auto_eject_hosts: true: a host marked down after \
                         server_failure_limit failures is not taken out of the ring; its keys \
                         fail fast (SERVER_ERROR) until server_retry_timeout lets a probe through",
                        pool.name
                    ));
                }
            }
            "preconnect" => {
                if boolean(key, value)? {
                    warnings.push(format!(
                        "pool {}: preconnect: true: backend connections open on first use",
                        pool.name
                    ));
                }
            }
            "backlog" => {
                let _: u32 = number(key, value)?;
                warnings.push(format!(
                    "pool {}: backlog: {value}: the listener uses the system's default backlog",
                    pool.name
                ));
            }
            "client_connections" => config.proxy.max_connections = number(key, value)?,
            "tailtrim_username" => config.pool.username = value.to_string(),
            "tailtrim_password" => config.pool.password = value.to_string(),
            "tailtrim_auth_file" => config.pool.auth_file = value.to_string(),
            "redis" => {
                if boolean(key, value)? {
                    return refuse(key, "the redis protocol is not supported (memcached only)");
                }
            }
            _ => return refuse(key, "not a nutcracker key tailtrim knows"),
        }
    }
    if pool.servers.is_empty() {
        return refuse("servers", "the pool has no servers");
    }
    config.pool.servers = pool.servers.clone();
    // Validates hash, distribution, hash tag and servers as the TOML path does.
    config.pool_config()?;
    Ok((config, warnings))
}

/// Reads a nutcracker configuration and maps the pool named `pool` (or the only pool).
pub fn from_yaml(text: &str, pool: Option<&str>) -> Result<(ProxyConfig, Vec<String>), ProxyError> {
    let pools = parse_pools(text)?;
    let names = || {
        pools
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let chosen = match pool {
        Some(name) => pools
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| config_error(format!("no pool {name:?} (pools: {})", names())))?,
        None if pools.len() == 1 => &pools[0],
        None => {
            return Err(config_error(format!(
                "the file has {} pools ({}); choose one with --twemproxy-pool",
                pools.len(),
                names()
            )))
        }
    };
    map_pool(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example shipped with Debian's nutcracker package (its five pools, verbatim).
    const DEBIAN_EXAMPLE: &str = include_str!("../../../tests/fixtures/nutcracker.yml");

    #[test]
    fn debian_example_pools_map_or_are_refused_with_reason() {
        let pools = parse_pools(DEBIAN_EXAMPLE).expect("parses");
        let names: Vec<&str> = pools.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["alpha", "beta", "gamma", "delta", "omega"]);
        for refused in ["alpha", "beta"] {
            let error = from_yaml(DEBIAN_EXAMPLE, Some(refused)).expect_err(refused);
            assert!(error.to_string().contains("redis"), "{error}");
        }
        let (gamma, warnings) = from_yaml(DEBIAN_EXAMPLE, Some("gamma")).expect("gamma maps");
        assert_eq!(gamma.proxy.listen, "127.0.0.1:22123");
        assert_eq!(gamma.pool.hash, "fnv1a_64");
        assert_eq!(gamma.pool.timeout_ms, 400);
        assert_eq!(gamma.pool.server_retry_timeout_ms, 2000);
        assert_eq!(gamma.pool.server_failure_limit, 3);
        assert_eq!(
            gamma.pool.servers,
            ["127.0.0.1:11212:1", "127.0.0.1:11213:1"]
        );
        assert_eq!(warnings.len(), 3, "{warnings:?}"); // backlog, preconnect, auto_eject
        let (delta, _) = from_yaml(DEBIAN_EXAMPLE, Some("delta")).expect("delta maps");
        assert_eq!(delta.pool.servers.len(), 10);
        assert_eq!(delta.pool.timeout_ms, 100);
        let error = from_yaml(DEBIAN_EXAMPLE, Some("omega")).expect_err("omega");
        assert!(error.to_string().contains("unix socket"), "{error}");
        let error = from_yaml(DEBIAN_EXAMPLE, None).expect_err("five pools");
        assert!(error.to_string().contains("--twemproxy-pool"), "{error}");
    }

    #[test]
    fn backend_credentials_are_tailtrim_extension_keys() {
        let text = "p:\n  tailtrim_username: proxy\n  tailtrim_password: \"s3cret\"\n  \
                    servers:\n   - 127.0.0.1:11211:1\n";
        let (config, _) = from_yaml(text, None).expect("maps");
        assert_eq!(
            (config.pool.username.as_str(), config.pool.password.as_str()),
            ("proxy", "s3cret")
        );
        let login = config.pool_config().unwrap().dialer.login.expect("a login");
        assert_eq!(login.user(), "proxy");
        let text = "p:\n  tailtrim_username: proxy\n  servers:\n   - 127.0.0.1:11211:1\n";
        let error = from_yaml(text, None).expect_err("half a pair");
        assert!(error.to_string().contains("go together"), "{error}");
    }

    #[test]
    fn hash_tag_and_unknown_keys() {
        let text = "p:\n  hash_tag: \"{}\"\n  servers:\n   - 127.0.0.1:11211:1 a\n";
        let (config, _) = from_yaml(text, None).expect("maps");
        assert_eq!(config.pool.hash_tag, "{}");
        assert_eq!(config.pool.servers, ["127.0.0.1:11211:1 a"]);
        let error = from_yaml(
            "p:\n  frobnicate: 1\n  servers:\n   - 127.0.0.1:1:1\n",
            None,
        )
        .expect_err("unknown key");
        assert!(error.to_string().contains("frobnicate"), "{error}");
        assert!(from_yaml("p:\n  hash: hsieh\n  servers:\n   - 127.0.0.1:1:1\n", None).is_err());
        assert!(from_yaml("p:\n  distribution: random\n  servers:\n   - a:1:1\n", None).is_err());
    }
}
