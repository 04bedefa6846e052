//! Backend health and load bookkeeping: the down-host (TKO) tracker, EWMA latency, and the
//! C3-style replica choice. Pure: every method takes the current time as a [`Timestamp`].
//!
//! ```text
//!              success                    failure × limit
//!   ┌────┐ ◄──────────── ┌─────────┐ ◄──────────────── ┌──────┐
//!   │ Up │               │ Probing │                   │ Down │
//!   └────┘ ──────────────►└─────────┘ ───────────────► └──────┘
//!       failure × limit   (one request allowed   failure     ▲ retry_after elapsed
//!        → Down            after retry_after)    → Down ─────┘   → Probing
//! ```

/// A point in time, in nanoseconds from an arbitrary origin chosen by the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// From nanoseconds.
    pub const fn from_nanos(nanos: u64) -> Self {
        Timestamp(nanos)
    }

    /// Nanoseconds since the caller's origin.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// `self + nanos`, saturating.
    pub const fn plus_nanos(self, nanos: u64) -> Self {
        Timestamp(self.0.saturating_add(nanos))
    }

    /// Nanoseconds from `earlier` to `self` (0 if `earlier` is later).
    pub const fn nanos_since(self, earlier: Timestamp) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

/// Default consecutive failures that mark a backend down (twemproxy's `server_failure_limit`
/// default is 2; we are a little more tolerant of a single slow reply).
pub const DEFAULT_FAILURE_LIMIT: u32 = 3;
/// Default wait before a down backend gets a probe request (twemproxy's
/// `server_retry_timeout` default is 30 s; a cache tier wants its server back sooner).
pub const DEFAULT_RETRY_AFTER_NANOS: u64 = 1_000_000_000;

/// Settings of a [`HealthTracker`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthSettings {
    /// Consecutive failures (errors or timeouts) that mark the backend down.
    pub failure_limit: u32,
    /// How long a down backend is skipped before one probe request is let through.
    pub retry_after_nanos: u64,
}

impl Default for HealthSettings {
    fn default() -> Self {
        HealthSettings {
            failure_limit: DEFAULT_FAILURE_LIMIT,
            retry_after_nanos: DEFAULT_RETRY_AFTER_NANOS,
        }
    }
}

/// Where a backend stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthState {
    /// Serving; `consecutive_failures` < limit.
    Up {
        /// Failures since the last success.
        consecutive_failures: u32,
    },
    /// Skipped until `retry_at`.
    Down {
        /// When a probe may be sent.
        retry_at: Timestamp,
    },
    /// One probe is in flight; other requests still skip the backend.
    Probing,
}

/// What a recorded outcome changed, so the runtime can log and count transitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthTransition {
    /// No state change worth reporting.
    None,
    /// The backend was just marked down.
    MarkedDown,
    /// A down backend answered its probe and is back.
    Revived,
}

/// Down-host (TKO) tracker of one backend.
#[derive(Debug, Clone)]
pub struct HealthTracker {
    settings: HealthSettings,
    state: HealthState,
}

impl HealthTracker {
    /// A tracker for a backend that starts up.
    pub fn new(settings: HealthSettings) -> Self {
        HealthTracker {
            settings,
            state: HealthState::Up {
                consecutive_failures: 0,
            },
        }
    }

    /// Current state.
    pub fn state(&self) -> HealthState {
        self.state
    }

    /// True when ordinary requests may go to this backend.
    pub fn is_up(&self) -> bool {
        matches!(self.state, HealthState::Up { .. })
    }

    /// Asks to send a request at `now`. Returns true if it may be sent: always when up; once
    /// (as the probe) when down and the retry time has come.
    pub fn try_acquire(&mut self, now: Timestamp) -> bool {
        match self.state {
            HealthState::Up { .. } => true,
            HealthState::Down { retry_at } if now >= retry_at => {
                self.state = HealthState::Probing;
                true
            }
            HealthState::Down { .. } | HealthState::Probing => false,
        }
    }

    /// True if [`HealthTracker::try_acquire`] would succeed at `now` (no state change).
    pub fn would_accept(&self, now: Timestamp) -> bool {
        match self.state {
            HealthState::Up { .. } => true,
            HealthState::Down { retry_at } => now >= retry_at,
            HealthState::Probing => false,
        }
    }

    /// Records that a request let through by [`HealthTracker::try_acquire`] ended with no
    /// verdict (its caller gave up, e.g. the client disconnected). A probe in that state
    /// would otherwise leave the backend `Probing` forever; it becomes retryable at `now`.
    pub fn record_abandoned(&mut self, now: Timestamp) {
        if self.state == HealthState::Probing {
            self.state = HealthState::Down { retry_at: now };
        }
    }

