//! The errors of the admin listener.

use thiserror::Error;

/// What can go wrong setting up an admin listener.
#[derive(Debug, Error)]
pub enum AdminError {
    /// The listener could not be handed to tokio or its address read.
    #[error("admin listener: {source}")]
    Listener {
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}
