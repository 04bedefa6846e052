//! The simulated request stream, drawn from the load generator's own workload code
//! (`tailtrim_bench::workload::RequestGenerator`), so a simulated run sends the same
//! operations, keys and sizes as `tailtrim bench` / `tailtrim experiment minos` with the same
//! seed. Arrival times come from the bench's open-loop [`Schedule`] at each offered rate.
//!
//! ```text
//!  WorkloadSpec ─► RequestGenerator(seed) ─► op, key ─► value_len, key_len ─┐
//!                                                                         ▼
//!        TraceRequest { conn (uniform pick), kind, size (what the server classifies),
//!                       wire bytes, key hash, bench class small/large, work_ns }
//!  Schedule(arrival, rate, seed) ─► arrival times (per run)
//! ```

use std::sync::Arc;

use tailtrim_bench::class::Class;
use tailtrim_bench::dist::Distribution;
use tailtrim_bench::rng::Rng;
use tailtrim_bench::schedule::Schedule;
use tailtrim_bench::workload::{OpKind, RequestGenerator, WorkloadSpec};

use crate::cost::CostModel;
use crate::time::Nanos;
use crate::SimError;

/// How the service time of a request is obtained.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ServiceModel {
    /// From the request's size with a [`CostModel`].
    Cost(CostModel),
    /// Exponentially distributed with this mean, independent of size (queueing sanity
    /// checks: one worker then is an M/M/1 queue). Nothing is transferred separately.
    Exponential {
        /// Mean service time, nanoseconds.
        mean_ns: f64,
    },
}

/// One request of the trace (independent of the offered rate).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TraceRequest {
    /// Client connection it is sent on (`0..connections`).
    pub conn: u32,
    /// Position among the requests of its connection (0, 1, 2, …).
    pub conn_seq: u32,
    /// GET or SET.
    pub kind: OpKind,
    /// The size the server classifies by: a GET's reply length after lookup, a SET's
    /// declared value length (as `crates/server/src/runtime.rs` `route` records it).
    pub size: u64,
    /// Bytes moved: reply for a GET, request for a SET.
    pub wire_bytes: u64,
    /// 64-bit hash of the key (high bits used by early binding).
    pub key_hash: u64,
    /// The bench's class: value above the workload's 1499-byte cut.
    pub large: bool,
    /// Whole service time on one core (fixed + transfer), nanoseconds.
    pub work_ns: u64,
    /// The size-dependent part of `work_ns`.
    pub transfer_ns: u64,
}

/// A generated request stream.
#[derive(Debug, Clone)]
pub struct Trace {
    /// Requests in send order.
    pub requests: Vec<TraceRequest>,
    /// Client connections.
    pub connections: u32,
    /// The arrival process (rescaled to each run's rate).
    pub arrival: tailtrim_bench::workload::Arrival,
    /// Seed of the arrival schedule.
    pub arrival_seed: u64,
}

/// Length of `value` in decimal digits.
fn digits(mut value: u64) -> u64 {
    let mut count = 1;
    while value >= 10 {
        value /= 10;
        count += 1;
    }
    count
}

/// Reply to `get KEY` for a hit with flags 0: `VALUE KEY 0 LEN\r\n` + value + `\r\nEND\r\n`.
pub fn get_reply_bytes(key_len: u64, value_len: u64) -> u64 {
    "VALUE ".len() as u64 + key_len + " 0 ".len() as u64 + digits(value_len) + 2 + value_len + 2 + 5
}

/// Request `set KEY 0 0 LEN\r\n` + value + `\r\n`.
pub fn set_request_bytes(key_len: u64, value_len: u64) -> u64 {
    "set ".len() as u64 + key_len + " 0 0 ".len() as u64 + digits(value_len) + 2 + value_len + 2
}

impl Trace {
    /// `count` requests of `spec` over `connections` connections, every random choice from
    /// `seed` (operations: stream 1, connections: stream 2, service draws: stream 3,
    /// arrivals: stream 4).
    pub fn generate(
        spec: &WorkloadSpec,
        count: usize,
        connections: u32,
        service: &ServiceModel,
        seed: u64,
    ) -> Result<Trace, SimError> {
        if connections == 0 {
            return Err(SimError::Config("connections must be at least 1".into()));
        }
        if let ServiceModel::Cost(cost) = service {
            cost.validate()?;
        }
        if let ServiceModel::Exponential { mean_ns } = service {
            if !mean_ns.is_finite() || *mean_ns <= 0.0 {
                return Err(SimError::Config("exponential mean must be > 0".into()));
            }
        }
        spec.validate()
            .map_err(|error| SimError::Config(error.to_string()))?;
        let root = Rng::new(seed);
        let mut generator = RequestGenerator::new(Arc::new(spec.clone()), root.fork(1));
        let mut conn_rng = root.fork(2);
        let mut service_rng = root.fork(3);
        let mut per_conn = vec![0u32; connections as usize];
        let mut requests = Vec::with_capacity(count);
        let mut key_bytes = Vec::new();
        for _ in 0..count {
            let operation = generator.next_operation();
            let Some(key) = operation.keys.first().copied() else {
                continue;
            };
            let key_len = spec.key_len(key) as u64;
            let value_len = spec.value_len(key);
            let (size, wire_bytes) = match operation.kind {
                OpKind::Get => {
                    let reply = get_reply_bytes(key_len, value_len);
                    (reply, reply)
                }
                OpKind::Set => (value_len, set_request_bytes(key_len, value_len)),
            };
            // The bytes the load generator sends for this key, hashed as the server hashes
            // them, so early binding routes the key to the same worker in both.
            key_bytes.clear();
            spec.write_key(key, &mut key_bytes);
            let key_hash = tailtrim_policy::dispatch::key_hash(&key_bytes);
            let conn = conn_rng.below(u64::from(connections)) as u32;
            let conn_seq = per_conn[conn as usize];
            per_conn[conn as usize] += 1;
            let (work_ns, transfer_ns) = match service {
                ServiceModel::Cost(cost) => {
                    let transfer = Nanos::from_f64(cost.transfer_ns(wire_bytes)).0;
                    (Nanos::from_f64(cost.fixed_ns).0 + transfer, transfer)
                }
                ServiceModel::Exponential { mean_ns } => {
                    let draw =
                        Distribution::Exponential { mean: *mean_ns }.sample(&mut service_rng);
                    (Nanos::from_f64(draw).0.max(1), 0)
                }
            };
            requests.push(TraceRequest {
                conn,
                conn_seq,
                kind: operation.kind,
                size,
                wire_bytes,
                key_hash,
                large: operation.classes.contains(Class::Large),
                work_ns,
                transfer_ns,
            });
        }
        Ok(Trace {
            requests,
            connections,
            arrival: spec.arrival.clone(),
            arrival_seed: root.fork(4).next_u64(),
        })
    }

