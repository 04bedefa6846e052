//! TLS through `tailtrim proxy`: a TLS client listener (`[tls]`, memcached's option names) in
//! front of three `memcached -Z -Y` backends reached with TLS and credentials (`[pool.tls]`,
//! `[pool] username/password`); certificates are made here with rcgen.
//!
//! ```text
//!   rustls client ──TLS + -Y login──> tailtrim proxy ──TLS + -Y login──> 3 × memcached -Z -Y
//!   plain client ──> TLS listener: closed, no hang
//!   proxy with an unknown backend CA: SERVER_ERROR … TLS handshake failed …, no hang
//! ```

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::proxy::Proxy;
use common::{require_memcached, Program, Server};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

/// Upper bound on any wait (bounds a hang, asserts no timing).
const LIMIT: Duration = Duration::from_secs(20);

/// A directory of PEM files: `NAME-ca.pem` and a `localhost`/127.0.0.1 server certificate
/// `NAME-server.pem` with its key `NAME-server.key`, for each CA name.
struct Pki {
    dir: PathBuf,
}

impl Pki {
    fn new(test: &str, authorities: &[&str]) -> Pki {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join("proxy-tls")
            .join(format!("{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create the test directory");
        for name in authorities {
            let ca_key = KeyPair::generate().expect("ca key");
            let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("params");
            ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            let ca = CertifiedIssuer::self_signed(ca_params, ca_key).expect("ca");
            std::fs::write(dir.join(format!("{name}-ca.pem")), ca.pem()).expect("write");
            let key = KeyPair::generate().expect("key");
            let cert =
                CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
                    .expect("params")
                    .signed_by(&key, &ca)
                    .expect("sign");
            std::fs::write(dir.join(format!("{name}-server.pem")), cert.pem()).expect("write");
            std::fs::write(dir.join(format!("{name}-server.key")), key.serialize_pem())
                .expect("write");
        }
        Pki { dir }
    }

    fn path(&self, file: &str) -> String {
        self.dir.join(file).display().to_string()
    }

    fn write(&self, file: &str, text: &str) -> String {
        std::fs::write(self.dir.join(file), text).expect("write");
        self.path(file)
    }
}

/// Three `memcached -Z -Y users` backends with `ca`'s server certificate.
fn secured_backends(pki: &Pki, ca: &str, users: &str) -> Vec<Server> {
    let options = format!(
        "ssl_chain_cert={},ssl_key={}",
        pki.path(&format!("{ca}-server.pem")),
        pki.path(&format!("{ca}-server.key"))
    );
    (0..3)
        .map(|_| Server::start(Program::Memcached, &["-Z", "-o", &options, "-Y", users]))
        .collect()
}

/// Writes the config (`[proxy] listen` is added) and starts `tailtrim proxy --config FILE`.
fn start_proxy(pki: &Pki, name: &str, config: &str) -> Proxy {
    Proxy::launch(|listen| {
        let path = pki.write(
            name,
            &format!("[proxy]\nlisten = \"{listen}\"\nadmin_listen = \"\"\n{config}"),
        );
        vec!["--config".to_string(), path]
    })
}

fn servers_line(backends: &[Server]) -> String {
    let list: Vec<String> = backends
        .iter()
        .map(|backend| format!("\"{}\"", backend.addr()))
        .collect();
    format!("servers = [{}]\n", list.join(", "))
}

/// A TLS connection to the proxy that trusts `ca_pem`.
fn tls_client(
    proxy: &Proxy,
    ca_pem: &str,
) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(ca_pem).expect("read the CA");
    for cert in CertificateDer::pem_slice_iter(&pem) {
        roots.add(cert.expect("PEM")).expect("add the CA");
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = ServerName::try_from("localhost").expect("name");
    let connection = rustls::ClientConnection::new(Arc::new(config), name).expect("client");
    rustls::StreamOwned::new(connection, proxy.connect())
}

/// Sends `request` and reads until the reply ends with `terminator` (bounded by the socket's
/// read timeout; an error or a close ends it).
fn exchange(stream: &mut impl ReadWrite, request: &[u8], terminator: &[u8]) -> String {
    stream.write_all(request).expect("send");
    stream.flush().expect("flush");
    let mut reply = Vec::new();
    let mut chunk = [0u8; 16384];
    let deadline = Instant::now() + LIMIT;
    while !reply.ends_with(terminator) && Instant::now() < deadline {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => reply.extend_from_slice(&chunk[..n]),
        }
    }
    String::from_utf8_lossy(&reply).into_owned()
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

#[test]
fn a_tls_client_goes_through_the_proxy_to_three_tls_and_auth_backends() {
    if !require_memcached("a_tls_client_goes_through_the_proxy_to_three_tls_and_auth_backends") {
        return;
    }
    let pki = Pki::new("through", &["good"]);
    let backend_users = pki.write("backend-users", "proxy:s3cret\n");
    let client_users = pki.write("client-users", "app:apppw\n");
    let backends = secured_backends(&pki, "good", &backend_users);
    let config = format!(
        "auth_file = \"{client_users}\"\n\n[tls]\nenabled = true\nchain_cert = \"{}\"\nkey = \"{}\"\n\n\
         [pool]\n{}username = \"proxy\"\npassword = \"s3cret\"\n\n[pool.tls]\nca_cert = \"{}\"\n\
         server_name = \"localhost\"\n",
        pki.path("good-server.pem"),
        pki.path("good-server.key"),
        servers_line(&backends),
        pki.path("good-ca.pem"),
    );
    let proxy = start_proxy(&pki, "through.toml", &config);
    let mut client = tls_client(&proxy, &pki.path("good-ca.pem"));
    assert_eq!(
        exchange(&mut client, b"get a\r\n", b"\r\n"),
        "CLIENT_ERROR unauthenticated\r\n"
    );
    assert_eq!(
        exchange(&mut client, b"set x 0 0 9\r\napp apppw\r\n", b"\r\n"),
        "STORED\r\n"
    );
    let keys: Vec<String> = (0..40).map(|index| format!("tls-key-{index}")).collect();
    for key in &keys {
        let request = format!("set {key} 3 0 {}\r\n{key}\r\n", key.len());
        assert_eq!(
            exchange(&mut client, request.as_bytes(), b"\r\n"),
            "STORED\r\n"
        );
    }
    for key in &keys {
        let request = format!("get {key}\r\n");
        assert_eq!(
            exchange(&mut client, request.as_bytes(), b"END\r\n"),
            format!("VALUE {key} 3 {}\r\n{key}\r\nEND\r\n", key.len())
        );
    }
    let multiget = format!("get {}\r\n", keys.join(" "));
    let expected: String = keys
        .iter()
        .map(|key| format!("VALUE {key} 3 {}\r\n{key}\r\n", key.len()))
        .chain(std::iter::once("END\r\n".to_string()))
        .collect();
    assert_eq!(
        exchange(&mut client, multiget.as_bytes(), b"END\r\n"),
        expected
    );
    // A large value crosses both TLS hops whole.
    let large = "v".repeat(100 * 1024);
    let request = format!("set large 0 0 {}\r\n{large}\r\n", large.len());
    assert_eq!(
        exchange(&mut client, request.as_bytes(), b"\r\n"),
        "STORED\r\n"
    );
    assert_eq!(
        exchange(&mut client, b"get large\r\n", b"END\r\n"),
        format!("VALUE large 0 {}\r\n{large}\r\nEND\r\n", large.len())
    );
    assert_eq!(
        exchange(&mut client, b"set n 0 0 1\r\n5\r\nincr n 10\r\n", b"15\r\n"),
        "STORED\r\n15\r\n"
    );
    assert_eq!(
        exchange(
            &mut client,
            b"delete tls-key-1\r\nget tls-key-1\r\n",
            b"END\r\n"
        ),
        "DELETED\r\nEND\r\n"
    );
    // Every backend holds some of the keys.
    let stats = exchange(&mut client, b"stats\r\n", b"END\r\n");
    let items: u64 = stats
        .lines()
        .find_map(|line| line.strip_prefix("STAT curr_items "))
        .and_then(|count| count.parse().ok())
        .unwrap_or_else(|| panic!("no curr_items in {stats}"));
    assert_eq!(items, keys.len() as u64 + 1, "{stats}");
    assert!(stats.contains("STAT backends_unreachable 0\r\n"), "{stats}");
    // A plaintext client on the TLS port is closed, without a hang.
    let mut plain = proxy.connect();
    let reply = exchange(&mut plain, b"version\r\n", b"\r\n");
    assert!(!reply.contains("VERSION"), "{reply:?}");
}

#[test]
fn an_unknown_backend_ca_gives_a_clear_error_without_a_hang() {
    if !require_memcached("an_unknown_backend_ca_gives_a_clear_error_without_a_hang") {
        return;
    }
    let pki = Pki::new("unknown-ca", &["good", "rogue"]);
    let backend_users = pki.write("backend-users", "proxy:s3cret\n");
    let backends = secured_backends(&pki, "good", &backend_users);
    let pool = |ca: &str| {
        format!(
            "[pool]\n{}username = \"proxy\"\npassword = \"s3cret\"\n\n[pool.tls]\nca_cert = \"{}\"\n\
             server_name = \"localhost\"\n",
            servers_line(&backends),
            pki.path(&format!("{ca}-ca.pem")),
        )
    };
    let mut rogue = start_proxy(&pki, "rogue.toml", &pool("rogue"));
    let trusted = start_proxy(&pki, "trusted.toml", &pool("good"));
    let mut client = rogue.connect();
    let reply = exchange(&mut client, b"get a\r\n", b"\r\n");
    assert!(reply.starts_with("SERVER_ERROR "), "{reply:?}");
    assert!(reply.contains("TLS handshake failed"), "{reply:?}");
    // Both CAs carry the same (empty) name: rustls finds the rogue one's signature wrong.
    assert!(reply.contains("invalid peer certificate"), "{reply:?}");
    let reply = exchange(&mut client, b"set a 0 0 1\r\nx\r\n", b"\r\n");
    assert!(reply.starts_with("SERVER_ERROR "), "{reply:?}");
    // The proxy itself still answers, and a proxy that trusts the backends' CA is served.
    assert_eq!(exchange(&mut client, b"mn\r\n", b"\r\n"), "MN\r\n");
    let mut good = trusted.connect();
    assert_eq!(
        exchange(&mut good, b"set a 0 0 1\r\nx\r\nget a\r\n", b"END\r\n"),
        "STORED\r\nVALUE a 0 1\r\nx\r\nEND\r\n"
    );
    let log = rogue.stderr();
    assert!(log.contains("TLS handshake failed"), "{log}");
}

#[test]
fn unusable_tls_settings_stop_the_proxy_at_start() {
    let pki = Pki::new("unusable", &["good"]);
    for (name, config, reason) in [
        (
            "no-chain.toml",
            "[tls]\nenabled = true\n[pool]\nservers = [\"127.0.0.1:1\"]\n".to_string(),
            "ssl_chain_cert",
        ),
        (
            "no-ca.toml",
            "[pool]\nservers = [\"127.0.0.1:1\"]\n[pool.tls]\nserver_name = \"localhost\"\n"
                .to_string(),
            "CA certificate",
        ),
    ] {
        let path = pki.write(name, &config);
        let mut child = Command::new(env!("CARGO_BIN_EXE_tailtrim"))
            .args([
                "proxy",
                "--config",
                &path,
                "--listen",
                "127.0.0.1:0",
                "--admin",
                "off",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run tailtrim proxy");
        // Bounds a proxy that starts instead of refusing (a hang, not a timing assertion).
        let deadline = Instant::now() + LIMIT;
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break Some(status);
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut stderr = String::new();
        if let Some(mut pipe) = child.stderr.take() {
            let _ = pipe.read_to_string(&mut stderr);
        }
        let status = status.unwrap_or_else(|| panic!("{name}: the proxy started: {stderr}"));
        assert!(!status.success(), "{name}: {stderr}");
        assert!(stderr.contains(reason), "{name}: {stderr}");
    }
}
