//! The admin listener: a minimal HTTP/1.x responder.
//!
//! ```text
//!   GET    /metrics                                  Prometheus text (format 0.0.4)
//!   GET    /pool                                     membership, phase, last change (JSON)
//!   POST   /pool/servers?server=H:P[:W]&warmup=MODE&share=F   (MODE's `+` escaped or not)
//!                                                    add a backend (or re-weight a member)
//!   DELETE /pool/servers?server=H:P&warmup=drain|cold&share=F
//!                                                    remove a backend
//!   GET    /pool/hotkeys?server=H:P&n=N              that backend's hottest tracked keys
//! ```
//!
//! Changes answer once the new ring version routes requests (after any preemptive copying);
//! a fallback warm-up goes on in the background (`GET /pool` shows when it ended). Errors are
//! `400` with a JSON `{"error": …}`. `HEAD` works wherever `GET` does; any other path is
//! `404`, a method a path does not take `405` (with `Allow`).
//!
//! Reads are open to whoever can connect. Membership changes (`POST`/`DELETE
//! /pool/servers`) follow [`MembershipAccess`]: with an admin token (`[proxy] admin_token` or
//! `admin_token_file`) they need `Authorization: Bearer <token>` and answer `401` (with
//! `WWW-Authenticate: Bearer`) without it; without a token they are allowed on a loopback
//! listener (the default `127.0.0.1:22123`) and answer `403` on any other, which start-up
//! warns about.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use subtle::ConstantTimeEq;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use tailtrim_client::{ChangeReport, ServerSpec};
use tailtrim_metrics::exposition::CONTENT_TYPE;

use crate::config::ProxySection;
use crate::error::ProxyError;
use crate::frontend::Shared;
use crate::metrics::prometheus_text;

/// Largest request head read before answering.
const MAX_HEAD: usize = 8192;
/// A client that sends no complete head within this time is dropped.
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);

/// Who may change the pool's membership through the admin listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MembershipAccess {
    /// Callers that send `Authorization: Bearer <token>` with this token.
    Token(String),
    /// Anyone who can connect: no token, and the listener is on loopback.
    Loopback,
    /// Nobody: no token, and the listener is reachable from other hosts.
    Refused,
}

impl MembershipAccess {
    /// The policy for a listener bound to `bound` with the configured `token`.
    pub fn decide(token: Option<String>, bound: IpAddr) -> MembershipAccess {
        match token {
            Some(token) => MembershipAccess::Token(token),
            None if bound.is_loopback() => MembershipAccess::Loopback,
            None => MembershipAccess::Refused,
        }
    }

    /// What start-up prints about a listener bound to `bound` under this policy; `None` on
    /// loopback.
    pub fn startup_notice(&self, bound: SocketAddr) -> Option<String> {
        if bound.ip().is_loopback() {
            return None;
        }
        Some(match self {
            MembershipAccess::Token(_) => format!(
                "admin listener on {bound} is not loopback: GET /metrics and GET /pool are open to the network; membership changes require the admin token"
            ),
            MembershipAccess::Loopback | MembershipAccess::Refused => format!(
                "warning: admin listener on {bound} is not loopback and no admin token is set: GET /metrics and GET /pool are open to the network, and membership changes (POST/DELETE /pool/servers) are refused with 403; set [proxy] admin_token_file or --admin-token-file to allow them"
            ),
        })
    }

    /// `Ok` if a membership change with this request head may go ahead, else the refusal.
    fn check(&self, head: &[u8]) -> Result<(), Vec<u8>> {
        let expected = match self {
            MembershipAccess::Loopback => return Ok(()),
            MembershipAccess::Refused => {
                return Err(json_error(
                    "403 Forbidden",
                    None,
                    "membership changes are refused: the admin listener is not on loopback and no admin token is set",
                ))
            }
            MembershipAccess::Token(token) => token,
        };
        let presented = bearer_token(head).unwrap_or_default();
        if bool::from(presented.ct_eq(expected.as_bytes())) {
            Ok(())
        } else {
            Err(json_error(
                "401 Unauthorized",
                Some(("WWW-Authenticate", "Bearer")),
                "membership changes need Authorization: Bearer <admin token>",
            ))
        }
    }
}

/// A bound admin listener with its membership policy.
pub struct AdminListener {
    listener: TcpListener,
    access: MembershipAccess,
}

