//! Who may change the pool's membership through the admin listener: with an admin token only
//! callers that send it (`Authorization: Bearer`), without one only a loopback listener's
//! callers; reads stay open. Real proxy, real memcached backends, real HTTP over loopback.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::{start_with, Harness, Options};
use tailtrim_client::testkit::{start_memcached, ChildGuard};

const TOKEN: &str = "s3cret-Token_42";

/// An admin reply: status code, head (status line and headers) and body.
struct Reply {
    status: u16,
    head: String,
    body: String,
}

/// The address to call: the listener's own, or loopback on its port when it is bound to
/// the unspecified address (the test's traffic stays on loopback).
fn admin_address(harness: &Harness) -> SocketAddr {
    let bound = harness.admin.expect("admin listener");
    SocketAddr::from(([127, 0, 0, 1], bound.port()))
}

/// One HTTP request with `headers` (each ending in CRLF) added to the head.
fn call(harness: &Harness, method: &str, target: &str, headers: &str) -> Reply {
    let mut stream = TcpStream::connect(admin_address(harness)).expect("connect admin");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    write!(
        stream,
        "{method} {target} HTTP/1.1\r\nHost: x\r\n{headers}\r\n"
    )
    .expect("write");
    let mut text = String::new();
    stream.read_to_string(&mut text).expect("read admin reply");
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    Reply {
        status,
        head: head.to_string(),
        body: body.to_string(),
    }
}

fn bearer(token: &str) -> String {
    format!("Authorization: Bearer {token}\r\n")
}

/// The pool's members as `GET /pool` (without a token) lists them.
fn members(harness: &Harness) -> Vec<String> {
    let reply = call(harness, "GET", "/pool", "");
    assert_eq!(reply.status, 200, "GET /pool: {}", reply.body);
    let pool: serde_json::Value = serde_json::from_str(&reply.body).expect("GET /pool is JSON");
    pool["servers"]
        .as_array()
        .expect("servers")
        .iter()
        .map(|server| server.as_str().expect("server").to_string())
        .collect()
}

fn listed(members: &[String], port: u16) -> bool {
    let address = format!("127.0.0.1:{port}");
    members.iter().any(|member| member.starts_with(&address))
}

fn with_token(admin_listen: &'static str) -> impl FnOnce(&mut tailtrim_proxy::ProxyConfig) {
    move |config| {
        config.proxy.admin_listen = admin_listen.to_string();
        config.proxy.admin_token = TOKEN.to_string();
    }
}

/// Joins `joining` and removes it again, each first without a token and with wrong ones
/// (`401`, nothing changes), then with `token` (`200`, `GET /pool` shows the change).
fn changes_need_the_token(harness: &Harness, joining: &ChildGuard, token: &str) {
    let join = format!(
        "/pool/servers?server=127.0.0.1:{}:1&warmup=cold",
        joining.port
    );
    let leave = format!(
        "/pool/servers?server=127.0.0.1:{}&warmup=cold",
        joining.port
    );
    for (method, target, member_after) in [("POST", &join, true), ("DELETE", &leave, false)] {
        for refused in [
            String::new(),
            bearer("wrong"),
            bearer(&format!("{token}x")),
            bearer(&token[..token.len() - 1]),
            format!("Authorization: Basic {token}\r\n"),
        ] {
            let reply = call(harness, method, target, &refused);
            assert_eq!(
                reply.status, 401,
                "{method} with {refused:?}: {}",
                reply.head
            );
            assert!(
                reply
                    .head
                    .to_ascii_lowercase()
                    .contains("\r\nwww-authenticate: bearer"),
                "{}",
                reply.head
            );
            assert!(reply.body.contains("\"error\""), "{}", reply.body);
            assert_eq!(
                listed(&members(harness), joining.port),
                !member_after,
                "{method} without the right token changed the pool"
            );
        }
        // Scheme and header name are case-insensitive; the token is not.
        let reply = call(
            harness,
            method,
            target,
            &format!("authorization: bearer {token}\r\n"),
        );
        assert_eq!(reply.status, 200, "{method} with the token: {}", reply.body);
        assert_eq!(listed(&members(harness), joining.port), member_after);
    }
}

#[test]
fn membership_changes_need_the_admin_token_and_reads_do_not() {
    let harness = start_with(Options::default(), with_token("127.0.0.1:0"));
    let joining = start_memcached();
    changes_need_the_token(&harness, &joining, TOKEN);
    let metrics = call(&harness, "GET", "/metrics", "");
    assert_eq!(metrics.status, 200, "{}", metrics.head);
    assert!(metrics.body.contains("tailtrim_"), "{}", metrics.body);
    // A request the token would not make valid is still refused before it is looked at.
    let reply = call(&harness, "POST", "/pool/servers?server=nonsense", "");
    assert_eq!(reply.status, 401, "{}", reply.body);
    let reply = call(
        &harness,
        "POST",
        "/pool/servers?server=nonsense",
        &bearer(TOKEN),
    );
    assert_eq!(reply.status, 400, "{}", reply.body);
}

#[test]
fn the_admin_token_file_is_read_and_trimmed() {
    let path = std::env::temp_dir().join(format!("tailtrim-admin-token-{}", std::process::id()));
    std::fs::write(&path, format!("  {TOKEN}\n")).expect("write token file");
    let file = path.display().to_string();
    let harness = start_with(Options::default(), move |config| {
        config.proxy.admin_token_file = file;
    });
    let joining = start_memcached();
    changes_need_the_token(&harness, &joining, TOKEN);
    std::fs::remove_file(&path).expect("remove token file");
}

#[test]
fn without_a_token_a_listener_beyond_loopback_refuses_membership_changes() {
    let harness = start_with(Options::default(), |config| {
        config.proxy.admin_listen = "0.0.0.0:0".to_string();
    });
    let joining = start_memcached();
    let before = members(&harness);
    for (method, target) in [
        (
            "POST",
            format!(
                "/pool/servers?server=127.0.0.1:{}:1&warmup=cold",
                joining.port
            ),
        ),
        (
            "DELETE",
            format!("/pool/servers?server={}&warmup=cold", before[0]),
        ),
    ] {
        for headers in [String::new(), bearer(TOKEN)] {
            let reply = call(&harness, method, &target, &headers);
            assert_eq!(reply.status, 403, "{method} {target}: {}", reply.head);
            assert!(reply.body.contains("no admin token"), "{}", reply.body);
        }
    }
    assert_eq!(members(&harness), before);
    let metrics = call(&harness, "GET", "/metrics", "");
    assert_eq!(metrics.status, 200, "{}", metrics.head);
}

#[test]
fn with_a_token_a_listener_beyond_loopback_takes_changes_with_it() {
    let harness = start_with(Options::default(), with_token("0.0.0.0:0"));
    let joining = start_memcached();
    changes_need_the_token(&harness, &joining, TOKEN);
}
