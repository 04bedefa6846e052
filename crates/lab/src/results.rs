//! `results.json`: written pretty-printed with a final newline, read back for `--replot`.

use std::path::Path;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::LabError;

/// The file name every experiment writes its results to.
pub const RESULTS_FILE: &str = "results.json";

/// Writes `value` as pretty JSON to `directory/results.json` (creating the directory).
pub fn write_json<T: Serialize>(directory: &Path, value: &T) -> Result<(), LabError> {
    std::fs::create_dir_all(directory)
        .map_err(|source| LabError::io(format!("creating {}", directory.display()), source))?;
    let text = serde_json::to_string_pretty(value)
        .map_err(|error| LabError::Results(format!("serializing results: {error}")))?;
    let path = directory.join(RESULTS_FILE);
    std::fs::write(&path, text + "\n")
        .map_err(|source| LabError::io(format!("writing {}", path.display()), source))
}

/// Reads `directory/results.json`.
pub fn read_json<T: DeserializeOwned>(directory: &Path) -> Result<T, LabError> {
    let path = directory.join(RESULTS_FILE);
    let text = std::fs::read_to_string(&path)
        .map_err(|source| LabError::io(format!("reading {}", path.display()), source))?;
    serde_json::from_str(&text)
        .map_err(|error| LabError::Results(format!("parsing {}: {error}", path.display())))
}

/// Writes `text` to `directory/name`.
pub fn write_text(directory: &Path, name: &str, text: &str) -> Result<(), LabError> {
    let path = directory.join(name);
    std::fs::write(&path, text)
        .map_err(|source| LabError::io(format!("writing {}", path.display()), source))
}

#[cfg(test)]
mod tests {
    use super::{read_json, write_json};
    use crate::meta::RunMetadata;

    /// A replot reads `results.json` and writes it again: every float must come back with the
    /// digits it was written with (serde_json's `float_roundtrip`; without it this value,
    /// taken from a kept run, reads back one unit in the last place lower).
    #[test]
    fn floats_read_back_exactly() {
        for text in [
            "13.618846112297241",
            "13.098522377602517",
            "14.323882439422647",
        ] {
            let value: f64 = serde_json::from_str(text).expect("parses");
            assert_eq!(serde_json::to_string(&value).expect("serializes"), text);
        }
    }

    /// Metadata of a file written before `build` existed stays without it when rewritten.
    #[test]
    fn a_replot_adds_no_empty_build_field() {
        let directory = std::env::temp_dir().join(format!("lab-results-{}", std::process::id()));
        let old = RunMetadata {
            command: "tailtrim experiment minos".into(),
            ..RunMetadata::default()
        };
        write_json(&directory, &old).expect("writes");
        let text = std::fs::read_to_string(directory.join("results.json")).expect("reads");
        assert!(!text.contains("\"build\""), "{text}");
        let back: RunMetadata = read_json(&directory).expect("reads back");
        assert_eq!(back, old);
        let built = RunMetadata {
            build: "abc".into(),
            ..old
        };
        write_json(&directory, &built).expect("writes");
        let text = std::fs::read_to_string(directory.join("results.json")).expect("reads");
        assert!(text.contains("\"build\": \"abc\""), "{text}");
        std::fs::remove_dir_all(&directory).expect("cleans up");
    }
}