impl AdminListener {
    /// Reads the admin token of `proxy`, decides the policy for the address `listener` is
    /// bound to, and prints the start-up notice (to stderr) when that is not loopback.
    pub fn new(listener: TcpListener, proxy: &ProxySection) -> Result<AdminListener, ProxyError> {
        let token = proxy.admin_token()?;
        let bound = listener.local_addr().map_err(|source| ProxyError::Io {
            what: "reading the admin listener's address".to_string(),
            source,
        })?;
        let access = MembershipAccess::decide(token, bound.ip());
        if let Some(notice) = access.startup_notice(bound) {
            eprintln!("tailtrim proxy: {notice}");
        }
        Ok(AdminListener { listener, access })
    }

    /// The address bound.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The membership policy.
    pub fn access(&self) -> &MembershipAccess {
        &self.access
    }
}

/// Accepts admin connections forever.
pub async fn serve(admin: AdminListener, shared: Arc<Shared>) {
    let access = Arc::new(admin.access);
    loop {
        match admin.listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(answer(stream, shared.clone(), access.clone()));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// The credentials of the head's first `Authorization: Bearer` header (name and scheme
/// compared without case, as RFC 9110 says).
fn bearer_token(head: &[u8]) -> Option<&[u8]> {
    let value = head.split(|&b| b == b'\n').skip(1).find_map(|line| {
        let colon = line.iter().position(|&b| b == b':')?;
        line[..colon]
            .eq_ignore_ascii_case(b"authorization")
            .then(|| line[colon + 1..].trim_ascii())
    })?;
    let space = value.iter().position(|&b| b == b' ')?;
    value[..space]
        .eq_ignore_ascii_case(b"bearer")
        .then(|| value[space + 1..].trim_ascii())
}

async fn answer(mut stream: TcpStream, shared: Arc<Shared>, access: Arc<MembershipAccess>) {
    let mut head = Vec::with_capacity(512);
    let read = async {
        let mut chunk = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_HEAD {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&chunk[..n]),
            }
        }
    };
    if tokio::time::timeout(HEAD_TIMEOUT, read).await.is_err() {
        return;
    }
    let response = route(&head, &shared, &access).await;
    let _ = stream.write_all(&response).await;
    let _ = stream.shutdown().await;
}

/// Methods each admin path answers; another method gets `405` with this `Allow` list.
fn allowed_methods(path: &[u8]) -> Option<&'static str> {
    match path {
        b"/metrics" | b"/pool" | b"/pool/hotkeys" => Some("GET, HEAD"),
        b"/pool/servers" => Some("POST, DELETE"),
        _ => None,
    }
}

/// The HTTP response to a request head: unknown paths `404`, a method a path does not take
/// `405`, a head without a request line `400`; `HEAD` gets `GET`'s headers without the body.
async fn route(head: &[u8], shared: &Shared, access: &MembershipAccess) -> Vec<u8> {
    let request_line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let request_line = request_line.strip_suffix(b"\r").unwrap_or(request_line);
    let words: Vec<&[u8]> = request_line.split(|&b| b == b' ').collect();
    let (method, target) = match words.as_slice() {
        [method, target, version] if version.starts_with(b"HTTP/") => (*method, *target),
        _ => {
            return response(
                "400 Bad Request",
                None,
                "text/plain",
                b"bad request\n",
                true,
            )
        }
    };
    let (path, query) = match target.iter().position(|&b| b == b'?') {
        Some(at) => (&target[..at], &target[at + 1..]),
        None => (target, &b""[..]),
    };
    let with_body = method != b"HEAD";
    let Some(allowed) = allowed_methods(path) else {
        return response(
            "404 Not Found",
            None,
            "text/plain",
            NOT_FOUND.as_bytes(),
            with_body,
        );
    };
    let method_name = if method == b"HEAD" {
        &b"GET"[..]
    } else {
        method
    };
    if !allowed
        .split(", ")
        .any(|name| name.as_bytes() == method_name)
    {
        return response(
            "405 Method Not Allowed",
            Some(("Allow", allowed)),
            "text/plain",
            b"method not allowed\n",
            with_body,
        );
    }
    if path == b"/pool/servers" {
        if let Err(refusal) = access.check(head) {
            return refusal;
        }
    }
    let params = parse_query(query);
    let param = |name: &str| {
        params
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    };
    let (status, content_type, body) = match path {
        b"/metrics" => match prometheus_text(shared) {
            Ok(text) => ("200 OK", CONTENT_TYPE, text),
            Err(error) => {
                eprintln!("tailtrim proxy: /metrics not rendered: {error}");
                (
                    "500 Internal Server Error",
                    "text/plain",
                    format!("{error}\n"),
                )
            }
        },
        b"/pool" => ("200 OK", "application/json", status_json(shared)),
        b"/pool/servers" => {
            let adding = method == b"POST";
            match change(
                shared,
                adding,
                param("server"),
                param("warmup"),
                param("share"),
            )
            .await
            {
                Ok(body) => ("200 OK", "application/json", body),
                Err(message) => (
                    "400 Bad Request",
                    "application/json",
                    serde_json::json!({ "error": message }).to_string(),
                ),
            }
        }
        _ => {
            let n = param("n").and_then(|n| n.parse().ok()).unwrap_or(20);
            let server = param("server").unwrap_or_default();
            let keys: Vec<serde_json::Value> = shared
                .pool
                .hot_keys(server, n)
                .into_iter()
                .map(|hot| {
                    serde_json::json!({
                        "key": String::from_utf8_lossy(&hot.key),
                        "count": hot.count,
                        "error": hot.error,
                    })
                })
                .collect();
            (
                "200 OK",
                "application/json",
                serde_json::json!({ "server": server, "keys": keys }).to_string(),
            )
        }
    };
    response(status, None, content_type, body.as_bytes(), with_body)
}

