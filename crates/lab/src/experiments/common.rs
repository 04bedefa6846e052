//! What the experiments need beyond the harness (the rest of this crate): the tailtrim
//! executable to start servers from, CPU pinning and nice values (the server crate's affinity
//! helpers), and a progress bar.

use std::path::PathBuf;

use indicatif::{ProgressBar, ProgressStyle};

use tailtrim_server::affinity::set_affinity;
pub use tailtrim_server::affinity::{parse_cpu_list, pin_current_thread};

/// This executable: `tailtrim serve` and `tailtrim proxy` run from it.
pub fn tailtrim_binary() -> Result<PathBuf, String> {
    std::env::current_exe().map_err(|error| format!("locating the tailtrim executable: {error}"))
}

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
