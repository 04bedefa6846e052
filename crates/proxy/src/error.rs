//! Errors of the proxy crate.

/// Why the proxy could not start or keep running.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The configuration is invalid.
    #[error("config: {0}")]
    Config(String),
    /// The client listener's auth file (`-Y`) cannot be read or is malformed.
    #[error("authfile [{path}]: {reason}")]
    AuthFile {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The client listener's TLS configuration (`-Z`, `[tls]`) cannot be built.
    #[error("TLS: {0}")]
    Tls(#[from] tailtrim_tls::TlsError),
    /// A listener could not be bound or accept failed fatally.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}
