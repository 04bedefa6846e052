//! A client that half-closes its connection and does not read its replies
//! must not hold up the other connections, under every dispatch policy; one
//! that reads them later still gets every byte before the server closes.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use socket2::{Domain, Socket, Type};
use tailtrim_server::config::DispatchPolicy;
use tailtrim_server::{start, ServerConfig, ServerHandle};

/// Every dispatch policy.
const POLICIES: [DispatchPolicy; 5] = DispatchPolicy::ALL;

/// One value large enough that a few replies overflow a small receive window
/// and the server's send buffer, and few enough that the server reads the
/// end of input before its output high-water mark stops it reading.
const VALUE_LEN: usize = 1_000_000;
const GETS_PER_CLIENT: usize = 3;

fn server(policy: DispatchPolicy) -> ServerHandle {
    let mut config = ServerConfig::default();
    config.server.listen = "127.0.0.1".into();
    config.server.port = 0;
    config.workers.threads = 2;
    config.workers.dispatch = policy;
    start(config).expect("server starts")
}

fn connect(address: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(address).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    stream
}

/// A connection with a small receive buffer that asks for the large value a
/// few times and does not read; `half_close`: then closes its sending side.
fn stalled_reader(address: SocketAddr, half_close: bool) -> TcpStream {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
    socket.connect(&address.into()).expect("connect");
    let mut stream: TcpStream = socket.into();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    stream
        .write_all(&b"get big\r\n".repeat(GETS_PER_CLIENT))
        .expect("write");
    if half_close {
        stream.shutdown(Shutdown::Write).expect("half-close");
    }
    stream
}

fn read_line(stream: &mut TcpStream) -> String {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        match stream.read(&mut byte) {
            Ok(0) => panic!("closed after {:?}", String::from_utf8_lossy(&line)),
            Ok(_) => line.push(byte[0]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => panic!(
                "read failed after {:?}: {e}",
                String::from_utf8_lossy(&line)
            ),
        }
    }
    String::from_utf8_lossy(&line).into_owned()
}

fn store_big(stream: &mut TcpStream) {
    let mut request = format!("set big 0 0 {VALUE_LEN}\r\n").into_bytes();
    request.extend(vec![b'v'; VALUE_LEN]);
    request.extend_from_slice(b"\r\n");
    stream.write_all(&request).expect("write");
    assert_eq!(read_line(stream), "STORED\r\n");
}

/// Every reply a half-closed reader is owed, then end of stream.
fn read_to_end(stream: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => panic!("read failed after {} bytes: {e}", got.len()),
        }
    }
}

fn expected_replies() -> Vec<u8> {
    let mut one = format!("VALUE big 0 {VALUE_LEN}\r\n").into_bytes();
    one.extend(vec![b'v'; VALUE_LEN]);
    one.extend_from_slice(b"\r\nEND\r\n");
    one.repeat(GETS_PER_CLIENT)
}

#[test]
fn a_half_closed_client_that_does_not_read_holds_up_no_one() {
    for policy in POLICIES {
        let handle = server(policy);
        let address = handle.local_addr();
        let mut probe = connect(address);
        store_big(&mut probe);
        // Enough stalled clients that both workers (and late binding's
        // dispatcher) get some.
        let stalled: Vec<TcpStream> = (0..4).map(|_| stalled_reader(address, true)).collect();
        std::thread::sleep(Duration::from_millis(200));
        let mut slowest = Duration::ZERO;
        for _ in 0..20 {
            let started = Instant::now();
            probe.write_all(b"version\r\n").expect("write");
            let line = read_line(&mut probe);
            assert!(line.starts_with("VERSION "), "{policy:?}: {line:?}");
            slowest = slowest.max(started.elapsed());
            std::thread::sleep(Duration::from_millis(10));
        }
        // Before the fix the thread that read a stalled client's end of input
        // waited 2 s for it to read, once per stalled client: the probe waited
        // at least that long. A loopback round trip takes microseconds.
        assert!(
            slowest < Duration::from_secs(1),
            "{policy:?}: a `version` waited {slowest:?} behind clients that do not read"
        );
        drop(stalled);
        handle.shutdown();
    }
}

