//! The systems an experiment runs, as real child processes: `tailtrim serve`, Debian's
//! memcached, nutcracker (twemproxy) and `tailtrim proxy`.
//!
//! ```text
//!   Launch::{tailtrim_serve, memcached, nutcracker, tailtrim_proxy}
//!        │  free port(s) on 127.0.0.1, arguments, config file (nutcracker's YAML)
//!        ▼
//!   Process::start ──spawn──> child (stdout+stderr to a log file; SIGTERM if we die)
//!        │  ready: the port accepts and answers `version` with `VERSION …`
//!        │         (the admin port, if any, accepts); fails early if the child exits,
//!        │         with the log's tail
//!        ▼
//!   drop / stop(): SIGTERM, wait up to 3 s, then SIGKILL; log and config removed
//! ```

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::LabError;

/// How long a process may take to become ready after spawning.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a process may take to exit after SIGTERM before SIGKILL.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(3);
/// How long one readiness probe waits for the `version` reply.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// Parameters shared by the cache servers of an experiment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerShape {
    /// Worker threads (`-t`).
    pub threads: usize,
    /// Item memory in megabytes (`-m`).
    pub memory_mb: u64,
}

/// A cache server an experiment compares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Program {
    /// `tailtrim serve` with arguments appended after the common ones (e.g. `--dispatch
    /// size-aware`).
    Tailtrim {
        /// The extra arguments.
        extra: Vec<String>,
    },
    /// Debian's memcached.
    Memcached,
}

impl Program {
    /// The launch of this server, `tailtrim` being the tailtrim executable.
    pub fn launch(
        &self,
        name: &str,
        tailtrim: &Path,
        shape: &ServerShape,
    ) -> Result<Launch, LabError> {
        match self {
            Program::Tailtrim { extra } => Launch::tailtrim_serve(name, tailtrim, shape, extra),
            Program::Memcached => Launch::memcached(name, shape, &[]),
        }
    }
}

/// How to start one process: binary, arguments, the address that answers `version`.
#[derive(Clone, Debug)]
pub struct Launch {
    /// Label in logs and errors.
    pub name: String,
    /// The executable.
    pub binary: PathBuf,
    /// Its arguments.
    pub arguments: Vec<String>,
    /// The memcached-protocol address that must answer `version`.
    pub address: SocketAddr,
    /// An HTTP admin address that must accept connections, if any.
    pub admin: Option<SocketAddr>,
    /// A file written before the start and removed at the stop (path, contents).
    pub config: Option<(PathBuf, String)>,
    /// How long the process may take to become ready.
    pub ready_timeout: Duration,
}

impl Launch {
    /// `tailtrim serve` (from `binary`, the tailtrim executable) on a free port, with `extra`
    /// arguments (e.g. `--dispatch size-aware`).
    pub fn tailtrim_serve(
        name: &str,
        binary: &Path,
        shape: &ServerShape,
        extra: &[String],
    ) -> Result<Self, LabError> {
        let port = free_port()?;
        let mut arguments = vec!["serve".to_string()];
        arguments.extend(server_arguments(port, shape));
        arguments.extend(extra.iter().cloned());
        Ok(Self::plain(name, binary.to_path_buf(), arguments, port))
    }

    /// Debian's memcached on a free port (TCP only; `-u root` when running as root), with
    /// `extra` arguments.
    pub fn memcached(name: &str, shape: &ServerShape, extra: &[String]) -> Result<Self, LabError> {
        let binary = memcached_path().ok_or_else(|| {
            LabError::Process("memcached is not installed (apt-get install memcached)".into())
        })?;
        let port = free_port()?;
        let mut arguments = server_arguments(port, shape);
        arguments.extend(["-U".to_string(), "0".to_string()]);
        if running_as_root() {
            arguments.extend(["-u".to_string(), "root".to_string()]);
        }
        arguments.extend(extra.iter().cloned());
        Ok(Self::plain(name, binary, arguments, port))
    }

