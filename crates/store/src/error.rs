//! Errors the store reports.

/// Why a store operation could not be carried out at all.
///
/// Outcomes that are part of normal memcached semantics (`NOT_STORED`,
/// `EXISTS`, `NOT_FOUND`, a non-numeric incr) are *not* errors; they are
/// variants of the operation's outcome type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The key is empty.
    #[error("key is empty")]
    EmptyKey,
    /// The key is longer than [`crate::KEY_MAX_LEN`] bytes.
    #[error("key is {len} bytes, longer than the {max} byte limit")]
    KeyTooLong {
        /// Length of the rejected key.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The item (key + value + header, see [`crate::item_size`]) is larger
    /// than the configured item size maximum (`-I`). memcached replies
    /// `SERVER_ERROR object too large for cache`.
    #[error("item of {size} bytes is larger than the {max} byte item size limit")]
    TooLarge {
        /// Accounted size of the rejected item.
        size: u64,
        /// The `-I` limit.
        max: u64,
    },
    /// No room could be made for the item within the memory limit (the item
    /// is larger than the whole limit, or every byte is held by concurrent
    /// in-flight stores). memcached replies `SERVER_ERROR out of memory
    /// storing object`.
    #[error("out of memory storing an item of {size} bytes")]
    OutOfMemory {
        /// Accounted size of the item that did not fit.
        size: u64,
    },
    /// The configuration is unusable.
    #[error("invalid store configuration: {0}")]
    InvalidConfig(String),
}

impl StoreError {
    /// The reply line memcached 1.6 sends for this condition (without
    /// `\r\n`), for the server's convenience.
    pub fn memcached_reply(&self) -> &'static str {
        match self {
            StoreError::EmptyKey | StoreError::KeyTooLong { .. } => {
                "CLIENT_ERROR bad command line format"
            }
            StoreError::TooLarge { .. } => "SERVER_ERROR object too large for cache",
            StoreError::OutOfMemory { .. } => "SERVER_ERROR out of memory storing object",
            StoreError::InvalidConfig(_) => "SERVER_ERROR invalid configuration",
        }
    }
}
