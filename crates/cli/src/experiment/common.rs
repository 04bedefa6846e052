//! Pieces every experiment needs: server child processes (tailtrim with a
//! dispatch policy, or Debian's memcached), port waits, `stats` queries, CPU
//! pinning, the noise-floor stub server, medians, CPU lists, timestamps and
//! a progress bar.
//!
//! ```text
//!   ServerProcess::start ──spawn──> tailtrim serve -p P -l 127.0.0.1 -t N -m MB [--dispatch X]
//!                         ──spawn──> memcached -p P -l 127.0.0.1 -U 0 -t N -m MB [-u root]
//!        │  wait_for_port (fails early if the child exits; shows its stderr)
//!        │  optional sched_setaffinity on every task of the child
//!        ▼
//!   Drop: SIGTERM, wait up to 3 s, then SIGKILL
//!
//!   FloorStub: in-process thread per connection, `get` -> `END` (a miss):
//!              the cheapest memcached exchange the bench can make
//! ```

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// How long a server may take to accept connections after spawning.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a server may take to exit after SIGTERM before SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(3);

/// What program a server runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Program {
    /// `tailtrim serve` (this executable), with optional extra arguments
    /// such as `--dispatch size-aware`.
    Tailtrim {
        /// Arguments appended after the common ones.
        extra: Vec<String>,
    },
    /// Debian's memcached.
    Memcached,
}

/// Parameters shared by every server of an experiment.
#[derive(Clone, Debug)]
pub struct ServerShape {
    /// Worker threads (`-t`).
    pub threads: usize,
    /// Item memory in megabytes (`-m`).
    pub memory_mb: u64,
    /// CPUs the server's threads are pinned to (none: the scheduler decides).
    pub cpus: Option<Vec<usize>>,
}

/// A running server child process, stopped on drop.
pub struct ServerProcess {
    name: String,
    child: Child,
    address: SocketAddr,
    command_line: String,
    log_path: PathBuf,
}

impl ServerProcess {
    /// Starts `program` on a free port of 127.0.0.1 and waits until it
    /// accepts connections.
    pub fn start(name: &str, program: &Program, shape: &ServerShape) -> Result<Self, String> {
        let port = free_port()?;
        let (binary, mut arguments) = match program {
            Program::Tailtrim { extra } => {
                let binary = std::env::current_exe()
                    .map_err(|error| format!("locating the tailtrim executable: {error}"))?;
                let mut arguments = vec!["serve".to_string()];
                arguments.extend(common_server_arguments(port, shape));
                arguments.extend(extra.iter().cloned());
                (binary, arguments)
            }
            Program::Memcached => {
                let binary = memcached_path().ok_or_else(|| {
                    "memcached is not installed (apt-get install memcached)".to_string()
                })?;
                let mut arguments = common_server_arguments(port, shape);
                arguments.extend(["-U".to_string(), "0".to_string()]);
                (binary, arguments)
            }
        };
        if matches!(program, Program::Memcached) && running_as_root() {
            arguments.extend(["-u".to_string(), "root".to_string()]);
        }
        let log_path = std::env::temp_dir().join(format!(
            "tailtrim-experiment-{}-{}-{port}.log",
            std::process::id(),
            name
        ));
        let log = File::create(&log_path)
            .map_err(|error| format!("creating {}: {error}", log_path.display()))?;
        let log_for_stdout = log
            .try_clone()
            .map_err(|error| format!("duplicating a log handle: {error}"))?;
        let command_line = format!("{} {}", binary.display(), arguments.join(" "));
        let mut command = Command::new(&binary);
        command
            .args(&arguments)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log_for_stdout))
            .stderr(Stdio::from(log));
        // SAFETY: the closure runs in the forked child before exec and only
        // calls prctl(2), which is async-signal-safe. The child gets SIGTERM
        // if the thread that spawned it dies (e.g. the experiment is killed),
        // so no server outlives the experiment.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command
            .spawn()
            .map_err(|error| format!("starting {command_line}: {error}"))?;
        let address = SocketAddr::from(([127, 0, 0, 1], port));
        let mut server = Self {
            name: name.to_string(),
            child,
            address,
            command_line,
            log_path,
        };
        server.wait_until_ready()?;
        if let Some(cpus) = &shape.cpus {
            pin_process(server.child.id(), cpus)?;
        }
        Ok(server)
    }

    /// `127.0.0.1:port`.
    pub fn address(&self) -> String {
        self.address.to_string()
    }

    /// The command line that started the server (binary path and arguments).
    pub fn command_line(&self) -> &str {
        &self.command_line
    }

    /// Process id of the server.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Fails if the server has exited (e.g. crashed during a run).
    pub fn check_alive(&mut self) -> Result<(), String> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(format!(
                "server {} exited ({status}); log:\n{}",
                self.name,
                self.log_tail()
            )),
            Err(error) => Err(format!("checking server {}: {error}", self.name)),
        }
    }

    fn wait_until_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            self.check_alive()
                .map_err(|error| format!("{error}\ncommand: {}", self.command_line))?;
            if TcpStream::connect_timeout(&self.address, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "server {} did not accept connections within {:?}\ncommand: {}\nlog:\n{}",
                    self.name,
                    START_TIMEOUT,
                    self.command_line,
                    self.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log_path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Ok(pid) = libc::pid_t::try_from(self.child.id()) {
            // SAFETY: kill(2) on the pid of a child we spawned and have not reaped.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                let _ = std::fs::remove_file(&self.log_path);
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log_path);
    }
}