    /// nutcracker (twemproxy) on a free port over `backends` (`host:port`, weight 1 each),
    /// ketama over fnv1a_64 as in its documentation's examples; `pool_options` are extra YAML
    /// lines of the pool (e.g. `  timeout: 400`).
    pub fn nutcracker(
        name: &str,
        backends: &[String],
        pool_options: &[String],
    ) -> Result<Self, LabError> {
        let binary = program_path("nutcracker").ok_or_else(|| {
            LabError::Process("nutcracker is not installed (apt-get install nutcracker)".into())
        })?;
        let (port, stats_port) = (free_port()?, free_port()?);
        let mut yaml =
            format!("lab:\n  listen: 127.0.0.1:{port}\n  hash: fnv1a_64\n  distribution: ketama\n");
        for option in pool_options {
            yaml.push_str(option);
            yaml.push('\n');
        }
        yaml.push_str("  servers:\n");
        for backend in backends {
            yaml.push_str(&format!("   - {backend}:1\n"));
        }
        let config = std::env::temp_dir().join(format!(
            "tailtrim-lab-{}-{name}-{port}.yml",
            std::process::id()
        ));
        let arguments = vec![
            "-c".to_string(),
            config.display().to_string(),
            "-s".to_string(),
            stats_port.to_string(),
            "-a".to_string(),
            "127.0.0.1".to_string(),
        ];
        let mut launch = Self::plain(name, binary, arguments, port);
        launch.config = Some((config, yaml));
        Ok(launch)
    }

    /// `tailtrim proxy` (from `binary`) on a free port over `backends`, with an admin port
    /// when `admin` is set, and `extra` arguments (e.g. `--planner chisel`).
    pub fn tailtrim_proxy(
        name: &str,
        binary: &Path,
        backends: &[String],
        admin: bool,
        extra: &[String],
    ) -> Result<Self, LabError> {
        let port = free_port()?;
        let mut arguments = vec![
            "proxy".to_string(),
            "-l".to_string(),
            format!("127.0.0.1:{port}"),
        ];
        let admin = if admin {
            let admin_port = free_port()?;
            arguments.extend(["--admin".to_string(), format!("127.0.0.1:{admin_port}")]);
            Some(SocketAddr::from(([127, 0, 0, 1], admin_port)))
        } else {
            None
        };
        arguments.extend(["-s".to_string(), backends.join(",")]);
        arguments.extend(extra.iter().cloned());
        let mut launch = Self::plain(name, binary.to_path_buf(), arguments, port);
        launch.admin = admin;
        Ok(launch)
    }

    fn plain(name: &str, binary: PathBuf, arguments: Vec<String>, port: u16) -> Self {
        Self {
            name: name.to_string(),
            binary,
            arguments,
            address: SocketAddr::from(([127, 0, 0, 1], port)),
            admin: None,
            config: None,
            ready_timeout: START_TIMEOUT,
        }
    }

    /// The command line (binary and arguments).
    #[must_use]
    pub fn command_line(&self) -> String {
        format!("{} {}", self.binary.display(), self.arguments.join(" "))
    }
}

/// A running child process, stopped on drop.
#[derive(Debug)]
pub struct Process {
    launch: Launch,
    child: Child,
    log_path: PathBuf,
}

