//! Which of a backend's connections carries the next request.
//!
//! ```text
//!   connections 0 … n−1, each with its requests in flight
//!   start = rotating counter mod n ──► scan n from start ──► first with the fewest in flight
//!                                      (an idle one ends the scan at once)
//! ```
//!
//! The memcached protocol answers a connection's requests in the order they were sent, so a
//! request queued behind a slow one (a large value, a large multiget) waits for it even when
//! the server serves it at once — and where a server pins each connection to a worker, the
//! connection's worker is busy with the slow one too. Round robin puts a request on such a
//! connection once in n; the least-loaded choice avoids it whenever another connection is
//! idler. Ties go round robin from the rotating start, so connections equally idle share the
//! load as round robin would. Round robin stays the default: under a saturating closed loop
//! the requests it stacks on one connection share writes and reads, and least-loaded, which
//! spreads them, carried less (`experiments/proxy/connection-choice/`).

/// How a backend's connection is chosen for the next request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConnectionChoice {
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
    pub const NAMES: [&'static str; 2] = ["least-loaded", "round-robin"];

    /// `least-loaded` or `round-robin`.
    pub fn parse(name: &str) -> Result<Self, String> {
        match name {
            "least-loaded" => Ok(ConnectionChoice::LeastLoaded),
            "round-robin" => Ok(ConnectionChoice::RoundRobin),
            other => Err(format!(
                "connection choice {other:?}: expected \"least-loaded\" or \"round-robin\""
            )),
        }
    }

    /// The name `parse` reads back.
    pub fn name(self) -> &'static str {
        match self {
            ConnectionChoice::LeastLoaded => "least-loaded",
            ConnectionChoice::RoundRobin => "round-robin",
        }
    }

    /// The connection, of `count`, for the request whose rotating counter is `start`.
    pub fn choose(self, start: usize, count: usize, in_flight: impl Fn(usize) -> usize) -> usize {
        match self {
            ConnectionChoice::LeastLoaded => least_loaded(start, count, in_flight),
            ConnectionChoice::RoundRobin => start % count.max(1),
        }
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
    use super::{least_loaded, ConnectionChoice};

    #[test]
    fn round_robin_ignores_what_a_connection_carries() {
        let loads = [9, 0, 0];
        let chosen: Vec<usize> = (0..4)
            .map(|start| ConnectionChoice::RoundRobin.choose(start, 3, |k| loads[k]))
            .collect();
        assert_eq!(chosen, vec![0, 1, 2, 0]);
        assert_eq!(ConnectionChoice::LeastLoaded.choose(3, 3, |k| loads[k]), 1);
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
}
