//! `cluster up`: the tier's nodes as child processes of one supervisor.
//!
//! ```text
//!   up(config) ── plan (ports) ── run dir: <name>.toml per proxy, logs/<name>.log
//!     │  SIGINT/SIGTERM/SIGHUP handlers first (a signal during start-up stops what started)
//!     ├─ servers: spawn all, then wait until each answers `version`
//!     ├─ proxies: spawn with their written config, wait for `version` and the admin port
//!     ├─ tier.json (state) + the table of roles, addresses, pids, logs
//!     └─ loop: a child that exits is reported (with its log's tail) and recorded;
//!              control.sock requests (`cluster add --start`) start servers from [server];
//!              on a signal: SIGTERM proxies then servers, SIGKILL after 3 s, state stopped
//! ```
//!
//! Every child runs in its own process group (a terminal's Ctrl-C reaches the supervisor
//! only, which stops the proxies before the servers) and gets SIGTERM from the kernel if
//! the supervisor dies without stopping it (`PR_SET_PDEATHSIG`): no node outlives it.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::config::{
    PortChoice, Program, ProxyPlan, ProxyProgram, ServerPlan, TierConfig, TierPlan,
};
use crate::error::TierError;
use crate::state::{NodeRecord, Role, TierState, CONTROL_SOCKET};
use crate::table::Table;

/// How long a node may take to exit after SIGTERM before SIGKILL.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(3);
/// How often the supervisor looks at its children, signals and control socket.
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// How long one readiness probe or control request may block.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);
/// Lines of a dead node's log printed with the report.
const LOG_TAIL_LINES: usize = 10;

/// What `cluster up` needs besides the tier file.
#[derive(Debug, Clone)]
pub struct UpOptions {
    /// The tailtrim executable the nodes run (`tailtrim serve`, `tailtrim proxy`).
    pub binary: PathBuf,
    /// The run directory.
    pub run_dir: PathBuf,
    /// How ports are numbered.
    pub ports: PortChoice,
}

/// A started node.
struct Running {
    record: NodeRecord,
    child: Child,
}

/// The supervisor: its children are stopped when it is dropped, whatever ended it.
struct Supervisor {
    config: TierConfig,
    options: UpOptions,
    ready_timeout: Duration,
    name: String,
    nodes: Vec<Running>,
    stop: Arc<AtomicBool>,
}

/// Starts the tier, prints its table to `out`, supervises it until SIGINT, SIGTERM or
/// SIGHUP, then stops every node.
pub fn up(config: &TierConfig, options: &UpOptions, out: &mut dyn Write) -> Result<(), TierError> {
    let stop = stop_on_signals()?;
    if let Some(state) = TierState::read(&options.run_dir)? {
        if state.running && crate::state::process_exists(state.supervisor_pid) {
            return Err(TierError::Config(format!(
                "{} already holds a running tier (cluster up pid {}); stop it or choose another --run-dir",
                options.run_dir.display(),
                state.supervisor_pid
            )));
        }
    }
    let plan = config.plan(options.ports, || {
        tailtrim_lab::process::free_port().map_err(TierError::from)
    })?;
    let logs = options.run_dir.join("logs");
    std::fs::create_dir_all(&logs)
        .map_err(|source| TierError::io(format!("creating {}", logs.display()), source))?;
    let mut supervisor = Supervisor {
        config: config.clone(),
        options: options.clone(),
        ready_timeout: Duration::from_secs(plan.ready_timeout_secs),
        name: plan.name.clone(),
        nodes: Vec::new(),
        stop,
    };
    supervisor.start(&plan)?;
    let control = supervisor.listen_control()?;
    supervisor.write_state(true)?;
    writeln!(
        out,
        "tier {} is up ({} servers, {} proxies); run directory {}\n\n{}\nCtrl-C (or SIGTERM to pid {}) stops every node.",
        plan.name,
        plan.servers.len(),
        plan.proxies.len(),
        options.run_dir.display(),
        node_table(supervisor.nodes.iter().map(|node| &node.record)).render(),
        std::process::id()
    )
    .and_then(|()| out.flush())
    .map_err(|source| TierError::io("writing the table", source))?;
    supervisor.supervise(&control, out);
    let count = supervisor.nodes.len();
    supervisor.stop_all();
    let _ = std::fs::remove_file(options.run_dir.join(CONTROL_SOCKET));
    writeln!(out, "tier {} stopped ({count} nodes)", plan.name)
        .map_err(|source| TierError::io("writing the report", source))?;
    Ok(())
}

