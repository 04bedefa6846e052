//! The one shape of an experiment: run (telling progress), keep, summarise, render tables
//! and figures, and replot from the kept run.
//!
//! ```text
//!   keep_run(&experiment, out, progress)       replot::<E>(out)   (experiments/replot-all.sh)
//!      │ E::run(progress) ──> E::Results           │ results::read_json(out)
//!      │ results::write_json(out)                  │ E::check (percentiles = histograms')
//!      ├─────────────────────────────┬─────────────┘
//!      ▼                             ▼
//!   E::render(results, out)   tables (results.md) and figures, through lab's
//!                             tables and figures modules
//!   E::summarise(results)     the text the command prints
//! ```
//!
//! An experiment decides what to run and how to read it; keeping, checking and redrawing go
//! through these two drivers, so every experiment writes and replots the same way.

use std::path::Path;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::results::{read_json, write_json};

/// How far a run has got: `done` of `total` steps of `stage`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress<'a> {
    /// What is being run (e.g. `chisel (simulated)`).
    pub stage: &'a str,
    /// Steps finished.
    pub done: u64,
    /// Steps in all.
    pub total: u64,
}

/// Told of progress from any of the run's threads.
pub type ProgressFn<'a> = &'a (dyn Fn(Progress<'_>) + Sync);

/// One experiment: it runs, its results are kept as `results.json`, and its tables and
/// figures are drawn from those results alone (so a replot redraws them byte for byte).
pub trait Experiment {
    /// What the run keeps (`results.json`).
    type Results: Serialize + DeserializeOwned;

    /// Runs the experiment, telling `progress` as steps finish.
    fn run(&self, progress: ProgressFn<'_>) -> Result<Self::Results, String>;

    /// Checks the percentiles the results report against the histograms they kept; how many
    /// were checked (an error on a mismatch).
    fn check(results: &Self::Results) -> Result<usize, String>;

    /// Writes the tables and figures of `results` into `out`.
    fn render(results: &Self::Results, out: &Path) -> Result<(), String>;

    /// The summary the command prints after a run or a replot.
    fn summarise(results: &Self::Results) -> String;
}

/// Runs `experiment`, keeps its results in `out` and draws them; returns the results.
pub fn keep_run<E: Experiment>(
    experiment: &E,
    out: &Path,
    progress: ProgressFn<'_>,
) -> Result<E::Results, String> {
    let results = experiment.run(progress)?;
    write_json(out, &results)?;
    E::render(&results, out)?;
    Ok(results)
}

/// Redraws the tables and figures of the run kept in `out` after checking its percentiles;
/// returns the results and how many percentiles were checked.
pub fn replot<E: Experiment>(out: &Path) -> Result<(E::Results, usize), String> {
    let results: E::Results = read_json(out)?;
    let checked = E::check(&results)?;
    E::render(&results, out)?;
    Ok((results, checked))
}

/// A progress callback that ignores what it is told (runs without a terminal).
pub fn no_progress(_: Progress<'_>) {}
