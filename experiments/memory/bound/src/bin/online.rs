//! The miss ratio of whole policies replayed on the miss-ratio trace's own request sequence
//! (`crates/bench/src/trace.rs`: the same spec yields the same ranks), with a byte budget:
//! online ones that see only the past, and Belady's offline MIN as the ceiling.
//!
//! Every request is a `get`; on a miss the key is stored (cache-aside's `set`) after the
//! items the policy chooses are evicted to make room — never the key just stored, which may
//! go at the next insertion. A key costs its key, its value and `--overhead` bytes. Misses
//! are counted in the measured pass only (after `--warmup` requests).
//!
//! Policies (the held item with the smallest priority is evicted; ties by least recent use):
//!
//! * `fifo`: insertion order; `lru`: last use; `clock`: insertion order with a second chance
//!   for an item read since it was (re)queued (the store's segment order, in one queue);
//! * `lfu`: perfect LFU, the key's requests over all the past (kept for keys not held too);
//!   `lfu_per_byte`: that count over the key's bytes;
//! * implementable approximations of `lfu_per_byte`: `sampled_per_byte` evicts the smallest
//!   count over bytes among 64 held items drawn at random (exact counts), `sketch_per_byte`
//!   the same with counts from a count-min sketch (two u8 counters a key, conservative
//!   update, one counter per 128 bytes of budget, every counter halved after eight
//!   increments per counter), as a store could keep them; `queue_sketch_per_byte` keeps
//!   the store's queue instead of drawing: the item at its head is requeued (up to 8 a
//!   eviction) when its sketch count per byte is above the new key's, TinyLFU's comparison
//!   per byte, and otherwise evicted; `window_per_byte` is the store-shaped form: the lowest
//!   sketch count per byte among the `--window` oldest items of the queue and the `--recent`
//!   items stored last, then up to `--moves` items at the queue's head before the chosen one
//!   requeued (moved, as the store moves a record);
//! * `belady`: the item whose next request is farthest (MIN; optimal for equal sizes, a
//!   standard approximation with sizes); `belady_size`: the largest (distance to the next
//!   request × bytes) among 64 held items drawn at random (seeded; `--draws`), as Belady-Size is run.
//!
//! ```sh
//! tailtrim-missratio-online --warmup 3000000 --requests 2000000 --overhead 28 \
//!     --budget 33554432 --policy lru --policy lfu
//! ```
//!
//! Prints one JSON object: per policy, per budget, the measured pass's gets and misses.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use serde_json::{json, Map, Value};
use tailtrim_bench::trace::{Trace, TraceSpec};

const POLICIES: [&str; 11] = [
    "fifo",
    "lru",
    "clock",
    "lfu",
    "lfu_per_byte",
    "sampled_per_byte",
    "sketch_per_byte",
    "queue_sketch_per_byte",
    "window_per_byte",
    "belady",
    "belady_size",
];
/// The policies that evict by drawing held items at random.
const SAMPLED: [&str; 3] = ["sampled_per_byte", "sketch_per_byte", "belady_size"];
/// The sketch's bytes of budget per counter (`sketch_per_byte`).
const BYTES_PER_COUNTER: u64 = 128;
/// Increments per counter after which every counter is halved.
const INCREMENTS_PER_COUNTER: u64 = 8;
/// No further request of the key.
const NEVER: u32 = u32::MAX;
/// Held items drawn per eviction by the sampled policies (`--draws` changes it).
const DRAWS: usize = 64;
/// Oldest held items `window_per_byte` chooses among (`--window` changes it).
const WINDOW: usize = 16;
/// Items `window_per_byte` moves from the queue's head to its tail per eviction (`--moves`).
const MOVES: usize = 1;
/// Most recently stored items `window_per_byte` also chooses among (`--recent`).
const RECENT: usize = 0;

struct Args {
    spec: TraceSpec,
    warmup: usize,
    requests: usize,
    overhead: u64,
    budgets: Vec<u64>,
    policies: Vec<String>,
    draws: usize,
    window: usize,
    moves: usize,
    recent: usize,
}

