//! The host's scheduling holes beside every run of `experiment tier`.
//!
//! ```text
//!  one meter thread per CPU the process may run on, pinned to it (SCHED_FIFO 50 if
//!  permitted, else normal):
//!     loop { sleep 1 ms; wake at t } ─► HoleDetector: t − previous wake − 1 ms > threshold?
//!                                        └► Hole { start: previous wake + 1 ms, length }
//!  per run: the union of every CPU's holes overlapping its measured window (a hole of one
//!           vCPU holds off whatever ran there), /proc/stat steal over it
//!           slow requests (latency > own p99 + 20 ms) counted by overlap with a hole
//!           disturbed  ⇔  longest hole > --disturbed-hole-ms
//! ```
//!
//! A thread that only sleeps is held off only by the host (the hypervisor not running the
//! vCPUs, or a non-preemptible kernel section; at real-time priority not by other threads):
//! its late wake-ups are holes in which no process of the tier ran either
//! (`experiments/tier/loopback-stall/` traced the tier's 100–180 ms stalls to them).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tailtrim_bench::cacheaside::RequestTime;

use crate::experiments::common::pin_current_thread;

/// The meter's sleep.
pub const PERIOD: Duration = Duration::from_millis(1);
/// Holes kept by the meter (memory bound; later ones are counted, not kept).
const MAX_HOLES: usize = 100_000;
/// Holes listed per run in results.json (the count, longest and total cover every one).
const LISTED_HOLES: usize = 50;
/// A slow request: latency over the run's own p99 by more than this.
pub const SLOW_OVER_P99: Duration = Duration::from_millis(20);

/// A late wake-up of the meter: from when it was due to when it ran, nanoseconds on the
/// meter's clock (or, once placed in a run, after the run's window start).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hole {
    pub start_ns: u64,
    pub length_ns: u64,
}

impl Hole {
    fn end_ns(self) -> u64 {
        self.start_ns + self.length_ns
    }
}

/// Turns the meter's wake-up times into holes: a wake-up later than the previous one plus
/// the period by more than the threshold is a hole from the due time to the wake-up.
#[derive(Clone, Debug)]
pub struct HoleDetector {
    period_ns: u64,
    threshold_ns: u64,
    last_ns: Option<u64>,
}

impl HoleDetector {
    #[must_use]
    pub fn new(period: Duration, threshold: Duration) -> Self {
        Self {
            period_ns: period.as_nanos() as u64,
            threshold_ns: threshold.as_nanos() as u64,
            last_ns: None,
        }
    }

    /// The hole still open at `now_ns` (the meter has not woken since it was due by more
    /// than the threshold): it is not over, so [`HoleDetector::wake`] has not reported it.
    #[cfg(test)]
    #[must_use]
    pub fn open_at(&self, now_ns: u64) -> Option<Hole> {
        open_hole(self.last_ns?, now_ns, self.period_ns, self.threshold_ns)
    }

    /// The meter woke at `at_ns` (non-decreasing): the hole before it, if any.
    pub fn wake(&mut self, at_ns: u64) -> Option<Hole> {
        let previous = self.last_ns.replace(at_ns)?;
        let due = previous + self.period_ns;
        let late = at_ns.saturating_sub(due);
        (late > self.threshold_ns).then_some(Hole {
            start_ns: due,
            length_ns: late,
        })
    }
}

/// The hole open at `now_ns` of a meter last awake at `last_ns`, if it is late by more than
/// the threshold.
fn open_hole(last_ns: u64, now_ns: u64, period_ns: u64, threshold_ns: u64) -> Option<Hole> {
    let due = last_ns + period_ns;
    let late = now_ns.saturating_sub(due);
    (late > threshold_ns).then_some(Hole {
        start_ns: due,
        length_ns: late,
    })
}

/// Every hole in a series of wake-up times.
#[cfg(test)]
#[must_use]
pub fn holes_in(wakes_ns: &[u64], period: Duration, threshold: Duration) -> Vec<Hole> {
    let mut detector = HoleDetector::new(period, threshold);
    wakes_ns
        .iter()
        .filter_map(|&at| detector.wake(at))
        .collect()
}

