//! TLS on the server (`-Z`), against Debian's `memcached -Z` as the oracle, with
//! certificates made in the test by rcgen and rustls clients over real loopback sockets.
//!
//! ```text
//!   rcgen ──PEM files──> tailtrim serve -Z -o ssl_chain_cert=…,ssl_key=…[,ssl_ca_cert=…,ssl_verify_mode=N]
//!                        memcached    -Z (same files)
//!   rustls client ──TLS──> either: same script, same bytes (after normalising)
//!   plain client ──> TLS port, TLS client ──> notls: port: refused, other connections undisturbed
//!   flood of silent / half-ClientHello connections ──> bounded by -c and idle_timeout, RSS bounded
//! ```

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{free_port, memcached_path, require_memcached};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use tailtrim_tls::rustls::StreamOwned;
use tailtrim_tls::{ClientConnection, ClientTlsOptions};

/// A CA and certificates it signed, as PEM files in a scratch directory.
struct Pki {
    dir: PathBuf,
    ca: CertifiedIssuer<'static, KeyPair>,
}

impl Pki {
    /// A new CA in a fresh directory named after `name`.
    fn new(name: &str) -> Pki {
        let dir = std::env::temp_dir().join(format!("tailtrim-tls-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(
            rcgen::DnType::CommonName,
            format!("tailtrim test CA {name}"),
        );
        let ca =
            CertifiedIssuer::self_signed(params, KeyPair::generate().expect("key")).expect("ca");
        std::fs::write(dir.join("ca.pem"), ca.pem()).expect("write ca");
        Pki { dir, ca }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// `NAME.pem` and `NAME.key`: a certificate for `names`, signed by the CA (or by
    /// itself), expired if asked.
    fn issue(&self, name: &str, names: &[&str], self_signed: bool, expired: bool) -> PathBuf {
        let key = KeyPair::generate().expect("key");
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .expect("params");
        if expired {
            params.not_before = rcgen::date_time_ymd(2001, 1, 1);
            params.not_after = rcgen::date_time_ymd(2002, 1, 1);
        }
        let cert = if self_signed {
            params.self_signed(&key).expect("self-sign")
        } else {
            params.signed_by(&key, &self.ca).expect("sign")
        };
        std::fs::write(self.path(&format!("{name}.pem")), cert.pem()).expect("write cert");
        std::fs::write(self.path(&format!("{name}.key")), key.serialize_pem()).expect("key");
        self.path(&format!("{name}.pem"))
    }

    /// A server certificate for localhost and 127.0.0.1 (`server.pem`, `server.key`).
    fn server_cert(&self) {
        self.issue("server", &["localhost", "127.0.0.1"], false, false);
    }

    fn text(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }

    /// `-o` value for a server with this CA's `server` certificate.
    fn server_options(&self, extra: &str) -> String {
        let mut options = format!(
            "ssl_chain_cert={},ssl_key={}",
            self.text("server.pem"),
            self.text("server.key")
        );
        if !extra.is_empty() {
            options.push(',');
            options.push_str(extra);
        }
        options
    }

    /// A client trusting this CA, presenting `cert` (a name given to [`Pki::issue`]).
    fn client(&self, cert: Option<&str>, server_name: &str) -> ClientTlsOptions {
        ClientTlsOptions {
            ca_cert: Some(self.path("ca.pem")),
            cert: cert.map(|name| self.path(&format!("{name}.pem"))),
            key: cert.map(|name| self.path(&format!("{name}.key"))),
            server_name: Some(server_name.to_string()),
        }
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A server process (tailtrim or memcached) on 127.0.0.1, killed when dropped.
struct Proc {
    child: Child,
    port: u16,
}

impl Proc {
    /// Starts `tailtrim serve` (or memcached) with `args` after `-p PORT -U 0`, and waits
    /// until the port accepts TCP connections.
    fn start(memcached: bool, port: u16, args: &[&str]) -> Proc {
        let mut command = if memcached {
            let mut command = Command::new(memcached_path().expect("memcached"));
            command.args(["-u", "root"]);
            command
        } else {
            let mut command = Command::new(env!("CARGO_BIN_EXE_tailtrim"));
            command.arg("serve");
            command
        };
        command
            .args(["-p", &port.to_string(), "-U", "0"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = command.spawn().expect("spawn server");
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("server {args:?} exited early: {status}");
            }
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Proc { child, port };
            }
            assert!(Instant::now() < deadline, "server {args:?} did not listen");
            std::thread::sleep(Duration::from_millis(30));
        }
    }

    fn tailtrim(args: &[&str]) -> Proc {
        Proc::start(false, free_port(), args)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .expect("read /proc status");
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

type TlsStream = StreamOwned<ClientConnection, TcpStream>;

/// Connects and completes the handshake (a refusal that only shows at the first read, as
/// TLS 1.3 client-certificate checks do, shows in [`exchange`]).
fn tls_connect(port: u16, options: &ClientTlsOptions) -> Result<TlsStream, String> {
    let config = Arc::new(options.build().map_err(|e| e.to_string())?);
    let name = options
        .server_name("localhost")
        .map_err(|e| e.to_string())?;
    let mut conn = ClientConnection::new(config, name).map_err(|e| e.to_string())?;
    let mut socket = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    socket.set_nodelay(true).expect("nodelay");
    while conn.is_handshaking() {
        conn.complete_io(&mut socket).map_err(|e| e.to_string())?;
    }
    Ok(StreamOwned::new(conn, socket))
}

/// Sends `request`, reads until the reply ends with `terminator`; Err on a TLS or socket
/// error or an early end.
fn exchange(stream: &mut TlsStream, request: &[u8], terminator: &[u8]) -> Result<Vec<u8>, String> {
    stream.write_all(request).map_err(|e| e.to_string())?;
    stream.flush().map_err(|e| e.to_string())?;
    let mut reply = Vec::new();
    let mut chunk = [0u8; 65536];
    let deadline = Instant::now() + Duration::from_secs(10);
    while !reply.ends_with(terminator) {
        if Instant::now() > deadline {
            return Err(format!(
                "no full reply: {}",
                String::from_utf8_lossy(&reply)
            ));
        }
        match stream.read(&mut chunk) {
            Ok(0) => return Err(format!("closed after {}", String::from_utf8_lossy(&reply))),
            Ok(n) => reply.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(reply)
}

/// Connects, then proves the session works with `version`.
fn works(port: u16, options: &ClientTlsOptions) -> Result<(), String> {
    let mut stream = tls_connect(port, options)?;
    let reply = exchange(&mut stream, b"version\r\n", b"\r\n")?;
    if reply.starts_with(b"VERSION ") {
        Ok(())
    } else {
        Err(format!("unexpected {}", String::from_utf8_lossy(&reply)))
    }
}

fn stats_of(stream: &mut TlsStream, group: &str) -> Vec<(String, String)> {
    let reply =
        exchange(stream, format!("stats {group}\r\n").as_bytes(), b"END\r\n").expect("stats");
    String::from_utf8_lossy(&reply)
        .lines()
        .filter_map(|line| line.strip_prefix("STAT "))
        .filter_map(|rest| rest.split_once(' '))
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect()
}

fn stat(stream: &mut TlsStream, name: &str) -> u64 {
    stats_of(stream, "")
        .into_iter()
        .find(|(n, _)| n == name)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or_else(|| panic!("no stat {name}"))
}

/// memcached's error text ends with OpenSSL's reason, ours with the system's: compare up
/// to the reason.
fn normalise(reply: &[u8]) -> String {
    String::from_utf8_lossy(reply)
        .split("\r\n")
        .map(|line| match line.split_once(" : ") {
            Some((head, _)) if line.starts_with("Error ") => format!("{head} : <reason>"),
            _ if line.starts_with("VERSION ") => "VERSION <v>".to_string(),
            _ => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\r\n")
}

#[test]
fn the_same_exchange_over_tls_gets_memcacheds_bytes() {
    if !require_memcached("the_same_exchange_over_tls_gets_memcacheds_bytes") {
        return;
    }
    let pki = Pki::new("differential");
    pki.server_cert();
    let client = pki.client(None, "localhost");
    let mut transcripts = Vec::new();
    for memcached in [true, false] {
        // Each server gets its own copy of the chain, removed below to make a reload fail.
        let chain = pki.path(if memcached { "m.pem" } else { "t.pem" });
        std::fs::copy(pki.path("server.pem"), &chain).expect("copy chain");
        let options = format!(
            "ssl_chain_cert={},ssl_key={}",
            chain.display(),
            pki.text("server.key")
        );
        let server = Proc::start(
            memcached,
            free_port(),
            &["-l", "127.0.0.1", "-Z", "-o", &options],
        );
        let mut stream = tls_connect(server.port, &client).expect("handshake");
        let mut transcript = Vec::new();
        for (request, terminator) in [
            (&b"set a 0 0 5\r\nhello\r\n"[..], &b"\r\n"[..]),
            (b"get a b\r\n", b"END\r\n"),
            (b"ms m 2 T0\r\nhi\r\n", b"\r\n"),
            (b"mg m v f t\r\n", b"\r\n"),
            (b"mn\r\n", b"MN\r\n"),
            (b"bogus command\r\n", b"\r\n"),
            (b"get\r\n", b"\r\n"),
            (b"refresh_certs\r\n", b"\r\n"),
            (b"version\r\n", b"\r\n"),
        ] {
            let reply = exchange(&mut stream, request, terminator).expect("reply");
            transcript.push(normalise(&reply));
        }
        let settings: Vec<String> = stats_of(&mut stream, "settings")
            .into_iter()
            .filter(|(name, _)| name.starts_with("ssl_") && name != "ssl_chain_cert")
            .map(|(name, value)| format!("{name} {value}"))
            .collect();
        transcript.push(settings.join("\n"));
        let names: Vec<String> = stats_of(&mut stream, "")
            .into_iter()
            .map(|(name, _)| name)
            .filter(|name| name.contains("ssl") || name.contains("cert"))
            .collect();
        transcript.push(names.join(" "));
        // A reload that fails keeps the certificates in use and says why.
        std::fs::remove_file(&chain).expect("remove chain");
        let reply = exchange(&mut stream, b"refresh_certs\r\n", b"\r\n").expect("reply");
        transcript.push(normalise(&reply).replace(&chain.display().to_string(), "<chain>"));
        assert!(
            works(server.port, &client).is_ok(),
            "new connections after a failed reload"
        );
        transcripts.push(transcript);
    }
    assert_eq!(
        transcripts[1], transcripts[0],
        "tailtrim (left) vs memcached (right)"
    );
    assert!(transcripts[0]
        .iter()
        .any(|t| t.contains("ssl_handshake_errors")));
}

#[test]
fn a_plain_client_on_the_tls_port_and_a_tls_client_on_a_notls_port_fail_cleanly() {
    let pki = Pki::new("wrong-port");
    pki.server_cert();
    let plain_port = free_port();
    let listen = format!("127.0.0.1,notls:127.0.0.1:{plain_port}");
    let server = Proc::tailtrim(&["-l", &listen, "-Z", "-o", &pki.server_options("")]);
    let client = pki.client(None, "localhost");
    let mut bystander = tls_connect(server.port, &client).expect("handshake");
    exchange(&mut bystander, b"set k 0 0 1\r\nv\r\n", b"\r\n").expect("set");

    // Plain text on the TLS port: a TLS alert at most, then the connection closes.
    let mut plain = TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
    plain
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    plain.write_all(b"get k\r\n").expect("send");
    let mut got = Vec::new();
    let _ = plain.read_to_end(&mut got);
    assert!(
        !got.windows(5).any(|w| w == b"VALUE"),
        "plain text was served on the TLS port: {got:?}"
    );
    assert!(got.is_empty() || got[0] == 0x15, "not an alert: {got:?}");
    assert_eq!(stat(&mut bystander, "ssl_handshake_errors"), 1);

    // A TLS client on the plain port: the handshake fails, nothing hangs.
    let deadline = Instant::now();
    assert!(
        tls_connect(plain_port, &client).is_err(),
        "TLS on a notls port"
    );
    assert!(deadline.elapsed() < Duration::from_secs(10));
    // The plain port serves plain clients.
    let mut plain = TcpStream::connect(("127.0.0.1", plain_port)).expect("connect");
    plain.write_all(b"get k\r\n").expect("send");
    let reply = common::read_until(&mut plain, b"END\r\n", Duration::from_secs(10));
    assert_eq!(reply, b"VALUE k 0 1\r\nv\r\nEND\r\n");

    let reply = exchange(&mut bystander, b"get k\r\n", b"END\r\n").expect("bystander");
    assert_eq!(reply, b"VALUE k 0 1\r\nv\r\nEND\r\n");
    // The log stream would leave in plain text: refused, the session goes on.
    let reply = exchange(&mut bystander, b"watch\r\nmn\r\n", b"MN\r\n").expect("watch");
    assert_eq!(
        reply,
        b"CLIENT_ERROR watch is not served over TLS\r\nMN\r\n"
    );
}

#[test]
fn server_certificates_are_checked_by_the_client() {
    let pki = Pki::new("server-certs");
    pki.server_cert();
    pki.issue("expired", &["localhost", "127.0.0.1"], false, true);
    pki.issue("selfsigned", &["localhost", "127.0.0.1"], true, false);
    let client = pki.client(None, "localhost");
    let good = Proc::tailtrim(&["-l", "127.0.0.1", "-Z", "-o", &pki.server_options("")]);
    assert!(works(good.port, &client).is_ok());
    let wrong_host = pki.client(None, "cache.elsewhere.example");
    let error = works(good.port, &wrong_host).unwrap_err();
    assert!(error.contains("not valid for name"), "{error}");
    for (cert, reason) in [("expired", "expired"), ("selfsigned", "UnknownIssuer")] {
        let options = format!(
            "ssl_chain_cert={},ssl_key={}",
            pki.text(&format!("{cert}.pem")),
            pki.text(&format!("{cert}.key"))
        );
        let server = Proc::tailtrim(&["-l", "127.0.0.1", "-Z", "-o", &options]);
        let error = works(server.port, &client).unwrap_err();
        assert!(error.contains(reason), "{cert}: {error}");
        // The refused client did not take the server down.
        let mut plain_check = tls_connect(server.port, &pki.client(None, "localhost"));
        assert!(plain_check.is_err());
        plain_check = tls_connect(good.port, &client);
        assert!(plain_check.is_ok());
    }
}

#[test]
fn client_certificates_per_verify_mode() {
    let pki = Pki::new("client-certs");
    pki.server_cert();
    pki.issue("client", &["client.test"], false, false);
    pki.issue("client-expired", &["client.test"], false, true);
    let stranger = Pki::new("client-certs-stranger");
    stranger.issue("client", &["client.test"], true, false);
    // (mode, no certificate, valid, expired, unknown CA): accepted?
    let cases = [
        (0, [true, true, true, true]),
        (1, [true, true, false, false]),
        (2, [false, true, false, false]),
        (3, [false, true, false, false]),
    ];
    for (mode, expected) in cases {
        let extra = format!("ssl_ca_cert={},ssl_verify_mode={mode}", pki.text("ca.pem"));
        let server = Proc::tailtrim(&["-l", "127.0.0.1", "-Z", "-o", &pki.server_options(&extra)]);
        let mut bystander =
            tls_connect(server.port, &pki.client(Some("client"), "localhost")).expect("bystander");
        exchange(&mut bystander, b"set k 0 0 1\r\nv\r\n", b"\r\n").expect("set");
        let mut unknown = pki.client(None, "localhost");
        unknown.cert = Some(stranger.path("client.pem"));
        unknown.key = Some(stranger.path("client.key"));
        let clients = [
            pki.client(None, "localhost"),
            pki.client(Some("client"), "localhost"),
            pki.client(Some("client-expired"), "localhost"),
            unknown,
        ];
        let mut refused = 0;
        for (index, (client, accepted)) in clients.iter().zip(expected).enumerate() {
            let result = works(server.port, client);
            assert_eq!(
                result.is_ok(),
                accepted,
                "mode {mode}, client {index}: {result:?}"
            );
            refused += u64::from(!accepted);
        }
        let reply = exchange(&mut bystander, b"get k\r\n", b"END\r\n").expect("bystander");
        assert_eq!(reply, b"VALUE k 0 1\r\nv\r\nEND\r\n", "mode {mode}");
        assert_eq!(
            stat(&mut bystander, "ssl_handshake_errors"),
            refused,
            "mode {mode}"
        );
    }
}

#[test]
fn refresh_certs_and_sighup_swap_certificates_for_new_connections() {
    let first = Pki::new("reload-first");
    first.server_cert();
    let second = Pki::new("reload-second");
    second.server_cert();
    let live = Pki::new("reload-live");
    for name in ["server.pem", "server.key"] {
        std::fs::copy(first.path(name), live.path(name)).expect("copy");
    }
    let server = Proc::tailtrim(&["-l", "127.0.0.1", "-Z", "-o", &live.server_options("")]);
    let trusts_first = first.client(None, "localhost");
    let trusts_second = second.client(None, "localhost");
    let mut old = tls_connect(server.port, &trusts_first).expect("first");
    assert!(works(server.port, &trusts_second).is_err());

    for name in ["server.pem", "server.key"] {
        std::fs::copy(second.path(name), live.path(name)).expect("copy");
    }
    assert_eq!(
        exchange(&mut old, b"refresh_certs\r\n", b"\r\n").expect("refresh"),
        b"OK\r\n"
    );
    assert!(
        works(server.port, &trusts_second).is_ok(),
        "new certificate"
    );
    assert!(
        works(server.port, &trusts_first).is_err(),
        "old certificate"
    );
    // The connection made before keeps its session.
    exchange(&mut old, b"version\r\n", b"\r\n").expect("old connection");

    // A broken file: refused with the reason, the certificates in use stay.
    std::fs::write(live.path("server.pem"), "garbage").expect("break");
    let reply = exchange(&mut old, b"refresh_certs\r\n", b"\r\n").expect("refresh");
    assert!(
        reply.starts_with(b"Error loading the certificate chain: "),
        "{}",
        String::from_utf8_lossy(&reply)
    );
    assert!(works(server.port, &trusts_second).is_ok());

    // SIGHUP reloads as well.
    for name in ["server.pem", "server.key"] {
        std::fs::copy(first.path(name), live.path(name)).expect("copy");
    }
    let status = Command::new("kill")
        .args(["-HUP", &server.pid().to_string()])
        .status()
        .expect("kill -HUP");
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    while works(server.port, &trusts_first).is_err() {
        assert!(
            Instant::now() < deadline,
            "SIGHUP did not reload the certificates"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    exchange(&mut old, b"version\r\n", b"\r\n").expect("old connection after SIGHUP");
}

/// The first bytes a TLS client sends (its ClientHello), for a half-sent handshake.
fn client_hello(pki: &Pki) -> Vec<u8> {
    let options = pki.client(None, "localhost");
    let config = Arc::new(options.build().expect("config"));
    let mut conn = ClientConnection::new(config, options.server_name("localhost").expect("name"))
        .expect("conn");
    let mut hello = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut hello).expect("hello");
    }
    hello
}

#[test]
fn a_handshake_flood_is_bounded_by_the_connection_limit_and_the_idle_timeout() {
    let pki = Pki::new("flood");
    pki.server_cert();
    let max_connections = 64;
    let server = Proc::tailtrim(&[
        "-l",
        "127.0.0.1",
        "-c",
        &max_connections.to_string(),
        "-Z",
        "-o",
        &format!("{},idle_timeout=1", pki.server_options("")),
    ]);
    let client = pki.client(None, "localhost");
    works(server.port, &client).expect("before the flood");
    let rss_before = server.rss_kib();
    let hello = client_hello(&pki);
    let mut flood = Vec::new();
    for index in 0..(max_connections * 3) {
        let Ok(mut socket) = TcpStream::connect(("127.0.0.1", server.port)) else {
            continue;
        };
        if index % 2 == 1 {
            let _ = socket.write_all(&hello[..hello.len() / 2]);
        }
        flood.push(socket);
    }
    // Past -c, the server says so and closes; the rest are closed by the idle timeout.
    let mut closed = 0;
    let mut refused = 0;
    for socket in &mut flood {
        socket
            .set_read_timeout(Some(Duration::from_secs(15)))
            .expect("timeout");
        let mut got = Vec::new();
        match socket.read_to_end(&mut got) {
            Ok(_) => closed += 1,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => closed += 1,
            Err(e) => panic!("a flood connection stayed open: {e}"),
        }
        if got.starts_with(b"ERROR Too many open connections") {
            refused += 1;
        }
    }
    assert_eq!(closed, flood.len());
    assert!(refused > 0, "no connection was refused past -c");
    let rss_after = server.rss_kib();
    assert!(
        rss_after < rss_before + 32 * 1024,
        "RSS grew from {rss_before} to {rss_after} KiB"
    );
    // The server still serves, and counts no handshake error for silent peers.
    let mut stream = tls_connect(server.port, &client).expect("after the flood");
    exchange(&mut stream, b"set k 0 0 1\r\nv\r\n", b"\r\n").expect("set");
    assert!(stat(&mut stream, "curr_connections") < 5);
}

#[test]
fn every_dispatch_policy_serves_get_and_set_over_tls() {
    let pki = Pki::new("dispatch");
    pki.server_cert();
    let client = pki.client(None, "localhost");
    let large: Vec<u8> = (0..300_000).map(|i| b'a' + (i % 26) as u8).collect();
    for policy in [
        "pinned",
        "size-aware",
        "early-binding",
        "stealing",
        "late-binding",
    ] {
        let server = Proc::tailtrim(&[
            "-l",
            "127.0.0.1",
            "-t",
            "2",
            "--dispatch",
            policy,
            "-Z",
            "-o",
            &pki.server_options(""),
        ]);
        let mut stream = tls_connect(server.port, &client).expect("handshake");
        let mut request = b"set small 0 0 2\r\nhi\r\n".to_vec();
        request.extend_from_slice(format!("set large 0 0 {}\r\n", large.len()).as_bytes());
        request.extend_from_slice(&large);
        request.extend_from_slice(b"\r\n");
        let reply = exchange(&mut stream, &request, b"STORED\r\nSTORED\r\n");
        assert_eq!(
            reply.as_deref(),
            Ok(&b"STORED\r\nSTORED\r\n"[..]),
            "{policy}"
        );
        for _ in 0..3 {
            let reply = exchange(&mut stream, b"get small large small\r\n", b"END\r\n")
                .unwrap_or_else(|e| panic!("{policy}: {e}"));
            let mut expected = b"VALUE small 0 2\r\nhi\r\n".to_vec();
            expected.extend_from_slice(format!("VALUE large 0 {}\r\n", large.len()).as_bytes());
            expected.extend_from_slice(&large);
            expected.extend_from_slice(b"\r\nVALUE small 0 2\r\nhi\r\nEND\r\n");
            assert!(reply == expected, "{policy}: {} bytes back", reply.len());
        }
    }
}

#[test]
fn impossible_tls_configurations_stop_the_server_with_memcacheds_words() {
    let pki = Pki::new("refusals");
    pki.server_cert();
    let serve = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_tailtrim"))
            .arg("serve")
            .args(["-p", &free_port().to_string(), "-l", "127.0.0.1"])
            .args(args)
            .output()
            .expect("run");
        assert!(!output.status.success(), "{args:?} started");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let missing = pki.path("absent.pem").display().to_string();
    let cases: Vec<(Vec<String>, String)> = vec![
        (
            vec![
                "-Z".into(),
                "-o".into(),
                format!("ssl_chain_cert={missing}"),
            ],
            format!("Error loading the certificate chain: {missing} : No such file or directory"),
        ),
        (
            vec![
                "-Z".into(),
                "-o".into(),
                format!(
                    "ssl_chain_cert={},ssl_key={missing}",
                    pki.text("server.pem")
                ),
            ],
            format!("Error loading the key: {missing} : No such file or directory"),
        ),
        (
            vec![
                "-Z".into(),
                "-o".into(),
                pki.server_options("ssl_verify_mode=4"),
            ],
            "Invalid ssl_verify_mode. Use help to see valid options.".into(),
        ),
        (
            vec![
                "-Z".into(),
                "-o".into(),
                pki.server_options("ssl_min_version=9"),
            ],
            "Invalid ssl_min_version. Use help to see valid options.".into(),
        ),
        (
            vec!["-l".into(), "notls:127.0.0.1".into()],
            "'notls' option is valid only when SSL is enabled".into(),
        ),
        (
            vec![
                "-Z".into(),
                "-o".into(),
                pki.server_options("ssl_verify_mode=2"),
            ],
            "ssl_verify_mode 2 needs ssl_ca_cert".into(),
        ),
    ];
    for (args, expected) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let stderr = serve(&args);
        assert!(stderr.contains(&expected), "{args:?}: {stderr}");
    }
    // The TOML section says the same as the flags.
    let config = pki.path("tls.toml");
    std::fs::write(
        &config,
        format!(
            "[tls]\nenabled = true\nchain_cert = \"{}\"\nkey = \"{}\"\nmin_version = \"tlsv1.3\"\n",
            pki.text("server.pem"),
            pki.text("server.key")
        ),
    )
    .expect("write config");
    let server = Proc::tailtrim(&["-l", "127.0.0.1", "--config", &config.display().to_string()]);
    let mut stream = tls_connect(server.port, &pki.client(None, "localhost")).expect("toml tls");
    let settings = stats_of(&mut stream, "settings");
    assert!(settings.contains(&("ssl_min_version".into(), "tlsv1.3".into())));
    assert!(settings.contains(&("ssl_enabled".into(), "yes".into())));
}
