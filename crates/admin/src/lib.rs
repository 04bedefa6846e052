//! The HTTP admin listener of the server and the proxy, one component for both: `hyper`'s
//! HTTP/1 server on a tokio listener, with a table of routes.
//!
//! ```text
//!   TCP ──► hyper (HTTP/1, one request per connection) ──► Admin::answer
//!             │ unknown path 404 · method a path does not take 405 + Allow · bad head 400
//!             │ a change route: Access (bearer token / loopback / refused) 401 · 403
//!             └──► the route's handler ──► Reply (status, content type, body)
//! ```
//!
//! Every admin listener answers [`Admin::with_metrics`]' two endpoints:
//!
//! ```text
//!   GET  /metrics   Prometheus text (format 0.0.4); 500 with the broken rule if not rendered
//!   GET  /health    200 `ok`: the process is up and its admin thread answers
//! ```
//!
//! A component adds its own routes: [`Admin::read`] (`GET` and `HEAD`, open to whoever can
//! connect) and [`Admin::change`] (other methods, under the listener's [`Access`]). `HEAD`
//! answers `GET`'s headers, `Content-Length` included, without the body. Each connection
//! serves one request and is closed (`Connection: close`); a head that does not arrive within
//! [`HEAD_TIMEOUT`] is dropped.

pub mod error;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::fmt::Display;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{
    HeaderName, HeaderValue, ALLOW, AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE,
};
use hyper::service::service_fn;
use hyper::{Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use percent_encoding::percent_decode_str;
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;

pub use error::AdminError;

/// A client that sends no complete request head within this time is dropped.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest request head read.
const MAX_HEAD: usize = 8192;
/// `Content-Type` of the Prometheus text format (0.0.4).
pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What a handler is given: the method, the path and the decoded query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `POST` … (`HEAD` is handed to handlers as `GET`).
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// `name=value` pairs of the query, `%XX` and `+` decoded, in order.
    pub query: Vec<(String, String)>,
}

impl Request {
    /// The first value of query parameter `name`.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

/// A handler's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// HTTP status code.
    pub status: u16,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// One more header (`Allow`, `WWW-Authenticate`), when given.
    pub header: Option<(&'static str, &'static str)>,
    /// The body.
    pub body: String,
}

impl Reply {
    /// A `200` with `body` of `content_type`.
    pub fn ok(content_type: &'static str, body: String) -> Reply {
        Reply {
            status: 200,
            content_type,
            header: None,
            body,
        }
    }

    /// A `text/plain` answer.
    pub fn text(status: u16, body: &str) -> Reply {
        Reply {
            status,
            content_type: "text/plain",
            header: None,
            body: body.to_string(),
        }
    }

    /// A JSON `{"error": message}` answer.
    pub fn json_error(status: u16, message: &str) -> Reply {
        Reply {
            status,
            content_type: "application/json",
            header: None,
            body: format!("{{\"error\":{}}}", json_string(message)),
        }
    }

    /// The same answer with one more header.
    pub fn with_header(mut self, name: &'static str, value: &'static str) -> Reply {
        self.header = Some((name, value));
        self
    }
}

/// `text` as a JSON string literal.
fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A boxed handler future.
pub type ReplyFuture = Pin<Box<dyn Future<Output = Reply> + Send>>;
/// A route's handler.
type Handler = Arc<dyn Fn(Request) -> ReplyFuture + Send + Sync>;

/// Who may use the change routes ([`Admin::change`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// Callers that send `Authorization: Bearer <token>` with this token.
    Token(String),
    /// Anyone who can connect: no token, and the listener is on loopback.
    Loopback,
    /// Nobody: no token, and the listener is reachable from other hosts.
    Refused,
}

impl Access {
    /// The policy for a listener bound to `bound` with the configured `token`.
    pub fn decide(token: Option<String>, bound: IpAddr) -> Access {
        match token {
            Some(token) => Access::Token(token),
            None if bound.is_loopback() => Access::Loopback,
            None => Access::Refused,
        }
    }

