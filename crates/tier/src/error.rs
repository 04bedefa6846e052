//! The crate's one error type.

use tailtrim_lab::LabError;

/// What can go wrong reading a tier, running it, or talking to its nodes.
#[derive(Debug, thiserror::Error)]
pub enum TierError {
    /// The tier file (or a flag) describes no valid tier.
    #[error("tier configuration: {0}")]
    Config(String),
    /// The tier file is not valid TOML for a tier.
    #[error("tier file {path}: {source}")]
    Parse {
        /// The file read.
        path: String,
        /// What the TOML reader said.
        source: toml::de::Error,
    },
    /// An I/O operation failed ([`LabError::Io`]), a node did not start, died during start-up
    /// or did not become ready ([`LabError::Process`]), or a node's `stats` could not be read.
    #[error(transparent)]
    Lab(#[from] LabError),
    /// A proxy's admin API refused a request or could not be reached.
    #[error("admin {address}: {message}")]
    Admin {
        /// The admin listener's address.
        address: String,
        /// What went wrong.
        message: String,
    },
    /// A proxy setting of the tier file could not be used (e.g. its admin token file).
    #[error(transparent)]
    Proxy(#[from] tailtrim_proxy::ProxyError),
    /// No running tier where one was expected.
    #[error("{0}")]
    NotRunning(String),
}

impl TierError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        TierError::Lab(LabError::io(context, source))
    }

    /// A node that did not start, died during start-up or did not become ready.
    pub(crate) fn process(message: String) -> Self {
        TierError::Lab(LabError::Process(message))
    }
}
