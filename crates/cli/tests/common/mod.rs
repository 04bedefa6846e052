//! Shared helpers of the integration tests that boot real servers.
//!
//! ```text
//!   test ──spawn──> tailtrim serve -p <free port> -l 127.0.0.1 ...   (CARGO_BIN_EXE_tailtrim)
//!        ──spawn──> memcached     -p <free port> -l 127.0.0.1 ...   (Debian's oracle)
//!        ──TCP────> either one; /proc/<pid>/status for VmRSS
//! ```
//!
//! Environment:
//! - `TAILTRIM_TEST_TARGET=memcached` runs the tailtrim-side tests against stock memcached
//!   (to validate a suite before the server exists).
//! - `TAILTRIM_SERVE_ARGS` adds arguments to every `tailtrim serve` (e.g. `--dispatch size-aware`).
//! - `CI=true` turns "memcached is missing" from a skip into a failure.

#![allow(dead_code)]

pub mod exchange;
pub mod proxy;

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Which server program a [`Server`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Program {
    /// `tailtrim serve`, the binary under test.
    Tailtrim,
    /// Debian's `memcached`, the reference.
    Memcached,
}

impl Program {
    /// The program the tests treat as "the system under test": tailtrim unless
    /// `TAILTRIM_TEST_TARGET=memcached`.
    pub fn under_test() -> Program {
        match std::env::var("TAILTRIM_TEST_TARGET").as_deref() {
            Ok("memcached") => Program::Memcached,
            _ => Program::Tailtrim,
        }
    }
}

/// Whether we run under CI (`CI=true`).
pub fn in_ci() -> bool {
    matches!(std::env::var("CI").as_deref(), Ok("true") | Ok("1"))
}

/// Path of Debian's memcached, if installed.
pub fn memcached_path() -> Option<PathBuf> {
    if let Some(paths) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&paths) {
            let candidate = dir.join("memcached");
            if candidate.is_file() {
                return Some(candidate);
            }
        }
    }
    let fallback = PathBuf::from("/usr/bin/memcached");
    fallback.is_file().then_some(fallback)
}

/// Returns true when memcached is available; otherwise prints a skip message and returns
/// false, or panics under CI (where scripts/setup-deps.sh must have installed it).
pub fn require_memcached(test: &str) -> bool {
    if memcached_path().is_some() {
        return true;
    }
    if in_ci() {
        panic!("{test}: memcached is not installed (run scripts/setup-deps.sh)");
    }
    eprintln!("SKIPPED {test}: memcached is not installed (run scripts/setup-deps.sh)");
    false
}

/// A free TCP port on 127.0.0.1 (bound then released; good enough for tests).
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local addr").port()
}

/// The process that holds the listening TCP socket on 127.0.0.1:`port`, found through
/// `/proc/net/tcp` (the socket's inode) and `/proc/<pid>/fd` (who holds that inode).
pub fn listener_owner(port: u16) -> Option<u32> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let inode = table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let local = fields.get(1)?;
        let state = fields.get(3)?;
        let local_port = u16::from_str_radix(local.rsplit(':').next()?, 16).ok()?;
        (local_port == port && *state == "0A")
            .then(|| fields.get(9).map(|inode| inode.to_string()))?
    })?;
    let wanted = format!("socket:[{inode}]");
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path())
                .is_ok_and(|target| target.as_os_str() == wanted.as_str())
            {
                return Some(pid);
            }
        }
    }
    None
}

/// A running server process on 127.0.0.1; killed when dropped.
pub struct Server {
    child: Child,
    /// The program this server runs.
    pub program: Program,
    /// TCP port it listens on.
    pub port: u16,
}

impl Server {
    /// Starts `program` with memcached-style flags (`-m 64 -I 1m -t 2` ...). Port, listen
    /// address and `-U 0` are added here. Waits until the port accepts connections.
    pub fn start(program: Program, flags: &[&str]) -> Server {
        Server::start_wrapped(program, flags, &[])
    }

