//! What a request executes against besides itself ([`ExecContext`]): the server-wide state,
//! the executing worker's counters, the client's descriptor and the current second. Both
//! `exec` (the commands) and `report` (`stats` and the admin page) take it.

use tailtrim_store::UnixSecs;

use crate::shared::Shared;
use crate::stats::WorkerCounters;

/// Everything a request needs besides itself.
pub struct ExecContext<'a> {
    /// Server-wide state (store, settings, connection counts).
    pub shared: &'a Shared,
    /// The executing worker's counters.
    pub counters: &'a WorkerCounters,
    /// The client's socket descriptor (`watch` lines name it `cfd`).
    pub client_fd: i32,
    /// The current second.
    pub now: UnixSecs,
}
