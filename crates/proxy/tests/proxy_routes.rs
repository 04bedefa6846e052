//! A proxy with `[[routes]]` takes its route tree; one without calls the tree's leaf directly
//! (the frontend's plain path). Here a `timeout` route must bound requests that the pool's own
//! backend timeout would let wait much longer.

mod common;

use std::io::Read;
use std::net::TcpListener;

use common::{connect, exchange, start_with, Options};
use tailtrim_proxy::config::RouteSection;

/// A backend that accepts connections and reads requests but never answers; its address.
fn silent_backend() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind silent backend");
    let address = listener.local_addr().expect("address").to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            std::thread::spawn(move || {
                let mut sink = [0u8; 4096];
                while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
            });
        }
    });
    address
}

#[test]
fn a_configured_timeout_route_bounds_reads_multigets_and_writes() {
    let silent = silent_backend();
    // The pool waits 60 s for a backend; the client gives up after 10 s (`connect`): only a
    // request that went through the route tree is answered in between.
    let options = Options {
        backends: 0,
        timeout_ms: 60_000,
        failure_limit: 1_000,
        ..Options::default()
    };
    let harness = start_with(options, |config| {
        config.pool.servers = vec![format!("{silent}:1")];
        config.routes = vec![RouteSection {
            kind: "timeout".to_string(),
            timeout_ms: Some(200),
            ..RouteSection::default()
        }];
    });
    let expired = b"SERVER_ERROR request timed out after 200 ms\r\n";
    for request in [
        &b"get k\r\n"[..],
        b"get a b c\r\n",
        b"set k 0 0 1\r\nx\r\n",
        b"mg k v\r\n",
    ] {
        let mut stream = connect(harness.address);
        let reply = exchange(&mut stream, request);
        assert_eq!(
            String::from_utf8_lossy(&reply),
            String::from_utf8_lossy(expired),
            "reply to {:?}",
            String::from_utf8_lossy(request)
        );
    }
}
