//! Running as a system service, as memcached does with `-d`, `-u`, `-P`, `-k`, `-r`, and as
//! Debian's start script does with the `logfile` line of `/etc/memcached.conf`.
//!
//! ```text
//!   prepare(&ProcessSection)   before any thread starts (fork is only safe then)
//!     log_file  -> stdout/stderr appended to the file
//!     max_core  -> RLIMIT_CORE raised to its hard limit
//!     user      -> (root only) setgid + initgroups + setuid to the user
//!     daemonize -> fork, parent exits 0, child setsid, chdir /, stdin from /dev/null
//!     pid_file  -> our pid written (after the fork and the user switch, as memcached)
//!     lock_mem  -> mlockall(current | future), warning on failure
//!   PidFile dropped on a clean exit -> file removed
//!   reopen_log_file on SIGHUP   -> stdout/stderr point at the (new) log file again
//!   memcached_conf_lines        -> the flags a Debian /etc/memcached.conf stands for
//!   tune_allocator              -> glibc returns large values' memory (RSS tracks -m)
//! ```

use std::ffi::CString;
use std::io;

use crate::config::ProcessSection;

/// Removes the pid file when dropped (clean shutdown).
#[derive(Debug)]
pub struct PidFile(Option<std::path::PathBuf>);

impl Drop for PidFile {
    fn drop(&mut self) {
        if let Some(path) = &self.0 {
            let _ = std::fs::remove_file(path);
        }
    }
}

fn os_error(what: &str) -> String {
    format!("{what}: {}", io::Error::last_os_error())
}

fn redirect_output(path: &str) -> Result<(), String> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("cannot open log file {path}: {e}"))?;
    use std::os::fd::AsRawFd;
    for target in [libc::STDOUT_FILENO, libc::STDERR_FILENO] {
        // SAFETY: dup2 on descriptors we own; the file stays open until dup2 returns.
        if unsafe { libc::dup2(file.as_raw_fd(), target) } < 0 {
            return Err(os_error("cannot redirect output to the log file"));
        }
    }
    Ok(())
}

/// Points stdout and stderr at `path` again, a file created anew if it was moved away (the
/// server's SIGHUP, after `logrotate` renamed the log).
pub fn reopen_log_file(path: &str) -> Result<(), String> {
    redirect_output(path)
}

fn raise_core_limit() -> Result<(), String> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain getrlimit/setrlimit on a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_CORE, &mut limit) != 0 {
            return Err(os_error("getrlimit(RLIMIT_CORE)"));
        }
        limit.rlim_cur = limit.rlim_max;
        if libc::setrlimit(libc::RLIMIT_CORE, &limit) != 0 {
            return Err(os_error("setrlimit(RLIMIT_CORE)"));
        }
    }
    Ok(())
}

fn daemonize(keep_output: bool) -> Result<(), String> {
    // SAFETY: called before any other thread exists; the parent exits at once.
    match unsafe { libc::fork() } {
        -1 => return Err(os_error("fork")),
        0 => {}
        _ => std::process::exit(0),
    }
    // SAFETY: setsid/chdir/open/dup2 on our own process and descriptors.
    unsafe {
        if libc::setsid() == -1 {
            return Err(os_error("setsid"));
        }
        let root = CString::new("/").map_err(|e| e.to_string())?;
        if libc::chdir(root.as_ptr()) != 0 {
            return Err(os_error("chdir /"));
        }
        let null = CString::new("/dev/null").map_err(|e| e.to_string())?;
        let fd = libc::open(null.as_ptr(), libc::O_RDWR);
        if fd < 0 {
            return Err(os_error("open /dev/null"));
        }
        libc::dup2(fd, libc::STDIN_FILENO);
        if !keep_output {
            libc::dup2(fd, libc::STDOUT_FILENO);
            libc::dup2(fd, libc::STDERR_FILENO);
        }
        if fd > libc::STDERR_FILENO {
            libc::close(fd);
        }
    }
    Ok(())
}

