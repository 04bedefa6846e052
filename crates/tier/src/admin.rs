//! Talking to a proxy's admin listener: `GET /pool` for membership, `GET /pool/hotkeys` for
//! the hottest keys per backend, `POST`/`DELETE
//! /pool/servers` for `cluster add` and `remove` (the proxy crate's `admin` module is the
//! other side). One HTTP/1.1 request per connection, `Connection: close`, as the listener
//! answers.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use serde::Serialize;

use crate::error::TierError;
use crate::up::reachable;

/// How long an admin request may take: a join with preemptive copying answers once the
/// copies are made, which can take seconds.
pub const ADMIN_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a status read of `GET /pool` may take.
pub const READ_TIMEOUT: Duration = Duration::from_secs(2);

/// An admin reply: status code and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminReply {
    /// HTTP status code.
    pub status: u16,
    /// The body.
    pub body: String,
}

/// One request to the admin listener at `address`, with `Authorization: Bearer` when a
/// token is given.
pub fn request(
    address: &str,
    method: &str,
    target: &str,
    token: Option<&str>,
    timeout: Duration,
) -> Result<AdminReply, TierError> {
    let failed = |message: String| TierError::Admin {
        address: address.to_string(),
        message,
    };
    let mut stream =
        TcpStream::connect(reachable(address)).map_err(|error| failed(error.to_string()))?;
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .map_err(|error| failed(error.to_string()))?;
    let authorization = token
        .map(|token| format!("Authorization: Bearer {token}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "{method} {target} HTTP/1.1\r\nHost: {address}\r\n{authorization}Content-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .map_err(|error| failed(format!("sending {method} {target}: {error}")))?;
    let mut reply = Vec::new();
    stream
        .read_to_end(&mut reply)
        .map_err(|error| failed(format!("reading the reply to {method} {target}: {error}")))?;
    let text = String::from_utf8_lossy(&reply);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| failed(format!("{method} {target}: no HTTP reply")))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| failed(format!("{method} {target}: bad status line")))?;
    Ok(AdminReply {
        status,
        body: body.to_string(),
    })
}

/// `GET /pool` of the proxy whose admin listener is `address`, as JSON.
pub fn pool(address: &str) -> Result<serde_json::Value, TierError> {
    let reply = request(address, "GET", "/pool", None, READ_TIMEOUT)?;
    parse_json(address, &reply)
}

/// `GET /pool/hotkeys?server=BACKEND&n=N` of the proxy whose admin listener is `address`:
/// the `n` hottest keys its tracker of `backend` holds, as (key, estimated requests since
/// the proxy started or the backend joined).
pub fn hot_keys(address: &str, backend: &str, n: usize) -> Result<Vec<(String, u64)>, TierError> {
    let target = format!(
        "/pool/hotkeys?server={}&n={n}",
        utf8_percent_encode(backend, NON_ALPHANUMERIC)
    );
    let reply = request(address, "GET", &target, None, READ_TIMEOUT)?;
    let body = parse_json(address, &reply)?;
    Ok(body["keys"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|hot| Some((hot["key"].as_str()?.to_string(), hot["count"].as_u64()?)))
        .collect())
}

/// A membership change to send to every proxy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Change {
    /// True: join (`POST`); false: leave (`DELETE`).
    pub adding: bool,
    /// `host:port[:weight]`.
    pub server: String,
    /// Warm-up mode; `None`: the proxy's `[warmup] mode` (join) or `remove_mode` (leave).
    pub warmup: Option<String>,
    /// Share of the moved keys copied; `None`: the proxy's `[warmup] warm_share`.
    pub share: Option<f64>,
}

impl Change {
    /// The request target, `/pool/servers?server=...`, every value percent-encoded (a
    /// mode's `+` must not read as a space).
    pub fn target(&self) -> String {
        let mut target = format!(
            "/pool/servers?server={}",
            utf8_percent_encode(&self.server, NON_ALPHANUMERIC)
        );
        if let Some(mode) = &self.warmup {
            target.push_str(&format!(
                "&warmup={}",
                utf8_percent_encode(mode, NON_ALPHANUMERIC)
            ));
        }
        if let Some(share) = self.share {
            target.push_str(&format!("&share={share}"));
        }
        target
    }

    /// Sends the change to the proxy whose admin listener is `address`; the proxy's JSON
    /// report (ring version, servers before and after, keys copied, ...).
    pub fn apply(
        &self,
        address: &str,
        token: Option<&str>,
    ) -> Result<serde_json::Value, TierError> {
        let method = if self.adding { "POST" } else { "DELETE" };
        let reply = request(address, method, &self.target(), token, ADMIN_TIMEOUT)?;
        parse_json(address, &reply)
    }
}

/// The JSON body of a `200`, or the listener's `{"error": ...}` as an error.
fn parse_json(address: &str, reply: &AdminReply) -> Result<serde_json::Value, TierError> {
    let value: Option<serde_json::Value> = serde_json::from_str(&reply.body).ok();
    if reply.status == 200 {
        return value.ok_or_else(|| TierError::Admin {
            address: address.to_string(),
            message: format!("not JSON: {:?}", reply.body),
        });
    }
    let message = value
        .as_ref()
        .and_then(|value| value.get("error"))
        .and_then(serde_json::Value::as_str)
        .map_or_else(|| reply.body.trim().to_string(), str::to_string);
    Err(TierError::Admin {
        address: address.to_string(),
        message: format!("{}: {message}", reply.status),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_encoded() {
        let change = Change {
            adding: true,
            server: "127.0.0.1:11214:2".to_string(),
            warmup: Some("preemptive+fallback".to_string()),
            share: Some(0.5),
        };
        assert_eq!(
            change.target(),
            "/pool/servers?server=127%2E0%2E0%2E1%3A11214%3A2&warmup=preemptive%2Bfallback&share=0.5"
        );
    }
}
