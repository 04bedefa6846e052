//! The kind of an operation the bench issues: the one type both the workloads (which
//! describe operations) and the latency classes (which sort their replies) name, so neither
//! module depends on the other.

use serde::{Deserialize, Serialize};

/// Kind of a memcached operation issued by the bench.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// `get` of one or more keys.
    Get,
    /// `set` of one key with its value size.
    Set,
}
