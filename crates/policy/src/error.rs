//! Errors of the policy crate.

/// Why a policy object could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// A ring was asked for with no servers.
    #[error("a pool needs at least one server")]
    NoServers,
    /// A server was given weight 0 (nutcracker rejects this too).
    #[error("server {name:?} has weight 0; weights must be at least 1")]
    ZeroWeight {
        /// The server's ketama name.
        name: String,
    },
    /// An unknown hash function name in a config.
    #[error("unknown hash function {name:?} (known: {known})", known = known.join(", "))]
    UnknownHash {
        /// The name given.
        name: String,
        /// The names known.
        known: &'static [&'static str],
    },
    /// An unknown distribution name in a config.
    #[error("unknown distribution {0:?} (known: ketama, modula, jump)")]
    UnknownDistribution(String),
    /// A hash tag must be exactly two bytes, e.g. `{}`.
    #[error("hash tag {0:?} must be exactly two characters, e.g. \"{{}}\"")]
    BadHashTag(String),
    /// An unknown planner name in a config.
    #[error("unknown planner {name:?} (known: {known})", known = known.join(", "))]
    UnknownPlanner {
        /// The name given.
        name: String,
        /// The names known.
        known: &'static [&'static str],
    },
    /// The replica count is 0 or larger than the number of servers.
    #[error("replicas = {replicas} must be between 1 and the number of servers ({servers})")]
    BadReplicaCount {
        /// Requested copies per key.
        replicas: usize,
        /// Servers in the pool.
        servers: usize,
    },
    /// An unknown warm-up mode name.
    #[error("unknown warm-up mode {0:?} (known: cold, fallback, preemptive, preemptive+fallback)")]
    UnknownWarmupMode(String),
}
