//! Errors of the client crate. Each message is what the proxy puts after `SERVER_ERROR `.

/// Why a request could not be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// No reply within the configured timeout; the connection was closed.
    #[error("backend {backend} timed out after {after_ms} ms")]
    Timeout {
        /// Backend address.
        backend: String,
        /// The timeout that fired.
        after_ms: u64,
    },
    /// Connecting failed (refused, unreachable, connect timeout).
    #[error("backend {backend} unreachable: {reason}")]
    Connect {
        /// Backend address.
        backend: String,
        /// What the OS said.
        reason: String,
    },
    /// A `-Y` backend did not accept the configured credentials (or did not answer the
    /// login); counted as a failed connection.
    #[error("backend {backend} refused the login of user {user}: {reply}")]
    Login {
        /// Backend address.
        backend: String,
        /// The user the client logged in as.
        user: String,
        /// The backend's reply line, or what happened instead.
        reply: String,
    },
    /// The TLS handshake with the backend failed (unknown CA, wrong name, a plain server).
    #[error("backend {backend} TLS handshake failed: {reason}")]
    Tls {
        /// Backend address.
        backend: String,
        /// What rustls said.
        reason: String,
    },
    /// The connection broke while the request was in flight.
    #[error("backend {backend} connection lost: {reason}")]
    ConnectionLost {
        /// Backend address.
        backend: String,
        /// What happened.
        reason: String,
    },
    /// The down-host tracker marked the backend down; the request was not sent.
    #[error("backend {backend} is marked down")]
    BackendDown {
        /// Backend address.
        backend: String,
    },
    /// Too many requests already queued on the connection.
    #[error("backend {backend} overloaded: {limit} requests outstanding")]
    Overloaded {
        /// Backend address.
        backend: String,
        /// The queue limit.
        limit: usize,
    },
    /// The backend sent bytes that are not a memcached reply.
    #[error("backend {backend} sent a malformed reply")]
    Protocol {
        /// Backend address.
        backend: String,
    },
    /// Every replica of a key is down or failed.
    #[error("no backend available for the key ({last})")]
    NoBackend {
        /// The last failure seen, for the operator.
        last: String,
    },
    /// The backend answered a read with an error line.
    #[error("backend {backend} replied {line}")]
    BackendReplied {
        /// Backend address.
        backend: String,
        /// The reply line without `\r\n`.
        line: String,
    },
    /// Invalid configuration.
    /// A whole request outlived the `timeout` route's bound.
    #[error("request timed out after {after_ms} ms")]
    RouteTimeout {
        /// The bound, ms.
        after_ms: u64,
    },
    #[error("config: {0}")]
    Config(String),
}

impl ClientError {
    /// True for failures that count against the backend's health (not a reply it chose to send).
    pub fn is_backend_failure(&self) -> bool {
        !matches!(
            self,
            ClientError::BackendReplied { .. }
                | ClientError::Config(_)
                | ClientError::NoBackend { .. }
                | ClientError::Overloaded { .. }
        )
    }
}
