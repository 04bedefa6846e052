//! The admin listener: a minimal HTTP/1.x responder for `GET /metrics` (Prometheus text).

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::frontend::Shared;
use crate::metrics::prometheus_text;

/// Largest request head read before answering.
const MAX_HEAD: usize = 8192;
/// A client that sends no complete head within this time is dropped.
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);

/// Accepts admin connections forever.
pub async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(answer(stream, shared.clone()));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

async fn answer(mut stream: TcpStream, shared: Arc<Shared>) {
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
    let request_line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let mut words = request_line.split(|&b| b == b' ');
    let method = words.next().unwrap_or_default();
    let path = words.next().unwrap_or_default();
    let (status, content_type, body) = match (method, path) {
        (b"GET", b"/metrics") => (
            "200 OK",
            "text/plain; version=0.0.4",
            prometheus_text(&shared),
        ),
        (b"GET", b"/") => (
            "200 OK",
            "text/plain",
            "tailtrim proxy admin: GET /metrics for Prometheus text\n".to_string(),
        ),
        _ => ("404 Not Found", "text/plain", "not found\n".to_string()),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}
