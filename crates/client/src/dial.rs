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
//! With TLS toward the backends (`memcached -Z`), the handshake (≤ connect_timeout) comes
//! between the connect and the login, and the connection handed back is one end of a
//! loopback socket pair whose other end a relay task copies to and from the TLS stream: the
//! pipelined connection machinery works on plain sockets only.
//!
//! A refused login or handshake is a failed connection: it counts against the backend's
//! health like a connect error, so the backend is ejected after `failure_limit` of them.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::ClientConfig;
use tokio_rustls::TlsConnector;

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

/// TLS toward the backends: the client configuration and the name their certificates must
/// carry (unset: each backend's host).
#[derive(Clone)]
pub struct BackendTls {
    config: Arc<ClientConfig>,
    server_name: Option<String>,
}

impl BackendTls {
    /// TLS with `config`, verifying every backend as `server_name` (or its own host).
    pub fn new(config: Arc<ClientConfig>, server_name: Option<String>) -> BackendTls {
        BackendTls {
            config,
            server_name,
        }
    }

    fn name_for(&self, address: &str) -> Result<ServerName<'static>, String> {
        let host = match &self.server_name {
            Some(name) => name.as_str(),
            None => address
                .rsplit_once(':')
                .map_or(address, |(host, _)| host)
                .trim_start_matches('[')
                .trim_end_matches(']'),
        };
        ServerName::try_from(host.to_string())
            .map_err(|_| format!("{host:?} is not a DNS name or an IP address"))
    }
}

impl fmt::Debug for BackendTls {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("BackendTls")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

/// How connections to the backends are opened: TLS or not, a login or not.
#[derive(Debug, Clone, Default)]
pub struct Dialer {
    /// The `-Y` login, if any.
    pub login: Option<BackendLogin>,
    /// TLS toward the backends, if any.
    pub tls: Option<BackendTls>,
}

impl Dialer {
    /// Connects to `address` within `connect_timeout`, then makes the TLS handshake and logs
    /// in (each within another `connect_timeout`) as configured.
    pub async fn dial(
        &self,
        address: &str,
        connect_timeout: Duration,
    ) -> Result<TcpStream, ClientError> {
        let mut stream = connect(address, connect_timeout).await?;
        let Some(tls) = &self.tls else {
            if let Some(login) = &self.login {
                log_in_within(&mut stream, address, login, connect_timeout).await?;
            }
            return Ok(stream);
        };
        let handshake_failed = |reason: String| ClientError::Tls {
            backend: address.to_string(),
            reason,
        };
        let name = tls.name_for(address).map_err(handshake_failed)?;
        let connector = TlsConnector::from(Arc::clone(&tls.config));
        let handshake = connector.connect(name, stream);
        let mut secured = match tokio::time::timeout(connect_timeout, handshake).await {
            Ok(Ok(secured)) => secured,
            Ok(Err(error)) => return Err(handshake_failed(error.to_string())),
            Err(_) => {
                return Err(handshake_failed(format!(
                    "no handshake within {} ms",
                    connect_timeout.as_millis()
                )))
            }
        };
        if let Some(login) = &self.login {
            log_in_within(&mut secured, address, login, connect_timeout).await?;
        }
        relay(secured)
            .await
            .map_err(|error| handshake_failed(format!("local relay: {error}")))
    }
}

/// One end of a loopback TCP pair whose other end is copied to and from `secured` by a task
/// that ends when either side closes.
async fn relay<S>(secured: S) -> std::io::Result<TcpStream>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let ours = TcpStream::connect(listener.local_addr()?).await?;
    let expected_peer = ours.local_addr()?;
    let (theirs, peer) = listener.accept().await?;
    if peer != expected_peer {
        return Err(std::io::Error::other(
            "another process took the relay's port",
        ));
    }
    let _ = theirs.set_nodelay(true);
    tokio::spawn(async move {
        let mut theirs = theirs;
        let mut secured = secured;
        let _ = tokio::io::copy_bidirectional(&mut theirs, &mut secured).await;
    });
    Ok(ours)
}

async fn connect(address: &str, connect_timeout: Duration) -> Result<TcpStream, ClientError> {
    match tokio::time::timeout(connect_timeout, TcpStream::connect(address)).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(error)) => Err(ClientError::Connect {
            backend: address.to_string(),
            reason: error.to_string(),
        }),
        Err(_) => Err(ClientError::Connect {
            backend: address.to_string(),
            reason: format!("connect timed out after {} ms", connect_timeout.as_millis()),
        }),
    }
}

/// Logs in with `login` and waits for `STORED` within `limit`.
async fn log_in_within<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    address: &str,
    login: &BackendLogin,
    limit: Duration,
) -> Result<(), ClientError> {
    let refused = |reply: String| ClientError::Login {
        backend: address.to_string(),
        user: login.user.clone(),
        reply,
    };
    match tokio::time::timeout(limit, log_in(stream, login)).await {
        Ok(Ok(line)) if line == b"STORED\r\n" => Ok(()),
        Ok(Ok(line)) => {
            let line = String::from_utf8_lossy(&line);
            Err(refused(line.trim_end().to_string()))
        }
        Ok(Err(error)) => Err(refused(format!("connection lost: {error}"))),
        Err(_) => Err(refused(format!("no reply within {} ms", limit.as_millis()))),
    }
}

/// Sends the login and returns the reply line (with its `\r\n`, or what came before the
/// close or the length bound).
async fn log_in<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    login: &BackendLogin,
) -> std::io::Result<Vec<u8>> {
    stream.write_all(&login.request()).await?;
    stream.flush().await?;
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
