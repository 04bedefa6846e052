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