fn common_server_arguments(port: u16, shape: &ServerShape) -> Vec<String> {
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

/// Path of memcached: `$PATH` first, then `/usr/bin/memcached`.
pub fn memcached_path() -> Option<PathBuf> {
    if let Some(paths) = std::env::var_os("PATH") {
        for directory in std::env::split_paths(&paths) {
            let candidate = directory.join("memcached");
            if candidate.is_file() {
                return Some(candidate);
            }
        }
    }
    let fallback = PathBuf::from("/usr/bin/memcached");
    fallback.is_file().then_some(fallback)
}

/// A free TCP port on 127.0.0.1 (bound, then released).
pub fn free_port() -> Result<u16, String> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .map_err(|error| format!("binding an ephemeral port: {error}"))?;
    listener
        .local_addr()
        .map(|address| address.port())
        .map_err(|error| format!("reading an ephemeral port: {error}"))
}

/// Sends one command and waits for the reply to end with `reply_end`.
pub fn send_command(address: &str, command: &[u8], reply_end: &[u8]) -> Result<(), String> {
    let mut stream =
        TcpStream::connect(address).map_err(|error| format!("connecting to {address}: {error}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(2)))
        .map_err(|error| format!("setting a timeout on {address}: {error}"))?;
    stream
        .write_all(command)
        .map_err(|error| format!("writing to {address}: {error}"))?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 256];
    while !reply.ends_with(reply_end) {
        let n = stream
            .read(&mut buf)
            .map_err(|error| format!("reading from {address}: {error}"))?;
        if n == 0 {
            return Err(format!("{address} closed before replying"));
        }
        reply.extend_from_slice(&buf[..n]);
    }
    Ok(())
}

/// Sends `stats [group]` to `address` and returns the `STAT name value`
/// lines. A server that does not know the group answers with an error line:
/// that gives an empty map.
pub fn fetch_stats(address: &str, group: Option<&str>) -> Result<BTreeMap<String, String>, String> {
    let mut stream = TcpStream::connect(address)
        .map_err(|error| format!("connecting to {address} for stats: {error}"))?;
    let timeout = Some(Duration::from_secs(2));
    stream
        .set_read_timeout(timeout)
        .and_then(|()| stream.set_write_timeout(timeout))
        .map_err(|error| format!("setting a timeout on {address}: {error}"))?;
    let command = match group {
        Some(group) => format!("stats {group}\r\n"),
        None => "stats\r\n".to_string(),
    };
    stream
        .write_all(command.as_bytes())
        .map_err(|error| format!("sending stats to {address}: {error}"))?;
    let mut reader = BufReader::new(stream);
    let mut stats = BTreeMap::new();
    let mut line = String::new();
    loop {
        line.clear();
        let read = reader
            .read_line(&mut line)
            .map_err(|error| format!("reading stats from {address}: {error}"))?;
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

use tailtrim_server::affinity::set_affinity;
pub use tailtrim_server::affinity::{parse_cpu_list, pin_current_thread};

/// Sets the nice value of the calling thread; threads and processes it
/// creates afterwards (bench I/O threads, servers) inherit it. Negative
/// values need root (CAP_SYS_NICE).
pub fn set_nice(nice: i32) -> Result<(), String> {
    // SAFETY: setpriority(2) on the calling thread (who = 0) with a plain int.
    let result = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) };
    if result == 0 {
        Ok(())
    } else {
        Err(format!(
            "setpriority(nice {nice}): {} (negative values need root)",
            std::io::Error::last_os_error()
        ))
    }
}

/// Pins every thread of process `pid` to `cpus`.
pub fn pin_process(pid: u32, cpus: &[usize]) -> Result<(), String> {
    let directory = format!("/proc/{pid}/task");
    let entries =
        std::fs::read_dir(&directory).map_err(|error| format!("reading {directory}: {error}"))?;
    for entry in entries.flatten() {
        if let Some(task) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<libc::pid_t>().ok())
        {
            set_affinity(task, cpus)?;
        }
    }
    Ok(())
}