fn switch_user(name: &str) -> Result<(), String> {
    // SAFETY: getuid/geteuid have no preconditions.
    if unsafe { libc::getuid() != 0 && libc::geteuid() != 0 } {
        return Ok(()); // memcached ignores -u unless started as root
    }
    let c_name = CString::new(name).map_err(|_| format!("bad user name {name:?}"))?;
    // SAFETY: getpwnam returns a pointer into static storage, read before any other call.
    let (uid, gid) = unsafe {
        let entry = libc::getpwnam(c_name.as_ptr());
        if entry.is_null() {
            return Err(format!("can't find the user {name} to switch to"));
        }
        ((*entry).pw_uid, (*entry).pw_gid)
    };
    // SAFETY: dropping privileges of our own, single-threaded process.
    unsafe {
        if libc::setgid(gid) != 0 || libc::initgroups(c_name.as_ptr(), gid) != 0 {
            return Err(os_error(&format!("failed to assume the group of {name}")));
        }
        if libc::setuid(uid) != 0 {
            return Err(os_error(&format!(
                "failed to assume the identity of {name}"
            )));
        }
    }
    Ok(())
}

fn write_pid_file(path: &str) -> Result<(), String> {
    std::fs::write(path, format!("{}\n", std::process::id()))
        .map_err(|e| format!("could not write the pid file {path}: {e}"))
}

/// Applies `process` to the running process. Must be called before any thread starts.
/// Returns the pid file guard (removes the file on drop) and warnings to print.
pub fn prepare(process: &ProcessSection) -> Result<(PidFile, Vec<String>), String> {
    let mut warnings = Vec::new();
    if !process.log_file.is_empty() {
        redirect_output(&process.log_file)?;
    }
    if process.max_core_file {
        if let Err(error) = raise_core_limit() {
            warnings.push(format!("failed to raise the core file limit: {error}"));
        }
    }
    if !process.user.is_empty() {
        switch_user(&process.user)?;
    }
    if process.daemonize {
        daemonize(!process.log_file.is_empty())?;
    }
    // As memcached: the pid file is written by the daemon after the user switch, so the
    // service user can remove it again on exit.
    let pid_file = if process.pid_file.is_empty() {
        PidFile(None)
    } else {
        write_pid_file(&process.pid_file)?;
        PidFile(Some(process.pid_file.clone().into()))
    };
    if process.lock_memory {
        // SAFETY: mlockall only changes paging of our own address space.
        if unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) } != 0 {
            warnings.push(os_error(
                "warning: -k invalid, mlockall() failed (check the memlock ulimit)",
            ));
        }
    }
    Ok((pid_file, warnings))
}

/// The command-line flags a Debian `/etc/memcached.conf` stands for, as its start script reads
/// it, with the line number each came from: blank lines and `#` comments skipped,
/// `logfile PATH` becomes `--log-file PATH`, every other line must hold flags (`-m 64`), split
/// on white space.
pub fn memcached_conf_lines(text: &str) -> Result<Vec<(usize, Vec<String>)>, String> {
    let mut lines = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(path) = line.strip_prefix("logfile") {
            lines.push((number, vec!["--log-file".into(), path.trim().to_string()]));
        } else if line.starts_with('-') {
            lines.push((
                number,
                line.split_whitespace().map(str::to_string).collect(),
            ));
        } else {
            return Err(format!(
                "{number}: {line:?} is neither a flag nor `logfile PATH`"
            ));
        }
    }
    Ok(lines)
}

/// glibc keeps freed memory of large values in its arenas unless told to
/// return it; with values up to 1 MB churned through the LRU that doubled the
/// resident size over `-m`. Serve large allocations with mmap and trim
/// eagerly, so RSS tracks the item memory (the CLI's tests/memory.rs holds the bound).
pub fn tune_allocator() {
    // Values above 32 KiB get their own mapping, returned to the kernel when
    // the item is evicted; a fixed threshold also stops glibc from raising it
    // dynamically after the first large free.
    const MMAP_THRESHOLD: libc::c_int = 32 * 1024;
    const TRIM_THRESHOLD: libc::c_int = 128 * 1024;
    // SAFETY: mallopt only adjusts allocator parameters; called before the
    // server's threads start.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
    }
}
