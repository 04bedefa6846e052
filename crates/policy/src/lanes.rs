//! Which of a backend's connections carries the next request.
//!
//! ```text
//!   connections 0 … n−1, each with its requests in flight and the age of its oldest
//!   start = rotating counter mod n
//!     round-robin  ──► start
//!     least-loaded ──► scan n from start ──► first with the fewest in flight
//!                                            (an idle one ends the scan at once)
//!     avoid-slow   ──► start, unless its oldest request is older than
//!                      max(1 ms, 4 × the backend's typical response time) (stuck)
//!                      ──► the fewest in flight among those not stuck (all stuck: least-loaded)
//! ```
//!
//! The memcached protocol answers a connection's requests in the order they were sent, so a
//! request queued behind a slow one (a large value, a large multiget) waits for it even when
//! the server serves it at once — and where a server pins each connection to a worker, the
//! connection's worker is busy with the slow one too. Round robin puts a request on such a
//! connection once in n; the least-loaded choice avoids it whenever another connection is
//! idler. Ties go round robin from the rotating start, so connections equally idle share the
//! load as round robin would. Under a saturating closed loop the requests round robin stacks
//! on one connection share writes and reads, and least-loaded, which spreads them, carried
//! less (`experiments/proxy/connection-choice/`). `avoid-slow` keeps round robin's pick (and
//! its batching) while the requests in flight are fresh and leaves a connection only once
//! its oldest reply is late. Round robin stays the default.

/// How a backend's connection is chosen for the next request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConnectionChoice {
    /// Round robin, skipping a connection stuck behind a slow reply: the next connection
    /// round robin unless its oldest request in flight is older than [`stuck_after_nanos`];
    /// then the least-loaded of the connections not stuck ([`avoid_slow`]). Requests stacked
    /// on a connection behind fresh ones still share its writes and reads as round robin's
    /// do, and a request does not wait behind a reply already late.
    AvoidSlow,
    /// The connection with the fewest requests in flight, ties round robin: a request does not
    /// wait behind a slow reply while another connection is idle, at the price of the
    /// batching a busy connection gives (several requests in one write and one read).
    LeastLoaded,
    /// The next connection round robin, whatever it carries (twemproxy's way; default).
    #[default]
    RoundRobin,
}

impl ConnectionChoice {
    /// The names `parse` accepts, in the order of the variants.
    pub const NAMES: [&'static str; 3] = ["avoid-slow", "least-loaded", "round-robin"];

    /// `avoid-slow`, `least-loaded` or `round-robin`.
    pub fn parse(name: &str) -> Result<Self, String> {
        match name {
            "avoid-slow" => Ok(ConnectionChoice::AvoidSlow),
            "least-loaded" => Ok(ConnectionChoice::LeastLoaded),
            "round-robin" => Ok(ConnectionChoice::RoundRobin),
            other => Err(format!(
                "connection choice {other:?}: expected \"avoid-slow\", \"least-loaded\" or \"round-robin\""
            )),
        }
    }

    /// The name `parse` reads back.
    pub fn name(self) -> &'static str {
        match self {
            ConnectionChoice::AvoidSlow => "avoid-slow",
            ConnectionChoice::LeastLoaded => "least-loaded",
            ConnectionChoice::RoundRobin => "round-robin",
        }
    }

    /// The connection, of `count`, for the request whose rotating counter is `start`:
    /// `lane(k)` tells what connection `k` carries (asked only by the choices that look, and
    /// for [`Lane::oldest_age_nanos`] only by `avoid-slow`), `typical_nanos()` the backend's
    /// typical response time (asked only when a connection's oldest request is past the
    /// floor).
    pub fn choose(
        self,
        start: usize,
        count: usize,
        lane: impl Fn(usize) -> Lane,
        typical_nanos: impl FnOnce() -> Option<f64>,
    ) -> usize {
        match self {
            ConnectionChoice::AvoidSlow => avoid_slow(start, count, lane, typical_nanos),
            ConnectionChoice::LeastLoaded => least_loaded(start, count, |k| lane(k).in_flight),
            ConnectionChoice::RoundRobin => start % count.max(1),
        }
    }

    /// Whether the choice looks at the age of a connection's oldest request in flight.
    pub fn reads_ages(self) -> bool {
        self == ConnectionChoice::AvoidSlow
    }
}

/// What the choice sees of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Lane {
    /// Requests in flight (queued or waiting for their reply).
    pub in_flight: usize,
    /// How long the oldest of them has waited (0 when none, or when not asked for).
    pub oldest_age_nanos: u64,
}

/// A connection is stuck only once its oldest request is older than this, whatever the
/// backend's typical response time: 1 ms. A memcached get over loopback is answered in tens
/// of µs, so µs-scale jitter (a wake-up, a batch of replies read late) stays well below it,
/// and round robin's batching is kept; the replies worth dodging — a large value or a large
/// multiget, milliseconds of service on the emulated testbed (a 500 KB value, 20 ms) — pass
/// it early in their life.
pub const STUCK_FLOOR_NANOS: u64 = 1_000_000;

