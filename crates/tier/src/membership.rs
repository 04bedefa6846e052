//! The flow of `cluster add` and `cluster remove` around [`crate::admin::Change`]: which
//! proxies to change, the admin token to send them, and one line per proxy's report.
//!
//! ```text
//!   Locate + run dir ──proxies_to_change──> (name, admin address) per live proxy
//!   --admin-token-file | TAILTRIM_ADMIN_TOKEN | [proxy] admin_token_file ──admin_token──> token
//!   Change::apply on each ──> report (JSON) ──summary──> "p1: added … servers a -> a,b …"
//! ```

use std::path::Path;

use tailtrim_proxy::effective::ADMIN_TOKEN_VARIABLE;

use crate::admin::Change;
use crate::config::ProxyProgram;
use crate::locate::{running_state, written_plan, Locate};
use crate::{TierConfig, TierError};

/// The admin token: the file given, else [`ADMIN_TOKEN_VARIABLE`], else the tier file's.
pub fn admin_token(
    token_file: Option<&Path>,
    config: Option<&TierConfig>,
) -> Result<Option<String>, TierError> {
    if let Some(path) = token_file {
        let text = std::fs::read_to_string(path)
            .map_err(|error| TierError::io(format!("reading {}", path.display()), error))?;
        return Ok(Some(text.trim().to_string()));
    }
    if let Ok(token) = std::env::var(ADMIN_TOKEN_VARIABLE) {
        if !token.trim().is_empty() {
            return Ok(Some(token.trim().to_string()));
        }
    }
    match config {
        Some(config) => Ok(config.proxy.admin_token()?),
        None => Ok(None),
    }
}

/// The proxies to change, as (name, admin address): `--admin`, else the running tier's
/// live proxies, else the tier file's. nutcracker proxies are left out: they have no admin
/// API and read their servers from their YAML at start only.
pub fn proxies_to_change(
    locate: &Locate,
    config: Option<&TierConfig>,
    run_dir: &Path,
) -> Result<Vec<(String, String)>, TierError> {
    let proxies: Vec<(String, String)> = if let Some(admin) = &locate.admin {
        vec![(admin.clone(), admin.clone())]
    } else if let Some(state) = running_state(run_dir) {
        state
            .proxies()
            .filter(|proxy| proxy.exited.is_none())
            .filter(|proxy| proxy.program != ProxyProgram::Nutcracker.name())
            .filter_map(|proxy| Some((proxy.name.clone(), proxy.admin.clone()?)))
            .collect()
    } else if let Some(config) = config {
        written_plan(config)?
            .proxies
            .into_iter()
            .filter(|proxy| proxy.program == ProxyProgram::Tailtrim)
            .map(|proxy| (proxy.name, proxy.admin_listen))
            .collect()
    } else {
        return Err(TierError::NotRunning(format!(
            "no running tier in {} (give the tier file, --run-dir or --admin)",
            run_dir.display()
        )));
    };
    if proxies.is_empty() {
        return Err(TierError::NotRunning(
            "the tier has no running tailtrim proxy to change (a nutcracker proxy takes its servers from its YAML at start only)".to_string(),
        ));
    }
    Ok(proxies)
}

/// One line of what proxy `name` reported for `change`: mode, pool version, servers before
/// and after, keys copied.
pub fn summary(name: &str, change: &Change, report: &serde_json::Value) -> String {
    format!(
        "{name}: {} {} (warm-up {}): pool version {}, servers {} -> {}, {} keys copied",
        if change.adding { "added" } else { "removed" },
        change.server,
        report["mode"].as_str().unwrap_or("?"),
        report["version"],
        list(&report["before"]),
        list(&report["after"]),
        report["copied"]
    )
}

/// A JSON array of strings as `a,b,c`.
fn list(value: &serde_json::Value) -> String {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(serde_json::Value::as_str)
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}
