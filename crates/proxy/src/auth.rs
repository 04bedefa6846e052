//! memcached's ASCII authentication (`-Y FILE`, `[proxy] auth_file`) on the client listener.
//!
//! The file format and the exchange are `tailtrim_proto::auth`'s, the same as `tailtrim serve
//! -Y` and memcached's: until a client sends `set <key> <flags> <exptime> <bytes>` with a
//! `user password` block that the file holds, every request gets `CLIENT_ERROR
//! unauthenticated` and nothing reaches a backend. SIGHUP re-reads the file; a file that no
//! longer reads or parses leaves the users read before in force.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use tailtrim_proto::auth::Credentials;

use crate::error::ProxyError;

/// The auth file of the client listener and the users last read from it.
#[derive(Debug)]
pub struct ClientAuth {
    path: PathBuf,
    credentials: RwLock<Arc<Credentials>>,
}

impl ClientAuth {
    /// Reads `path`; fails when it cannot be read or is malformed.
    pub fn load(path: impl AsRef<Path>) -> Result<ClientAuth, ProxyError> {
        let path = path.as_ref().to_path_buf();
        let credentials = read_credentials(&path)?;
        Ok(ClientAuth {
            path,
            credentials: RwLock::new(Arc::new(credentials)),
        })
    }

    /// Re-reads the file and returns its number of users. On an error the users read before
    /// stay in force, as in memcached.
    pub fn reload(&self) -> Result<usize, ProxyError> {
        let credentials = read_credentials(&self.path)?;
        let users = credentials.len();
        *self
            .credentials
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(credentials);
        Ok(users)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `user` with `password` is in the users in force (compared in constant time).
    pub fn check(&self, user: &[u8], password: &[u8]) -> bool {
        let credentials = Arc::clone(
            &self
                .credentials
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        credentials.check(user, password)
    }
}

fn read_credentials(path: &Path) -> Result<Credentials, ProxyError> {
    let text = std::fs::read(path).map_err(|error| ProxyError::AuthFile {
        path: path.display().to_string(),
        reason: format!("could not open for reading: {error}"),
    })?;
    Credentials::parse(&text).map_err(|reason| ProxyError::AuthFile {
        path: path.display().to_string(),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reload_that_fails_keeps_the_users_in_force() {
        let path = std::env::temp_dir().join(format!("tailtrim-proxy-auth-{}", std::process::id()));
        std::fs::write(&path, "alice:secret\n").unwrap();
        let auth = ClientAuth::load(&path).unwrap();
        assert!(auth.check(b"alice", b"secret"));
        std::fs::write(&path, "alice:secret\nbroken\n").unwrap();
        let error = auth.reload().unwrap_err().to_string();
        assert!(error.contains("line 2 is malformed"), "{error}");
        assert!(auth.check(b"alice", b"secret"));
        std::fs::write(&path, "bob:hunter2\n").unwrap();
        assert_eq!(auth.reload().unwrap(), 1);
        assert!(!auth.check(b"alice", b"secret"));
        assert!(auth.check(b"bob", b"hunter2"));
        std::fs::remove_file(&path).unwrap();
        let error = ClientAuth::load(&path).unwrap_err().to_string();
        assert!(error.contains("could not open for reading"), "{error}");
    }
}
