//! memcached's ASCII authentication (`-Y FILE`, `[server] auth_file`).
//!
//! The file holds `user:password` lines. A connection starts
//! unauthenticated; until it authenticates, the server reads it with the
//! rules of memcached 1.6 (`try_read_command_asciiauth`), not with the
//! command parser:
//!
//! ```text
//!   line "set <key> <flags> <exptime> <bytes>"   any other line ─► CLIENT_ERROR unauthenticated
//!        │ (key, flags, exptime ignored)         no newline in 2048 bytes ─► close
//!        ▼
//!   <bytes> + 2 bytes of data ── not ending in \r\n ─► CLIENT_ERROR bad command line termination
//!        │                       fewer than 2 words ─► CLIENT_ERROR bad authentication token format
//!        ▼                       more than the 16 KiB read buffer ─► close
//!   "user pass" in the file? ── yes ─► STORED (authenticated from now on)
//!                               no  ─► CLIENT_ERROR authentication failure
//! ```
//!
//! Nothing closes the connection but the two size bounds; a client may try
//! again after a failure. [`AuthFile::reload`] re-reads the file (what
//! memcached does on `SIGHUP`); a file that no longer parses leaves the
//! previous users in force. Passwords are compared in constant time. The exchange and the
//! file format are `tailtrim_proto::auth`'s (the proxy reads its clients with them too).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;
pub use tailtrim_proto::auth::{
    AuthState, Credentials, Outcome, Step, MAX_UNAUTHENTICATED_LINE, UNAUTHENTICATED_BUFFER,
};

use crate::ServerError;

/// An auth file and the users last read from it.
#[derive(Debug)]
pub struct AuthFile {
    path: PathBuf,
    credentials: RwLock<Arc<Credentials>>,
}

impl AuthFile {
    /// Reads `path`; fails when it cannot be read or is malformed.
    pub fn load(path: impl AsRef<Path>) -> Result<AuthFile, ServerError> {
        let path = path.as_ref().to_path_buf();
        let credentials = read_credentials(&path)?;
        Ok(AuthFile {
            path,
            credentials: RwLock::new(Arc::new(credentials)),
        })
    }

    /// Re-reads the file and returns its number of users. On an error the
    /// users read before stay in force, as in memcached.
    pub fn reload(&self) -> Result<usize, ServerError> {
        let credentials = read_credentials(&self.path)?;
        let users = credentials.len();
        *self.credentials.write() = Arc::new(credentials);
        Ok(users)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The users in force.
    pub fn credentials(&self) -> Arc<Credentials> {
        Arc::clone(&self.credentials.read())
    }

    /// `user` with `password` is in the users in force.
    pub fn check(&self, user: &[u8], password: &[u8]) -> bool {
        self.credentials.read().check(user, password)
    }
}

fn read_credentials(path: &Path) -> Result<Credentials, ServerError> {
    let text = std::fs::read(path).map_err(|error| ServerError::AuthFile {
        path: path.display().to_string(),
        reason: format!("could not open for reading: {error}"),
    })?;
    Credentials::parse(&text).map_err(|reason| ServerError::AuthFile {
        path: path.display().to_string(),
        reason,
    })
}
