//! ASCII authentication (`[server] auth_file`) under every dispatch policy, on
//! an in-process server over loopback: a connection that has not
//! authenticated can neither read nor write data while an authenticated one
//! on the same server works, random bytes before authentication never crash
//! the server or disturb another connection, and a reload takes new users.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::Duration;

use tailtrim_server::config::DispatchPolicy;
use tailtrim_server::{start, ServerConfig, ServerHandle};

/// Bounds a read that hangs; asserts no timing.
const LIMIT: Duration = Duration::from_secs(20);

fn auth_file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tailtrim-ascii-auth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the test directory");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write the auth file");
    path
}

fn server(policy: DispatchPolicy, path: &std::path::Path) -> ServerHandle {
    let mut config = ServerConfig::default();
    config.server.listen = "127.0.0.1".into();
    config.server.port = 0;
    config.server.auth_file = path.to_str().expect("utf-8 path").to_string();
    config.workers.threads = 3;
    config.workers.dispatch = policy;
    // size-aware: values of 4 KiB and more are large, served by one worker.
    config.sizeaware.fixed_threshold = 4096;
    config.sizeaware.fixed_small_workers = 2;
    start(config).expect("server starts")
}

fn connect(handle: &ServerHandle) -> TcpStream {
    let stream = TcpStream::connect(handle.local_addr()).expect("connect");
    stream.set_read_timeout(Some(LIMIT)).expect("timeout");
    stream.set_nodelay(true).expect("nodelay");
    stream
}

/// Reads exactly `len` bytes (fewer if the server closes).
fn read_exactly(stream: &mut TcpStream, len: usize) -> Vec<u8> {
    let mut got = vec![0u8; len];
    let mut filled = 0;
    while filled < len {
        match stream.read(&mut got[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => panic!("read failed after {filled} of {len} bytes: {e}"),
        }
    }
    got.truncate(filled);
    got
}

/// Sends `request` and expects exactly `reply`.
fn expect(stream: &mut TcpStream, request: &[u8], reply: &[u8], what: &str) {
    stream.write_all(request).expect("write");
    let got = read_exactly(stream, reply.len());
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(reply),
        "{what}"
    );
}

fn login(stream: &mut TcpStream, user: &str, password: &str) {
    let data = format!("{user} {password}");
    let request = format!("set login 0 0 {}\r\n{data}\r\n", data.len());
    expect(stream, request.as_bytes(), b"STORED\r\n", "login");
}

const UNAUTHENTICATED: &[u8] = b"CLIENT_ERROR unauthenticated\r\n";

fn value(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| b'a' + ((i + seed as usize) % 26) as u8)
        .collect()
}

#[test]
fn unauthenticated_connections_cannot_read_or_write_under_every_policy() {
    let path = auth_file("every-policy", "alice:secret\nbob:hunter2\n");
    for policy in DispatchPolicy::ALL {
        let handle = server(policy, &path);
        let mut trusted = connect(&handle);
        let mut stranger = connect(&handle);
        login(&mut trusted, "alice", "secret");
        for (key, len) in [("small", 10), ("large", 300_000)] {
            let data = value(len, 1);
            let mut request = format!("set {key} 0 0 {len}\r\n").into_bytes();
            request.extend_from_slice(&data);
            request.extend_from_slice(b"\r\n");
            expect(&mut trusted, &request, b"STORED\r\n", "trusted set");

            // Reads: nothing of the item comes back.
            for read in [
                format!("get {key}\r\n"),
                format!("gets {key}\r\n"),
                format!("mg {key} v\r\n"),
                format!("gat 0 {key}\r\n"),
            ] {
                expect(&mut stranger, read.as_bytes(), UNAUTHENTICATED, &read);
            }
            // Writes: neither the command nor its data is taken as one.
            expect(
                &mut stranger,
                format!("delete {key}\r\n").as_bytes(),
                UNAUTHENTICATED,
                "delete",
            );
            expect(
                &mut stranger,
                format!("set {key} 0 0 5\r\nevil!\r\n").as_bytes(),
                b"CLIENT_ERROR bad authentication token format\r\n",
                "set",
            );
            // A block shorter than its data: the rest is a line of its own.
            expect(
                &mut stranger,
                format!("set {key} 0 0 6\r\nnot a pw\r\n").as_bytes(),
                b"CLIENT_ERROR bad command line termination\r\nCLIENT_ERROR unauthenticated\r\n",
                "set with a bad block",
            );
            expect(
                &mut stranger,
                format!("set {key} 0 0 7\r\nab cdef\r\n").as_bytes(),
                b"CLIENT_ERROR authentication failure\r\n",
                "set as credentials",
            );
            expect(
                &mut stranger,
                b"flush_all\r\n",
                UNAUTHENTICATED,
                "flush_all",
            );

            // The trusted connection still sees its item, untouched.
            let mut reply = format!("VALUE {key} 0 {len}\r\n").into_bytes();
            reply.extend_from_slice(&data);
            reply.extend_from_slice(b"\r\nEND\r\n");
            expect(
                &mut trusted,
                format!("get {key}\r\n").as_bytes(),
                &reply,
                &format!("{policy:?}: trusted get after the stranger"),
            );
        }
        // Once authenticated, the stranger is served like anyone.
        login(&mut stranger, "bob", "hunter2");
        expect(&mut stranger, b"delete small\r\n", b"DELETED\r\n", "delete");
        expect(&mut trusted, b"get small\r\n", b"END\r\n", "deleted");
        let counters = handle.shared().counter_snapshot();
        assert_eq!(
            (counters.auth_cmds, counters.auth_errors),
            (4, 2),
            "{policy:?}"
        );
        handle.shutdown();
    }
}

