//! What the experiments need beyond the harness (the rest of this crate): the tailtrim
//! executable to start servers from, CPU pinning and nice values (the server crate's affinity
//! helpers), a progress bar, and the command every experiment runs through.
//!
//! ```text
//!   run_invocation(title, quiet, &args, out, replot) ─► command(&Invocation { args, terminal }, …)
//!   command(&experiment, out, replot, &terminal)
//!     replot:  experiment::replot::<E>(out) ──> "N percentiles equal their histograms'"
//!     run:     experiment::keep_run(&experiment, out, terminal's progress bar)
//!     then     E::summarise printed (unless quiet), and where the run is
//! ```

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use indicatif::{ProgressBar, ProgressStyle};

use crate::experiment::{keep_run, replot, Experiment, Progress};

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

/// Where a command tells its progress: a bar on stderr when it is a terminal, and lines printed
/// above the bar (or on stderr without one); nothing when quiet.
pub struct Terminal {
    bar: Option<ProgressBar>,
    quiet: bool,
}

impl Terminal {
    /// A terminal for the experiment named `prefix`; `quiet`: no bar and no lines.
    pub fn new(prefix: &str, quiet: bool) -> Self {
        Self {
            bar: progress_bar(!quiet && std::io::stderr().is_terminal(), 0, prefix),
            quiet,
        }
    }

    /// A terminal without a bar (for an experiment that draws one per run itself).
    pub fn without_bar() -> Self {
        Self {
            bar: None,
            quiet: false,
        }
    }

    /// Shows `progress` on the bar (its stage as the bar's message).
    pub fn progress(&self, progress: Progress<'_>) {
        if let Some(bar) = &self.bar {
            bar.set_length(progress.total.max(1));
            bar.set_position(progress.done);
            bar.set_message(progress.stage.to_string());
        }
    }

    /// Prints `line` above the bar, or on stderr.
    pub fn say(&self, line: &str) {
        match (&self.bar, self.quiet) {
            (_, true) => {}
            (Some(bar), false) => bar.println(line),
            (None, false) => eprintln!("{line}"),
        }
    }

    /// Whether lines and the summary are left out.
    pub fn quiet(&self) -> bool {
        self.quiet
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// An experiment's flags and the terminal its per-run lines go to: the experiment, for the
/// experiments that need nothing else to run (`impl Experiment for Invocation<'_, TheirArgs>`).
pub struct Invocation<'a, A> {
    /// What the command's flags ask for.
    pub args: &'a A,
    /// Where per-run lines go.
    pub terminal: &'a Terminal,
}

/// Runs the experiment of `args` ([`Invocation`]) through [`command`], its lines on a terminal
/// titled `title` (quiet: no progress or summary).
pub fn run_invocation<A>(
    title: &str,
    quiet: bool,
    args: &A,
    out: &Path,
    replot_only: bool,
) -> Result<ExitCode, String>
where
    for<'a> Invocation<'a, A>: Experiment,
{
    let terminal = Terminal::new(title, quiet);
    let experiment = Invocation {
        args,
        terminal: &terminal,
    };
    command(&experiment, out, replot_only, &terminal)
}

/// Runs `experiment` and keeps it in `out`, or with `replot` redraws the run kept there; prints
/// its summary (unless the terminal is quiet) and where it is.
pub fn command<E: Experiment>(
    experiment: &E,
    out: &Path,
    replot_only: bool,
    terminal: &Terminal,
) -> Result<ExitCode, String> {
    let (results, done) = if replot_only {
        let (results, checked) = replot::<E>(out)?;
        terminal.say(&format!(
            "{checked} kept results' percentiles equal their histograms'"
        ));
        (results, "redrew")
    } else {
        let results = keep_run(experiment, out, &|progress| terminal.progress(progress));
        terminal.finish();
        (results?, "wrote")
    };
    if !terminal.quiet() {
        print!("{}", E::summarise(&results));
        println!("{done} {}", out.display());
    }
    Ok(ExitCode::SUCCESS)
}