/// Median of `values` (mean of the two middle ones for an even count; 0 when
/// empty). NaNs sort last.
pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(|left, right| left.total_cmp(right));
    let middle = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[middle]
    } else {
        (sorted[middle - 1] + sorted[middle]) / 2.0
    }
}

/// The order in which systems run in round `round` of a rate: rotated by one
/// each round (A B C, B C A, C A B, …) so no system is always first after a
/// rate change or always right after the same neighbour.
pub fn interleaved_order(systems: usize, round: usize) -> Vec<usize> {
    (0..systems)
        .map(|position| (position + round) % systems.max(1))
        .collect()
}

/// The noise-floor server: answers every `get` with `END` (a miss) and every
/// storage command with `STORED`, one thread per connection, in this process.
/// The bench against it measures loopback + the bench's own path.
pub struct FloorStub {
    address: SocketAddr,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl FloorStub {
    /// Binds 127.0.0.1 on a free port and starts accepting.
    pub fn start() -> Result<Self, String> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .map_err(|error| format!("binding the floor stub: {error}"))?;
        let address = listener
            .local_addr()
            .map_err(|error| format!("reading the floor stub address: {error}"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop_flag = Arc::clone(&stop);
        let acceptor = std::thread::Builder::new()
            .name("floor-stub".to_string())
            .spawn(move || {
                for stream in listener.incoming() {
                    if stop_flag.load(Ordering::Acquire) {
                        break;
                    }
                    if let Ok(stream) = stream {
                        let _ = std::thread::Builder::new()
                            .name("floor-conn".to_string())
                            .spawn(move || serve_floor_connection(stream));
                    }
                }
            })
            .map_err(|error| format!("starting the floor stub: {error}"))?;
        Ok(Self {
            address,
            stop,
            acceptor: Some(acceptor),
        })
    }

    /// `127.0.0.1:port`.
    pub fn address(&self) -> String {
        self.address.to_string()
    }
}

impl Drop for FloorStub {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wake the acceptor so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.address, Duration::from_millis(200));
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

/// Serves one floor-stub connection until EOF: `get`/`gets` lines get `END`,
/// `set`-like lines have their data block skipped and get `STORED`, anything
/// else gets `ERROR`. Replies are batched per read.
fn serve_floor_connection(mut stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let mut input: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut chunk = vec![0u8; 16 * 1024];
    let mut output: Vec<u8> = Vec::with_capacity(4096);
    let mut skip_bytes = 0usize;
    loop {
        let count = match stream.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(count) => count,
        };
        input.extend_from_slice(&chunk[..count]);
        let mut consumed = 0usize;
        loop {
            if skip_bytes > 0 {
                let available = (input.len() - consumed).min(skip_bytes);
                consumed += available;
                skip_bytes -= available;
                if skip_bytes > 0 {
                    break;
                }
            }
            let Some(end) = input[consumed..]
                .windows(2)
                .position(|pair| pair == b"\r\n")
            else {
                break;
            };
            let line = &input[consumed..consumed + end];
            consumed += end + 2;
            let mut words = line.split(|byte| *byte == b' ');
            match words.next() {
                Some(b"get") | Some(b"gets") => output.extend_from_slice(b"END\r\n"),
                Some(b"set") | Some(b"add") | Some(b"replace") => {
                    let length = words
                        .nth(3)
                        .and_then(|word| std::str::from_utf8(word).ok())
                        .and_then(|word| word.parse::<usize>().ok())
                        .unwrap_or(0);
                    skip_bytes = length + 2;
                    output.extend_from_slice(b"STORED\r\n");
                }
                _ => output.extend_from_slice(b"ERROR\r\n"),
            }
        }
        input.drain(..consumed);
        if !output.is_empty() {
            if stream.write_all(&output).is_err() {
                break;
            }
            output.clear();
        }
    }
    let _ = stream.shutdown(Shutdown::Both);
}

/// A progress bar on stderr when it is a terminal (None otherwise).
pub fn progress_bar(interactive: bool, length: u64, prefix: &str) -> Option<ProgressBar> {
    if !interactive {
        return None;
    }
    let bar = ProgressBar::new(length.max(1));
    let style = ProgressStyle::with_template(
        "{prefix} [{bar:40}] {percent:>3}% elapsed {elapsed_precise} eta {eta_precise} {msg}",
    )
    .map(|style| style.progress_chars("=> "));
    if let Ok(style) = style {
        bar.set_style(style);
    }
    bar.set_prefix(prefix.to_string());
    Some(bar)
}

/// The current UTC time as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc_timestamp() -> String {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs())
        .unwrap_or(0);
    let days = (seconds / 86_400) as i64;
    let of_day = seconds % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        of_day / 3600,
        (of_day / 60) % 60,
        of_day % 60
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian
/// (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_index + 2) / 5 + 1) as u32;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::{civil_from_days, interleaved_order, median, FloorStub};
    use std::io::{Read, Write};

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }

    #[test]
    fn interleaving_rotates_and_covers_every_system() {
        for round in 0..4 {
            let mut order = interleaved_order(5, round);
            assert_eq!(order[0], round % 5);
            order.sort_unstable();
            assert_eq!(order, vec![0, 1, 2, 3, 4]);
        }
    }

    #[test]
    fn dates_from_days() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(20_513), (2026, 3, 1));
    }

    #[test]
    fn floor_stub_answers_gets_and_skips_set_bodies() {
        let stub = FloorStub::start().unwrap_or_else(|error| panic!("{error}"));
        let mut stream = std::net::TcpStream::connect(stub.address())
            .unwrap_or_else(|error| panic!("connect: {error}"));
        let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(5)));
        stream
            .write_all(b"get a\r\nset k 0 0 6\r\nhe\r\nlo\r\nget b c\r\nbogus\r\n")
            .unwrap_or_else(|error| panic!("write: {error}"));
        let expected = b"END\r\nSTORED\r\nEND\r\nERROR\r\n";
        let mut received = Vec::new();
        let mut chunk = [0u8; 256];
        while received.len() < expected.len() {
            let count = stream
                .read(&mut chunk)
                .unwrap_or_else(|error| panic!("read: {error}"));
            assert!(count > 0, "stub closed early");
            received.extend_from_slice(&chunk[..count]);
        }
        assert_eq!(received, expected.to_vec());
    }
}