/// A flag set by SIGINT, SIGTERM or SIGHUP (whose default actions no longer apply).
pub fn stop_on_signals() -> Result<Arc<AtomicBool>, TierError> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(signal, Arc::clone(&stop))
            .map_err(|source| TierError::io("installing the signal handlers", source))?;
    }
    Ok(stop)
}

/// The table `cluster up` prints: role, name, address, admin, pid, log.
pub fn node_table<'a>(records: impl Iterator<Item = &'a NodeRecord>) -> Table {
    let mut table = Table::new(&["ROLE", "NAME", "PROGRAM", "ADDRESS", "ADMIN", "PID", "LOG"]);
    for record in records {
        table.push(vec![
            record.role.name().to_string(),
            record.name.clone(),
            record.program.clone(),
            record.address.clone(),
            record.admin.clone().unwrap_or_else(|| "-".to_string()),
            record.pid.to_string(),
            record.log.display().to_string(),
        ]);
    }
    table
}

impl Supervisor {
    /// Starts the servers (all at once, then waits for each) and then the proxies.
    fn start(&mut self, plan: &TierPlan) -> Result<(), TierError> {
        let first_server = self.nodes.len();
        for server in &plan.servers {
            let running = self.spawn_server(server)?;
            self.nodes.push(running);
        }
        for index in first_server..self.nodes.len() {
            wait_ready(&mut self.nodes[index], self.ready_timeout, &self.stop)?;
        }
        for proxy in &plan.proxies {
            let (binary, arguments) = self.proxy_command(proxy)?;
            let mut running = self.spawn(
                Role::Proxy,
                &proxy.name,
                proxy.program.name(),
                &binary,
                &arguments,
                &proxy.listen,
                Some(proxy.admin_listen.clone()),
            )?;
            let ready = wait_ready(&mut running, self.ready_timeout, &self.stop);
            self.nodes.push(running);
            ready?;
        }
        Ok(())
    }

    /// Writes a proxy's configuration file into the run directory; returns the executable and
    /// arguments that start it.
    fn proxy_command(&self, proxy: &ProxyPlan) -> Result<(PathBuf, Vec<String>), TierError> {
        let run_dir = &self.options.run_dir;
        let (file_name, text) = match proxy.program {
            ProxyProgram::Tailtrim => (format!("{}.toml", proxy.name), proxy.config_text()?),
            ProxyProgram::Nutcracker => (format!("{}.yml", proxy.name), proxy.nutcracker_yaml()),
        };
        let config_path = run_dir.join(file_name);
        std::fs::write(&config_path, text).map_err(|source| {
            TierError::io(format!("writing {}", config_path.display()), source)
        })?;
        match proxy.program {
            ProxyProgram::Tailtrim => Ok((
                self.options.binary.clone(),
                vec![
                    "proxy".to_string(),
                    "--config".to_string(),
                    config_path.display().to_string(),
                ],
            )),
            ProxyProgram::Nutcracker => {
                let binary =
                    tailtrim_lab::process::program_path("nutcracker").ok_or_else(|| {
                        TierError::process(format!(
                            "{}: nutcracker is not installed (apt-get install nutcracker)",
                            proxy.name
                        ))
                    })?;
                let log = run_dir.join("logs").join(format!("{}.log", proxy.name));
                Ok((binary, proxy.nutcracker_arguments(&config_path, &log)?))
            }
        }
    }