/// The union of `holes` (from any number of meters, in any order), sorted: overlapping or
/// touching holes become one.
#[must_use]
pub fn merged(holes: &[Hole]) -> Vec<Hole> {
    let mut sorted = holes.to_vec();
    sorted.sort_unstable_by_key(|hole| hole.start_ns);
    let mut union: Vec<Hole> = Vec::with_capacity(sorted.len());
    for hole in sorted {
        match union.last_mut() {
            Some(last) if hole.start_ns <= last.end_ns() => {
                last.length_ns = last.end_ns().max(hole.end_ns()) - last.start_ns;
            }
            _ => union.push(hole),
        }
    }
    union
}

/// The holes overlapping `[from_ns, to_ns)`, re-timed from `from_ns` and clipped to it.
#[must_use]
pub fn holes_within(holes: &[Hole], from_ns: u64, to_ns: u64) -> Vec<Hole> {
    holes
        .iter()
        .filter(|hole| hole.start_ns < to_ns && hole.end_ns() > from_ns)
        .map(|hole| {
            let start = hole.start_ns.max(from_ns);
            let end = hole.end_ns().min(to_ns);
            Hole {
                start_ns: start - from_ns,
                length_ns: end - start,
            }
        })
        .collect()
}

/// Slow requests (latency over `slow_over_ns`) and how many of them overlap a hole (the
/// request's span from its scheduled time to its completion meets the hole's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlowCount {
    pub slow: u64,
    pub in_holes: u64,
}

#[must_use]
pub fn slow_against_holes(
    requests: &[RequestTime],
    holes: &[Hole],
    slow_over_ns: u64,
) -> SlowCount {
    let mut count = SlowCount::default();
    for request in requests.iter().filter(|r| r.latency_ns > slow_over_ns) {
        count.slow += 1;
        let end = request.scheduled_ns + request.latency_ns;
        if holes
            .iter()
            .any(|hole| hole.start_ns < end && hole.end_ns() > request.scheduled_ns)
        {
            count.in_holes += 1;
        }
    }
    count
}

/// The steal ticks of the all-CPU line of a `/proc/stat` text (its eighth number).
#[must_use]
pub fn parse_steal(stat: &str) -> Option<u64> {
    let line = stat.lines().find(|line| line.starts_with("cpu "))?;
    line.split_whitespace().nth(8)?.parse().ok()
}

/// The host's steal time so far, ms (none where /proc/stat or its steal field is missing).
#[must_use]
pub fn steal_ms() -> Option<f64> {
    let ticks = parse_steal(&std::fs::read_to_string("/proc/stat").ok()?)?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then(|| ticks as f64 * 1e3 / hz as f64)
}

/// What the meter saw during one run (kept in results.json per run).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HostReading {
    /// Holes over the recording threshold in the run's span (window start to last reply).
    pub holes: u64,
    /// The longest of them, ms (0 without any).
    pub longest_hole_ms: f64,
    /// Their sum, ms.
    pub total_hole_ms: f64,
    /// `(seconds into the window, ms)` of the first holes (at most 50).
    pub hole_list: Vec<(f64, f64)>,
    /// The host's steal time over the run's span, ms (all CPUs; none where unreadable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steal_ms: Option<f64>,
    /// A slow request's latency: over the run's own p99 by 20 ms, ms.
    pub slow_over_ms: f64,
    /// Requests slower than that.
    pub slow_requests: u64,
    /// Of those, the ones whose span overlaps a hole.
    pub slow_in_holes: u64,
}

impl HostReading {
    /// The reading of a run's holes (re-timed from its window start), its steal and its
    /// requests.
    #[must_use]
    pub fn of(
        holes: &[Hole],
        steal_ms: Option<f64>,
        requests: &[RequestTime],
        p99_ns: u64,
    ) -> Self {
        let slow_over_ns = p99_ns + SLOW_OVER_P99.as_nanos() as u64;
        let slow = slow_against_holes(requests, holes, slow_over_ns);
        let ms = |ns: u64| ns as f64 / 1e6;
        Self {
            holes: holes.len() as u64,
            longest_hole_ms: ms(holes.iter().map(|h| h.length_ns).max().unwrap_or(0)),
            total_hole_ms: ms(holes.iter().map(|h| h.length_ns).sum()),
            hole_list: holes
                .iter()
                .take(LISTED_HOLES)
                .map(|hole| (hole.start_ns as f64 / 1e9, ms(hole.length_ns)))
                .collect(),
            steal_ms,
            slow_over_ms: ms(slow_over_ns),
            slow_requests: slow.slow,
            slow_in_holes: slow.in_holes,
        }
    }
}

