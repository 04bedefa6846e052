//! Operating a running server and proxy: signals, log levels, `watch`, `lru_crawler
//! metadump`, each checked on real processes over real sockets.
//!
//! ```text
//!   tailtrim serve -vv --log-file F ──set/get──> F holds `<FD set …` / `>FD STORED`
//!   kill -HUP serve  ──> still serving, data kept; F moved away ─> F reopened
//!   kill -HUP proxy (with and without -c) ──> still serving; kill -TERM proxy ──> exit 0
//!   watch on one connection ──> sees the get and set made on another
//!   lru_crawler metadump all  ──> same lines as memcached (fields, keys, exp=-1)
//! ```

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, read_until, require_memcached, Program, Server};

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(30));
    }
}

fn send_signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid}");
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tailtrim-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn request(addr: std::net::SocketAddr, text: &[u8], terminator: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.write_all(text).expect("send");
    let reply = read_until(&mut stream, terminator, Duration::from_secs(10));
    String::from_utf8_lossy(&reply).into_owned()
}

#[test]
fn sighup_keeps_the_server_and_its_data() {
    let mut server = Server::start(Program::Tailtrim, &[]);
    assert_eq!(
        server.request(b"set kept 0 0 5\r\nvalue\r\n", b"\r\n"),
        b"STORED\r\n"
    );
    send_signal(server.pid(), "HUP");
    // The main thread handles the signal when it wakes for it; a request after it must still
    // find the server (a killed one refuses the connection).
    std::thread::sleep(Duration::from_millis(300));
    assert!(server.is_running(), "SIGHUP ended the server");
    assert_eq!(
        server.request(b"get kept\r\n", b"END\r\n"),
        b"VALUE kept 0 5\r\nvalue\r\nEND\r\n"
    );
    assert!(server.is_running());
}

