//! Request latency by class, as an operator reads a tier's tail: small gets, large gets,
//! mice multigets and elephant multigets, each in its own HDR histogram.
//!
//! ```text
//!   front end: request parsed ─► Classifier::keys(request) ─┐ (reads only)
//!              reply composed ───────────────────────────────┴─► ClassLatency::record
//!                                 keys == 1: reply bytes > large_value_bytes ? large_get : small_get
//!                                 keys >= 2: keys > elephant_keys ? elephant : mice
//!   metrics: latency_class_us (summary, label class) ─► stats `latency_class_us_p99:<class>`,
//!                                                       /metrics `tailtrim_latency_class_seconds`
//! ```
//!
//! A get is classed by the size of its reply (its value plus the `VALUE` line and `END`), a
//! multiget by its keys: what the client asked for, before any planner splits or merges it.
//! The bounds are `[classes]` in the proxy's configuration; the defaults are the ones the
//! load generator's classes use (`tailtrim bench`: large above 1,499 bytes; an elephant has
//! 50 keys or more), so a bench report and the proxy's `stats` speak of the same requests.
//! Writes, deletes and the rest are in no class (they are in `pool_latency_us`).

use std::time::Instant;

use serde::{Deserialize, Serialize};
use tailtrim_client::stats::LatencyHistogram;
use tailtrim_proto::Request;

/// Default bound of a large get: a reply of more bytes than this is a large get (the bench's
/// `large_threshold_bytes`).
pub const DEFAULT_LARGE_VALUE_BYTES: u64 = 1_499;
/// Default bound of an elephant: a multiget of at least this many keys is an elephant (the
/// bench's `elephant_min_keys`).
pub const DEFAULT_ELEPHANT_KEYS: usize = 50;

/// `[classes]`: where the per-class latency histograms draw their lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClassesSection {
    /// A one-key get whose reply has more bytes than this is a large get, else a small get.
    pub large_value_bytes: u64,
    /// A multiget of at least this many keys is an elephant, of 2 up to one fewer a mouse.
    pub elephant_keys: usize,
}

impl Default for ClassesSection {
    fn default() -> Self {
        ClassesSection {
            large_value_bytes: DEFAULT_LARGE_VALUE_BYTES,
            elephant_keys: DEFAULT_ELEPHANT_KEYS,
        }
    }
}

impl ClassesSection {
    /// Whether every key has its default (the section is then left out of a printed
    /// configuration).
    pub fn is_default(&self) -> bool {
        *self == ClassesSection::default()
    }
}

/// A latency class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LatencyClass {
    /// A one-key read whose reply is at most `large_value_bytes`.
    SmallGet,
    /// A one-key read whose reply is larger.
    LargeGet,
    /// A multiget of fewer than `elephant_keys` keys.
    Mice,
    /// A multiget of `elephant_keys` keys or more.
    Elephant,
}

impl LatencyClass {
    /// Every class, in the order `stats` lists them.
    pub const ALL: [LatencyClass; 4] = [
        LatencyClass::SmallGet,
        LatencyClass::LargeGet,
        LatencyClass::Mice,
        LatencyClass::Elephant,
    ];

    /// The name in `stats` (`latency_class_us_p99:<name>`) and the `class` label.
    pub fn name(self) -> &'static str {
        match self {
            LatencyClass::SmallGet => "small_get",
            LatencyClass::LargeGet => "large_get",
            LatencyClass::Mice => "mice",
            LatencyClass::Elephant => "elephant",
        }
    }
}

/// One histogram per class, and the bounds that class requests.
#[derive(Debug, Default)]
pub struct ClassLatency {
    bounds: ClassesSection,
    histograms: [LatencyHistogram; 4],
}

impl ClassLatency {
    /// Empty histograms with these bounds.
    pub fn new(bounds: ClassesSection) -> ClassLatency {
        ClassLatency {
            bounds,
            histograms: Default::default(),
        }
    }

    /// The bounds in use.
    pub fn bounds(&self) -> ClassesSection {
        self.bounds
    }

    /// The keys a request reads, when it is a read that has a class (get, gets, gat, gats,
    /// mg); `None` for everything else.
    pub fn read_keys(request: &Request) -> Option<usize> {
        match request {
            Request::Get { keys, .. } | Request::GetAndTouch { keys, .. } => Some(keys.len()),
            Request::MetaGet { .. } => Some(1),
            _ => None,
        }
    }

    /// The class of a read of `keys` keys answered with `reply_bytes` bytes.
    pub fn classify(&self, keys: usize, reply_bytes: usize) -> LatencyClass {
        match keys {
            0 | 1 if reply_bytes as u64 > self.bounds.large_value_bytes => LatencyClass::LargeGet,
            0 | 1 => LatencyClass::SmallGet,
            _ if keys >= self.bounds.elephant_keys => LatencyClass::Elephant,
            _ => LatencyClass::Mice,
        }
    }

    /// Records a read of `keys` keys, started at `started`, answered with `reply_bytes`.
    pub fn record(&self, keys: usize, reply_bytes: usize, started: Instant) {
        let class = self.classify(keys, reply_bytes);
        let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.histogram(class).record_micros(micros);
    }

    /// The histogram of a class.
    pub fn histogram(&self, class: LatencyClass) -> &LatencyHistogram {
        &self.histograms[class as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gets_are_classed_by_reply_size_and_multigets_by_keys() {
        let classes = ClassLatency::new(ClassesSection {
            large_value_bytes: 100,
            elephant_keys: 10,
        });
        assert_eq!(classes.classify(1, 100), LatencyClass::SmallGet);
        assert_eq!(classes.classify(1, 101), LatencyClass::LargeGet);
        assert_eq!(classes.classify(2, 1_000_000), LatencyClass::Mice);
        assert_eq!(classes.classify(9, 5), LatencyClass::Mice);
        assert_eq!(classes.classify(10, 5), LatencyClass::Elephant);
    }

    #[test]
    fn a_record_lands_in_its_class_only() {
        let classes = ClassLatency::new(ClassesSection::default());
        classes.record(DEFAULT_ELEPHANT_KEYS, 10, Instant::now());
        let counts: Vec<u64> = LatencyClass::ALL
            .iter()
            .map(|class| classes.histogram(*class).snapshot(&[0.99]).count)
            .collect();
        assert_eq!(counts, vec![0, 0, 0, 1]);
    }

    #[test]
    fn only_reads_have_a_class() {
        let get = Request::Get {
            keys: vec![
                bytes::Bytes::from_static(b"a"),
                bytes::Bytes::from_static(b"b"),
            ]
            .into(),
            with_cas: false,
        };
        assert_eq!(ClassLatency::read_keys(&get), Some(2));
        assert_eq!(ClassLatency::read_keys(&Request::Version), None);
    }
}