    /// Multiplies every request's service time (fixed and transfer parts alike) by a factor
    /// drawn from the quantile table `table` ([`crate::cost::dispersion_factor`]), from its own
    /// random stream of `seed` (stream 5): the measured spread of service times around the
    /// median of a size.
    pub fn apply_dispersion(&mut self, table: &[f64], seed: u64) {
        if table.is_empty() {
            return;
        }
        let mut rng = Rng::new(seed).fork(5);
        for request in &mut self.requests {
            let factor = crate::cost::dispersion_factor(table, rng.unit()).max(0.0);
            request.work_ns = ((request.work_ns as f64 * factor).round() as u64).max(1);
            request.transfer_ns =
                ((request.transfer_ns as f64 * factor).round() as u64).min(request.work_ns);
        }
    }

    /// Arrival times of every request at `rate` requests per second.
    pub fn arrivals(&self, rate: f64) -> Vec<Nanos> {
        let mut schedule = Schedule::new(&self.arrival, rate, Rng::new(self.arrival_seed));
        self.requests
            .iter()
            .map(|_| Nanos(schedule.next_nanos()))
            .collect()
    }

    /// Mean whole service time per request, nanoseconds (the capacity of one core is its
    /// inverse).
    pub fn mean_work_ns(&self) -> f64 {
        if self.requests.is_empty() {
            return 0.0;
        }
        self.requests.iter().map(|r| r.work_ns as f64).sum::<f64>() / self.requests.len() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::{get_reply_bytes, set_request_bytes, ServiceModel, Trace};
    use crate::cost::CostModel;
    use tailtrim_bench::workload::WorkloadSpec;

    #[test]
    fn wire_sizes_match_the_protocol_text() {
        let key = b"k1";
        let value = [b'x'; 123];
        let reply = format!("VALUE k1 0 123\r\n{}\r\nEND\r\n", "x".repeat(123));
        assert_eq!(
            get_reply_bytes(key.len() as u64, value.len() as u64),
            reply.len() as u64
        );
        let request = format!("set k1 0 0 123\r\n{}\r\n", "x".repeat(123));
        assert_eq!(set_request_bytes(2, 123), request.len() as u64);
    }

    #[test]
    fn dispersion_scales_service_times_deterministically() {
        let spec = WorkloadSpec::preset("minos").expect("preset");
        let service = ServiceModel::Cost(CostModel::default());
        let plain = Trace::generate(&spec, 20_000, 8, &service, 3).expect("trace");
        let mut identity = plain.clone();
        identity.apply_dispersion(&[1.0, 1.0], 3);
        assert_eq!(identity.requests, plain.requests);
        let table = [0.5, 1.0, 4.0];
        let mut spread = plain.clone();
        spread.apply_dispersion(&table, 3);
        let mut again = plain.clone();
        again.apply_dispersion(&table, 3);
        assert_eq!(spread.requests, again.requests);
        let ratios: Vec<f64> = spread
            .requests
            .iter()
            .zip(&plain.requests)
            .map(|(s, p)| s.work_ns as f64 / p.work_ns as f64)
            .collect();
        assert!(ratios.iter().all(|r| (0.49..=4.01).contains(r)));
        // Mean of the table's factor: (0.75 + 2.5) / 2 = 1.625.
        let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
        assert!((mean - 1.625).abs() < 0.03, "mean factor {mean}");
        assert!(spread.requests.iter().all(|r| r.transfer_ns <= r.work_ns));
    }

    #[test]
    fn minos_trace_has_the_papers_mix() {
        let spec = WorkloadSpec::preset("minos").expect("preset");
        let trace = Trace::generate(
            &spec,
            100_000,
            32,
            &ServiceModel::Cost(CostModel::default()),
            7,
        )
        .expect("trace");
        let large = trace.requests.iter().filter(|r| r.large).count() as f64 / 1e5;
        assert!((0.003..0.008).contains(&large), "large share {large}");
        let sets = trace
            .requests
            .iter()
            .filter(|r| r.kind == tailtrim_bench::workload::OpKind::Set)
            .count() as f64
            / 1e5;
        assert!((0.04..0.06).contains(&sets), "set share {sets}");
        assert!(trace.requests.iter().all(|r| r.conn < 32));
        let arrivals = trace.arrivals(100_000.0);
        let span = arrivals.last().map(|t| t.as_secs_f64()).unwrap_or(0.0);
        assert!((span - 1.0).abs() < 0.02, "span {span}");
        assert!(arrivals.windows(2).all(|pair| pair[0] <= pair[1]));
    }
}
