//! `tailtrim proxy`'s admin token from the command line: `--admin-token-file FILE` and the
//! `TAILTRIM_ADMIN_TOKEN` environment variable guard the membership endpoints, and an admin
//! listener beyond loopback without a token warns at start-up and refuses them.
//!
//! ```text
//!   test ──spawn──> tailtrim proxy --admin 127.0.0.1:P --admin-token-file F ──> memcached
//!        ──POST/DELETE /pool/servers (HTTP over loopback)──> 401 | 200 | 403
//! ```

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, listener_owner, require_memcached, Program, Server};

/// Bounds every wait of these tests (a hang, not a performance threshold).
const HANG_LIMIT: Duration = Duration::from_secs(60);

/// A running `tailtrim proxy`; killed (and reaped) when dropped.
struct Proxy {
    child: Child,
    admin: SocketAddr,
}

impl Proxy {
    /// Starts the proxy over `backend` with the admin listener on `admin_host` (a free port;
    /// called through loopback), extra `flags` and `environment`, stderr captured. The ports
    /// are picked before the proxy binds them, so a test started at the same moment can be
    /// handed the same one: a proxy that cannot bind it exits, and one whose admin port another
    /// process listens on (a request would reach that process) is stopped; either is started
    /// again on other ports.
    fn start(
        backend: &Server,
        admin_host: &str,
        flags: &[&str],
        environment: &[(&str, &str)],
    ) -> Proxy {
        const ATTEMPTS: usize = 5;
        for attempt in 1..=ATTEMPTS {
            match Proxy::try_start(backend, admin_host, flags, environment) {
                Ok(proxy) => return proxy,
                Err(why) if attempt < ATTEMPTS => {
                    eprintln!("proxy start attempt {attempt} failed ({why}); retrying");
                }
                Err(why) => panic!("{why}"),
            }
        }
        unreachable!("the last attempt panics")
    }