    fn spawn_server(&self, server: &ServerPlan) -> Result<Running, TierError> {
        let binary = match server.program {
            Program::Tailtrim => self.options.binary.clone(),
            Program::Memcached => tailtrim_lab::process::memcached_path().ok_or_else(|| {
                TierError::process(format!(
                    "{}: memcached is not installed (apt-get install memcached)",
                    server.name
                ))
            })?,
        };
        self.spawn(
            Role::Server,
            &server.name,
            server.program.name(),
            &binary,
            &server.arguments(running_as_root()),
            &server.address(),
            None,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn spawn(
        &self,
        role: Role,
        name: &str,
        program: &str,
        binary: &Path,
        arguments: &[String],
        address: &str,
        admin: Option<String>,
    ) -> Result<Running, TierError> {
        let log = self
            .options
            .run_dir
            .join("logs")
            .join(format!("{name}.log"));
        // Emptied, then appended to: a node that also opens its log itself (nutcracker's
        // `-o`) appends beside its own stdout and stderr instead of overwriting them.
        let log_file = File::create(&log)
            .and_then(|_| OpenOptions::new().append(true).open(&log))
            .map_err(|source| TierError::io(format!("creating {}", log.display()), source))?;
        let log_for_stdout = log_file
            .try_clone()
            .map_err(|source| TierError::io("duplicating a log handle", source))?;
        let mut command = Command::new(binary);
        command
            .args(arguments)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log_for_stdout))
            .stderr(Stdio::from(log_file));
        // SAFETY: the closure runs in the forked child before exec and calls only setpgid(2)
        // and prctl(2), both async-signal-safe. Its own process group keeps a terminal's
        // Ctrl-C to the supervisor (which stops the nodes in order); PDEATHSIG sends it
        // SIGTERM should the supervisor's thread die without stopping it.
        unsafe {
            command.pre_exec(|| {
                if libc::setpgid(0, 0) != 0
                    || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let command_line = format!("{} {}", binary.display(), arguments.join(" "));
        let child = command
            .spawn()
            .map_err(|source| TierError::io(format!("starting {command_line}"), source))?;
        Ok(Running {
            record: NodeRecord {
                role,
                name: name.to_string(),
                program: program.to_string(),
                address: address.to_string(),
                admin,
                pid: child.id(),
                log,
                command: command_line,
                exited: None,
            },
            child,
        })
    }

    fn listen_control(&self) -> Result<UnixListener, TierError> {
        let path = self.options.run_dir.join(CONTROL_SOCKET);
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path)
            .map_err(|source| TierError::io(format!("binding {}", path.display()), source))?;
        listener
            .set_nonblocking(true)
            .map_err(|source| TierError::io("setting the control socket non-blocking", source))?;
        Ok(listener)
    }

    fn write_state(&self, running: bool) -> Result<(), TierError> {
        TierState {
            name: self.name.clone(),
            supervisor_pid: std::process::id(),
            running,
            nodes: self.nodes.iter().map(|node| node.record.clone()).collect(),
        }
        .write(&self.options.run_dir)
    }

    /// Watches the children and the control socket until a stop signal.
    fn supervise(&mut self, control: &UnixListener, out: &mut dyn Write) {
        while !self.stop.load(Ordering::Relaxed) {
            let mut changed = false;
            for node in &mut self.nodes {
                if node.record.exited.is_some() {
                    continue;
                }
                let status = match node.child.try_wait() {
                    Ok(Some(status)) => status.to_string(),
                    Ok(None) => continue,
                    Err(error) => format!("unknown ({error})"),
                };
                eprintln!(
                    "tailtrim cluster: {} {} (pid {}) {status}; last lines of {}:\n{}",
                    node.record.role.name(),
                    node.record.name,
                    node.record.pid,
                    node.record.log.display(),
                    log_tail(&node.record.log)
                );
                node.record.exited = Some(status);
                changed = true;
            }
            if changed {
                if let Err(error) = self.write_state(true) {
                    eprintln!("tailtrim cluster: {error}");
                }
            }
            if let Ok((stream, _)) = control.accept() {
                if let Err(error) = self.answer_control(stream, out) {
                    eprintln!("tailtrim cluster: control request: {error}");
                }
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    fn answer_control(&mut self, stream: UnixStream, out: &mut dyn Write) -> Result<(), TierError> {
        let io = |source| TierError::io("control socket", source);
        stream.set_nonblocking(false).map_err(io)?;
        stream.set_read_timeout(Some(PROBE_TIMEOUT)).map_err(io)?;
        let mut line = String::new();
        BufReader::new(&stream).read_line(&mut line).map_err(io)?;
        let reply = match serde_json::from_str::<ControlRequest>(&line) {
            Ok(ControlRequest::StartServer { host, port }) => match self.start_extra(&host, port) {
                Ok(record) => {
                    let _ = writeln!(
                        out,
                        "started {} on {} (pid {}, log {})",
                        record.name,
                        record.address,
                        record.pid,
                        record.log.display()
                    );
                    ControlReply::Started(record)
                }
                Err(error) => ControlReply::Error(error.to_string()),
            },
            Err(error) => ControlReply::Error(format!("bad request: {error}")),
        };
        let text = serde_json::to_string(&reply)
            .map_err(|error| TierError::Config(format!("control reply: {error}")))?;
        (&stream)
            .write_all(format!("{text}\n").as_bytes())
            .map_err(io)
    }

    /// Starts one more server from the `[server]` template (`cluster add --start`).
    fn start_extra(&mut self, host: &str, port: u16) -> Result<NodeRecord, TierError> {
        let address = format!("{host}:{port}");
        if self
            .nodes
            .iter()
            .any(|node| node.record.address == address && node.record.exited.is_none())
        {
            return Err(TierError::Config(format!(
                "{address} already runs in this tier"
            )));
        }
        let mut name = format!("server-{port}");
        if self.nodes.iter().any(|node| node.record.name == name) {
            name = format!("server-{port}-{}", self.nodes.len());
        }
        let plan = self.config.server_from_template(&name, host, port);
        let mut running = self.spawn_server(&plan)?;
        if let Err(error) = wait_ready(&mut running, self.ready_timeout, &self.stop) {
            stop_children(std::slice::from_mut(&mut running));
            return Err(error);
        }
        let record = running.record.clone();
        self.nodes.push(running);
        self.write_state(true)?;
        Ok(record)
    }

    /// SIGTERM to the proxies, then to the servers; SIGKILL to whatever still runs after
    /// [`STOP_TIMEOUT`]; the state file then says stopped.
    fn stop_all(&mut self) {
        let (mut proxies, mut servers): (Vec<Running>, Vec<Running>) = self
            .nodes
            .drain(..)
            .partition(|node| node.record.role == Role::Proxy);
        stop_children(&mut proxies);
        stop_children(&mut servers);
        self.nodes = servers;
        self.nodes.extend(proxies);
        for node in &mut self.nodes {
            if node.record.exited.is_none() {
                node.record.exited = Some("stopped".to_string());
            }
        }
        if let Err(error) = self.write_state(false) {
            eprintln!("tailtrim cluster: {error}");
        }
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        if self.nodes.iter().any(|node| node.record.exited.is_none()) {
            self.stop_all();
        }
    }
}

/// SIGTERM to every child still running, then waits; SIGKILL after [`STOP_TIMEOUT`].
fn stop_children(nodes: &mut [Running]) {
    for node in nodes.iter() {
        if node.record.exited.is_some() {
            continue;
        }
        if let Ok(pid) = libc::pid_t::try_from(node.child.id()) {
            // SAFETY: kill(2) on the pid of a child we spawned and have not reaped.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
    }
    let deadline = Instant::now() + STOP_TIMEOUT;
    for node in nodes.iter_mut() {
        if node.record.exited.is_some() {
            continue;
        }
        loop {
            match node.child.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if Instant::now() >= deadline => {
                    let _ = node.child.kill();
                    let _ = node.child.wait();
                    break;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        node.record.exited = Some("stopped".to_string());
    }
}

/// Waits until the node answers `version` (and its admin port accepts), failing early if it
/// exits or a stop signal arrives.
fn wait_ready(node: &mut Running, timeout: Duration, stop: &AtomicBool) -> Result<(), TierError> {
    let deadline = Instant::now() + timeout;
    let record = &node.record;
    let failed = |what: String| {
        TierError::process(format!(
            "{} {} {what}\ncommand: {}\nlast lines of {}:\n{}",
            record.role.name(),
            record.name,
            record.command,
            record.log.display(),
            log_tail(&record.log)
        ))
    };
    let mut problem;
    loop {
        if let Ok(Some(status)) = node.child.try_wait() {
            return Err(failed(format!("exited during start-up ({status})")));
        }
        if stop.load(Ordering::Relaxed) {
            return Err(TierError::process(
                "stopped by a signal during start-up".to_string(),
            ));
        }
        match answers_version(&record.address) {
            Ok(()) => match &record.admin {
                Some(admin) => match TcpStream::connect(reachable(admin)) {
                    Ok(_) => return Ok(()),
                    Err(error) => problem = format!("admin {admin}: {error}"),
                },
                None => return Ok(()),
            },
            Err(error) => problem = error,
        }
        if Instant::now() >= deadline {
            return Err(failed(format!(
                "was not ready within {timeout:?} ({problem})"
            )));
        }
        std::thread::sleep(Duration::from_millis(30));
    }
}

/// Whether `address` answers `version` with `VERSION …`.
fn answers_version(address: &str) -> Result<(), String> {
    let resolved = reachable(address)
        .to_socket_addrs()
        .map_err(|error| format!("resolve {address}: {error}"))?
        .next()
        .ok_or_else(|| format!("resolve {address}: no address"))?;
    tailtrim_lab::process::answers_version(&resolved)
}

/// Where to connect to reach a listener bound to `address`: a wildcard host is reached on
/// loopback.
pub fn reachable(address: &str) -> String {
    match address.rsplit_once(':') {
        Some(("0.0.0.0", port)) => format!("127.0.0.1:{port}"),
        Some(("[::]", port)) => format!("[::1]:{port}"),
        _ => address.to_string(),
    }
}

/// The last lines of a log file.
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    if lines.is_empty() {
        return "(the log is empty)".to_string();
    }
    lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
}

fn running_as_root() -> bool {
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A request on the control socket (one JSON line).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ControlRequest {
    /// Start a server from the `[server]` template on `host:port`.
    StartServer {
        /// Listen host.
        host: String,
        /// Listen port.
        port: u16,
    },
}

/// The answer (one JSON line).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ControlReply {
    /// The server runs.
    Started(NodeRecord),
    /// It did not start.
    Error(String),
}

/// Asks the `cluster up` of `run_dir` to start a server from its `[server]` template on
/// `host:port`; answers once it is ready.
pub fn request_start_server(
    run_dir: &Path,
    host: &str,
    port: u16,
) -> Result<NodeRecord, TierError> {
    TierState::read_running(run_dir)?;
    let path = run_dir.join(CONTROL_SOCKET);
    let io = |source| TierError::io(format!("control socket {}", path.display()), source);
    let mut stream = UnixStream::connect(&path).map_err(io)?;
    let request = ControlRequest::StartServer {
        host: host.to_string(),
        port,
    };
    let text = serde_json::to_string(&request)
        .map_err(|error| TierError::Config(format!("control request: {error}")))?;
    stream
        .write_all(format!("{text}\n").as_bytes())
        .map_err(io)?;
    let mut line = String::new();
    BufReader::new(&stream).read_line(&mut line).map_err(io)?;
    match serde_json::from_str::<ControlReply>(&line) {
        Ok(ControlReply::Started(record)) => Ok(record),
        Ok(ControlReply::Error(message)) => Err(TierError::process(message)),
        Err(error) => Err(TierError::process(format!(
            "control reply {line:?}: {error}"
        ))),
    }
}