/// The meter threads: started once per experiment, holes read per run.
pub struct HiccupMeter {
    epoch: Instant,
    holes: Arc<Mutex<Vec<Hole>>>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// Each meter's last wake-up, ns after the epoch: a hole still open when a run is read
    /// counts up to then.
    last_wakes: Vec<Arc<AtomicU64>>,
    threshold_ns: u64,
    /// `real-time (SCHED_FIFO 50), one pinned to each of CPUs 0, 1` or `normal (…)`.
    pub priority: String,
}

/// The CPUs the calling thread may run on (none where the mask cannot be read).
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: an all-zero cpu_set_t is a valid empty set; the size passed is its size.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let result =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if result != 0 {
        return Vec::new();
    }
    // SAFETY: `set` was filled by sched_getaffinity; the index is below CPU_SETSIZE.
    (0..libc::CPU_SETSIZE as usize)
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect()
}

/// Asks for real-time priority for the calling thread: its description.
fn try_realtime() -> String {
    let param = libc::sched_param { sched_priority: 50 };
    // SAFETY: `param` is a valid sched_param; pid 0 names the calling thread.
    let result = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if result == 0 {
        "real-time (SCHED_FIFO 50)".to_string()
    } else {
        format!(
            "normal (real-time refused: {})",
            std::io::Error::last_os_error()
        )
    }
}

impl HiccupMeter {
    /// Starts the meters, one pinned to each CPU (one unpinned where the CPUs cannot be
    /// read), recording holes longer than `threshold`.
    pub fn start(threshold: Duration) -> Result<Self, String> {
        let epoch = Instant::now();
        let holes = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let cpus = allowed_cpus();
        let pins: Vec<Option<usize>> = if cpus.is_empty() {
            vec![None]
        } else {
            cpus.iter().copied().map(Some).collect()
        };
        let (tell, told) = mpsc::channel();
        let mut threads = Vec::new();
        let mut last_wakes = Vec::new();
        for pin in &pins {
            let (holes, stop, tell, pin) =
                (Arc::clone(&holes), Arc::clone(&stop), tell.clone(), *pin);
            let last_wake = Arc::new(AtomicU64::new(epoch.elapsed().as_nanos() as u64));
            last_wakes.push(Arc::clone(&last_wake));
            let thread = std::thread::Builder::new()
                .name("hiccup-meter".to_string())
                .spawn(move || {
                    let pinned = pin.map(|cpu| pin_current_thread(&[cpu]).is_ok());
                    let _ = tell.send((try_realtime(), pinned));
                    let mut detector = HoleDetector::new(PERIOD, threshold);
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(PERIOD);
                        let at = epoch.elapsed().as_nanos() as u64;
                        last_wake.store(at, Ordering::Relaxed);
                        if let Some(hole) = detector.wake(at) {
                            let mut kept = holes.lock().unwrap_or_else(|e| e.into_inner());
                            if kept.len() < MAX_HOLES {
                                kept.push(hole);
                            }
                        }
                    }
                })
                .map_err(|error| format!("hiccup meter thread: {error}"))?;
            threads.push(thread);
        }
        let mut priorities = Vec::new();
        let mut unpinned = 0;
        for _ in &pins {
            let (priority, pinned) = told
                .recv()
                .map_err(|_| "hiccup meter thread ended at its start".to_string())?;
            priorities.push(priority);
            unpinned += usize::from(pinned != Some(true));
        }
        priorities.sort();
        priorities.dedup();
        let placement = if cpus.is_empty() {
            "one meter, unpinned (the CPU mask could not be read)".to_string()
        } else {
            format!(
                "one meter pinned to each of CPUs {}{}",
                cpus.iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
                if unpinned > 0 {
                    format!(" ({unpinned} could not be pinned)")
                } else {
                    String::new()
                }
            )
        };
        Ok(Self {
            epoch,
            holes,
            stop,
            threads,
            last_wakes,
            threshold_ns: threshold.as_nanos() as u64,
            priority: format!("{}; {placement}", priorities.join(" / ")),
        })
    }

    /// The union of every meter's holes overlapping `[from, to)`, timed from `from`, with
    /// the holes still open now (a meter held off since before `to`).
    #[must_use]
    pub fn holes_between(&self, from: Instant, to: Instant) -> Vec<Hole> {
        let at = |instant: Instant| instant.saturating_duration_since(self.epoch).as_nanos() as u64;
        let now = at(Instant::now());
        let mut holes = self.holes.lock().unwrap_or_else(|e| e.into_inner()).clone();
        holes.extend(self.last_wakes.iter().filter_map(|last| {
            open_hole(
                last.load(Ordering::Relaxed),
                now,
                PERIOD.as_nanos() as u64,
                self.threshold_ns,
            )
        }));
        holes_within(&merged(&holes), at(from), at(to))
    }
}