/// xorshift64*: reproducible bytes without a dependency.
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Random bytes, biased towards what the auth reader looks for.
    fn bytes(&mut self, len: usize) -> Vec<u8> {
        const PIECES: [&[u8]; 10] = [
            b"set ",
            b" 0 0 ",
            b"\r\n",
            b"\n",
            b" ",
            b"alice secret",
            b"12",
            b"-1",
            b"\0",
            b"99999",
        ];
        let mut out = Vec::with_capacity(len);
        while out.len() < len {
            let pick = self.next();
            if pick.is_multiple_of(3) {
                out.extend_from_slice(PIECES[(pick >> 8) as usize % PIECES.len()]);
            } else {
                out.push((pick >> 16) as u8);
            }
        }
        out
    }
}

/// Reads whatever comes back until the connection closes or stays silent for
/// `quiet`; true when it closed.
fn drain(stream: &mut TcpStream, quiet: Duration) -> (Vec<u8>, bool) {
    stream.set_read_timeout(Some(quiet)).expect("timeout");
    let mut got = Vec::new();
    let mut chunk = [0u8; 65536];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => return (got, true),
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return (got, false)
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return (got, true),
        }
    }
}

const KNOWN_REPLIES: [&[u8]; 5] = [
    b"CLIENT_ERROR unauthenticated\r\n",
    b"CLIENT_ERROR bad command line termination\r\n",
    b"CLIENT_ERROR bad authentication token format\r\n",
    b"CLIENT_ERROR authentication failure\r\n",
    b"STORED\r\n",
];

/// Splits `reply` into known reply lines; panics on anything else.
fn check_replies(reply: &[u8], what: &str) {
    let mut rest = reply;
    while !rest.is_empty() {
        if KNOWN_REPLIES.iter().any(|known| known.starts_with(rest)) {
            return; // the last reply, still arriving
        }
        let Some(known) = KNOWN_REPLIES.iter().find(|known| rest.starts_with(known)) else {
            // After STORED the connection is authenticated: anything goes.
            assert!(
                reply.windows(8).any(|w| w == b"STORED\r\n"),
                "{what}: unexpected reply {:?}",
                String::from_utf8_lossy(rest)
            );
            return;
        };
        rest = &rest[known.len()..];
    }
}

#[test]
fn random_bytes_before_authentication_disturb_nobody() {
    let path = auth_file("noise", "alice:secret\n");
    let mut noise = Noise(0x9E37_79B9_7F4A_7C15);
    for policy in DispatchPolicy::ALL {
        let handle = server(policy, &path);
        let mut trusted = connect(&handle);
        login(&mut trusted, "alice", "secret");
        let mut strangers: Vec<TcpStream> = (0..6).map(|_| connect(&handle)).collect();
        for round in 0..40 {
            for stranger in strangers.iter_mut() {
                let len = 1 + (noise.next() % 600) as usize;
                let bytes = noise.bytes(len);
                if stranger.write_all(&bytes).is_err() {
                    // Closed by the server (a bound was passed): take a new one.
                    *stranger = connect(&handle);
                }
            }
            // Every connection on every worker is still served.
            let key = format!("k{round}");
            let data = value(20, round as u8);
            let mut request = format!("set {key} 0 0 20\r\n").into_bytes();
            request.extend_from_slice(&data);
            request.extend_from_slice(b"\r\nget ");
            request.extend_from_slice(key.as_bytes());
            request.extend_from_slice(b"\r\n");
            let mut reply = format!("STORED\r\nVALUE {key} 0 20\r\n").into_bytes();
            reply.extend_from_slice(&data);
            reply.extend_from_slice(b"\r\nEND\r\n");
            expect(
                &mut trusted,
                &request,
                &reply,
                &format!("{policy:?} round {round}"),
            );
            for _ in 0..2 {
                let mut fresh = connect(&handle);
                expect(
                    &mut fresh,
                    b"version\r\n",
                    UNAUTHENTICATED,
                    &format!("{policy:?} round {round}: a new connection"),
                );
            }
        }
        for (index, mut stranger) in strangers.into_iter().enumerate() {
            let (reply, _closed) = drain(&mut stranger, Duration::from_millis(200));
            check_replies(&reply, &format!("{policy:?} stranger {index}"));
        }
        handle.shutdown();
    }
}

#[test]
fn a_reload_takes_new_users_and_keeps_the_old_ones_on_a_bad_file() {
    let path = auth_file("reload", "alice:secret\n");
    let handle = server(DispatchPolicy::Pinned, &path);
    let mut before = connect(&handle);
    expect(
        &mut before,
        b"set k 0 0 9\r\ncarol pw3\r\n",
        b"CLIENT_ERROR authentication failure\r\n",
        "carol before",
    );
    std::fs::write(&path, "alice:secret\ncarol:pw3\n").expect("rewrite");
    assert_eq!(handle.reload_auth().expect("reload"), Some(2));
    expect(
        &mut before,
        b"set k 0 0 9\r\ncarol pw3\r\n",
        b"STORED\r\n",
        "carol after the reload, same connection",
    );
    std::fs::write(&path, "dave\n").expect("break the file");
    assert!(handle.reload_auth().is_err(), "a malformed file is refused");
    let mut after = connect(&handle);
    login(&mut after, "carol", "pw3");
    std::fs::remove_file(&path).expect("remove the file");
    assert!(handle.reload_auth().is_err(), "a missing file is refused");
    let mut last = connect(&handle);
    login(&mut last, "alice", "secret");
    expect(
        &mut before,
        b"get nothing\r\n",
        b"END\r\n",
        "still authenticated",
    );
    handle.shutdown();
}