/// A connection is stuck once its oldest request is older than this many of the backend's
/// typical response times (the EWMA of its reply latency, which the replica choice uses): 4.
/// Replies are answered in order, so a request's latency includes the wait behind those sent
/// before it on its connection; the EWMA, measured the same way, grows with the stacking a
/// saturating closed loop makes, and a reply 4 typical latencies old is in the tail (for
/// exponential latency e^−4 ≈ 2 % of replies get that old) — rare enough that round robin's
/// batching is kept nearly always, early enough that most of a slow reply's life is dodged.
pub const STUCK_MULTIPLE: f64 = 4.0;

/// The age past which a connection's oldest request makes it stuck, for a backend whose
/// typical response time is `typical_nanos` (`None` before its first reply: the floor).
pub fn stuck_after_nanos(typical_nanos: Option<f64>) -> u64 {
    let scaled = typical_nanos.map_or(0.0, |typical| typical * STUCK_MULTIPLE);
    // `as` saturates (and gives 0 for NaN); the floor bounds it from below.
    (scaled as u64).max(STUCK_FLOOR_NANOS)
}

/// Round robin, skipping a connection stuck behind a slow reply: connection `start % count`
/// unless its oldest request (`lane(k)`) is older than [`stuck_after_nanos`] of
/// `typical_nanos()`; then the connection with the fewest requests in flight among those
/// not stuck (scanning from the next one, an idle one ending the scan), or, when every one
/// is stuck, [`least_loaded`] over all. `typical_nanos` is asked at most once, and only when
/// the round-robin pick's oldest request is past [`STUCK_FLOOR_NANOS`]. `count` 0 gives 0.
pub fn avoid_slow(
    start: usize,
    count: usize,
    lane: impl Fn(usize) -> Lane,
    typical_nanos: impl FnOnce() -> Option<f64>,
) -> usize {
    if count <= 1 {
        return 0;
    }
    let pick = start % count;
    let first = lane(pick);
    if first.in_flight == 0 || first.oldest_age_nanos <= STUCK_FLOOR_NANOS {
        return pick;
    }
    let threshold = stuck_after_nanos(typical_nanos());
    if first.oldest_age_nanos <= threshold {
        return pick;
    }
    let mut best: Option<(usize, usize)> = None;
    for step in 1..count {
        let candidate = (start + step) % count;
        let seen = lane(candidate);
        if seen.in_flight == 0 {
            return candidate;
        }
        if seen.oldest_age_nanos > threshold {
            continue;
        }
        if best.is_none_or(|(_, load)| seen.in_flight < load) {
            best = Some((candidate, seen.in_flight));
        }
    }
    match best {
        Some((candidate, _)) => candidate,
        None => least_loaded(start, count, |k| lane(k).in_flight),
    }
}