/// Voluntary context switches (wake-ups from a wait) of process `pid`'s main thread.
fn main_thread_wakeups(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/status"))
        .expect("the main thread's status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("voluntary_ctxt_switches:"))
        .and_then(|value| value.trim().parse().ok())
        .expect("voluntary_ctxt_switches")
}

/// An idle server's main thread sleeps until a signal comes: it used to poll the signal flags
/// every 100 ms (about 10 wake-ups a second). Counted over an idle second, not timed; a busy
/// host only makes a poll fire later. After the count, SIGHUP still reaches it and SIGTERM
/// still stops it.
#[test]
fn an_idle_servers_main_thread_waits_for_signals_without_polling() {
    let mut server = Server::start(Program::Tailtrim, &[]);
    std::thread::sleep(Duration::from_millis(200));
    let before = main_thread_wakeups(server.pid());
    std::thread::sleep(Duration::from_secs(1));
    let wakeups = main_thread_wakeups(server.pid()) - before;
    assert!(
        wakeups <= 3,
        "the idle main thread woke {wakeups} times in a second (at most 3)"
    );
    send_signal(server.pid(), "HUP");
    std::thread::sleep(Duration::from_millis(300));
    assert!(server.is_running(), "SIGHUP ended the server");
    assert_eq!(
        server.request(b"version\r\n", b"\r\n")[..8],
        b"VERSION "[..]
    );
    send_signal(server.pid(), "TERM");
    wait_for("SIGTERM to stop the server", || !server.is_running());
}

#[test]
fn vv_logs_commands_and_replies_and_sighup_reopens_the_log_file() {
    let dir = temp_dir("vv-log");
    let log = dir.join("server.log");
    let log_text = log.to_str().expect("utf-8 path");
    let mut server = Server::start(Program::Tailtrim, &["-vv", "--log-file", log_text]);
    // One connection, so one descriptor in every line.
    let mut client = server.connect();
    client
        .write_all(b"set logged 0 0 3\r\nabc\r\nget logged\r\n")
        .expect("send");
    read_until(&mut client, b"END\r\n", Duration::from_secs(10));
    let read_log = |path: &PathBuf| std::fs::read_to_string(path).unwrap_or_default();
    // The reply reached the client before its line reached the file: wait for the last one.
    wait_for("the -vv lines", || read_log(&log).contains(" END"));
    let text = read_log(&log);
    let fd_of = |prefix: &str| {
        text.lines()
            .find_map(|line| line.strip_suffix(prefix))
            .and_then(|start| start.strip_prefix('<'))
            .map(str::to_string)
    };
    let fd = fd_of(" set logged 0 0 3").unwrap_or_else(|| panic!("no set line in:\n{text}"));
    for expected in [
        format!("<{fd} set logged 0 0 3"),
        format!(">{fd} STORED"),
        format!(">{fd} sending key logged"),
        format!(">{fd} END"),
    ] {
        assert!(
            text.lines().any(|line| line == expected),
            "{expected:?} not in:\n{text}"
        );
    }
    assert!(
        !text.contains("abc"),
        "the data block is not logged:\n{text}"
    );

    // logrotate: the file is moved away, SIGHUP makes the server open a new one.
    let rotated = dir.join("server.log.1");
    std::fs::rename(&log, &rotated).expect("rotate");
    send_signal(server.pid(), "HUP");
    wait_for("a new log file", || log.exists());
    server.request(b"get after-rotation\r\n", b"END\r\n");
    wait_for("the request in the new file", || {
        read_log(&log).contains("get after-rotation")
    });
    assert!(!read_log(&rotated).contains("after-rotation"));
    assert!(server.is_running());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `tailtrim proxy` process; killed when dropped.
struct ProxyProcess {
    child: Child,
    addr: std::net::SocketAddr,
}

impl ProxyProcess {
    fn start(args: &[String], port: u16) -> ProxyProcess {
        let child = Command::new(env!("CARGO_BIN_EXE_tailtrim"))
            .arg("proxy")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start tailtrim proxy");
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        wait_for("the proxy to listen", || TcpStream::connect(addr).is_ok());
        ProxyProcess { child, addr }
    }

    fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for ProxyProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn proxy_survives_sighup(args: Vec<String>, port: u16) {
    let mut proxy = ProxyProcess::start(&args, port);
    assert_eq!(
        request(proxy.addr, b"set via-proxy 0 0 2\r\nok\r\n", b"\r\n"),
        "STORED\r\n"
    );
    send_signal(proxy.child.id(), "HUP");
    std::thread::sleep(Duration::from_millis(300));
    assert!(proxy.running(), "SIGHUP ended the proxy ({args:?})");
    assert_eq!(
        request(proxy.addr, b"get via-proxy\r\n", b"END\r\n"),
        "VALUE via-proxy 0 2\r\nok\r\nEND\r\n"
    );
    send_signal(proxy.child.id(), "TERM");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Ok(Some(status)) = proxy.child.try_wait() {
            break status;
        }
        assert!(Instant::now() < deadline, "SIGTERM did not end the proxy");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        status.success(),
        "SIGTERM is a clean exit, not a kill: {status:?}"
    );
}

#[test]
fn proxy_without_a_config_file_survives_sighup_and_exits_on_sigterm() {
    if !require_memcached("proxy_without_a_config_file_survives_sighup") {
        return;
    }
    let backend = Server::start(Program::Memcached, &[]);
    let port = free_port();
    let args = [
        "-l".to_string(),
        format!("127.0.0.1:{port}"),
        "--admin".to_string(),
        "off".to_string(),
        "-s".to_string(),
        format!("127.0.0.1:{}", backend.port),
    ];
    proxy_survives_sighup(args.to_vec(), port);
}

#[test]
fn proxy_with_a_config_file_survives_sighup_and_exits_on_sigterm() {
    if !require_memcached("proxy_with_a_config_file_survives_sighup") {
        return;
    }
    let backend = Server::start(Program::Memcached, &[]);
    let port = free_port();
    let dir = temp_dir("proxy-conf");
    let file = dir.join("proxy.toml");
    std::fs::write(
        &file,
        format!(
            "[proxy]\nlisten = \"127.0.0.1:{port}\"\nadmin_listen = \"\"\n\n[pool]\nservers = [\"127.0.0.1:{}:1\"]\n",
            backend.port
        ),
    )
    .expect("write config");
    let args = ["-c".to_string(), file.display().to_string()];
    proxy_survives_sighup(args.to_vec(), port);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Reads from `stream` until `done` holds for what came so far (or the time bound ends).
fn read_while(stream: &mut TcpStream, done: impl Fn(&str) -> bool) -> String {
    use std::io::Read;
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut text = Vec::new();
    let mut chunk = [0u8; 4096];
    while !done(&String::from_utf8_lossy(&text)) && Instant::now() < deadline {
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => text.extend_from_slice(&chunk[..n]),
            Err(_) => {}
        }
    }
    String::from_utf8_lossy(&text).into_owned()
}

#[test]
fn a_watcher_sees_gets_and_sets_of_other_connections() {
    let server = Server::start_under_test(&[]);
    let mut all = server.connect();
    all.write_all(b"watch fetchers mutations\r\n")
        .expect("send");
    assert_eq!(
        read_until(&mut all, b"\r\n", Duration::from_secs(10)),
        b"OK\r\n"
    );
    let mut fetches_only = server.connect();
    // Without a type, a watcher gets fetches; the `get` after `watch` is not answered.
    fetches_only
        .write_all(b"watch\r\nget never-answered\r\n")
        .expect("send");
    assert_eq!(
        read_until(&mut fetches_only, b"\r\n", Duration::from_secs(10)),
        b"OK\r\n"
    );
    // memcached registers a watcher asynchronously: wait until events reach it.
    let mut client = server.connect();
    wait_for("the watcher to see events", || {
        client.write_all(b"get probe\r\n").expect("send");
        read_until(&mut client, b"END\r\n", Duration::from_secs(10));
        read_while(&mut all, |text| text.contains("key=probe")).contains("key=probe")
    });
    client
        .write_all(b"set watched%20key 0 0 5\r\nhello\r\nget watched%20key\r\n")
        .expect("send");
    read_until(&mut client, b"END\r\n", Duration::from_secs(10));
    let seen = read_while(&mut all, |text| {
        text.contains("type=item_get key=watched%2520key status=found")
    });
    let line_with = |text: &str, needle: &str| {
        text.lines()
            .find(|line| line.contains(needle))
            .map(str::to_string)
            .unwrap_or_else(|| panic!("no line with {needle:?} in:\n{text}"))
    };
    let store = line_with(&seen, "type=item_store key=watched%2520key");
    assert!(
        store.starts_with("ts=") && store.contains(" gid="),
        "{store}"
    );
    assert!(
        store.contains(" status=stored cmd=set ttl=0 clsid=1 cfd=") && store.ends_with(" size=5"),
        "{store}"
    );
    let get = line_with(&seen, "type=item_get key=watched%2520key status=found");
    assert!(
        get.contains(" clsid=1 cfd=") && get.ends_with(" size=5"),
        "{get}"
    );

    let fetches = read_while(&mut fetches_only, |text| {
        text.contains("key=watched%2520key status=found")
    });
    line_with(&fetches, "type=item_get key=watched%2520key status=found");
    assert!(
        !fetches.contains("type=item_store") && !fetches.contains("END"),
        "a fetchers watcher gets no stores and no replies:\n{fetches}"
    );
}

/// `lru_crawler metadump` lines with the clock-dependent fields (`la`, a set `exp`) masked,
/// sorted (the dump's order is the LRU's, which differs between the servers).
fn metadump_masked(server: &Server, command: &[u8]) -> Vec<String> {
    let reply = server.request(command, b"END\r\n");
    let text = String::from_utf8(reply).expect("text");
    let mut lines: Vec<String> = text
        .split_inclusive('\n')
        .map(|line| {
            line.split(' ')
                .map(|field| match field.split_once('=') {
                    Some(("la", _)) => "la=T".to_string(),
                    Some(("exp", value)) if value != "-1" => "exp=T".to_string(),
                    _ => field.to_string(),
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    lines.sort();
    lines
}

#[test]
fn metadump_prints_what_memcached_prints() {
    if !require_memcached("metadump_prints_what_memcached_prints") {
        return;
    }
    let servers = [
        Server::start(Program::Tailtrim, &[]),
        Server::start(Program::Memcached, &[]),
    ];
    let dumps: Vec<Vec<Vec<String>>> = servers
        .iter()
        .map(|server| {
            for (command, reply) in [
                (&b"set plain 0 0 5\r\nvalue\r\n"[..], &b"STORED\r\n"[..]),
                (b"set odd%20key/\xc3\xa9 7 100 2\r\nhi\r\n", b"STORED\r\n"),
                (b"set fetched 0 0 300\r\n", b""),
            ] {
                if reply.is_empty() {
                    let mut value = command.to_vec();
                    value.extend_from_slice(&[b'v'; 300]);
                    value.extend_from_slice(b"\r\n");
                    assert_eq!(server.request(&value, b"\r\n"), b"STORED\r\n");
                } else {
                    assert_eq!(server.request(command, b"\r\n"), reply);
                }
            }
            server.request(b"get fetched\r\n", b"END\r\n");
            [
                &b"lru_crawler metadump all\r\n"[..],
                b"lru_crawler metadump hash\r\n",
                b"lru_crawler metadump 1\r\n",
                b"lru_crawler metadump 2,3,63\r\n",
            ]
            .iter()
            .map(|command| metadump_masked(server, command))
            .collect()
        })
        .collect();
    assert_eq!(dumps[0], dumps[1], "tailtrim (left) and memcached (right)");
    assert!(dumps[0][0]
        .iter()
        .any(|line| line
            .starts_with("key=odd%2520key%2F%C3%A9 exp=T la=T cas=2 fetch=no cls=1 size=")));
    assert!(dumps[0][0]
        .iter()
        .any(|line| line.starts_with("key=plain exp=-1 ")));
    for server in &servers {
        for bad in [
            &b"lru_crawler metadump 64\r\n"[..],
            b"lru_crawler metadump 0\r\n",
            b"lru_crawler metadump 1,x\r\n",
        ] {
            assert_eq!(
                server.request(bad, b"\r\n"),
                b"BADCLASS invalid class id\r\n"
            );
        }
        for bad in [
            &b"lru_crawler metadump\r\n"[..],
            b"lru_crawler metadump all extra\r\n",
            b"watch nonsense\r\n",
        ] {
            assert_eq!(server.request(bad, b"\r\n"), b"ERROR\r\n");
        }
    }
}

/// Debian's memcached on `port`; killed when dropped.
struct Memcached(Child);

impl Memcached {
    fn start(port: u16) -> Memcached {
        let mut command = Command::new(common::memcached_path().expect("memcached"));
        command.args(["-p", &port.to_string(), "-U", "0", "-l", "127.0.0.1"]);
        // memcached refuses to run as root without -u.
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            command.args(["-u", "root"]);
        }
        let child = command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start memcached");
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        wait_for("memcached to listen", || TcpStream::connect(addr).is_ok());
        Memcached(child)
    }
}

impl Drop for Memcached {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn admin_request(admin: std::net::SocketAddr, head: &str) -> String {
    let mut stream = TcpStream::connect(admin).expect("connect admin");
    stream
        .write_all(format!("{head} HTTP/1.1\r\n\r\n").as_bytes())
        .expect("send");
    read_while(&mut stream, |_| false)
}

#[test]
fn the_proxy_logs_membership_changes_ejections_and_recoveries() {
    if !require_memcached("the_proxy_logs_membership_changes") {
        return;
    }
    let (first_port, second_port) = (free_port(), free_port());
    let _first = Memcached::start(first_port);
    let mut second = Some(Memcached::start(second_port));
    let dir = temp_dir("proxy-log");
    let log = dir.join("proxy.log");
    let (port, admin_port) = (free_port(), free_port());
    let args: Vec<String> = [
        "-l",
        &format!("127.0.0.1:{port}"),
        "--admin",
        &format!("127.0.0.1:{admin_port}"),
        "-s",
        &format!("127.0.0.1:{first_port}"),
        "--server-failure-limit",
        "1",
        "--server-retry-timeout-ms",
        "100",
        "--log-file",
        log.to_str().expect("utf-8 path"),
    ]
    .iter()
    .map(|arg| arg.to_string())
    .collect();
    let mut proxy = ProxyProcess::start(&args, port);
    let admin = std::net::SocketAddr::from(([127, 0, 0, 1], admin_port));
    let second_address = format!("127.0.0.1:{second_port}");
    let reply = admin_request(
        admin,
        // `+` left unescaped (it decodes to a space) still names the mode.
        &format!("POST /pool/servers?server={second_address}&warmup=preemptive+fallback"),
    );
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_for("the join in the log", || read_log().contains("admin add"));
    let joined = read_log();
    assert!(
        joined.contains(&format!(
            "admin add {second_address} (warm-up preemptive+fallback)"
        )),
        "{joined}"
    );

    // The second backend goes away: requests for its keys fail, it is ejected.
    second.take();
    let keys: String = (0..64).map(|i| format!(" key{i}")).collect();
    let get = format!("get{keys}\r\n");
    wait_for("the ejection in the log", || {
        request(proxy.addr, get.as_bytes(), b"\r\n");
        read_log().contains("ejected")
    });
    assert!(
        read_log().contains(&format!("backend {second_address} ejected")),
        "{}",
        read_log()
    );
    // It comes back on the same port: the next probe finds it.
    let _second = Memcached::start(second_port);
    wait_for("the recovery in the log", || {
        request(proxy.addr, get.as_bytes(), b"\r\n");
        read_log().contains("answers again")
    });
    assert!(read_log().contains(&format!("backend {second_address} answers again")));

    let reply = admin_request(
        admin,
        &format!("DELETE /pool/servers?server={second_address}"),
    );
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    wait_for("the removal in the log", || {
        read_log().contains(&format!("admin remove {second_address}"))
    });
    assert!(proxy.running());
    let _ = std::fs::remove_dir_all(&dir);
}