/// The body of a `404`: what the listener answers.
const NOT_FOUND: &str = "not found; tailtrim proxy admin: GET /metrics, GET /pool, POST|DELETE /pool/servers?server=H:P, GET /pool/hotkeys?server=H:P\n";

/// An HTTP/1.1 response that closes the connection, with one more header (`Allow`,
/// `WWW-Authenticate`) when given; `with_body` false (for `HEAD`) keeps the headers,
/// `Content-Length` included.
fn response(
    status: &str,
    header: Option<(&str, &str)>,
    content_type: &str,
    body: &[u8],
    with_body: bool,
) -> Vec<u8> {
    let header = header.map_or_else(String::new, |(name, value)| format!("{name}: {value}\r\n"));
    let mut bytes = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n{header}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if with_body {
        bytes.extend_from_slice(body);
    }
    bytes
}

/// A JSON `{"error": message}` response.
fn json_error(status: &str, header: Option<(&str, &str)>, message: &str) -> Vec<u8> {
    let body = serde_json::json!({ "error": message }).to_string();
    response(status, header, "application/json", body.as_bytes(), true)
}

/// Applies a join/re-weight (`adding`) or a removal; the JSON answer describes the change.
async fn change(
    shared: &Shared,
    adding: bool,
    server: Option<&str>,
    warmup: Option<&str>,
    share: Option<&str>,
) -> Result<String, String> {
    let server = server.ok_or("missing server=HOST:PORT[:WEIGHT]")?;
    let mut section = shared.warmup.clone();
    if let Some(share) = share {
        section.warm_share = share.parse().map_err(|_| format!("bad share {share:?}"))?;
    }
    let default_mode = if adding {
        section.mode.clone()
    } else {
        section.remove_mode.clone()
    };
    // A query decodes `+` to a space, and no mode name holds one: `preemptive+fallback`
    // written unescaped means what it says.
    let warmup = warmup.map(|mode| mode.replace(' ', "+"));
    let settings = section
        .settings(warmup.as_deref().unwrap_or(&default_mode))
        .map_err(|error| error.to_string())?;
    let verb = if adding { "add" } else { "remove" };
    let report = if adding {
        let spec = ServerSpec::parse(server).map_err(|error| error.to_string())?;
        shared.pool.add_server(spec, settings).await
    } else {
        let address = match ServerSpec::parse(server) {
            Ok(spec) => spec.address(),
            Err(_) => server.to_string(),
        };
        shared.pool.remove_server(&address, settings).await
    }
    .map_err(|error| {
        tracing::warn!("tailtrim proxy: admin {verb} {server} refused: {error}");
        error.to_string()
    })?;
    tracing::info!(
        "tailtrim proxy: admin {verb} {server} (warm-up {}): version {}, servers {} -> {}",
        report.mode,
        report.version,
        report.before.join(","),
        report.after.join(",")
    );
    Ok(report_json(&report).to_string())
}

fn report_json(report: &ChangeReport) -> serde_json::Value {
    serde_json::json!({
        "version": report.version,
        "mode": report.mode,
        "before": report.before,
        "after": report.after,
        "moved_tracked": report.moved_tracked,
        "moved_held": report.moved_held,
        "unlisted": report.unlisted,
        "planned": report.planned,
        "copied": report.copied,
        "copy_ms": report.copy_ms,
        "warmup_end": report.warmup_end,
        "warmup_ms": report.warmup_ms,
    })
}