    /// Like [`Server::start`], run through `wrapper` (e.g. `prlimit --nofile=20`), which
    /// must exec the program so that the process id stays the server's.
    pub fn start_wrapped(program: Program, flags: &[&str], wrapper: &[&str]) -> Server {
        // The port is picked before the server binds it, so a test started at the same
        // moment can be handed the same port. A server that loses that race exits (bind
        // failure) or never owns the listener: start again on another port.
        const ATTEMPTS: usize = 5;
        for attempt in 1..=ATTEMPTS {
            match Server::try_start(program, flags, wrapper) {
                Ok(server) => return server,
                Err(why) if attempt < ATTEMPTS => {
                    eprintln!(
                        "server start attempt {attempt} failed ({why}); retrying on another port"
                    );
                }
                Err(why) => panic!("{why}"),
            }
        }
        unreachable!("the last attempt panics")
    }

    /// One start on a freshly picked port; `Err` when the server exited early or another
    /// process owns the listener on that port.
    fn try_start(program: Program, flags: &[&str], wrapper: &[&str]) -> Result<Server, String> {
        let port = free_port();
        let port_text = port.to_string();
        let mut args: Vec<String> = Vec::new();
        let binary: PathBuf = match program {
            Program::Tailtrim => {
                args.push("serve".to_string());
                PathBuf::from(env!("CARGO_BIN_EXE_tailtrim"))
            }
            Program::Memcached => memcached_path().expect("memcached is installed"),
        };
        for flag in ["-p", &port_text, "-U", "0", "-l", "127.0.0.1"] {
            args.push(flag.to_string());
        }
        args.extend(flags.iter().map(|flag| flag.to_string()));
        match program {
            Program::Tailtrim => {
                if let Ok(extra) = std::env::var("TAILTRIM_SERVE_ARGS") {
                    args.extend(extra.split_whitespace().map(str::to_string));
                }
            }
            Program::Memcached => {
                // memcached refuses to run as root without -u.
                if running_as_root() {
                    args.extend(["-u".to_string(), "root".to_string()]);
                }
            }
        }
        let mut command = match wrapper.split_first() {
            Some((first, rest)) => {
                let mut command = Command::new(first);
                command.args(rest).arg(&binary);
                command
            }
            None => Command::new(&binary),
        };
        let child = command
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|err| panic!("cannot start {}: {err}", binary.display()));
        let mut server = Server {
            child,
            program,
            port,
        };
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!(
                    "{} {:?} exited early: {status}",
                    binary.display(),
                    args
                ));
            }
            if TcpStream::connect_timeout(&server.addr(), Duration::from_millis(200)).is_ok() {
                match listener_owner(port) {
                    Some(owner) if owner == server.pid() => return Ok(server),
                    // Another process listens there: ours cannot bind it (dropping kills it).
                    Some(owner) => {
                        return Err(format!("port {port} is held by process {owner}"));
                    }
                    // The listener went away between connect and lookup: look again.
                    None => {}
                }
            }
            if Instant::now() > deadline {
                panic!("{} {:?} did not listen within 15 s", binary.display(), args);
            }
            std::thread::sleep(Duration::from_millis(30));
        }
    }

    /// Starts the program under test (see [`Program::under_test`]).
    pub fn start_under_test(flags: &[&str]) -> Server {
        Server::start(Program::under_test(), flags)
    }

    /// Socket address of the server.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// A new connection with read/write timeouts set.
    pub fn connect(&self) -> TcpStream {
        let stream = TcpStream::connect(self.addr()).expect("connect to server");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("read timeout");
        stream
            .set_write_timeout(Some(Duration::from_secs(10)))
            .expect("write timeout");
        stream.set_nodelay(true).expect("nodelay");
        stream
    }

    /// Process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Resident set size in KiB (VmRSS of /proc/<pid>/status).
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .expect("read /proc/<pid>/status");
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS line")
    }

    /// `stats` as a name → value map.
    pub fn stats(&self) -> HashMap<String, String> {
        self.stats_group("")
    }

    /// `stats <group>` (`stats` for an empty group) as a name → value map.
    pub fn stats_group(&self, group: &str) -> HashMap<String, String> {
        let mut stream = self.connect();
        let command = if group.is_empty() {
            "stats\r\n".to_string()
        } else {
            format!("stats {group}\r\n")
        };
        stream.write_all(command.as_bytes()).expect("send stats");
        let reply = read_until(&mut stream, b"END\r\n", Duration::from_secs(10));
        let text = String::from_utf8_lossy(&reply);
        text.lines()
            .filter_map(|line| line.strip_prefix("STAT "))
            .filter_map(|rest| {
                let (name, value) = rest.split_once(' ')?;
                Some((name.to_string(), value.to_string()))
            })
            .collect()
    }

    /// Sends `request` on a fresh connection and returns the reply up to and including
    /// `terminator`.
    pub fn request(&self, request: &[u8], terminator: &[u8]) -> Vec<u8> {
        let mut stream = self.connect();
        stream.write_all(request).expect("send request");
        read_until(&mut stream, terminator, Duration::from_secs(10))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("Uid:"))
                .and_then(|rest| rest.split_whitespace().next().map(|uid| uid == "0"))
        })
        .unwrap_or(false)
}