    /// One start on freshly picked ports; `Err` when the proxy could not bind them or another
    /// process owns the admin listener's port.
    fn try_start(
        backend: &Server,
        admin_host: &str,
        flags: &[&str],
        environment: &[(&str, &str)],
    ) -> Result<Proxy, String> {
        let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let admin_port = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_tailtrim"))
            .args(["proxy", "--listen", &listen.to_string(), "--admin"])
            .arg(format!("{admin_host}:{admin_port}"))
            .args(["--servers", &backend.addr().to_string()])
            .args(flags)
            .env_remove("TAILTRIM_ADMIN_TOKEN")
            .envs(environment.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start tailtrim proxy");
        let mut proxy = Proxy {
            child,
            admin: SocketAddr::from(([127, 0, 0, 1], admin_port)),
        };
        let deadline = Instant::now() + HANG_LIMIT;
        loop {
            if let Ok(Some(status)) = proxy.child.try_wait() {
                let stderr = proxy.stderr();
                if stderr.contains("in use") {
                    return Err(format!("a port was taken: {stderr}"));
                }
                panic!("tailtrim proxy exited early: {status}: {stderr}");
            }
            if TcpStream::connect_timeout(&proxy.admin, Duration::from_millis(200)).is_ok() {
                match listener_owner(admin_port) {
                    Some(owner) if owner == proxy.child.id() => return Ok(proxy),
                    Some(owner) => {
                        let _ = proxy.stderr();
                        return Err(format!("port {admin_port} is held by process {owner}"));
                    }
                    // The listener went away between connect and lookup: look again.
                    None => {}
                }
            }
            assert!(
                Instant::now() < deadline,
                "the admin listener never accepted"
            );
            std::thread::sleep(Duration::from_millis(30));
        }
    }

    /// One admin request; returns the status code and the whole reply.
    fn call(&self, method: &str, target: &str, headers: &str) -> (u16, String) {
        let mut stream = TcpStream::connect(self.admin).expect("connect admin");
        stream.set_read_timeout(Some(HANG_LIMIT)).expect("timeout");
        write!(
            stream,
            "{method} {target} HTTP/1.1\r\nHost: x\r\n{headers}\r\n"
        )
        .expect("write");
        let mut text = String::new();
        stream.read_to_string(&mut text).expect("read admin reply");
        let status = text
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or(0);
        (status, text)
    }

    /// Stops the proxy and returns what it wrote to stderr.
    fn stderr(&mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let mut text = String::new();
        if let Some(mut stderr) = self.child.stderr.take() {
            stderr.read_to_string(&mut text).expect("read stderr");
        }
        text
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A join of `joining` is refused without the token and with a wrong one, then taken with it.
fn join_needs(proxy: &Proxy, joining: &Server, token: &str) {
    let target = format!("/pool/servers?server={}:1&warmup=cold", joining.addr());
    for headers in [String::new(), "Authorization: Bearer wrong\r\n".to_string()] {
        let (status, reply) = proxy.call("POST", &target, &headers);
        assert_eq!(status, 401, "{reply}");
        // Header names are case-insensitive (RFC 9110); hyper writes them title-cased.
        assert!(
            reply
                .to_ascii_lowercase()
                .contains("www-authenticate: bearer"),
            "{reply}"
        );
    }
    let (_, pool) = proxy.call("GET", "/pool", "");
    assert!(!pool.contains(&joining.addr().to_string()), "{pool}");
    let (status, reply) = proxy.call(
        "POST",
        &target,
        &format!("Authorization: Bearer {token}\r\n"),
    );
    assert_eq!(status, 200, "{reply}");
    let (_, pool) = proxy.call("GET", "/pool", "");
    assert!(pool.contains(&joining.addr().to_string()), "{pool}");
}

#[test]
fn the_admin_token_comes_from_a_file_flag_or_the_environment() {
    if !require_memcached("the_admin_token_comes_from_a_file_flag_or_the_environment") {
        return;
    }
    let backend = Server::start(Program::Memcached, &[]);
    let joining = Server::start(Program::Memcached, &[]);
    let file = std::env::temp_dir().join(format!("tailtrim-admin-token-{}", std::process::id()));
    std::fs::write(&file, "from-the-file\n").expect("write token file");
    let file_text = file.display().to_string();
    // The flag wins over the environment.
    let proxy = Proxy::start(
        &backend,
        "127.0.0.1",
        &["--admin-token-file", &file_text],
        &[("TAILTRIM_ADMIN_TOKEN", "from-the-environment")],
    );
    join_needs(&proxy, &joining, "from-the-file");
    drop(proxy);
    let proxy = Proxy::start(
        &backend,
        "127.0.0.1",
        &[],
        &[("TAILTRIM_ADMIN_TOKEN", "from-the-environment")],
    );
    join_needs(&proxy, &joining, "from-the-environment");
    drop(proxy);
    // An empty variable counts as unset: the config file's token stays in force.
    let config = file.with_extension("toml");
    std::fs::write(&file, "from-the-config\n").expect("write token file");
    std::fs::write(
        &config,
        format!("[proxy]\nadmin_token_file = {file_text:?}\n"),
    )
    .expect("write config");
    let config_text = config.display().to_string();
    let proxy = Proxy::start(
        &backend,
        "127.0.0.1",
        &["--config", &config_text],
        &[("TAILTRIM_ADMIN_TOKEN", "")],
    );
    join_needs(&proxy, &joining, "from-the-config");
    drop(proxy);
    std::fs::remove_file(&config).expect("remove config");
    std::fs::remove_file(&file).expect("remove token file");
    // A token file that cannot be read stops the start, with the reason.
    let output = Command::new(env!("CARGO_BIN_EXE_tailtrim"))
        .args(["proxy", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
        .args(["--servers", &backend.addr().to_string()])
        .args(["--admin-token-file", &file_text])
        .stdin(Stdio::null())
        .output()
        .expect("run tailtrim proxy");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("admin token file"), "{stderr}");
}

#[test]
fn a_listener_beyond_loopback_without_a_token_warns_and_refuses_changes() {
    if !require_memcached("a_listener_beyond_loopback_without_a_token_warns_and_refuses_changes") {
        return;
    }
    let backend = Server::start(Program::Memcached, &[]);
    let joining = Server::start(Program::Memcached, &[]);
    let mut proxy = Proxy::start(&backend, "0.0.0.0", &[], &[]);
    let target = format!("/pool/servers?server={}:1&warmup=cold", joining.addr());
    let (status, reply) = proxy.call("POST", &target, "");
    assert_eq!(status, 403, "{reply}");
    let (status, reply) = proxy.call("GET", "/metrics", "");
    assert_eq!(status, 200, "{reply}");
    let stderr = proxy.stderr();
    assert!(
        stderr.contains("warning: admin listener on 0.0.0.0:")
            && stderr.contains("no admin token")
            && stderr.contains("403"),
        "{stderr}"
    );
}
