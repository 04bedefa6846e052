//! A client that pipelines requests faster than the workers serve them must
//! not make the server queue its whole stream: under every policy that runs a
//! connection's requests on other workers, the reader stops once the
//! connection has a bounded backlog, so what the server takes from the socket
//! stays bounded (the rest waits in the client's socket), and every request
//! is still answered in order once the workers catch up.
//!
//! ```text
//!   client ──64 MiB of pipelined gets──► socket ──► reader ─► ExecQueue (≤ 256 outstanding)
//!                                                               └─► workers, 200 µs each (emulated)
//! ```

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use tailtrim_server::config::DispatchPolicy;
use tailtrim_server::{start, ServerConfig};

/// Pipelined requests, `bytes` of them: gets of 240-byte keys spread over
/// 1024 names (so over every worker a key decides), all absent (each reply is
/// `END`). Every request is [`REQUEST_LEN`] bytes.
fn requests(bytes: usize) -> Vec<u8> {
    let mut stream = Vec::with_capacity(bytes);
    for i in 0..bytes / REQUEST_LEN {
        stream.extend_from_slice(format!("get {:k>240}\r\n", i % 1024).as_bytes());
    }
    stream
}

const REQUEST_LEN: usize = 246;

/// Writes as much of `stream` as the connection takes within `window`.
fn offer(conn: &mut TcpStream, stream: &[u8], window: Duration) -> usize {
    conn.set_nonblocking(true).expect("nonblocking");
    let deadline = Instant::now() + window;
    let mut sent = 0;
    while sent < stream.len() && Instant::now() < deadline {
        match conn.write(&stream[sent..]) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(e) => panic!("write: {e}"),
        }
    }
    conn.set_nonblocking(false).expect("blocking");
    sent
}

#[test]
fn a_pipelining_client_cannot_make_the_server_queue_its_whole_stream() {
    // 64 MiB: an unbounded reader takes it all at once (about 260k queued
    // jobs); a bounded one stops after a few MiB (socket buffers, one input
    // buffer and 256 requests).
    let stream = requests(64 * 1024 * 1024);
    for policy in DispatchPolicy::ALL {
        if policy == DispatchPolicy::Pinned {
            continue; // runs requests inline: its reader is the worker
        }
        let mut config = ServerConfig::default();
        config.server.listen = "127.0.0.1".into();
        config.server.port = 0;
        config.workers.threads = 2;
        config.workers.dispatch = policy;
        config.emulation.service = "const=200us".into();
        let handle = start(config).expect("server starts");
        let mut conn = TcpStream::connect(handle.local_addr()).expect("connect");
        let sent = offer(&mut conn, &stream, Duration::from_secs(2));
        // Socket buffers on loopback take up to ~10 MiB, the input buffer
        // 4 MiB, the backlog 256 requests; 32 MiB leaves room for all of it
        // and is half of what an unbounded reader takes.
        assert!(
            sent < 32 * 1024 * 1024,
            "{policy:?}: the server took {sent} bytes of pipelined requests from one client"
        );

        eprintln!(
            "{policy:?}: the server took {sent} of {} bytes",
            stream.len()
        );

        // The reader comes back as the backlog drains: far more replies than
        // the bound arrive (each an `END`, the key being absent).
        conn.set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        let wanted = 4 * 256;
        let mut replies = Vec::new();
        let mut chunk = vec![0u8; 64 * 1024];
        while replies.len() < wanted * 5 {
            let n = conn.read(&mut chunk).expect("replies keep coming");
            assert!(n > 0, "{policy:?}: closed");
            replies.extend_from_slice(&chunk[..n]);
        }
        assert!(
            replies
                .chunks(5)
                .take(wanted)
                .all(|reply| reply == b"END\r\n"),
            "{policy:?}: a reply other than END"
        );
        drop(conn);
        handle.shutdown();
    }
}