fn parse_args() -> Args {
    let mut args = Args {
        spec: TraceSpec {
            keys: 2_000_000,
            exponent: 0.99,
            seed: 1,
            max_value_bytes: 100_000,
        },
        warmup: 3_000_000,
        requests: 2_000_000,
        overhead: 28,
        budgets: Vec::new(),
        policies: Vec::new(),
        draws: DRAWS,
        window: WINDOW,
        moves: MOVES,
        recent: RECENT,
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
            "--warmup" => args.warmup = number(&flag, &value),
            "--requests" => args.requests = number(&flag, &value),
            "--overhead" => args.overhead = number(&flag, &value),
            "--draws" => args.draws = number(&flag, &value),
            "--window" => args.window = number(&flag, &value),
            "--moves" => args.moves = number(&flag, &value),
            "--recent" => args.recent = number(&flag, &value),
            "--budget" => args.budgets.push(number(&flag, &value)),
            "--policy" if POLICIES.contains(&value.as_str()) => args.policies.push(value),
            _ => panic!("unknown flag or policy: {flag} {value}"),
        }
    }
    if args.policies.is_empty() {
        args.policies = POLICIES.iter().map(|name| name.to_string()).collect();
    }
    args
}

fn number<T: std::str::FromStr>(flag: &str, value: &str) -> T {
    value
        .parse()
        .unwrap_or_else(|_| panic!("{flag}: not a number: {value}"))
}

/// The request sequence as key indices (rank − 1), each key's bytes, and for every request
/// the position of the same key's next request.
struct Workload {
    keys: Vec<u32>,
    size: Vec<u64>,
    next: Vec<u32>,
    warmup: usize,
}

impl Workload {
    fn new(args: &Args) -> Workload {
        let trace = Trace::new(args.spec.clone());
        let size: Vec<u64> = (1..=args.spec.keys)
            .map(|rank| {
                let request = trace.request(rank);
                (request.key.len() + request.value_bytes) as u64 + args.overhead
            })
            .collect();
        let keys: Vec<u32> = trace
            .take(args.warmup + args.requests)
            .map(|request| (request.rank - 1) as u32)
            .collect();
        let mut next = vec![NEVER; keys.len()];
        let mut seen = vec![NEVER; size.len()];
        for (at, &key) in keys.iter().enumerate().rev() {
            next[at] = seen[key as usize];
            seen[key as usize] = at as u32;
        }
        Workload {
            keys,
            size,
            next,
            warmup: args.warmup,
        }
    }
}

/// What a policy's replay counted.
struct Outcome {
    gets: u64,
    misses: u64,
    evictions: u64,
    /// Measured requests that were their key's first: the misses no policy avoids.
    cold: u64,
    items_at_end: usize,
    held_bytes_at_end: u64,
}

/// The state every policy shares: what is held, each key's requests and last use.
struct Cache<'a> {
    work: &'a Workload,
    budget: u64,
    held: Vec<bool>,
    held_bytes: u64,
    items: usize,
    count: Vec<u32>,
    /// The time (request position) of the key's valid heap entry.
    stamp: Vec<u32>,
    next_of: Vec<u32>,
    /// Min-heap of (priority, stamp, key); an entry whose stamp is not the key's is stale.
    heap: BinaryHeap<Reverse<(u64, u32, u32)>>,
    /// `clock`'s queue of (key, stamp) and read bits.
    queue: VecDeque<(u32, u32)>,
    read: Vec<bool>,
    /// `belady_size`'s held keys (for drawing) and each key's place there.
    list: Vec<u32>,
    place: Vec<u32>,
    rng: u64,
    draws: usize,
    window: usize,
    moves: usize,
    /// `window_per_byte`'s most recently stored items (key, stamp), newest last.
    recent: VecDeque<(u32, u32)>,
    recent_len: usize,
    sketch: Sketch,
}

