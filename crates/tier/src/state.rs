//! The state file a running tier keeps in its run directory (`tier.json`): which nodes run
//! where, under which pid, logging to which file. `cluster status`, `add` and `remove` read
//! it to find the tier; `cluster up` rewrites it whenever a node starts or exits, and marks
//! it stopped when it ends.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::TierError;

/// The state file's name in the run directory.
pub const STATE_FILE: &str = "tier.json";
/// The control socket's name in the run directory.
pub const CONTROL_SOCKET: &str = "control.sock";

/// What a node does in the tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// A cache server.
    Server,
    /// A proxy.
    Proxy,
}

impl Role {
    /// `server` or `proxy`.
    pub fn name(self) -> &'static str {
        match self {
            Role::Server => "server",
            Role::Proxy => "proxy",
        }
    }
}

/// One node of a running tier.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// Server or proxy.
    pub role: Role,
    /// Label.
    pub name: String,
    /// `tailtrim`, `memcached` or `tailtrim proxy`.
    pub program: String,
    /// The memcached-protocol address.
    pub address: String,
    /// The admin HTTP address (proxies).
    pub admin: Option<String>,
    /// Process id.
    pub pid: u32,
    /// Its stdout and stderr.
    pub log: PathBuf,
    /// The command line it was started with.
    pub command: String,
    /// `None` while it runs; how it ended otherwise.
    pub exited: Option<String>,
}

/// The whole state file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TierState {
    /// The tier's name.
    pub name: String,
    /// Pid of `tailtrim cluster up`.
    pub supervisor_pid: u32,
    /// Whether `cluster up` still runs (false once it stopped every node).
    pub running: bool,
    /// The nodes, in start order.
    pub nodes: Vec<NodeRecord>,
}

impl TierState {
    /// Path of the state file in `run_dir`.
    pub fn path(run_dir: &Path) -> PathBuf {
        run_dir.join(STATE_FILE)
    }

    /// Reads the state file of `run_dir`; `None` when there is none.
    pub fn read(run_dir: &Path) -> Result<Option<TierState>, TierError> {
        let path = Self::path(run_dir);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(TierError::io(format!("reading {}", path.display()), source))
            }
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|error| TierError::Config(format!("{}: {error}", path.display())))
    }

    /// The running tier of `run_dir`, or an error saying there is none.
    pub fn read_running(run_dir: &Path) -> Result<TierState, TierError> {
        match Self::read(run_dir)? {
            Some(state) if state.running && process_exists(state.supervisor_pid) => Ok(state),
            _ => Err(TierError::NotRunning(format!(
                "no running tier in {} (start one with `tailtrim cluster up TIER.toml`)",
                run_dir.display()
            ))),
        }
    }

    /// Writes the state file into `run_dir` (through a temporary file, so a reader never
    /// sees half of it).
    pub fn write(&self, run_dir: &Path) -> Result<(), TierError> {
        let path = Self::path(run_dir);
        let temporary = run_dir.join(format!("{STATE_FILE}.new"));
        let text = serde_json::to_string_pretty(self)
            .map_err(|error| TierError::Config(format!("state file: {error}")))?;
        std::fs::write(&temporary, text + "\n")
            .and_then(|()| std::fs::rename(&temporary, &path))
            .map_err(|source| TierError::io(format!("writing {}", path.display()), source))
    }

    /// The proxies.
    pub fn proxies(&self) -> impl Iterator<Item = &NodeRecord> {
        self.nodes.iter().filter(|node| node.role == Role::Proxy)
    }
}

/// Whether a process with this pid exists (and is not a zombie).
pub fn process_exists(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses: "pid (comm) S ...".
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}
