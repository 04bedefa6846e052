//! `tailtrim bench --json` documents: the bench's report with the run's metadata beside it
//! and every latency histogram it read its percentiles from, so any percentile can be
//! recomputed from the file.
//!
//! ```text
//!   RunReport + ClassHistograms + RunMetadata ──► run_json   { ..report, metadata, histograms }
//!   SweepReport + per-point histograms        ──► sweep_json { ..report, metadata,
//!                                                              points[i].histograms }
//!   CacheAsideReport + RunMetadata            ──► cache_aside_json { ..report, metadata,
//!                                                                    latency_ns }
//! ```

use tailtrim_bench::class::ClassHistograms;
use tailtrim_bench::CacheAsideReport;

use crate::histogram::Encoded;
use crate::meta::RunMetadata;
use crate::LabError;

fn json_error(error: serde_json::Error) -> LabError {
    LabError::Results(error.to_string())
}

/// Each class's latency histogram (nanoseconds, hdrhistogram's V2 serialization in base64;
/// classes with no request left out), as a JSON object by class name.
pub fn encoded_classes(histograms: &ClassHistograms) -> Result<serde_json::Value, LabError> {
    let mut encoded = serde_json::Map::new();
    for class in tailtrim_bench::Class::ALL {
        let histogram = histograms.get(class);
        if !histogram.is_empty() {
            let value = Encoded::encode(histogram)?;
            encoded.insert(class.name().to_string(), serde_json::Value::String(value.0));
        }
    }
    Ok(serde_json::Value::Object(encoded))
}

/// `report` as JSON with the run's metadata (commit, machine, load) beside it.
fn with_metadata(
    report: &impl serde::Serialize,
    metadata: RunMetadata,
) -> Result<serde_json::Value, LabError> {
    let mut document = serde_json::to_value(report).map_err(json_error)?;
    if let Some(object) = document.as_object_mut() {
        object.insert(
            "metadata".to_string(),
            serde_json::to_value(metadata).map_err(json_error)?,
        );
    }
    Ok(document)
}

/// One run's `--json` document: the report, the run's metadata and each class's latency
/// histogram ([`encoded_classes`]), so any percentile can be recomputed.
pub fn run_json(
    report: &tailtrim_bench::RunReport,
    histograms: &ClassHistograms,
    metadata: RunMetadata,
) -> Result<String, LabError> {
    let mut document = with_metadata(report, metadata)?;
    if let Some(object) = document.as_object_mut() {
        object.insert("histograms".to_string(), encoded_classes(histograms)?);
    }
    serde_json::to_string_pretty(&document).map_err(json_error)
}

/// A sweep's `--json` document: the sweep report with the metadata of the whole sweep, and
/// each point (`points[i]`) with its classes' histograms ([`encoded_classes`]).
pub fn sweep_json(
    report: &tailtrim_bench::SweepReport,
    histograms: &[ClassHistograms],
    metadata: RunMetadata,
) -> Result<String, LabError> {
    let mut document = with_metadata(report, metadata)?;
    if let Some(points) = document
        .get_mut("points")
        .and_then(serde_json::Value::as_array_mut)
    {
        for (point, histograms) in points.iter_mut().zip(histograms) {
            if let Some(object) = point.as_object_mut() {
                object.insert("histograms".to_string(), encoded_classes(histograms)?);
            }
        }
    }
    serde_json::to_string_pretty(&document).map_err(json_error)
}

/// A cache-aside run's `--json` document: the report, the run's metadata and every request's
/// latency (`latency_ns`, the histogram its p50 and p99 come from).
pub fn cache_aside_json(
    report: &CacheAsideReport,
    metadata: RunMetadata,
) -> Result<String, LabError> {
    let mut document = with_metadata(report, metadata)?;
    if let (Some(object), Some(histogram)) = (document.as_object_mut(), &report.latency_ns) {
        let encoded = Encoded::encode(histogram)?;
        object.insert(
            "latency_ns".to_string(),
            serde_json::Value::String(encoded.0),
        );
    }
    serde_json::to_string_pretty(&document).map_err(json_error)
}
