//! A tailtrim tier from one TOML file: cache servers and proxies started, watched and
//! changed as one system (`tailtrim cluster up | status | add | remove`).
//!
//! ```text
//!   tier.toml ──config::TierConfig──plan (ports)──> config::TierPlan
//!                                                      │
//!   cluster up ───────────────> up::up: servers, then proxies, as child processes;
//!                               run dir: <proxy>.toml (.yml), logs/<node>.log, tier.json,
//!                               control.sock; signals stop every node
//!   cluster status ──────────> status::sample: two `stats` samples per node + GET /pool
//!                               + GET /pool/hotkeys (a nutcracker proxy: its stats
//!                               listener's JSON, module nutcracker)
//!   cluster add|remove ──────> admin::Change::apply on every proxy's admin listener;
//!                               `add --start` first asks up (control.sock) for a server
//!   status, add, remove find the tier with locate::Locate (state file, tier file or
//!   addresses); membership: the proxies to change, the admin token, a line per report
//! ```
//!
//! The nodes are the project's own programs (`tailtrim serve`, `tailtrim proxy`, or stock
//! memcached and nutcracker for a baseline tier) run as they would be by hand; this crate
//! writes their command lines and configuration files (a nutcracker's YAML among them), and
//! reads what they expose (`stats`, the proxy's admin API, nutcracker's stats listener). Deployment on several machines does not use it: see `docs/tier.md`.

pub mod admin;
pub mod config;
pub mod error;
pub mod locate;
pub mod membership;
pub mod nutcracker;
pub mod state;
pub mod status;
pub mod table;
pub mod up;

pub use config::{PortChoice, TierConfig};
pub use error::TierError;
pub use state::TierState;
