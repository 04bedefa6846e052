//! Each run's latency histogram, kept in `results.json` so any percentile can be recomputed:
//! hdrhistogram's V2 serialization (the format HdrHistogram's other implementations read),
//! base64-encoded into a JSON string.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hdrhistogram::serialization::{Deserializer, Serializer, V2Serializer};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::LabError;

/// A histogram in its serialized form (V2, base64). Values are whatever unit the recorder
/// used; the bench records nanoseconds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Encoded(pub String);

impl Encoded {
    /// Serializes `histogram`.
    pub fn encode(histogram: &Histogram<u64>) -> Result<Self, LabError> {
        let mut bytes = Vec::new();
        V2Serializer::new()
            .serialize(histogram, &mut bytes)
            .map_err(|error| LabError::Histogram(format!("serializing: {error:?}")))?;
        Ok(Self(STANDARD.encode(bytes)))
    }

    /// The histogram back.
    pub fn decode(&self) -> Result<Histogram<u64>, LabError> {
        let bytes = STANDARD
            .decode(self.0.as_bytes())
            .map_err(|error| LabError::Histogram(format!("base64: {error}")))?;
        Deserializer::new()
            .deserialize(&mut bytes.as_slice())
            .map_err(|error| LabError::Histogram(format!("deserializing: {error:?}")))
    }

    /// The value at `percentile` (0–100) of the decoded histogram, divided by `scale` (e.g.
    /// 1000 for nanoseconds to microseconds); `None` when empty or undecodable.
    #[must_use]
    pub fn percentile(&self, percentile: f64, scale: f64) -> Option<f64> {
        let histogram = self.decode().ok()?;
        (!histogram.is_empty())
            .then(|| histogram.value_at_quantile(percentile / 100.0) as f64 / scale)
    }

    /// Checks percentiles reported from this histogram (nanoseconds), `(label, percentile,
    /// µs)`, against what it gives again: the first that differs by more than 1e-6 µs, worded
    /// `reported {label} {µs} µs, its histogram's {again} µs`; `None` when all agree.
    #[must_use]
    pub fn disagreement(&self, reported: &[(&str, f64, f64)]) -> Option<String> {
        reported.iter().find_map(|&(label, percentile, micros)| {
            let again = self.percentile(percentile, 1e3).unwrap_or(0.0);
            ((again - micros).abs() > 1e-6)
                .then(|| format!("reported {label} {micros} µs, its histogram's {again} µs"))
        })
    }
}

/// Adds every decodable histogram of `encoded` into one (for pooling repeats); `None` when
/// there is none.
#[must_use]
pub fn pooled<'a>(encoded: impl IntoIterator<Item = &'a Encoded>) -> Option<Histogram<u64>> {
    let mut total: Option<Histogram<u64>> = None;
    for histogram in encoded.into_iter().filter_map(|one| one.decode().ok()) {
        match &mut total {
            Some(sum) => {
                if sum.add(&histogram).is_err() {
                    return None;
                }
            }
            None => total = Some(histogram),
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::{pooled, Encoded};
    use hdrhistogram::Histogram;

    fn recorded(values: &[u64]) -> Histogram<u64> {
        let mut histogram = tailtrim_bench::class::new_histogram();
        for value in values {
            histogram.saturating_record(*value);
        }
        histogram
    }

    #[test]
    fn a_histogram_survives_the_round_trip_through_json() {
        let values: Vec<u64> = (1..=10_000).map(|i| i * 1_000).collect();
        let histogram = recorded(&values);
        let encoded = Encoded::encode(&histogram).expect("encodes");
        let json = serde_json::to_string(&encoded).expect("serializes");
        assert!(json.starts_with('"'), "a plain JSON string: {json:.40}");
        let back: Encoded = serde_json::from_str(&json).expect("parses");
        let decoded = back.decode().expect("decodes");
        assert_eq!(decoded.len(), histogram.len());
        assert_eq!(decoded.max(), histogram.max());
        for quantile in [0.5, 0.9, 0.99, 0.999] {
            assert_eq!(
                decoded.value_at_quantile(quantile),
                histogram.value_at_quantile(quantile)
            );
        }
        // The p99 of 1..=10000 µs, within the histogram's 2 significant digits.
        let p99 = back.percentile(99.0, 1_000.0).expect("not empty");
        assert!((p99 - 9_900.0).abs() / 9_900.0 < 0.01, "{p99}");
    }

    #[test]
    fn garbage_and_empty_histograms_are_reported_not_panicked_on() {
        assert!(Encoded("not base64 !".into()).decode().is_err());
        assert!(Encoded("AAAA".into()).decode().is_err());
        let empty = Encoded::encode(&recorded(&[])).expect("encodes");
        assert_eq!(empty.percentile(99.0, 1.0), None);
    }

    #[test]
    fn pooling_adds_the_repeats() {
        let first = Encoded::encode(&recorded(&[10, 20, 30])).expect("encodes");
        let second = Encoded::encode(&recorded(&[40_000])).expect("encodes");
        let total = pooled([&first, &second]).expect("two histograms");
        assert_eq!(total.len(), 4);
        assert!(total.max() >= 39_900);
        assert!(pooled([]).is_none());
    }
}