    /// Records a reply.
    pub fn record_success(&mut self) -> HealthTransition {
        let was_down = !self.is_up();
        self.state = HealthState::Up {
            consecutive_failures: 0,
        };
        if was_down {
            HealthTransition::Revived
        } else {
            HealthTransition::None
        }
    }

    /// Records an error or timeout at `now`.
    pub fn record_failure(&mut self, now: Timestamp) -> HealthTransition {
        let retry_at = now.plus_nanos(self.settings.retry_after_nanos);
        match self.state {
            HealthState::Up {
                consecutive_failures,
            } => {
                let failures = consecutive_failures + 1;
                if failures >= self.settings.failure_limit.max(1) {
                    self.state = HealthState::Down { retry_at };
                    HealthTransition::MarkedDown
                } else {
                    self.state = HealthState::Up {
                        consecutive_failures: failures,
                    };
                    HealthTransition::None
                }
            }
            HealthState::Probing | HealthState::Down { .. } => {
                self.state = HealthState::Down { retry_at };
                HealthTransition::None
            }
        }
    }
}

/// Default EWMA weight of a new sample.
pub const DEFAULT_EWMA_ALPHA: f64 = 0.1;

/// Exponentially weighted moving average of a latency, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ewma {
    alpha: f64,
    value: Option<f64>,
}

impl Ewma {
    /// An empty average with weight `alpha` (0 < alpha ≤ 1) for each new sample.
    pub fn new(alpha: f64) -> Self {
        Ewma {
            alpha: alpha.clamp(f64::MIN_POSITIVE, 1.0),
            value: None,
        }
    }

    /// Adds a sample; the first sample sets the value.
    pub fn observe(&mut self, sample: f64) {
        self.value = Some(match self.value {
            None => sample,
            Some(current) => current + self.alpha * (sample - current),
        });
    }

    /// The current average, if any sample was seen.
    pub fn value(&self) -> Option<f64> {
        self.value
    }
}

impl Default for Ewma {
    fn default() -> Self {
        Ewma::new(DEFAULT_EWMA_ALPHA)
    }
}

/// What the replica chooser knows of one backend.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BackendLoad {
    /// Requests sent and not yet answered.
    pub outstanding: u32,
    /// The work those requests are estimated to need, in the runtime's unit (`None`: not
    /// estimated). The simulator sums each in-flight fetch's mean service time in nanoseconds
    /// under its cost model (an oracle of T_S and T_L); the client and proxy count each one's
    /// keys plus a fixed cost per fetch in keys (`[pool] fetch_cost_keys`).
    pub outstanding_work: Option<f64>,
    /// The part of `outstanding_work` that a fetch of the first class would overtake: the
    /// work of fetches of a lower class (priority above 0) that are not in service (not
    /// started, or served with their reply on its way). Only the simulator's oracle view knows
    /// it (it knows which fetch is in service); the client and the proxy say `None` (a
    /// count of their demoted fetches in flight, all but one taken as waiting, made
    /// `size-rel+cover` worse in the simulator: experiments/tailx, `sim-v13-first-class`).
    pub demoted_work: Option<f64>,
    /// EWMA of reply latency in nanoseconds (`None` before the first reply).
    pub ewma_nanos: Option<f64>,
    /// False when the down-host tracker says to skip it.
    pub available: bool,
}

/// C3's expected cost of sending one more request: `(outstanding + 1)³ × EWMA latency`.
/// The cube is C3's: a linear queue term lets a backend whose estimate is a few times lower
/// than the others' take every request until its queue is that many times longer, and the
/// others, sent nothing, keep their old estimates (the herd behaviour C3 was designed
/// against); the cube caps that queue at the cube root of the ratio. A backend with no latency
/// sample yet is treated as the cheapest (so it gets measured).
pub fn expected_cost(load: &BackendLoad) -> f64 {
    let latency = load.ewma_nanos.unwrap_or(0.0);
    let queue = f64::from(load.outstanding) + 1.0;
    queue * queue * queue * latency
}

/// Default half-life of a latency estimate that no reply has refreshed: after it, half of the
/// estimate's distance from the pool's mean is forgotten.
pub const DEFAULT_ESTIMATE_HALF_LIFE_NANOS: u64 = 500_000_000;

/// One backend's latency estimate and how long ago a reply last refreshed it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatencyEstimate {
    /// EWMA of reply latency, nanoseconds.
    pub ewma_nanos: f64,
    /// Nanoseconds since the last reply.
    pub age_nanos: u64,
}

