//! The expected miss ratio of the best caches under the independent reference model (IRM)
//! for the miss-ratio trace of `crates/bench/src/trace.rs`: zipf popularity over a fixed key
//! space, every key with a fixed ETC key size and value size.
//!
//! Under IRM a non-anticipating cache's contents at a request are independent of that
//! request, so its expected hit ratio is `Σ pᵢ·xᵢ` where `xᵢ` is the probability key `i` is
//! held, and `Σ sᵢ·xᵢ ≤ B` at every moment. The largest such sum is the fractional knapsack:
//! keys in decreasing popularity per byte, the last one taken in part (`density`). Among
//! size-blind orders the best is the most popular keys first (`popularity`, static LFU,
//! whole keys until the next does not fit). A key costs `sᵢ = key + value + overhead` bytes.
//!
//! ```sh
//! tailtrim-missratio-bound --keys 2000000 --exponent 0.99 --seed 1 --max-value-bytes 100000 \
//!     --overhead 0 --overhead 28 --budget 33554432 --target 0.2
//! ```
//!
//! Prints one JSON object: for each overhead and each order, the expected miss ratio at each
//! budget and the smallest budget whose expected miss ratio is at most each target.

use serde_json::{json, Map, Value};
use tailtrim_bench::dist::Zipf;
use tailtrim_bench::trace::{Trace, TraceSpec};

struct Args {
    spec: TraceSpec,
    overheads: Vec<u64>,
    budgets: Vec<u64>,
    targets: Vec<f64>,
}

fn parse_args() -> Args {
    let mut args = Args {
        spec: TraceSpec {
            keys: 2_000_000,
            exponent: 0.99,
            seed: 1,
            max_value_bytes: 100_000,
        },
        overheads: Vec::new(),
        budgets: Vec::new(),
        targets: Vec::new(),
    };
    let mut words = std::env::args().skip(1);
    while let Some(flag) = words.next() {
        let value = words
            .next()
            .unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--keys" => args.spec.keys = number(&flag, &value),
            "--exponent" => args.spec.exponent = number(&flag, &value),
            "--seed" => args.spec.seed = number(&flag, &value),
            "--max-value-bytes" => args.spec.max_value_bytes = number(&flag, &value),
            "--overhead" => args.overheads.push(number(&flag, &value)),
            "--budget" => args.budgets.push(number(&flag, &value)),
            "--target" => args.targets.push(number(&flag, &value)),
            _ => panic!("unknown flag {flag}"),
        }
    }
    if args.overheads.is_empty() {
        args.overheads.push(0);
    }
    args
}

fn number<T: std::str::FromStr>(flag: &str, value: &str) -> T {
    value
        .parse()
        .unwrap_or_else(|_| panic!("{flag}: not a number: {value}"))
}

/// One order of the keys: cumulative bytes and cumulative probability after each key.
struct Filling {
    bytes: Vec<u64>,
    hits: Vec<f64>,
    /// Whether the key that does not fit whole is taken in part (the fractional knapsack).
    fractional: bool,
}

impl Filling {
    fn new(order: &[usize], probability: &[f64], size: &[u64], fractional: bool) -> Filling {
        let (mut bytes, mut hits) = (Vec::with_capacity(order.len()), Vec::new());
        let (mut total_bytes, mut total_hits) = (0u64, 0f64);
        for &key in order {
            total_bytes += size[key];
            total_hits += probability[key];
            bytes.push(total_bytes);
            hits.push(total_hits);
        }
        Filling {
            bytes,
            hits,
            fractional,
        }
    }

    /// Expected hit ratio with `budget` bytes.
    fn hit_ratio(&self, budget: u64) -> f64 {
        let whole = self.bytes.partition_point(|&bytes| bytes <= budget);
        let held = if whole == 0 {
            0.0
        } else {
            self.hits[whole - 1]
        };
        if !self.fractional || whole == self.bytes.len() {
            return held;
        }
        let before = if whole == 0 { 0 } else { self.bytes[whole - 1] };
        let part = (budget - before) as f64 / (self.bytes[whole] - before) as f64;
        held + part * (self.hits[whole] - held)
    }

    /// Keys held whole with `budget` bytes.
    fn keys(&self, budget: u64) -> usize {
        self.bytes.partition_point(|&bytes| bytes <= budget)
    }

    /// The smallest budget whose expected miss ratio is at most `target` (None: never).
    fn budget_for(&self, target: f64) -> Option<u64> {
        let wanted = 1.0 - target;
        let at = self.hits.partition_point(|&hits| hits < wanted);
        if at == self.hits.len() {
            return None;
        }
        if !self.fractional {
            return Some(self.bytes[at]);
        }
        let (before_bytes, before_hits) = if at == 0 {
            (0, 0.0)
        } else {
            (self.bytes[at - 1], self.hits[at - 1])
        };
        let part = (wanted - before_hits) / (self.hits[at] - before_hits);
        Some(before_bytes + (part * (self.bytes[at] - before_bytes) as f64).ceil() as u64)
    }
}

fn main() {
    let args = parse_args();
    let keys = args.spec.keys as usize;
    // P(rank) = rank^-exponent / H; the generator's own normaliser, taken once from rank 1.
    let first = Zipf::new(args.spec.keys, args.spec.exponent).probability(1);
    let probability: Vec<f64> = (1..=keys)
        .map(|rank| first * (rank as f64).powf(-args.spec.exponent))
        .collect();
    let trace = Trace::new(args.spec.clone());
    let payload: Vec<u64> = (1..=args.spec.keys)
        .map(|rank| {
            let request = trace.request(rank);
            (request.key.len() + request.value_bytes) as u64
        })
        .collect();
    let total_payload: u64 = payload.iter().sum();
    let by_rank: Vec<usize> = (0..keys).collect();

    let mut overheads = Map::new();
    for &overhead in &args.overheads {
        let size: Vec<u64> = payload.iter().map(|bytes| bytes + overhead).collect();
        let mut by_density = by_rank.clone();
        by_density.sort_by(|&a, &b| {
            (probability[b] * size[a] as f64)
                .total_cmp(&(probability[a] * size[b] as f64))
                .then(a.cmp(&b))
        });
        let mut orders = Map::new();
        for (name, order, fractional) in [
            ("popularity", &by_rank, false),
            ("density", &by_density, true),
        ] {
            let filling = Filling::new(order, &probability, &size, fractional);
            let at_budget: Vec<Value> = args
                .budgets
                .iter()
                .map(|&budget| {
                    json!({
                        "budget_bytes": budget,
                        "miss_ratio": 1.0 - filling.hit_ratio(budget),
                        "keys_held": filling.keys(budget),
                    })
                })
                .collect();
            let for_target: Vec<Value> = args
                .targets
                .iter()
                .map(|&target| json!({"miss_ratio": target, "budget_bytes": filling.budget_for(target)}))
                .collect();
            orders.insert(
                name.to_string(),
                json!({"at_budget": at_budget, "for_target": for_target}),
            );
        }
        overheads.insert(overhead.to_string(), Value::Object(orders));
    }
    let report = json!({
        "trace": {
            "keys": args.spec.keys,
            "exponent": args.spec.exponent,
            "seed": args.spec.seed,
            "max_value_bytes": args.spec.max_value_bytes,
            "payload_bytes_all_keys": total_payload,
            "mean_payload_bytes": total_payload as f64 / keys as f64,
        },
        "overheads": overheads,
    });
    println!("{report}");
}
