//! The admin component over a real loopback socket, requests written by hand.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::{bearer_token, parse_query, Access, Admin, Reply, MAX_HEAD};

/// Sends `request` as written and reads the answer until the server closes.
async fn exchange(addr: SocketAddr, request: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("send request");
    let mut answer = Vec::new();
    let read = stream.read_to_end(&mut answer);
    tokio::time::timeout(std::time::Duration::from_secs(30), read)
        .await
        .expect("the admin listener closes after answering")
        .expect("read answer");
    String::from_utf8(answer).expect("utf-8 answer")
}

async fn listening(admin: Admin) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(Arc::new(admin).serve(listener));
    addr
}

fn component(access: Access) -> Admin {
    Admin::new("not found; try /metrics\n")
        .with_metrics(|| Ok::<_, String>("tailtrim_up 1\n".to_string()))
        .change(
            "/pool/servers",
            "POST, DELETE",
            "membership changes",
            |request| {
                let body = format!("{} {:?}", request.method, request.query);
                Box::pin(std::future::ready(Reply::ok("text/plain", body)))
            },
        )
        .with_access(access)
}

#[tokio::test]
async fn metrics_health_and_head_are_answered() {
    let addr = listening(component(Access::Loopback)).await;
    let get = exchange(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(get.starts_with("HTTP/1.1 200 OK\r\n"), "{get}");
    assert!(
        get.contains("\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"),
        "{get}"
    );
    assert!(get.contains("\r\nConnection: close\r\n"), "{get}");
    assert!(get.ends_with("\r\n\r\ntailtrim_up 1\n"), "{get}");
    let head = exchange(addr, "HEAD /metrics?x=1 HTTP/1.1\r\n\r\n").await;
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(head.contains("\r\nContent-Length: 14\r\n"), "{head}");
    assert!(head.ends_with("\r\n\r\n"), "{head}");
    let health = exchange(addr, "GET /health HTTP/1.0\r\n\r\n").await;
    assert!(health.starts_with("HTTP/1.0 200 OK\r\n"), "{health}");
    assert!(health.ends_with("\r\n\r\nok\n"), "{health}");
}

#[tokio::test]
async fn unknown_paths_wrong_methods_and_garbage_are_refused() {
    let addr = listening(component(Access::Loopback)).await;
    for path in ["/", "/metricsx", "/metrics/", "/stats", "*"] {
        let reply = exchange(addr, &format!("GET {path} HTTP/1.1\r\n\r\n")).await;
        let refused = reply.starts_with("HTTP/1.1 404 Not Found\r\n")
            || (path == "*" && reply.starts_with("HTTP/1.1 400 "));
        assert!(refused, "{path}: {reply}");
    }
    let reply = exchange(addr, "GET /nope HTTP/1.1\r\n\r\n").await;
    assert!(reply.ends_with("not found; try /metrics\n"), "{reply}");
    for method in ["POST", "PUT", "DELETE", "OPTIONS"] {
        let reply = exchange(addr, &format!("{method} /metrics HTTP/1.1\r\n\r\n")).await;
        assert!(reply.starts_with("HTTP/1.1 405 "), "{method}: {reply}");
        assert!(reply.contains("\r\nAllow: GET, HEAD\r\n"), "{reply}");
    }
    let reply = exchange(addr, "GET /pool/servers HTTP/1.1\r\n\r\n").await;
    assert!(reply.contains("\r\nAllow: POST, DELETE\r\n"), "{reply}");
    for garbage in ["stats\r\n\r\n", "GET\r\n\r\n", "\u{1}\u{2}\r\n\r\n"] {
        let reply = exchange(addr, garbage).await;
        assert!(reply.starts_with("HTTP/1.1 400 "), "{garbage:?}: {reply}");
    }
}

#[tokio::test]
async fn change_routes_follow_the_access_policy() {
    let open = listening(component(Access::Loopback)).await;
    let reply = exchange(
        open,
        "POST /pool/servers?server=127.0.0.1%3A11214:2+alpha&warmup=preemptive%2Bfallback HTTP/1.1\r\n\r\n",
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");
    assert!(
        reply.ends_with(
            r#"POST [("server", "127.0.0.1:11214:2 alpha"), ("warmup", "preemptive+fallback")]"#
        ),
        "{reply}"
    );
    let refused = listening(component(Access::Refused)).await;
    let reply = exchange(refused, "DELETE /pool/servers?server=x HTTP/1.1\r\n\r\n").await;
    assert!(reply.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{reply}");
    assert!(reply.contains("membership changes are refused"), "{reply}");
    let metrics = exchange(refused, "GET /metrics HTTP/1.1\r\n\r\n").await;
    assert!(metrics.starts_with("HTTP/1.1 200 OK\r\n"), "{metrics}");
    let guarded = listening(component(Access::Token("t0k=n".to_string()))).await;
    for header in [
        "",
        "Authorization: Bearer wrong\r\n",
        "Authorization: Basic t0k=n\r\n",
    ] {
        let reply = exchange(
            guarded,
            &format!("POST /pool/servers HTTP/1.1\r\n{header}\r\n"),
        )
        .await;
        assert!(
            reply.starts_with("HTTP/1.1 401 Unauthorized\r\n"),
            "{header}: {reply}"
        );
        assert!(
            reply
                .to_ascii_lowercase()
                .contains("\r\nwww-authenticate: bearer\r\n"),
            "{reply}"
        );
        assert!(
            reply.contains(r#"{"error":"membership changes need"#),
            "{reply}"
        );
    }
    let reply = exchange(
        guarded,
        "POST /pool/servers HTTP/1.1\r\nAUTHORIZATION:  bearer  t0k=n \r\n\r\n",
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");
}

#[tokio::test]
async fn a_head_that_fills_the_buffer_is_refused() {
    let addr = listening(component(Access::Loopback)).await;
    // Exactly a full buffer and no end of head: the listener reads all of it, so it closes
    // without unread input (which would reset the connection under its answer).
    let start = "GET /metrics HTTP/1.1\r\nX-Filler: ";
    let request = format!("{start}{}", "x".repeat(MAX_HEAD - start.len()));
    let reply = exchange(addr, &request).await;
    assert!(reply.starts_with("HTTP/1.1 431 "), "{reply}");
}

#[tokio::test]
async fn a_page_that_breaks_a_rule_is_a_server_error() {
    let admin = Admin::new("").with_metrics(|| Err::<String, _>("metric name x: rule"));
    let addr = listening(admin).await;
    let reply = exchange(addr, "GET /metrics HTTP/1.1\r\n\r\n").await;
    assert!(reply.starts_with("HTTP/1.1 500 "), "{reply}");
    assert!(reply.ends_with("metric name x: rule\n"), "{reply}");
}

#[test]
fn tokens_and_queries_decode() {
    assert_eq!(bearer_token(b" Bearer  t0k=n "), Some(&b"t0k=n"[..]));
    assert_eq!(bearer_token(b"Basic abc"), None);
    let params = parse_query("server=127.0.0.1%3A11214:2+alpha&x&y=%zz%4");
    assert_eq!(params[0].1, "127.0.0.1:11214:2 alpha");
    assert_eq!(params[1], ("x".to_string(), String::new()));
    assert_eq!(params[2].1, "%zz%4");
    assert_eq!(
        Access::decide(None, "127.0.0.1".parse().expect("ip")),
        Access::Loopback
    );
    assert_eq!(
        Access::decide(None, "0.0.0.0".parse().expect("ip")),
        Access::Refused
    );
}