/// The weight an estimate `age_nanos` old still carries: `0.5^(age / half_life)` (1 when the
/// half-life is 0: estimates never go stale).
pub fn freshness(age_nanos: u64, half_life_nanos: u64) -> f64 {
    if half_life_nanos == 0 {
        return 1.0;
    }
    (-(age_nanos as f64 / half_life_nanos as f64) * std::f64::consts::LN_2).exp()
}

/// The estimates of a pool's backends with stale ones pulled toward the pool's mean: each
/// becomes `mean + (ewma − mean) × freshness(age)`, where the mean weighs every estimate by
/// its own freshness (the plain mean when all are stale). A backend the chooser stopped
/// sending to gets no reply and so no new sample: without this its estimate would stay at
/// whatever it was when it was left (high, or it would not have been left) for as long as
/// another backend is cheaper, and an idle pool would resume with the estimates of its last
/// busy moment. `None` (never measured) stays `None`.
pub fn settle_estimates(
    estimates: &[Option<LatencyEstimate>],
    half_life_nanos: u64,
    out: &mut Vec<Option<f64>>,
) {
    out.clear();
    let (mut weighted, mut weights, mut plain, mut measured) = (0.0, 0.0, 0.0, 0usize);
    for estimate in estimates.iter().flatten() {
        let weight = freshness(estimate.age_nanos, half_life_nanos);
        weighted += weight * estimate.ewma_nanos;
        weights += weight;
        plain += estimate.ewma_nanos;
        measured += 1;
    }
    if measured == 0 {
        out.extend(estimates.iter().map(|_| None));
        return;
    }
    let mean = if weights > f64::MIN_POSITIVE {
        weighted / weights
    } else {
        plain / measured as f64
    };
    out.extend(estimates.iter().map(|estimate| {
        estimate.map(|estimate| {
            let weight = freshness(estimate.age_nanos, half_life_nanos);
            mean + (estimate.ewma_nanos - mean) * weight
        })
    }));
}