/// Reads until the buffer ends with `terminator`, the peer closes, or `limit` passes.
pub fn read_until(stream: &mut TcpStream, terminator: &[u8], limit: Duration) -> Vec<u8> {
    let deadline = Instant::now() + limit;
    let mut reply = Vec::new();
    let mut chunk = [0u8; 65536];
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .expect("read timeout");
    while !reply.ends_with(terminator) && Instant::now() < deadline {
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => reply.extend_from_slice(&chunk[..n]),
            Err(err)
                if matches!(
                    err.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(_) => break,
        }
    }
    reply
}

/// Outcome of reading whatever a server sends until it goes quiet.
#[derive(Debug, Default, Clone)]
pub struct Drained {
    /// Bytes received.
    pub bytes: Vec<u8>,
    /// The peer closed (EOF or reset).
    pub closed: bool,
}

/// Reads until `quiet` passes without data, the peer closes, or `limit` passes.
pub fn drain(stream: &mut TcpStream, quiet: Duration, limit: Duration) -> Drained {
    let deadline = Instant::now() + limit;
    let mut drained = Drained::default();
    let mut chunk = [0u8; 65536];
    stream.set_read_timeout(Some(quiet)).expect("read timeout");
    while Instant::now() < deadline {
        match stream.read(&mut chunk) {
            Ok(0) => {
                drained.closed = true;
                break;
            }
            Ok(n) => drained.bytes.extend_from_slice(&chunk[..n]),
            Err(err) if matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => break,
            Err(err) if err.kind() == ErrorKind::Interrupted => {}
            Err(_) => {
                drained.closed = true;
                break;
            }
        }
    }
    drained
}

/// A value of `len` bytes that embeds `key`, so that a value returned for the wrong key
/// (or truncated, or shifted) never compares equal.
pub fn value_for(key: &str, len: usize) -> Vec<u8> {
    let unit = format!("{key}|");
    unit.as_bytes().iter().copied().cycle().take(len).collect()
}

/// Runs `tailtrim experiment <args> --out <fresh scratch directory>`, fails the test unless it
/// succeeds, and returns the directory and its results.json.
pub fn run_experiment(name: &str, args: &[&str]) -> (PathBuf, serde_json::Value) {
    let out = std::env::temp_dir().join(format!("tailtrim-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let output = Command::new(env!("CARGO_BIN_EXE_tailtrim"))
        .arg("experiment")
        .args(args)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap_or_else(|error| panic!("running tailtrim: {error}"));
    assert!(
        output.status.success(),
        "tailtrim experiment {args:?} failed ({:?}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let text = std::fs::read_to_string(out.join("results.json"))
        .unwrap_or_else(|error| panic!("reading results.json: {error}"));
    let json = serde_json::from_str(&text).unwrap_or_else(|error| panic!("parsing: {error}"));
    (out, json)
}
