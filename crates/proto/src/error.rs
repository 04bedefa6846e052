//! Protocol errors, each carrying the exact reply memcached 1.6 sends.

use thiserror::Error;

/// A request memcached would reject, with what happens to the connection.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ProtoError {
    /// Unknown command or wrong number of tokens.
    #[error("ERROR")]
    UnknownCommand,
    /// Malformed command line (bad numbers, key too long, ...).
    #[error("CLIENT_ERROR bad command line format")]
    BadCommandLine {
        /// The command carried `noreply`, so memcached stays silent.
        noreply: bool,
    },
    /// `delete` with a non-zero hold time or extra tokens.
    #[error("CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]")]
    DeleteUsage {
        /// The command carried `noreply`.
        noreply: bool,
    },
    /// The data block did not end with `\r\n` where its length said.
    #[error("CLIENT_ERROR bad data chunk")]
    BadDataChunk {
        /// The command carried `noreply`.
        noreply: bool,
    },
    /// A non-numeric or out-of-range exptime.
    #[error("CLIENT_ERROR invalid exptime argument")]
    InvalidExptime {
        /// The command carried `noreply`.
        noreply: bool,
    },
    /// A non-numeric incr/decr delta.
    #[error("CLIENT_ERROR invalid numeric delta argument")]
    InvalidDelta {
        /// The command carried `noreply`.
        noreply: bool,
    },
    /// A value larger than the item size limit. The server must discard
    /// `swallow` more bytes (the data block) and, for `set`, drop any old
    /// value of `key` as memcached does.
    #[error("SERVER_ERROR object too large for cache")]
    TooLarge {
        /// Bytes of data (including the trailing `\r\n`) still to discard.
        swallow: usize,
        /// The command carried `noreply`.
        noreply: bool,
        /// For `set`/`ms` in set mode: the key whose stale value must be removed.
        unlink_key: Option<bytes::Bytes>,
    },
    /// Meta command with a flag it does not know.
    #[error("CLIENT_ERROR invalid flag")]
    InvalidMetaFlag,
    /// Meta command with the same flag twice.
    #[error("CLIENT_ERROR duplicate flag")]
    DuplicateMetaFlag,
    /// `ms` with an unknown `M` mode; the data block is swallowed.
    #[error("CLIENT_ERROR invalid mode for ms M token")]
    InvalidMetaSetMode {
        /// Bytes of data still to discard.
        swallow: usize,
    },
    /// `md`/`ma` with an unknown, repeated or malformed flag.
    #[error("CLIENT_ERROR invalid or duplicate flag")]
    InvalidOrDuplicateMetaFlag,
    /// An `O` (opaque) token longer than 32 bytes.
    #[error("CLIENT_ERROR opaque token too long")]
    OpaqueTooLong,
    /// `shutdown` without memcached's `-A`.
    #[error("ERROR: shutdown not enabled")]
    ShutdownDisabled,
    /// An error after which the data block of an `ms` must be discarded.
    #[error("{error}")]
    WithSwallow {
        /// The reply.
        error: Box<ProtoError>,
        /// Bytes of data still to discard.
        swallow: usize,
    },
    /// Meta token that is not valid for its flag.
    #[error("CLIENT_ERROR bad token in command line format")]
    BadMetaToken,
    /// Base64 key that does not decode.
    #[error("CLIENT_ERROR error decoding key")]
    BadBase64Key,
    /// A command line longer than memcached tolerates without a newline:
    /// memcached closes the connection without a reply.
    #[error("line too long")]
    LineTooLong,
    /// An HTTP request line (an unknown command ending in `HTTP/...`): memcached hangs up
    /// without a reply.
    #[error("HTTP request")]
    HttpRequest,
}

impl ProtoError {
    /// True when memcached sends nothing for this error (`noreply` given).
    pub fn silent(&self) -> bool {
        match self {
            ProtoError::BadCommandLine { noreply }
            | ProtoError::DeleteUsage { noreply }
            | ProtoError::BadDataChunk { noreply }
            | ProtoError::InvalidExptime { noreply }
            | ProtoError::InvalidDelta { noreply }
            | ProtoError::TooLarge { noreply, .. } => *noreply,
            _ => false,
        }
    }

    /// True when the connection must be closed after this error.
    pub fn closes_connection(&self) -> bool {
        matches!(self, ProtoError::LineTooLong | ProtoError::HttpRequest)
    }

    /// Bytes of data that follow the command line and must be discarded.
    pub fn swallow(&self) -> usize {
        match self {
            ProtoError::TooLarge { swallow, .. }
            | ProtoError::InvalidMetaSetMode { swallow }
            | ProtoError::WithSwallow { swallow, .. } => *swallow,
            _ => 0,
        }
    }

    /// The reply line, `\r\n` included.
    pub fn reply_line(&self) -> String {
        format!("{self}\r\n")
    }
}