    /// `Ok` if a change with this `Authorization` header value (if any) may go ahead, else
    /// the refusal: `403` when nobody may, `401` with `WWW-Authenticate: Bearer` without the
    /// right token. `what` names the changes in the refusal (`membership changes`).
    pub fn check(&self, authorization: Option<&[u8]>, what: &str) -> Result<(), Reply> {
        let expected = match self {
            Access::Loopback => return Ok(()),
            Access::Refused => {
                return Err(Reply::json_error(
                    403,
                    &format!("{what} are refused: the admin listener is not on loopback and no admin token is set"),
                ))
            }
            Access::Token(token) => token,
        };
        let presented = authorization.and_then(bearer_token).unwrap_or_default();
        if bool::from(presented.ct_eq(expected.as_bytes())) {
            Ok(())
        } else {
            Err(Reply::json_error(
                401,
                &format!("{what} need Authorization: Bearer <admin token>"),
            )
            .with_header("WWW-Authenticate", "Bearer"))
        }
    }
}

/// The credentials of an `Authorization: Bearer` header value (the scheme compared without
/// case, as RFC 9110 says).
fn bearer_token(value: &[u8]) -> Option<&[u8]> {
    let value = value.trim_ascii();
    let space = value.iter().position(|&b| b == b' ')?;
    value[..space]
        .eq_ignore_ascii_case(b"bearer")
        .then(|| value[space + 1..].trim_ascii())
}

struct Route {
    /// The methods the path takes, as the `Allow` header lists them.
    allow: &'static str,
    /// `Some(what)`: a change route under the listener's [`Access`].
    guarded: Option<&'static str>,
    handler: Handler,
}

/// An admin listener's routes and access policy.
pub struct Admin {
    routes: BTreeMap<&'static str, Route>,
    access: Access,
    not_found: String,
}

impl Admin {
    /// No routes yet; `not_found` is the body of a `404` (what the listener answers).
    pub fn new(not_found: &str) -> Admin {
        Admin {
            routes: BTreeMap::new(),
            access: Access::Loopback,
            not_found: not_found.to_string(),
        }
    }

    /// The endpoints every admin listener has: `GET /metrics`, the page `render` gives
    /// (a `500` with the error's text, logged, if it cannot be rendered), and `GET /health`.
    pub fn with_metrics<E, F>(self, render: F) -> Admin
    where
        E: Display,
        F: Fn() -> Result<String, E> + Send + Sync + 'static,
    {
        let render = Arc::new(render);
        self.read("/metrics", move |_| {
            let reply = match render() {
                Ok(text) => Reply::ok(METRICS_CONTENT_TYPE, text),
                Err(error) => {
                    tracing::error!("tailtrim admin: /metrics not rendered: {error}");
                    Reply::text(500, &format!("{error}\n"))
                }
            };
            Box::pin(std::future::ready(reply))
        })
        .read("/health", |_| {
            Box::pin(std::future::ready(Reply::text(200, "ok\n")))
        })
    }

