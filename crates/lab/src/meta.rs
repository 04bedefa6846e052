//! What every `results.json` records about how it was produced: the code (commit, dirty
//! tree), the machine (CPU model, cores, kernel), the conditions during the run (load
//! average at start and end and the highest seen, CPU steal) and the exact command.
//!
//! ```text
//!   Recorder::start ── /proc/stat (steal), /proc/loadavg, git, /proc/cpuinfo
//!        │  sampler thread: /proc/loadavg every second, keeps the highest 1-minute load
//!        ├─ snapshot()  (metadata so far, for results written while the run goes on)
//!        ▼
//!   finish() ── /proc/stat again: steal % = Δsteal / Δtotal; wall time; stops the sampler
//! ```

use std::collections::BTreeMap;
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// The commit this binary was built from (`-dirty` when its tree differed), from the build
/// script.
pub const BUILD_COMMIT: &str = env!("TAILTRIM_BUILD_COMMIT");

/// The version `tailtrim --version` prints: the package version and [`BUILD_COMMIT`].
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("TAILTRIM_BUILD_COMMIT"),
    ")"
);

/// How often the sampler reads the load average.
const LOAD_SAMPLE_PERIOD: Duration = Duration::from_secs(1);

/// The metadata of one experiment run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunMetadata {
    /// The command line, as typed (program name and arguments).
    pub command: String,
    /// `git rev-parse HEAD` of the working directory (`unknown` outside a checkout).
    pub commit: String,
    /// Whether tracked files differed from that commit.
    pub dirty: bool,
    /// The commit the running binary was built from (`-dirty` when its tree differed);
    /// differs from `commit` when an older copy of the binary ran. Empty (and left out of
    /// the JSON) in files written before the field existed, so a replot does not add it.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub build: String,
    /// `model name` of /proc/cpuinfo.
    pub cpu_model: String,
    /// CPUs online.
    pub cores: usize,
    /// Kernel release.
    pub kernel: String,
    /// UTC start time, `YYYY-MM-DDTHH:MM:SSZ`.
    pub started_utc: String,
    /// Wall seconds of the run.
    pub wall_seconds: f64,
    /// /proc/loadavg's 1, 5 and 15-minute load at the start.
    pub load_average_start: String,
    /// The same at the end.
    pub load_average_end: String,
    /// Highest 1-minute load average seen during the run (sampled every second).
    pub load_average_max: f64,
    /// Share of CPU time stolen by the hypervisor during the run, percent.
    pub steal_percent: f64,
    /// Versions of the external programs the run used (e.g. `memcached`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub tools: BTreeMap<String, String>,
}

/// The note of a run of the cluster simulator (what kind of result it is).
pub const SIMULATED_NOTE: &str = "SIMULATED: tailtrim's cluster simulator, no real servers";

/// The metadata of a seeded simulated run: the harness's [`RunMetadata`], the seed and a note
/// saying what kind of result it is. Files written before the harness (`wall_secs` instead of
/// `wall_seconds`, no load or CPU model) read as well.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SeededMetadata {
    /// The harness's run metadata.
    #[serde(flatten)]
    pub run: RunMetadata,
    /// The simulator's seed.
    pub seed: u64,
    /// What kind of result this is (e.g. `SIMULATED: …`).
    pub note: String,
}

/// Records [`RunMetadata`] over a run.
#[derive(Debug)]
pub struct Recorder {
    metadata: RunMetadata,
    started: Instant,
    jiffies_start: Option<(u64, u64)>,
    highest_load: Arc<Mutex<f64>>,
    stop: Option<Sender<()>>,
    sampler: Option<JoinHandle<()>>,
}

impl Recorder {
    /// Starts recording: reads the static facts and starts the load sampler.
    #[must_use]
    pub fn start() -> Self {
        let (commit, dirty) = git_state();
        let load_start = load_average();
        let highest_load = Arc::new(Mutex::new(one_minute_load(&load_start)));
        let (stop, stopped) = channel::<()>();
        let sampled = Arc::clone(&highest_load);
        let sampler = std::thread::Builder::new()
            .name("lab-load-sampler".into())
            .spawn(move || {
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(LOAD_SAMPLE_PERIOD)
                {
                    let load = one_minute_load(&load_average());
                    if let Ok(mut highest) = sampled.lock() {
                        *highest = highest.max(load);
                    }
                }
            })
            .ok();
        Self {
            metadata: RunMetadata {
                command: command_line(),
                commit,
                dirty,
                build: BUILD_COMMIT.to_string(),
                cpu_model: cpu_model(),
                cores: online_cpus(),
                kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                    .map(|text| text.trim().to_string())
                    .unwrap_or_default(),
                started_utc: utc_timestamp(),
                load_average_start: load_start,
                ..RunMetadata::default()
            },
            started: Instant::now(),
            jiffies_start: cpu_jiffies(),
            highest_load,
            stop: Some(stop),
            sampler,
        }
    }

    /// Records the version of an external program the run uses.
    pub fn tool(&mut self, name: &str, version: String) {
        self.metadata.tools.insert(name.to_string(), version);
    }