fn status_json(shared: &Shared) -> String {
    let status = shared.pool.status();
    let stats = shared.pool.stats();
    serde_json::json!({
        "version": status.version,
        "servers": status.servers,
        "phase": status.phase,
        "last_change": status.last_change.as_ref().map(report_json),
        "copies": stats.copies.get(),
        "copy_misses": stats.copy_misses.get(),
        "fallback_reads": stats.fallback_reads.get(),
        "fallback_hits": stats.fallback_hits.get(),
        "fenced_writes": stats.fenced_writes.get(),
        "former_owner_deletes": stats.former_owner_deletes.get(),
        "leftovers_deleted": stats.leftovers_deleted.get(),
        "history_gaps": stats.history_gaps.get(),
        "tracker_bytes": shared.pool.tracker_memory(),
    })
    .to_string()
}

/// `a=b&c=d` with `%XX` and `+` decoded.
fn parse_query(query: &[u8]) -> Vec<(String, String)> {
    query
        .split(|&b| b == b'&')
        .filter(|part| !part.is_empty())
        .map(|part| {
            let (key, value) = match part.iter().position(|&b| b == b'=') {
                Some(at) => (&part[..at], &part[at + 1..]),
                None => (part, &b""[..]),
            };
            (decode(key), decode(value))
        })
        .collect()
}

fn decode(text: &[u8]) -> String {
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < text.len() => {
                let hex = std::str::from_utf8(&text[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(byte) => {
                        out.push(byte);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            byte => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_are_found_in_the_head() {
        let head =
            b"POST /pool/servers HTTP/1.1\r\nHost: x\r\nAUTHORIZATION:  Bearer  t0k=n \r\n\r\n";
        assert_eq!(bearer_token(head), Some(&b"t0k=n"[..]));
        assert_eq!(
            bearer_token(b"POST / HTTP/1.1\r\nAuthorization: Basic abc\r\n\r\n"),
            None
        );
        assert_eq!(
            bearer_token(b"POST / HTTP/1.1\r\nX-Authorization: Bearer abc\r\n\r\n"),
            None
        );
        // The request line is no header, even when its target holds one's name.
        assert_eq!(
            bearer_token(b"POST /authorization: Bearer abc HTTP/1.1\r\n\r\n"),
            None
        );
    }

    #[test]
    fn the_policy_follows_the_token_and_the_bound_address() {
        let loopback: SocketAddr = "127.0.0.1:22123".parse().unwrap();
        let public: SocketAddr = "0.0.0.0:22123".parse().unwrap();
        let open = MembershipAccess::decide(None, loopback.ip());
        assert_eq!(open, MembershipAccess::Loopback);
        assert_eq!(open.startup_notice(loopback), None);
        assert!(open.check(b"POST / HTTP/1.1\r\n\r\n").is_ok());
        let refused = MembershipAccess::decide(None, public.ip());
        assert_eq!(refused, MembershipAccess::Refused);
        let warning = refused.startup_notice(public).unwrap();
        assert!(
            warning.starts_with("warning:") && warning.contains("403"),
            "{warning}"
        );
        let answer = refused.check(b"POST / HTTP/1.1\r\n\r\n").unwrap_err();
        assert!(answer.starts_with(b"HTTP/1.1 403 Forbidden\r\n"));
        let guarded = MembershipAccess::decide(Some("t".to_string()), public.ip());
        assert!(guarded
            .startup_notice(public)
            .unwrap()
            .contains("require the admin token"));
        assert!(guarded
            .check(b"POST / HTTP/1.1\r\nAuthorization: Bearer t\r\n\r\n")
            .is_ok());
        let answer = guarded.check(b"POST / HTTP/1.1\r\n\r\n").unwrap_err();
        let answer = String::from_utf8(answer).unwrap();
        assert!(
            answer.starts_with("HTTP/1.1 401 Unauthorized\r\n"),
            "{answer}"
        );
        assert!(
            answer.contains("\r\nWWW-Authenticate: Bearer\r\n"),
            "{answer}"
        );
    }

    #[test]
    fn queries_decode() {
        let params =
            parse_query(b"server=127.0.0.1%3A11214:2+alpha&warmup=preemptive%2Bfallback&x");
        assert_eq!(params[0].1, "127.0.0.1:11214:2 alpha");
        assert_eq!(params[1].1, "preemptive+fallback");
        assert_eq!(params[2], ("x".to_string(), String::new()));
        assert_eq!(decode(b"%zz%4"), "%zz%4");
    }
}
