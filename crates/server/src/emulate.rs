//! Emulated time (experimental): the sleep mechanics behind `--emulate-service` and
//! `--emulate-network`, and a measurement of how accurately this machine sleeps.
//!
//! ```text
//!   CostSpec (tailtrim_policy::costspec, shared with the simulator)
//!      │ sample_nanos(Units{keys, bytes}, u)   u from a per-thread xorshift stream
//!      ▼
//!   Emulator::hold(units) ─► clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, start + t)
//!                            (the thread's timer slack set to 1 ns first: PR_SET_TIMERSLACK)
//!   measure_accuracy(requested, sleepers, samples) ─► achieved − requested, p50/p99/max
//! ```
//!
//! A sleeping thread costs no CPU, so emulated workers and servers fit on few cores; the error
//! of each sleep is what [`measure_accuracy`] reports. The request path uses it in
//! `Runtime::complete` ([`crate::runtime`]): one hold per request, on the worker that completes
//! it, for every dispatch policy.

use std::time::{Duration, Instant};

use tailtrim_policy::costspec::{CostSpec, Units};

/// Sets the calling thread's timer slack to 1 ns (the default 50 µs slack lets the kernel
/// coalesce wake-ups and makes short sleeps overshoot). Returns false if the kernel refused.
pub fn set_min_timer_slack() -> bool {
    // SAFETY: prctl with PR_SET_TIMERSLACK takes one integer argument and touches no memory.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) == 0 }
}

/// Sleeps until `deadline` on the monotonic clock (absolute, so an interrupted sleep resumes
/// toward the same instant).
pub fn sleep_until(deadline: Instant) {
    let now = Instant::now();
    if deadline <= now {
        return;
    }
    let mut target = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut target) };
    let wait = deadline - now;
    let total = target.tv_nsec as u128 + wait.subsec_nanos() as u128;
    target.tv_sec += wait.as_secs() as libc::time_t + (total / 1_000_000_000) as libc::time_t;
    target.tv_nsec = (total % 1_000_000_000) as libc::c_long;
    loop {
        // SAFETY: the timespec is valid for the call; the remainder pointer may be null with
        // TIMER_ABSTIME.
        let result = unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &target,
                std::ptr::null_mut(),
            )
        };
        if result != libc::EINTR {
            return;
        }
    }
}

/// Holds a thread for times drawn from a cost model.
#[derive(Debug, Clone)]
pub struct Emulator {
    spec: CostSpec,
    state: u64,
}

impl Emulator {
    /// An emulator drawing from `spec`, its random stream seeded by `seed` (one per thread).
    pub fn new(spec: CostSpec, seed: u64) -> Emulator {
        Emulator {
            spec,
            state: seed | 1,
        }
    }

    /// The model.
    pub fn spec(&self) -> &CostSpec {
        &self.spec
    }

    fn unit(&mut self) -> f64 {
        // xorshift64*: enough for dispersion draws, no allocation, no lock.
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        let bits = self.state.wrapping_mul(0x2545_F491_4F6C_DD1D);
        (bits >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The next emulated time for a request of `units`.
    pub fn draw(&mut self, units: Units) -> Duration {
        if self.spec.is_zero() {
            return Duration::ZERO;
        }
        let u = self.unit();
        Duration::from_nanos(self.spec.sample_nanos(units, u) as u64)
    }

    /// Sleeps for the next emulated time counted from `since` (e.g. when the request started
    /// executing, so the real work is part of the emulated time). Returns the time drawn.
    pub fn hold(&mut self, units: Units, since: Instant) -> Duration {
        let time = self.draw(units);
        if !time.is_zero() {
            sleep_until(since + time);
        }
        time
    }
}

/// Overshoot (achieved − requested) of sleeps, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Accuracy {
    /// Requested sleep.
    pub requested_us: f64,
    /// Threads sleeping at once.
    pub sleepers: usize,
    /// Whether the timer slack was set to 1 ns.
    pub min_slack: bool,
    /// Sleeps measured.
    pub samples: usize,
    /// Median overshoot.
    pub p50_us: f64,
    /// 99th percentile overshoot.
    pub p99_us: f64,
    /// Largest overshoot.
    pub max_us: f64,
}

/// Runs `sleepers` threads that each sleep `requested` back to back `samples` times (absolute
/// deadlines from the previous wake-up) and reports the overshoot over all of them.
pub fn measure_accuracy(
    requested: Duration,
    sleepers: usize,
    samples: usize,
    min_slack: bool,
) -> Accuracy {
    let threads: Vec<_> = (0..sleepers.max(1))
        .map(|_| {
            std::thread::spawn(move || {
                if min_slack {
                    set_min_timer_slack();
                }
                let mut overshoots = Vec::with_capacity(samples);
                for _ in 0..samples {
                    let start = Instant::now();
                    sleep_until(start + requested);
                    let achieved = start.elapsed();
                    overshoots.push(achieved.saturating_sub(requested).as_nanos() as f64 / 1e3);
                }
                overshoots
            })
        })
        .collect();
    let mut all: Vec<f64> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap_or_default())
        .collect();
    all.sort_by(f64::total_cmp);
    let at = |q: f64| {
        if all.is_empty() {
            0.0
        } else {
            all[((all.len() - 1) as f64 * q).round() as usize]
        }
    };
    Accuracy {
        requested_us: requested.as_nanos() as f64 / 1e3,
        sleepers: sleepers.max(1),
        min_slack,
        samples: all.len(),
        p50_us: at(0.5),
        p99_us: at(0.99),
        max_us: all.last().copied().unwrap_or(0.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleeps_never_end_early_and_draws_follow_the_spec() {
        let accuracy = measure_accuracy(Duration::from_micros(200), 2, 20, true);
        assert_eq!(accuracy.samples, 40);
        // Overshoot is never negative: an absolute deadline is never woken before.
        assert!(accuracy.p50_us >= 0.0 && accuracy.max_us >= accuracy.p99_us);
        let mut emulator = Emulator::new(CostSpec::parse("const=10us,key=1us").unwrap(), 3);
        let units = Units { keys: 5, bytes: 0 };
        assert_eq!(emulator.draw(units), Duration::from_micros(15));
        let start = Instant::now();
        emulator.hold(units, start);
        assert!(start.elapsed() >= Duration::from_micros(15));
        let mut exp = Emulator::new(CostSpec::parse("const=10us,dist=exp").unwrap(), 3);
        let mean = (0..20_000)
            .map(|_| exp.draw(units).as_nanos() as f64)
            .sum::<f64>()
            / 20_000.0;
        assert!((mean - 10_000.0).abs() < 300.0, "{mean}");
    }
}