#[test]
fn a_half_closed_client_that_reads_late_still_gets_every_reply() {
    for policy in POLICIES {
        let handle = server(policy);
        let address = handle.local_addr();
        let mut probe = connect(address);
        store_big(&mut probe);
        let mut late = stalled_reader(address, true);
        // Long enough for the server to have read the end of input and to
        // have found the client's window full.
        std::thread::sleep(Duration::from_millis(300));
        let got = read_to_end(&mut late);
        assert!(
            got == expected_replies(),
            "{policy:?}: {} bytes before end of stream, {} expected",
            got.len(),
            expected_replies().len()
        );
        handle.shutdown();
    }
}

/// Size-aware with one small and one large worker: every reply of the large
/// value is sent by the one large worker.
fn size_aware_one_large_worker() -> ServerHandle {
    let mut config = ServerConfig::default();
    config.server.listen = "127.0.0.1".into();
    config.server.port = 0;
    config.workers.threads = 2;
    config.workers.dispatch = DispatchPolicy::SizeAware;
    config.sizeaware.fixed_threshold = 10_000;
    config.sizeaware.fixed_small_workers = 1;
    start(config).expect("server starts")
}

/// The slowest of `rounds` large gets on `probe`.
fn slowest_large_get(probe: &mut TcpStream, rounds: usize) -> Duration {
    let expected = expected_replies();
    let one = &expected[..expected.len() / GETS_PER_CLIENT];
    let mut slowest = Duration::ZERO;
    for _ in 0..rounds {
        let started = Instant::now();
        probe.write_all(b"get big\r\n").expect("write");
        let mut got = vec![0u8; one.len()];
        probe.read_exact(&mut got).expect("read the reply");
        assert!(got == one, "a wrong reply to `get big`");
        slowest = slowest.max(started.elapsed());
        std::thread::sleep(Duration::from_millis(10));
    }
    slowest
}

#[test]
fn a_client_that_stops_reading_does_not_hold_the_large_worker() {
    let handle = size_aware_one_large_worker();
    let address = handle.local_addr();
    let mut probe = connect(address);
    store_big(&mut probe);
    // Clients that ask for the large value and never read.
    let stalled: Vec<TcpStream> = (0..3).map(|_| stalled_reader(address, false)).collect();
    std::thread::sleep(Duration::from_millis(100));
    let slowest = slowest_large_get(&mut probe, 10);
    // Before the fix the large worker waited up to 2 s on each stalled reply.
    assert!(
        slowest < Duration::from_secs(1),
        "a large get waited {slowest:?} behind clients that do not read"
    );
    drop(stalled);
    handle.shutdown();
}

#[test]
fn a_client_that_stops_mid_value_does_not_hold_the_large_worker() {
    let handle = size_aware_one_large_worker();
    let address = handle.local_addr();
    let mut probe = connect(address);
    store_big(&mut probe);
    // Clients that start a large set and stop sending half way.
    let stalled: Vec<TcpStream> = (0..3)
        .map(|_| {
            let mut stream = connect(address);
            let mut partial = format!("set other 0 0 {VALUE_LEN}\r\n").into_bytes();
            partial.extend(vec![b'p'; VALUE_LEN / 2]);
            stream.write_all(&partial).expect("write");
            stream
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    let slowest = slowest_large_get(&mut probe, 10);
    assert!(
        slowest < Duration::from_secs(1),
        "a large get waited {slowest:?} behind clients that stopped mid-value"
    );
    // The stalled sets complete when their clients go on.
    for mut stream in stalled {
        let mut rest = vec![b'p'; VALUE_LEN - VALUE_LEN / 2];
        rest.extend_from_slice(b"\r\n");
        stream.write_all(&rest).expect("write");
        assert_eq!(read_line(&mut stream), "STORED\r\n");
    }
    handle.shutdown();
}