impl Process {
    /// Starts `launch` and waits until it is ready (answers `version`).
    pub fn start(launch: Launch) -> Result<Self, LabError> {
        if let Some((path, contents)) = &launch.config {
            std::fs::write(path, contents)
                .map_err(|source| LabError::io(format!("writing {}", path.display()), source))?;
        }
        let log_path = std::env::temp_dir().join(format!(
            "tailtrim-lab-{}-{}-{}.log",
            std::process::id(),
            launch.name,
            launch.address.port()
        ));
        let log = File::create(&log_path)
            .map_err(|source| LabError::io(format!("creating {}", log_path.display()), source))?;
        let log_for_stdout = log
            .try_clone()
            .map_err(|source| LabError::io("duplicating a log handle", source))?;
        let mut command = Command::new(&launch.binary);
        command
            .args(&launch.arguments)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log_for_stdout))
            .stderr(Stdio::from(log));
        // SAFETY: the closure runs in the forked child before exec and only calls prctl(2),
        // which is async-signal-safe. The child gets SIGTERM if the thread that spawned it
        // dies (e.g. the experiment is killed), so no system outlives the experiment.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().map_err(|source| {
            LabError::io(format!("starting {}", launch.command_line()), source)
        })?;
        let mut process = Self {
            launch,
            child,
            log_path,
        };
        process.wait_until_ready()?;
        Ok(process)
    }

    /// The memcached-protocol address, `127.0.0.1:port`.
    #[must_use]
    pub fn address(&self) -> String {
        self.launch.address.to_string()
    }

    /// The admin address, if the process has one.
    #[must_use]
    pub fn admin_address(&self) -> Option<String> {
        self.launch.admin.map(|address| address.to_string())
    }

    /// The command line that started the process.
    #[must_use]
    pub fn command_line(&self) -> String {
        self.launch.command_line()
    }

    /// The label given at launch.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.launch.name
    }

    /// Process id.
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Fails if the process has exited (e.g. crashed during a run).
    pub fn check_alive(&mut self) -> Result<(), LabError> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(LabError::Process(format!(
                "{} exited ({status}); log:\n{}",
                self.launch.name,
                self.log_tail()
            ))),
            Err(source) => Err(LabError::io(
                format!("checking {}", self.launch.name),
                source,
            )),
        }
    }

    /// Stops the process (as drop does) and reports whether it had already died.
    pub fn stop(mut self) -> Result<(), LabError> {
        self.check_alive()
    }

    fn wait_until_ready(&mut self) -> Result<(), LabError> {
        let deadline = Instant::now() + self.launch.ready_timeout;
        let mut last_problem;
        loop {
            self.check_alive().map_err(|error| {
                LabError::Process(format!("{error}\ncommand: {}", self.command_line()))
            })?;
            match answers_version(&self.launch.address) {
                Ok(()) => match self.launch.admin {
                    Some(admin) => {
                        if TcpStream::connect_timeout(&admin, PROBE_TIMEOUT).is_ok() {
                            return Ok(());
                        }
                        last_problem = format!("admin port {admin} does not accept");
                    }
                    None => return Ok(()),
                },
                Err(problem) => last_problem = problem,
            }
            if Instant::now() > deadline {
                return Err(LabError::Process(format!(
                    "{} was not ready within {:?} ({last_problem})\ncommand: {}\nlog:\n{}",
                    self.launch.name,
                    self.launch.ready_timeout,
                    self.command_line(),
                    self.log_tail()
                )));
            }
            std::thread::sleep(Duration::from_millis(30));
        }
    }

    /// The last 20 lines of the process's output.
    #[must_use]
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log_path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Ok(pid) = libc::pid_t::try_from(self.child.id()) {
            // SAFETY: kill(2) on the pid of a child we spawned and have not reaped.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        let mut exited = false;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                exited = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if !exited {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_file(&self.log_path);
        if let Some((path, _)) = &self.launch.config {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Whether `address` accepts a connection and answers `version` with `VERSION …` (each
/// step bounded by half a second); the error says which step failed.
pub fn answers_version(address: &SocketAddr) -> Result<(), String> {
    let mut stream = TcpStream::connect_timeout(address, PROBE_TIMEOUT)
        .map_err(|error| format!("connect: {error}"))?;
    stream
        .set_read_timeout(Some(PROBE_TIMEOUT))
        .and_then(|()| stream.set_write_timeout(Some(PROBE_TIMEOUT)))
        .and_then(|()| stream.write_all(b"version\r\n"))
        .map_err(|error| format!("version: {error}"))?;
    let mut reply = Vec::new();
    let mut chunk = [0u8; 128];
    while !reply.ends_with(b"\r\n") && reply.len() < 512 {
        match stream.read(&mut chunk) {
            Ok(0) => return Err("closed before answering version".into()),
            Ok(count) => reply.extend_from_slice(&chunk[..count]),
            Err(error) => return Err(format!("version reply: {error}")),
        }
    }
    if reply.starts_with(b"VERSION ") {
        Ok(())
    } else {
        Err(format!(
            "version answered {:?}",
            String::from_utf8_lossy(&reply).trim_end()
        ))
    }
}

fn server_arguments(port: u16, shape: &ServerShape) -> Vec<String> {
    vec![
        "-p".to_string(),
        port.to_string(),
        "-l".to_string(),
        "127.0.0.1".to_string(),
        "-t".to_string(),
        shape.threads.to_string(),
        "-m".to_string(),
        shape.memory_mb.to_string(),
    ]
}

fn running_as_root() -> bool {
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Path of `program` on `$PATH`, then in /usr/bin and /usr/sbin.
#[must_use]
pub fn program_path(program: &str) -> Option<PathBuf> {
    let mut directories: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).collect())
        .unwrap_or_default();
    directories.extend([PathBuf::from("/usr/bin"), PathBuf::from("/usr/sbin")]);
    directories
        .into_iter()
        .map(|directory| directory.join(program))
        .find(|candidate| candidate.is_file())
}

/// Path of memcached.
#[must_use]
pub fn memcached_path() -> Option<PathBuf> {
    program_path("memcached")
}

/// The first line `program -V` prints (memcached on stdout, nutcracker on stderr); empty
/// when the program is missing.
#[must_use]
pub fn program_version(program: &str) -> String {
    program_path(program)
        .and_then(|path| Command::new(path).arg("-V").output().ok())
        .map(|output| {
            let text = if output.stdout.is_empty() {
                output.stderr
            } else {
                output.stdout
            };
            String::from_utf8_lossy(&text)
                .lines()
                .next()
                .unwrap_or_default()
                .trim()
                .to_string()
        })
        .unwrap_or_default()
}

/// A free TCP port on 127.0.0.1 (bound, then released).
pub fn free_port() -> Result<u16, LabError> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .map_err(|source| LabError::io("binding an ephemeral port", source))?;
    listener
        .local_addr()
        .map(|address| address.port())
        .map_err(|source| LabError::io("reading an ephemeral port", source))
}

/// Sends one command and waits for the reply to end with `reply_end`.
pub fn send_command(address: &str, command: &[u8], reply_end: &[u8]) -> Result<Vec<u8>, LabError> {
    let mut stream = TcpStream::connect(address)
        .map_err(|source| LabError::io(format!("connecting to {address}"), source))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(2)))
        .and_then(|()| stream.write_all(command))
        .map_err(|source| LabError::io(format!("writing to {address}"), source))?;
    let mut reply = Vec::new();
    let mut chunk = [0u8; 256];
    while !reply.ends_with(reply_end) {
        let count = stream
            .read(&mut chunk)
            .map_err(|source| LabError::io(format!("reading from {address}"), source))?;
        if count == 0 {
            return Err(LabError::Process(format!(
                "{address} closed before replying"
            )));
        }
        reply.extend_from_slice(&chunk[..count]);
    }
    Ok(reply)
}

