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
//! it, for every dispatch policy; a connection's batch of quiet meta commands pays the fixed
//! cost once, at one draw ([`BatchDraw`]), as one `get` of the same keys does.

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

/// A connection's pipelined batch of quiet meta commands, as emulated service time charges
/// it: the batch's first request pays the model's fixed cost and draws the dispersion; every
/// further one, up to and including the first request that is not a quiet meta command (the
/// `mn` that ends a multiget sent as `mg … q` per key), pays its keys and bytes only, at the
/// same draw. So a multiget sent as one quiet `mg` per key costs what the same keys cost in
/// one `get`, and what the simulator charges one fetch (`const + key × n + byte × bytes`,
/// one draw).
///
/// ```text
///   mg a q ─ fixed + a, draw u      (opens: u kept)
///   mg b q ─ b at u
///   mn     ─ (its bytes) at u       (closes)
///   get c d ─ fixed + c + d, new draw
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BatchDraw {
    /// The open batch's draw, if a batch is open.
    pub open: Option<f64>,
}

impl BatchDraw {
    /// The draw and whether the fixed cost is charged for the next request, `fresh` drawing a
    /// new uniform when no batch is open; the state then holds the batch on if the request is a
    /// `quiet_meta` command, else closes it.
    pub fn next(&mut self, quiet_meta: bool, fresh: impl FnOnce() -> f64) -> (f64, bool) {
        let (u, fixed) = match self.open {
            Some(u) => (u, false),
            None => (fresh(), true),
        };
        self.open = quiet_meta.then_some(u);
        (u, fixed)
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

    /// The next emulated time for a request of `units` in its connection's `batch` (a quiet
    /// meta command's keeps the batch open), and whether the fixed cost was charged
    /// ([`BatchDraw`]).
    pub fn draw_in_batch(
        &mut self,
        units: Units,
        batch: &mut BatchDraw,
        quiet_meta: bool,
    ) -> (Duration, bool) {
        if self.spec.is_zero() {
            return (Duration::ZERO, false);
        }
        let (u, fixed) = batch.next(quiet_meta, || self.unit());
        let spec = if fixed {
            self.spec
        } else {
            CostSpec {
                const_nanos: 0.0,
                ..self.spec
            }
        };
        (
            Duration::from_nanos(spec.sample_nanos(units, u) as u64),
            fixed,
        )
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

    #[test]
    fn a_batch_of_quiet_meta_commands_pays_the_fixed_cost_once_at_one_draw() {
        let spec = CostSpec::parse("const=10us,key=1us").unwrap();
        let mut emulator = Emulator::new(spec, 3);
        let mut batch = BatchDraw::default();
        let one = Units { keys: 1, bytes: 0 };
        let none = Units { keys: 0, bytes: 0 };
        // mg a q, mg b q, mg c q, mn: 10 + 1 + 1 + 1 + 0 µs, the fixed cost once.
        let mut charged = Vec::new();
        for (units, quiet) in [(one, true), (one, true), (one, true), (none, false)] {
            charged.push(emulator.draw_in_batch(units, &mut batch, quiet));
        }
        let total: Duration = charged.iter().map(|(time, _)| *time).sum();
        assert_eq!(total, Duration::from_micros(13));
        let fixed: Vec<bool> = charged.iter().map(|(_, fixed)| *fixed).collect();
        assert_eq!(fixed, [true, false, false, false]);
        assert_eq!(batch, BatchDraw::default(), "mn closes the batch");
        // What a `get a b c` costs.
        let get = Units { keys: 3, bytes: 0 };
        assert_eq!(
            emulator.draw_in_batch(get, &mut batch, false),
            (Duration::from_micros(13), true)
        );
        // Alone, every request pays it (not quiet: each closes what it opened).
        assert_eq!(
            emulator.draw_in_batch(one, &mut batch, false),
            (Duration::from_micros(11), true)
        );
    }

    #[test]
    fn a_batch_shares_one_dispersion_draw_as_one_fetch_does() {
        let spec = CostSpec::parse("const=10us,key=1us,dist=exp").unwrap();
        let mut emulator = Emulator::new(spec, 7);
        let mut batch = BatchDraw::default();
        let one = Units { keys: 1, bytes: 0 };
        let (first, _) = emulator.draw_in_batch(one, &mut batch, true);
        let u = batch.open.expect("the batch is open");
        let (second, fixed) = emulator.draw_in_batch(one, &mut batch, true);
        assert!(!fixed);
        let factor = spec.dispersion.factor(u);
        assert_eq!(first.as_nanos(), (11_000.0 * factor) as u128);
        assert_eq!(second.as_nanos(), (1_000.0 * factor) as u128);
    }
}
