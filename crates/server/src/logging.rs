//! Log output at memcached's verbosity levels, on the `tracing` ecosystem.
//!
//! ```text
//!   flag   tracing level   what is printed (stderr, or the --log-file stderr was moved to)
//!   none   WARN            warnings and errors
//!   -v     INFO            + start-up, shutdown, signals
//!   -vv    DEBUG           + every command and reply: `<FD cmd line`, `>FD REPLY`
//!   -vvv   TRACE           + connection state: accepted, closed, idle kicks
//! ```
//!
//! Lines carry the message alone (no time stamp, level or colour), as memcached prints them,
//! so the output is the same on a terminal and in a log file. The runtime decides once, when
//! it starts, whether commands are logged ([`logs_commands`]); with the level below DEBUG a
//! request costs one test of a `bool` and nothing is formatted.

use std::os::fd::RawFd;

use tracing::level_filters::LevelFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::reload;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Registry;

/// The `tracing` level a `-v` count stands for (see the module table).
pub fn level_of(verbose: u8) -> LevelFilter {
    match verbose {
        0 => LevelFilter::WARN,
        1 => LevelFilter::INFO,
        2 => LevelFilter::DEBUG,
        _ => LevelFilter::TRACE,
    }
}

/// True when a `-v` count logs every command and reply (`-vv` and more).
pub fn logs_commands(verbose: u8) -> bool {
    verbose >= 2
}

/// True when a `-v` count logs connection state changes (`-vvv`).
pub fn logs_state(verbose: u8) -> bool {
    verbose >= 3
}

/// Raises or lowers the level of the installed subscriber while the process runs
/// (nutcracker's SIGUSR1 / SIGUSR2).
#[derive(Clone)]
pub struct LogLevel {
    handle: reload::Handle<LevelFilter, Registry>,
}

const LEVELS: [LevelFilter; 6] = [
    LevelFilter::OFF,
    LevelFilter::ERROR,
    LevelFilter::WARN,
    LevelFilter::INFO,
    LevelFilter::DEBUG,
    LevelFilter::TRACE,
];

impl LogLevel {
    /// The level now.
    pub fn current(&self) -> LevelFilter {
        self.handle
            .clone_current()
            .unwrap_or(LevelFilter::current())
    }

    /// One level more verbose (up to TRACE); returns the new level.
    pub fn raise(&self) -> LevelFilter {
        self.step(1)
    }

    /// One level less verbose (down to OFF); returns the new level.
    pub fn lower(&self) -> LevelFilter {
        self.step(-1)
    }

    fn step(&self, by: isize) -> LevelFilter {
        let now = self.current();
        let index = LEVELS.iter().position(|level| *level == now).unwrap_or(2) as isize;
        let next = LEVELS[(index + by).clamp(0, LEVELS.len() as isize - 1) as usize];
        let _ = self.handle.modify(|level| *level = next);
        next
    }
}

/// Installs the process-wide subscriber at `level`, writing bare lines to stderr (which
/// [`crate::process::prepare`] points at the log file when one is set). Returns `None` when a
/// subscriber was installed already (then that one stays).
pub fn init(level: LevelFilter) -> Option<LogLevel> {
    let (filter, handle) = reload::Layer::new(level);
    let format = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .without_time()
        .with_level(false)
        .with_target(false);
    tracing_subscriber::registry()
        .with(filter)
        .with(format)
        .try_init()
        .ok()
        .map(|()| LogLevel { handle })
}

/// Logs one command and its reply as memcached's `-vv` does: the command line as
/// `<FD line` (without its data block) and each reply line as `>FD line`, where a `VALUE`
/// line of a retrieval is `>FD sending key KEY` and its data block is left out.
pub fn log_exchange(fd: RawFd, frame: &[u8], reply: &[u8]) {
    log_command(fd, frame);
    for line in reply_lines(reply) {
        tracing::debug!(">{fd} {}", String::from_utf8_lossy(&line));
    }
}

/// Logs the command line at the start of `frame` as `<FD line` (nothing when empty).
pub fn log_command(fd: RawFd, frame: &[u8]) {
    let command = first_line(frame);
    if !command.is_empty() {
        tracing::debug!("<{fd} {}", String::from_utf8_lossy(command));
    }
}

fn first_line(bytes: &[u8]) -> &[u8] {
    let end = memchr_newline(bytes).unwrap_or(bytes.len());
    let line = &bytes[..end];
    line.strip_suffix(b"\r").unwrap_or(line)
}

fn memchr_newline(bytes: &[u8]) -> Option<usize> {
    memchr::memchr(b'\n', bytes)
}

/// The lines memcached's `-vv` prints for a reply: data blocks (after `VALUE … <bytes>` and
/// meta `VA <bytes>`) skipped, `VALUE <key> …` shown as `sending key <key>`.
fn reply_lines(reply: &[u8]) -> Vec<Vec<u8>> {
    let mut lines = Vec::new();
    let mut rest = reply;
    while !rest.is_empty() {
        let end = memchr_newline(rest).unwrap_or(rest.len());
        let line = first_line(rest);
        rest = rest.get(end + 1..).unwrap_or_default();
        let mut words = line.split(|b| *b == b' ');
        let data_len = match words.next() {
            Some(b"VALUE") => {
                let key = words.next().unwrap_or_default();
                let mut shown = b"sending key ".to_vec();
                shown.extend_from_slice(key);
                lines.push(shown);
                words.nth(1)
            }
            Some(b"VA") => {
                lines.push(line.to_vec());
                words.next()
            }
            _ => {
                lines.push(line.to_vec());
                None
            }
        };
        if let Some(len) = data_len
            .and_then(|len| std::str::from_utf8(len).ok())
            .and_then(|len| len.parse::<usize>().ok())
        {
            rest = rest.get(len + 2..).unwrap_or_default();
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_lines_follow_memcached_vv() {
        let reply = b"VALUE foo 0 3\r\nbar\r\nVALUE k 5 3 7\r\nEND\r\nEND\r\n";
        let lines: Vec<String> = reply_lines(reply)
            .into_iter()
            .map(|line| String::from_utf8(line).expect("text"))
            .collect();
        assert_eq!(
            lines,
            ["sending key foo", "sending key k", "END"],
            "data blocks are skipped, even when they look like lines"
        );
        let meta: Vec<Vec<u8>> = reply_lines(b"VA 2 f0\r\nhi\r\nHD\r\n");
        assert_eq!(meta, [b"VA 2 f0".to_vec(), b"HD".to_vec()]);
        assert_eq!(first_line(b"set a 0 0 1\r\nx\r\n"), b"set a 0 0 1");
    }

    #[test]
    fn levels_step_and_saturate() {
        assert_eq!(level_of(0), LevelFilter::WARN);
        assert_eq!(level_of(2), LevelFilter::DEBUG);
        assert_eq!(level_of(9), LevelFilter::TRACE);
        assert!(logs_commands(2) && !logs_commands(1));
        assert!(logs_state(3) && !logs_state(2));
    }
}