/// A count-min sketch of requests: two u8 counters a key, halved periodically.
struct Sketch {
    counters: Vec<u8>,
    increments: u64,
}

impl Sketch {
    fn new(budget: u64) -> Sketch {
        let width = (budget / BYTES_PER_COUNTER).max(64).next_power_of_two() as usize;
        Sketch {
            counters: vec![0; width],
            increments: 0,
        }
    }

    fn slots(&self, key: usize) -> [usize; 2] {
        let mut hash = (key as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        hash ^= hash >> 29;
        hash = hash.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        hash ^= hash >> 32;
        let mask = self.counters.len() as u64 - 1;
        [(hash & mask) as usize, ((hash >> 32) & mask) as usize]
    }

    fn estimate(&self, key: usize) -> u8 {
        let [a, b] = self.slots(key);
        self.counters[a].min(self.counters[b])
    }

    fn count(&mut self, key: usize) {
        let least = self.estimate(key);
        if least == u8::MAX {
            return;
        }
        for slot in self.slots(key) {
            if self.counters[slot] == least {
                self.counters[slot] += 1;
            }
        }
        self.increments += 1;
        if self.increments >= INCREMENTS_PER_COUNTER * self.counters.len() as u64 {
            self.increments = 0;
            for counter in &mut self.counters {
                *counter /= 2;
            }
        }
    }
}

impl<'a> Cache<'a> {
    fn new(work: &'a Workload, budget: u64, args: &Args) -> Cache<'a> {
        let keys = work.size.len();
        Cache {
            work,
            budget,
            held: vec![false; keys],
            held_bytes: 0,
            items: 0,
            count: vec![0; keys],
            stamp: vec![0; keys],
            next_of: vec![NEVER; keys],
            heap: BinaryHeap::new(),
            queue: VecDeque::new(),
            read: vec![false; keys],
            list: Vec::new(),
            place: vec![0; keys],
            rng: 0x9e37_79b9_7f4a_7c15,
            draws: args.draws,
            window: args.window,
            moves: args.moves,
            recent: VecDeque::new(),
            recent_len: args.recent,
            sketch: Sketch::new(budget),
        }
    }

    /// The eviction priority of `key` now (smallest goes first).
    fn priority(&self, policy: &str, key: usize, now: u32) -> u64 {
        match policy {
            "fifo" | "lru" => u64::from(now),
            "lfu" => u64::from(self.count[key]),
            // Non-negative f64s order as their bits.
            "lfu_per_byte" => (f64::from(self.count[key]) / self.work.size[key] as f64).to_bits(),
            "belady" => u64::from(NEVER - self.next_of[key]),
            _ => unreachable!("{policy} keeps no heap"),
        }
    }

    fn push(&mut self, policy: &str, key: usize, now: u32) {
        self.stamp[key] = now;
        match policy {
            "clock" | "queue_sketch_per_byte" | "window_per_byte" => {
                self.queue.push_back((key as u32, now))
            }
            policy if SAMPLED.contains(&policy) => {}
            _ => {
                let priority = self.priority(policy, key, now);
                self.heap.push(Reverse((priority, now, key as u32)));
                // Stale entries pile up under hits; rebuild when they outnumber the live.
                if self.heap.len() > 4 * self.items + 1024 {
                    let (held, stamp) = (&self.held, &self.stamp);
                    self.heap.retain(|Reverse((_, at, key))| {
                        held[*key as usize] && stamp[*key as usize] == *at
                    });
                }
            }
        }
    }

    /// The held key to evict (not `keep`).
    fn victim(&mut self, policy: &str, keep: usize, now: u32) -> usize {
        match policy {
            "queue_sketch_per_byte" => {
                let density = |cache: &Self, key: usize| {
                    f64::from(cache.sketch.estimate(key)) / cache.work.size[key] as f64
                };
                let mut passes = 0;
                loop {
                    let (key, at) = self.queue.pop_front().expect("something is held");
                    let key = key as usize;
                    if !self.held[key] || self.stamp[key] != at || key == keep {
                        continue;
                    }
                    if passes < 8 && density(self, key) > density(self, keep) {
                        passes += 1;
                        self.push(policy, key, now);
                        continue;
                    }
                    return key;
                }
            }
            "window_per_byte" => {
                // The queue's stale entries (and `keep`'s, from an earlier stay) at its head go.
                let valid = |cache: &Self, (key, at): (u32, u32)| {
                    let key = key as usize;
                    cache.held[key] && cache.stamp[key] == at && key != keep
                };
                while let Some(&entry) = self.queue.front() {
                    if valid(self, entry) {
                        break;
                    }
                    self.queue.pop_front();
                }
                // The lowest sketch count per byte among the oldest `window` held items;
                // ties go to the oldest.
                let (mut best, mut best_count, mut best_size, mut seen) = (usize::MAX, 0, 0, 0);
                for &entry in &self.queue {
                    if seen == self.window {
                        break;
                    }
                    if !valid(self, entry) {
                        continue;
                    }
                    seen += 1;
                    let key = entry.0 as usize;
                    let count = u64::from(self.sketch.estimate(key)).max(1);
                    let size = self.work.size[key];
                    if best == usize::MAX || count * best_size < best_count * size {
                        (best, best_count, best_size) = (key, count, size);
                    }
                }
                for &entry in &self.recent {
                    if !valid(self, entry) {
                        continue;
                    }
                    let key = entry.0 as usize;
                    let count = u64::from(self.sketch.estimate(key)).max(1);
                    let size = self.work.size[key];
                    if best == usize::MAX || count * best_size < best_count * size {
                        (best, best_count, best_size) = (key, count, size);
                    }
                }
                assert!(best != usize::MAX, "only the new key is held");
                // The head items not chosen go to the tail (as the store moves a record).
                for _ in 0..self.moves {
                    while let Some(&entry) = self.queue.front() {
                        if valid(self, entry) {
                            break;
                        }
                        self.queue.pop_front();
                    }
                    match self.queue.front() {
                        Some(&(key, _)) if key as usize != best => {
                            self.queue.pop_front();
                            self.push(policy, key as usize, now);
                        }
                        _ => break,
                    }
                }
                best
            }
            "clock" => loop {
                let (key, at) = self.queue.pop_front().expect("something is held");
                let key = key as usize;
                if !self.held[key] || self.stamp[key] != at || key == keep {
                    continue;
                }
                if self.read[key] {
                    self.read[key] = false;
                    self.push(policy, key, now);
                    continue;
                }
                return key;
            },
            policy if SAMPLED.contains(&policy) => {
                // The largest score goes: distance × bytes, or bytes over the count.
                let mut best = (0u128, usize::MAX);
                for _ in 0..self.draws.min(self.list.len()) {
                    self.rng ^= self.rng << 13;
                    self.rng ^= self.rng >> 7;
                    self.rng ^= self.rng << 17;
                    let key = self.list[(self.rng % self.list.len() as u64) as usize] as usize;
                    if key == keep {
                        continue;
                    }
                    let score = match policy {
                        "belady_size" => {
                            u128::from(self.next_of[key] - now) * u128::from(self.work.size[key])
                        }
                        "sampled_per_byte" => {
                            (u128::from(self.work.size[key]) << 32) / u128::from(self.count[key])
                        }
                        _ => {
                            let count = u128::from(self.sketch.estimate(key)).max(1);
                            (u128::from(self.work.size[key]) << 32) / count
                        }
                    };
                    if best.1 == usize::MAX || score > best.0 {
                        best = (score, key);
                    }
                }
                assert!(best.1 != usize::MAX, "only the new key is held");
                best.1
            }
            _ => loop {
                let Reverse((_, at, key)) = self.heap.pop().expect("something is held");
                let key = key as usize;
                if self.held[key] && self.stamp[key] == at && key != keep {
                    return key;
                }
            },
        }
    }

    fn remove(&mut self, key: usize) {
        self.held[key] = false;
        self.held_bytes -= self.work.size[key];
        self.items -= 1;
        let at = self.place[key] as usize;
        if at < self.list.len() && self.list[at] as usize == key {
            let last = self.list.pop().expect("not empty");
            if at < self.list.len() {
                self.list[at] = last;
                self.place[last as usize] = at as u32;
            }
        }
    }

    fn insert(&mut self, policy: &str, key: usize) {
        self.held[key] = true;
        self.held_bytes += self.work.size[key];
        self.items += 1;
        self.read[key] = false;
        if SAMPLED.contains(&policy) {
            self.place[key] = self.list.len() as u32;
            self.list.push(key as u32);
        }
    }
}

fn replay(work: &Workload, policy: &str, budget: u64, args: &Args) -> Outcome {
    let mut cache = Cache::new(work, budget, args);
    let (mut gets, mut misses, mut evictions, mut cold) = (0u64, 0u64, 0u64, 0u64);
    for (at, &key) in work.keys.iter().enumerate() {
        let (key, now) = (key as usize, at as u32);
        cache.count[key] += 1;
        if policy.starts_with("sketch")
            || policy.starts_with("queue_sketch")
            || policy.starts_with("window")
        {
            cache.sketch.count(key);
        }
        cache.next_of[key] = work.next[at];
        let measured = at >= work.warmup;
        gets += u64::from(measured);
        // The key's first request ever: a miss for every policy.
        cold += u64::from(measured && cache.count[key] == 1);
        if cache.held[key] {
            match policy {
                "fifo" | "queue_sketch_per_byte" | "window_per_byte" => {}
                "clock" => cache.read[key] = true,
                _ => cache.push(policy, key, now),
            }
            continue;
        }
        misses += u64::from(measured);
        let size = work.size[key];
        if size > cache.budget {
            continue;
        }
        cache.insert(policy, key);
        while cache.held_bytes > cache.budget {
            let victim = cache.victim(policy, key, now);
            cache.remove(victim);
            evictions += 1;
        }
        cache.push(policy, key, now);
        if cache.recent_len > 0 {
            cache.recent.push_back((key as u32, now));
            if cache.recent.len() > cache.recent_len {
                cache.recent.pop_front();
            }
        }
    }
    Outcome {
        gets,
        misses,
        evictions,
        cold,
        items_at_end: cache.items,
        held_bytes_at_end: cache.held_bytes,
    }
}

fn main() {
    let args = parse_args();
    let work = Workload::new(&args);
    let mut policies = Map::new();
    for policy in &args.policies {
        let runs: Vec<Value> = args
            .budgets
            .iter()
            .map(|&budget| {
                let outcome = replay(&work, policy, budget, &args);
                json!({
                    "budget_bytes": budget,
                    "gets": outcome.gets,
                    "misses": outcome.misses,
                    "miss_ratio": outcome.misses as f64 / outcome.gets.max(1) as f64,
                    "evictions": outcome.evictions,
                    "cold_misses": outcome.cold,
                    "cold_miss_ratio": outcome.cold as f64 / outcome.gets.max(1) as f64,
                    "items_at_end": outcome.items_at_end,
                    "held_bytes_at_end": outcome.held_bytes_at_end,
                })
            })
            .collect();
        policies.insert(policy.clone(), Value::Array(runs));
    }
    let report = json!({
        "trace": {
            "keys": args.spec.keys,
            "exponent": args.spec.exponent,
            "seed": args.spec.seed,
            "max_value_bytes": args.spec.max_value_bytes,
            "warmup": args.warmup,
            "requests": args.requests,
        },
        "overhead": args.overhead,
        "draws": args.draws,
        "window": args.window,
        "moves": args.moves,
        "recent": args.recent,
        "policies": policies,
    });
    println!("{report}");
}