    /// Adds a `GET` (and `HEAD`) route open to whoever can connect.
    pub fn read<F>(mut self, path: &'static str, handler: F) -> Admin
    where
        F: Fn(Request) -> ReplyFuture + Send + Sync + 'static,
    {
        self.routes.insert(
            path,
            Route {
                allow: "GET, HEAD",
                guarded: None,
                handler: Arc::new(handler),
            },
        );
        self
    }

    /// Adds a route for the methods `allow` lists (e.g. `"POST, DELETE"`) under the
    /// listener's [`Access`]; `what` names these changes in a refusal.
    pub fn change<F>(
        mut self,
        path: &'static str,
        allow: &'static str,
        what: &'static str,
        handler: F,
    ) -> Admin
    where
        F: Fn(Request) -> ReplyFuture + Send + Sync + 'static,
    {
        self.routes.insert(
            path,
            Route {
                allow,
                guarded: Some(what),
                handler: Arc::new(handler),
            },
        );
        self
    }

    /// Sets who may use the change routes (default [`Access::Loopback`]).
    pub fn with_access(mut self, access: Access) -> Admin {
        self.access = access;
        self
    }

    /// The change routes' policy.
    pub fn access(&self) -> &Access {
        &self.access
    }

    /// The answer to one request: `404` for an unknown path, `405` (with `Allow`) for a
    /// method the path does not take, the [`Access`] refusal for a change route, else the
    /// route's handler. `HEAD` is answered as `GET` (the body is dropped when sent).
    pub async fn answer(&self, method: &str, target: &str, authorization: Option<&[u8]>) -> Reply {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let Some(route) = self.routes.get(path) else {
            return Reply::text(404, &self.not_found);
        };
        if !route.allow.split(", ").any(|allowed| allowed == method) {
            return Reply::text(405, "method not allowed\n").with_header("Allow", route.allow);
        }
        if let Some(what) = route.guarded {
            if let Err(refusal) = self.access.check(authorization, what) {
                return refusal;
            }
        }
        let method = if method == "HEAD" { "GET" } else { method };
        let request = Request {
            method: method.to_string(),
            path: path.to_string(),
            query: parse_query(query),
        };
        (route.handler)(request).await
    }

    /// Serves `listener` until `stop` completes (one task per connection).
    pub async fn serve_until(
        self: Arc<Self>,
        listener: TcpListener,
        stop: impl Future<Output = ()>,
    ) {
        tokio::select! {
            () = self.serve(listener) => {}
            () = stop => {}
        }
    }

    /// Serves `listener` forever (one task per connection); accept errors (e.g. no
    /// descriptor left) are retried after a short pause.
    pub async fn serve(self: Arc<Self>, listener: TcpListener) {
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    let admin = Arc::clone(&self);
                    tokio::spawn(async move {
                        let service = service_fn(move |request| {
                            let admin = Arc::clone(&admin);
                            async move { Ok::<_, Infallible>(admin.respond(request).await) }
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .keep_alive(false)
                            .title_case_headers(true)
                            .auto_date_header(false)
                            .max_buf_size(MAX_HEAD)
                            .timer(TokioTimer::new())
                            .header_read_timeout(HEAD_TIMEOUT)
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    async fn respond(&self, request: hyper::Request<Incoming>) -> Response<Full<Bytes>> {
        let method = request.method().as_str().to_string();
        let target = request.uri().path_and_query().map_or_else(
            || request.uri().path().to_string(),
            |pq| pq.as_str().to_string(),
        );
        let authorization = request
            .headers()
            .get(AUTHORIZATION)
            .map(|value| value.as_bytes().to_vec());
        let reply = self
            .answer(&method, &target, authorization.as_deref())
            .await;
        http_response(reply)
    }
}

/// The hyper response of a [`Reply`]; for `HEAD` the body is left out by hyper, which keeps
/// `Content-Length`.
fn http_response(reply: Reply) -> Response<Full<Bytes>> {
    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = Response::new(Full::new(Bytes::from(reply.body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(reply.content_type));
    if let Some((name, value)) = reply.header {
        let name = match name {
            "Allow" => ALLOW,
            "WWW-Authenticate" => WWW_AUTHENTICATE,
            other => HeaderName::from_static(other),
        };
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// `a=b&c=d` with `%XX` and `+` decoded.
pub fn parse_query(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|part| !part.is_empty())
        .map(|part| {
            let (key, value) = part.split_once('=').unwrap_or((part, ""));
            (decode(key), decode(value))
        })
        .collect()
}

fn decode(text: &str) -> String {
    let spaced = text.replace('+', " ");
    percent_decode_str(&spaced).decode_utf8_lossy().into_owned()
}

/// A tokio listener from a bound std listener (made non-blocking here); call inside a
/// tokio runtime.
pub fn adopt(listener: std::net::TcpListener) -> Result<TcpListener, AdminError> {
    let wrap = |source| AdminError::Listener { source };
    listener.set_nonblocking(true).map_err(wrap)?;
    TcpListener::from_std(listener).map_err(wrap)
}

/// The address `listener` is bound to.
pub fn bound(listener: &TcpListener) -> Result<SocketAddr, AdminError> {
    listener
        .local_addr()
        .map_err(|source| AdminError::Listener { source })
}

#[cfg(test)]
mod tests;