/// Sends `stats [group]` to `address` and returns the `STAT name value` lines. A server that
/// does not know the group answers with an error line: that gives an empty map.
pub fn fetch_stats(
    address: &str,
    group: Option<&str>,
) -> Result<BTreeMap<String, String>, LabError> {
    let mut stream = TcpStream::connect(address)
        .map_err(|source| LabError::io(format!("connecting to {address} for stats"), source))?;
    let timeout = Some(Duration::from_secs(2));
    let command = match group {
        Some(group) => format!("stats {group}\r\n"),
        None => "stats\r\n".to_string(),
    };
    stream
        .set_read_timeout(timeout)
        .and_then(|()| stream.set_write_timeout(timeout))
        .and_then(|()| stream.write_all(command.as_bytes()))
        .map_err(|source| LabError::io(format!("sending stats to {address}"), source))?;
    let mut reader = BufReader::new(stream);
    let mut stats = BTreeMap::new();
    let mut line = String::new();
    loop {
        line.clear();
        let read = reader
            .read_line(&mut line)
            .map_err(|source| LabError::io(format!("reading stats from {address}"), source))?;
        let trimmed = line.trim_end();
        if read == 0 || trimmed == "END" || trimmed.contains("ERROR") {
            return Ok(stats);
        }
        let mut fields = trimmed.splitn(3, ' ');
        if let (Some("STAT"), Some(name), Some(value)) =
            (fields.next(), fields.next(), fields.next())
        {
            stats.insert(name.to_string(), value.to_string());
        }
    }
}
