//! Opening a connection to a backend: TCP connect, then, for a `-Y` backend, memcached's
//! ASCII login before the connection is used for anything else.
//!
//! ```text
//!   connect (≤ connect_timeout) ──► login set? ── no ──► ready
//!                                        │ yes: "set auth 0 0 <n>\r\nuser password\r\n"
//!                                        ▼
//!                     reply line (≤ connect_timeout) ── "STORED" ──► ready
//!                                        └── anything else, close, timeout ──► ClientError::Login
//! ```
//!
//! A refused login is a failed connection: it counts against the backend's health like a
//! connect error, so the backend is ejected after `failure_limit` of them.

use std::fmt;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::error::ClientError;

/// The longest reply line read from a backend during the login.
const LOGIN_REPLY_LIMIT: usize = 1024;

/// A user and password the client sends on every new connection to `-Y` backends.
#[derive(Clone, PartialEq, Eq)]
pub struct BackendLogin {
    user: String,
    password: String,
}

impl BackendLogin {
    /// A login, refused when a server could not read it back whole (empty, or holding a
    /// space, `\r`, `\n` or NUL: see `tailtrim_proto::auth::login_pair_is_valid`).
    pub fn new(user: &str, password: &str) -> Result<BackendLogin, ClientError> {
        if !tailtrim_proto::auth::login_pair_is_valid(user.as_bytes(), password.as_bytes()) {
            return Err(ClientError::Config(format!(
                "backend credentials for user {user:?}: the user and the password must be \
                 non-empty and hold no space, CR, LF or NUL"
            )));
        }
        Ok(BackendLogin {
            user: user.to_string(),
            password: password.to_string(),
        })
    }

    /// The first `user:password` line of a memcached `-Y` file's text.
    pub fn from_auth_file_text(text: &str) -> Result<BackendLogin, ClientError> {
        let line = text.lines().next().unwrap_or("");
        let (user, password) = line.split_once(':').ok_or_else(|| {
            ClientError::Config("the first line is not 'user:password'".to_string())
        })?;
        BackendLogin::new(user, password.trim_end_matches('\r'))
    }

    /// The user name.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// The bytes that log in.
    pub fn request(&self) -> Vec<u8> {
        tailtrim_proto::auth::login_request(self.user.as_bytes(), self.password.as_bytes())
    }
}

/// The password is never printed.
impl fmt::Debug for BackendLogin {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("BackendLogin")
            .field("user", &self.user)
            .field("password", &"<hidden>")
            .finish()
    }
}

/// Connects to `address` within `connect_timeout`, then logs in with `login` (if any) within
/// another `connect_timeout`.
pub async fn dial(
    address: &str,
    connect_timeout: Duration,
    login: Option<&BackendLogin>,
) -> Result<TcpStream, ClientError> {
    let connect = TcpStream::connect(address);
    let mut stream = match tokio::time::timeout(connect_timeout, connect).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => {
            return Err(ClientError::Connect {
                backend: address.to_string(),
                reason: error.to_string(),
            })
        }
        Err(_) => {
            return Err(ClientError::Connect {
                backend: address.to_string(),
                reason: format!("connect timed out after {} ms", connect_timeout.as_millis()),
            })
        }
    };
    if let Some(login) = login {
        let refused = |reply: String| ClientError::Login {
            backend: address.to_string(),
            user: login.user.clone(),
            reply,
        };
        match tokio::time::timeout(connect_timeout, log_in(&mut stream, login)).await {
            Ok(Ok(line)) if line == b"STORED\r\n" => {}
            Ok(Ok(line)) => {
                let line = String::from_utf8_lossy(&line);
                return Err(refused(line.trim_end().to_string()));
            }
            Ok(Err(error)) => return Err(refused(format!("connection lost: {error}"))),
            Err(_) => {
                return Err(refused(format!(
                    "no reply within {} ms",
                    connect_timeout.as_millis()
                )))
            }
        }
    }
    Ok(stream)
}

/// Sends the login and returns the reply line (with its `\r\n`, or what came before the
/// close or the length bound).
async fn log_in(stream: &mut TcpStream, login: &BackendLogin) -> std::io::Result<Vec<u8>> {
    stream.write_all(&login.request()).await?;
    let mut line = Vec::with_capacity(64);
    let mut byte = [0u8; 1];
    // Byte by byte: nothing after the reply line may be consumed (there should be nothing,
    // and the reply is a few bytes).
    while !line.ends_with(b"\n") && line.len() < LOGIN_REPLY_LIMIT {
        if stream.read(&mut byte).await? == 0 {
            if line.is_empty() {
                line.extend_from_slice(b"(connection closed)");
            }
            break;
        }
        line.push(byte[0]);
    }
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logins_that_a_server_could_not_read_are_refused() {
        assert!(BackendLogin::new("alice", "s3cret:x").is_ok());
        for (user, password) in [("", "x"), ("a", ""), ("a b", "x"), ("a", "x y")] {
            assert!(BackendLogin::new(user, password).is_err(), "{user:?}");
        }
        let login = BackendLogin::from_auth_file_text("alice:secret\r\nbob:x\n").unwrap();
        assert_eq!(login.user(), "alice");
        assert_eq!(login.request(), b"set auth 0 0 12\r\nalice secret\r\n");
        assert!(!format!("{login:?}").contains("secret"));
        assert!(BackendLogin::from_auth_file_text("no colon\n").is_err());
        assert!(BackendLogin::from_auth_file_text("").is_err());
    }
}