/// Picks, among `candidates` (in preference order, owner first), the available backend with the
/// lowest [`expected_cost`]; ties go to the earlier candidate. `None` if none is available.
pub fn choose_replica(
    candidates: &[usize],
    mut load_of: impl FnMut(usize) -> BackendLoad,
) -> Option<usize> {
    let mut best: Option<(usize, f64)> = None;
    for &candidate in candidates {
        let load = load_of(candidate);
        if !load.available {
            continue;
        }
        let cost = expected_cost(&load);
        match best {
            Some((_, best_cost)) if best_cost <= cost => {}
            _ => best = Some((candidate, cost)),
        }
    }
    best.map(|(candidate, _)| candidate)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000_000;

    #[test]
    fn goes_down_after_limit_and_probes_once_after_retry_time() {
        let mut tracker = HealthTracker::new(HealthSettings {
            failure_limit: 2,
            retry_after_nanos: SECOND,
        });
        let start = Timestamp(10);
        assert_eq!(tracker.record_failure(start), HealthTransition::None);
        assert!(tracker.is_up());
        assert_eq!(tracker.record_failure(start), HealthTransition::MarkedDown);
        assert!(!tracker.try_acquire(start.plus_nanos(SECOND - 1)));
        assert!(tracker.try_acquire(start.plus_nanos(SECOND)));
        // Only one probe at a time.
        assert!(!tracker.try_acquire(start.plus_nanos(SECOND + 5)));
        assert_eq!(tracker.record_success(), HealthTransition::Revived);
        assert!(tracker.try_acquire(start.plus_nanos(SECOND + 6)));
    }

    #[test]
    fn failed_probe_pushes_retry_time_out() {
        let mut tracker = HealthTracker::new(HealthSettings {
            failure_limit: 1,
            retry_after_nanos: 100,
        });
        tracker.record_failure(Timestamp(0));
        assert!(tracker.try_acquire(Timestamp(100)));
        tracker.record_failure(Timestamp(150));
        assert_eq!(
            tracker.state(),
            HealthState::Down {
                retry_at: Timestamp(250)
            }
        );
        assert!(!tracker.would_accept(Timestamp(249)));
        assert!(tracker.would_accept(Timestamp(250)));
    }

    #[test]
    fn abandoned_probe_makes_the_backend_retryable_again() {
        let mut tracker = HealthTracker::new(HealthSettings {
            failure_limit: 1,
            retry_after_nanos: 100,
        });
        tracker.record_failure(Timestamp(0));
        assert!(tracker.try_acquire(Timestamp(100)));
        assert!(!tracker.try_acquire(Timestamp(101)));
        tracker.record_abandoned(Timestamp(102));
        assert!(tracker.try_acquire(Timestamp(102)));
        // Abandoning an ordinary request of an up backend changes nothing.
        let mut up = HealthTracker::new(HealthSettings::default());
        up.record_abandoned(Timestamp(5));
        assert!(up.is_up());
    }

    #[test]
    fn success_resets_the_failure_count() {
        let mut tracker = HealthTracker::new(HealthSettings {
            failure_limit: 2,
            retry_after_nanos: 1,
        });
        tracker.record_failure(Timestamp(0));
        tracker.record_success();
        tracker.record_failure(Timestamp(0));
        assert!(tracker.is_up());
    }

    #[test]
    fn ewma_moves_toward_samples() {
        let mut ewma = Ewma::new(0.5);
        assert_eq!(ewma.value(), None);
        ewma.observe(100.0);
        ewma.observe(200.0);
        assert_eq!(ewma.value(), Some(150.0));
    }

    #[test]
    fn replica_choice_weighs_queue_by_latency_and_skips_unavailable() {
        let loads = [
            BackendLoad {
                outstanding: 4,
                outstanding_work: None,
                demoted_work: None,
                ewma_nanos: Some(100.0),
                available: true,
            },
            BackendLoad {
                outstanding: 0,
                outstanding_work: None,
                demoted_work: None,
                ewma_nanos: Some(300.0),
                available: true,
            },
            BackendLoad {
                outstanding: 0,
                outstanding_work: None,
                demoted_work: None,
                ewma_nanos: Some(10.0),
                available: false,
            },
        ];
        // 5³·100 = 12500 vs 1·300 = 300 → backend 1.
        assert_eq!(choose_replica(&[0, 1, 2], |index| loads[index]), Some(1));
        assert_eq!(choose_replica(&[2], |index| loads[index]), None);
        // Equal cost: preference order wins.
        let equal = BackendLoad {
            outstanding: 1,
            outstanding_work: None,
            demoted_work: None,
            ewma_nanos: Some(50.0),
            available: true,
        };
        assert_eq!(choose_replica(&[3, 7], |_| equal), Some(3));
    }

    #[test]
    fn the_queue_term_is_cubic_so_a_cheaper_estimate_buys_only_a_short_queue() {
        let load = |outstanding, ewma| BackendLoad {
            outstanding,
            outstanding_work: None,
            demoted_work: None,
            ewma_nanos: Some(ewma),
            available: true,
        };
        let loads = |fast_outstanding| [load(fast_outstanding, 100.0), load(0, 1_000.0)];
        // An estimate 10x lower: the fast backend takes the next request while its queue is
        // under 10^(1/3) ≈ 2.15 (a linear term would allow 9).
        assert_eq!(choose_replica(&[0, 1], |b| loads(1)[b]), Some(0));
        assert_eq!(choose_replica(&[0, 1], |b| loads(2)[b]), Some(1));
        assert_eq!(expected_cost(&load(2, 100.0)), 2_700.0);
    }

    #[test]
    fn stale_estimates_drift_to_the_fresh_mean_and_fresh_ones_stay() {
        let half_life = 1_000;
        assert_eq!(freshness(0, half_life), 1.0);
        assert!((freshness(1_000, half_life) - 0.5).abs() < 1e-12);
        assert_eq!(freshness(123, 0), 1.0, "a zero half-life never ages");
        let estimates = [
            Some(LatencyEstimate {
                ewma_nanos: 100.0,
                age_nanos: 0,
            }),
            Some(LatencyEstimate {
                ewma_nanos: 100_000.0,
                age_nanos: 40 * half_life,
            }),
            None,
        ];
        let mut out = Vec::new();
        settle_estimates(&estimates, half_life, &mut out);
        let fresh = out[0].expect("measured");
        let stale = out[1].expect("measured");
        assert!((fresh - 100.0).abs() < 1e-3, "fresh estimate kept: {fresh}");
        assert!(
            (stale - 100.0).abs() < 1e-3,
            "stale one near the fresh: {stale}"
        );
        assert_eq!(out[2], None);
        // Everything stale: the plain mean.
        let all_stale = [
            estimates[1],
            estimates[1].map(|e| LatencyEstimate {
                ewma_nanos: 0.0,
                ..e
            }),
        ];
        settle_estimates(&all_stale, half_life, &mut out);
        assert!(out
            .iter()
            .all(|e| (e.expect("measured") - 50_000.0).abs() < 1.0));
        // No half-life: untouched.
        settle_estimates(&estimates, 0, &mut out);
        assert_eq!(out, vec![Some(100.0), Some(100_000.0), None]);
    }
}