impl Drop for HiccupMeter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_late_wake_up_is_a_hole_from_its_due_time() {
        // Wakes every ~1.1 ms, then one 31 ms after the previous (30 ms late), then one 6 ms
        // after (5 ms late: not over a 5 ms threshold), then 7 ms after (6 ms late).
        let wakes = [0, 1_100_000, 2_200_000, 33_200_000, 39_200_000, 46_200_000];
        let holes = holes_in(&wakes, PERIOD, Duration::from_millis(5));
        assert_eq!(
            holes,
            vec![
                Hole {
                    start_ns: 3_200_000,
                    length_ns: 30 * MS
                },
                Hole {
                    start_ns: 40_200_000,
                    length_ns: 6 * MS
                },
            ]
        );
        assert!(holes_in(&wakes[..3], PERIOD, Duration::from_millis(5)).is_empty());
        // A meter held off since its last wake-up: the hole is open, reported up to now.
        let mut detector = HoleDetector::new(PERIOD, Duration::from_millis(5));
        assert_eq!(detector.open_at(0), None);
        detector.wake(10 * MS);
        assert_eq!(detector.open_at(15 * MS), None);
        assert_eq!(
            detector.open_at(31 * MS),
            Some(Hole {
                start_ns: 11 * MS,
                length_ns: 20 * MS
            })
        );
    }

    #[test]
    fn holes_are_placed_in_a_window_and_clipped_to_it() {
        let holes = [
            Hole {
                start_ns: 5 * MS,
                length_ns: 10 * MS,
            },
            Hole {
                start_ns: 50 * MS,
                length_ns: 10 * MS,
            },
            Hole {
                start_ns: 200 * MS,
                length_ns: 10 * MS,
            },
        ];
        let within = holes_within(&holes, 10 * MS, 100 * MS);
        assert_eq!(
            within,
            vec![
                Hole {
                    start_ns: 0,
                    length_ns: 5 * MS
                },
                Hole {
                    start_ns: 40 * MS,
                    length_ns: 10 * MS
                },
            ]
        );
    }

    #[test]
    fn two_meters_holes_merge_into_their_union() {
        let hole = |start_ms: u64, length_ms: u64| Hole {
            start_ns: start_ms * MS,
            length_ns: length_ms * MS,
        };
        // CPU 1's hole inside CPU 0's, one overlapping its end, one apart.
        let holes = [hole(100, 40), hole(300, 10), hole(110, 10), hole(130, 20)];
        assert_eq!(merged(&holes), vec![hole(100, 50), hole(300, 10)]);
        assert!(merged(&[]).is_empty());
    }

    #[test]
    fn slow_requests_are_counted_by_overlap_with_a_hole() {
        let request = |scheduled_ms: u64, latency_ms: u64| RequestTime {
            scheduled_ns: scheduled_ms * MS,
            latency_ns: latency_ms * MS,
        };
        let holes = [Hole {
            start_ns: 100 * MS,
            length_ns: 50 * MS,
        }];
        let requests = [
            request(90, 60),  // slow, spans the hole
            request(120, 40), // slow, inside it
            request(160, 40), // slow, after it
            request(40, 59),  // slow, ends 1 ms before it
            request(110, 5),  // in the hole but not slow
        ];
        let count = slow_against_holes(&requests, &holes, 30 * MS);
        assert_eq!(
            count,
            SlowCount {
                slow: 4,
                in_holes: 2
            }
        );
        let reading = HostReading::of(&holes, Some(30.0), &requests, 10 * MS);
        assert_eq!((reading.slow_requests, reading.slow_in_holes), (4, 2));
        assert_eq!(reading.longest_hole_ms, 50.0);
        assert_eq!(reading.slow_over_ms, 30.0);
        assert_eq!(reading.hole_list, vec![(0.1, 50.0)]);
    }

    #[test]
    fn steal_is_the_eighth_number_of_the_cpu_line() {
        let stat = "cpu  10 0 20 300 4 0 1 77 0 0\ncpu0 5 0 10 150 2 0 0 40 0 0\n";
        assert_eq!(parse_steal(stat), Some(77));
        assert_eq!(parse_steal("cpu0 1 2 3\n"), None);
    }
}