/// The connection, of `count`, with the fewest requests in flight (`in_flight(k)`); the scan
/// starts at `start % count` and ends at the first idle connection, ties going to the first
/// met. `count` 0 gives 0.
pub fn least_loaded(start: usize, count: usize, in_flight: impl Fn(usize) -> usize) -> usize {
    if count <= 1 {
        return 0;
    }
    let mut best = start % count;
    let mut best_load = in_flight(best);
    for step in 1..count {
        if best_load == 0 {
            break;
        }
        let candidate = (start + step) % count;
        let load = in_flight(candidate);
        if load < best_load {
            best = candidate;
            best_load = load;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::{
        avoid_slow, least_loaded, stuck_after_nanos, ConnectionChoice, Lane, STUCK_FLOOR_NANOS,
    };

    fn lanes(loads: &[usize]) -> impl Fn(usize) -> Lane + '_ {
        |k| Lane {
            in_flight: loads[k],
            oldest_age_nanos: 0,
        }
    }

    #[test]
    fn round_robin_ignores_what_a_connection_carries() {
        let loads = [9, 0, 0];
        let chosen: Vec<usize> = (0..4)
            .map(|start| ConnectionChoice::RoundRobin.choose(start, 3, lanes(&loads), || None))
            .collect();
        assert_eq!(chosen, vec![0, 1, 2, 0]);
        assert_eq!(
            ConnectionChoice::LeastLoaded.choose(3, 3, lanes(&loads), || None),
            1
        );
        for name in ConnectionChoice::NAMES {
            assert_eq!(ConnectionChoice::parse(name).map(|c| c.name()), Ok(name));
        }
        assert!(ConnectionChoice::parse("random").is_err());
    }

    #[test]
    fn an_idle_connection_is_taken_before_a_busy_one() {
        let loads = [1, 0, 0, 2];
        assert_eq!(least_loaded(0, 4, |k| loads[k]), 1);
        assert_eq!(least_loaded(3, 4, |k| loads[k]), 1);
        assert_eq!(least_loaded(6, 4, |k| loads[k]), 2);
    }

    #[test]
    fn equally_loaded_connections_take_turns() {
        let chosen: Vec<usize> = (0..6).map(|start| least_loaded(start, 3, |_| 4)).collect();
        assert_eq!(chosen, vec![0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn the_fewest_in_flight_wins_when_none_is_idle() {
        let loads = [3, 5, 2, 4];
        assert_eq!(least_loaded(1, 4, |k| loads[k]), 2);
        assert_eq!(least_loaded(0, 1, |_| 9), 0);
        assert_eq!(least_loaded(5, 0, |_| 9), 0);
    }

    /// With every request in flight younger than the threshold, `avoid-slow` picks what round
    /// robin picks, however unequal the loads: requests stack on a busy connection and share
    /// its writes and reads, where least-loaded would spread them.
    #[test]
    fn fresh_requests_in_flight_keep_round_robin_s_pick() {
        let loads = [7, 0, 3, 1];
        // Up to 4 typical latencies of 100 µs, or the 1 ms floor, whichever is longer.
        let ages = [STUCK_FLOOR_NANOS, 0, 400_000, 999_999];
        let lane = |k: usize| Lane {
            in_flight: loads[k],
            oldest_age_nanos: ages[k],
        };
        for start in 0..12 {
            assert_eq!(
                ConnectionChoice::AvoidSlow.choose(start, 4, lane, || Some(100_000.0)),
                ConnectionChoice::RoundRobin.choose(start, 4, lane, || None),
                "start {start}"
            );
        }
        // Past the floor but within 4 typical latencies of a slower backend: still fresh.
        let slower = |_| Lane {
            in_flight: 2,
            oldest_age_nanos: 3_000_000,
        };
        assert_eq!(avoid_slow(5, 3, slower, || Some(1_000_000.0)), 2);
    }

    /// The typical latency is not even asked for while the pick's oldest request is within
    /// the floor (it takes a lock in the client).
    #[test]
    fn the_typical_latency_is_asked_only_past_the_floor() {
        let fresh = |_| Lane {
            in_flight: 3,
            oldest_age_nanos: STUCK_FLOOR_NANOS,
        };
        assert_eq!(
            avoid_slow(1, 3, fresh, || panic!("asked for the typical latency")),
            1
        );
        let idle = |_| Lane::default();
        assert_eq!(avoid_slow(2, 3, idle, || panic!("asked")), 2);
    }

    #[test]
    fn a_stuck_connection_is_skipped_for_the_least_loaded_of_the_others() {
        // Connection 0's oldest request is 5 ms old; the typical latency is 100 µs, so the
        // threshold is the 1 ms floor.
        let loads = [1, 4, 2, 3];
        let ages = [5_000_000, 10_000, 20_000, 30_000];
        let lane = |k: usize| Lane {
            in_flight: loads[k],
            oldest_age_nanos: ages[k],
        };
        assert_eq!(avoid_slow(0, 4, lane, || Some(100_000.0)), 2);
        assert_eq!(avoid_slow(4, 4, lane, || Some(100_000.0)), 2);
        // An idle one ends the scan.
        let loads = [1, 4, 0, 0];
        let lane = |k: usize| Lane {
            in_flight: loads[k],
            oldest_age_nanos: ages[k],
        };
        assert_eq!(avoid_slow(0, 4, lane, || None), 2);
        // A stuck connection is not taken even with fewer requests in flight.
        let loads = [3, 1, 4];
        let ages = [9_000_000, 9_000_000, 10_000];
        let lane = |k: usize| Lane {
            in_flight: loads[k],
            oldest_age_nanos: ages[k],
        };
        assert_eq!(avoid_slow(0, 3, lane, || Some(1_000.0)), 2);
    }

    #[test]
    fn when_every_connection_is_stuck_the_least_loaded_takes_it() {
        let loads = [5, 3, 4];
        let lane = |k: usize| Lane {
            in_flight: loads[k],
            oldest_age_nanos: 50_000_000,
        };
        assert_eq!(avoid_slow(0, 3, lane, || Some(1_000_000.0)), 1);
        assert_eq!(avoid_slow(7, 1, lane, || None), 0);
        assert_eq!(avoid_slow(7, 0, lane, || None), 0);
    }

    #[test]
    fn the_threshold_is_four_typical_latencies_with_a_floor() {
        assert_eq!(stuck_after_nanos(None), STUCK_FLOOR_NANOS);
        assert_eq!(stuck_after_nanos(Some(20_000.0)), STUCK_FLOOR_NANOS);
        assert_eq!(stuck_after_nanos(Some(2_000_000.0)), 8_000_000);
        assert_eq!(stuck_after_nanos(Some(f64::NAN)), STUCK_FLOOR_NANOS);
        assert_eq!(stuck_after_nanos(Some(f64::INFINITY)), u64::MAX);
    }
}