    /// The metadata so far (for results written while the run goes on).
    #[must_use]
    pub fn snapshot(&self) -> RunMetadata {
        let mut metadata = self.metadata.clone();
        metadata.wall_seconds = self.started.elapsed().as_secs_f64();
        metadata.load_average_end = load_average();
        metadata.load_average_max = self
            .highest_load
            .lock()
            .map(|highest| *highest)
            .unwrap_or_default()
            .max(one_minute_load(&metadata.load_average_end));
        if let (Some(start), Some(now)) = (self.jiffies_start, cpu_jiffies()) {
            metadata.steal_percent = steal_percent(start, now);
        }
        metadata
    }

    /// Stops the sampler and returns the run's metadata.
    #[must_use]
    pub fn finish(mut self) -> RunMetadata {
        let metadata = self.snapshot();
        self.stop_sampler();
        metadata
    }

    fn stop_sampler(&mut self) {
        drop(self.stop.take());
        if let Some(sampler) = self.sampler.take() {
            let _ = sampler.join();
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.stop_sampler();
    }
}

/// The command line of this process, arguments joined by spaces.
#[must_use]
pub fn command_line() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}

/// `git rev-parse HEAD` of the working directory and whether tracked files differ from it
/// (`unknown`, false outside a checkout).
#[must_use]
pub fn git_state() -> (String, bool) {
    let run = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|output| output.status.success())
            .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_string())
    };
    let commit = run(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".to_string());
    let dirty = run(&["status", "--porcelain", "--untracked-files=no"])
        .is_some_and(|status| !status.is_empty());
    (commit, dirty)
}

/// /proc/loadavg's first three fields (`""` when unreadable).
#[must_use]
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

fn one_minute_load(load_average: &str) -> f64 {
    load_average
        .split_whitespace()
        .next()
        .and_then(|field| field.parse().ok())
        .unwrap_or(0.0)
}

/// CPUs online (not only those this possibly pinned process may use).
#[must_use]
pub fn online_cpus() -> usize {
    // SAFETY: sysconf has no preconditions.
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if online > 0 {
        online as usize
    } else {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    }
}

/// The first `model name` of /proc/cpuinfo (`""` when there is none).
#[must_use]
pub fn cpu_model() -> String {
    let text = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    text.lines()
        .find_map(|line| {
            let (key, value) = line.split_once(':')?;
            (key.trim() == "model name").then(|| value.trim().to_string())
        })
        .unwrap_or_default()
}

/// Total and steal jiffies of all CPUs from /proc/stat.
fn cpu_jiffies() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    parse_cpu_jiffies(text.lines().next()?)
}

/// `cpu  user nice system idle iowait irq softirq steal ...` to (total of the first eight,
/// steal).
fn parse_cpu_jiffies(line: &str) -> Option<(u64, u64)> {
    let values: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|field| field.parse().ok())
        .collect();
    let steal = *values.get(7)?;
    Some((values.iter().take(8).sum(), steal))
}

fn steal_percent(start: (u64, u64), end: (u64, u64)) -> f64 {
    let total = end.0.saturating_sub(start.0).max(1);
    end.1.saturating_sub(start.1) as f64 / total as f64 * 100.0
}

/// The current UTC time as `YYYY-MM-DDTHH:MM:SSZ`.
#[must_use]
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

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (Howard Hinnant's
/// algorithm).
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
    use super::{civil_from_days, one_minute_load, parse_cpu_jiffies, steal_percent, Recorder};

    #[test]
    fn dates_from_days() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(20_513), (2026, 3, 1));
    }

    #[test]
    fn steal_is_the_share_of_the_jiffies_between_two_readings() {
        let start = parse_cpu_jiffies("cpu  100 0 50 800 10 0 0 40 0 0").expect("parses");
        assert_eq!(start, (1000, 40));
        let end = parse_cpu_jiffies("cpu  150 0 60 1150 10 0 0 70 0 0").expect("parses");
        assert_eq!(steal_percent(start, end), 30.0 / 440.0 * 100.0);
        assert!(parse_cpu_jiffies("cpu  1 2 3").is_none());
        assert_eq!(one_minute_load("1.50 0.90 0.40"), 1.5);
    }

    #[test]
    fn a_recording_has_the_machine_and_the_command() {
        let recorder = Recorder::start();
        let metadata = recorder.finish();
        assert!(metadata.cores >= 1);
        assert!(!metadata.command.is_empty());
        assert_eq!(metadata.load_average_start.split_whitespace().count(), 3);
        assert!(metadata.load_average_max >= 0.0);
        assert!(metadata.started_utc.ends_with('Z'));
        // Run from the repository: the commit is a 40-digit hash.
        assert_eq!(metadata.commit.len(), 40, "{}", metadata.commit);
        // The binary under test was built from a checkout too.
        assert!(
            metadata.build.len() >= 40 && metadata.build.is_char_boundary(40),
            "{}",
            metadata.build
        );
        assert!(metadata.build[..40].bytes().all(|b| b.is_ascii_hexdigit()));
        assert!((0.0..=100.0).contains(&metadata.steal_percent));
    }
}
