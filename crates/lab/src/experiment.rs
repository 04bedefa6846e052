//! The one shape of an experiment: run (telling progress), keep, summarise, render tables
//! and figures, and replot from the kept run.
//!
//! ```text
//!   keep_run(&experiment, out, progress)       replot::<E>(out)   (experiments/replot-all.sh)
//!      │ E::run(progress) ──> E::Results           │ results::read_json(out)
//!      │ results::write_json(out)                  │ E::refresh (an older file brought up to
//!      │                                           │   date; rewritten if it changed)
//!      │                                           │ E::check (percentiles = histograms')
//!      ├─────────────────────────────┬─────────────┘
//!      ▼                             ▼
//!   E::render(results, out)   tables (results.md) and figures, through lab's
//!                             tables and figures modules
//!   E::summarise(results)     the text the command prints
//! ```
//!
//! An experiment decides what to run and how to read it; keeping, checking and redrawing go
//! through these two drivers, so every experiment writes and replots the same way. Scenarios
//! that are independent of each other (simulations) run on several threads through
//! [`run_each`].

use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

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

    /// Brings results read from a kept file up to date (a schema moved, a summary derived
    /// anew); whether they changed, so that the file is rewritten. By default nothing changes.
    fn refresh(_results: &mut Self::Results) -> bool {
        false
    }

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

/// Redraws the tables and figures of the run kept in `out` after checking its percentiles
/// (rewriting `results.json` first if [`Experiment::refresh`] brought it up to date); returns
/// the results and how many percentiles were checked.
pub fn replot<E: Experiment>(out: &Path) -> Result<(E::Results, usize), String> {
    let mut results: E::Results = read_json(out)?;
    if E::refresh(&mut results) {
        write_json(out, &results)?;
    }
    let checked = E::check(&results)?;
    E::render(&results, out)?;
    Ok((results, checked))
}

/// Runs `work` on every item on `jobs` threads (at least one), telling `progress` as items
/// finish (`stage`, items done of all); the outcomes in the items' order, or the first error.
pub fn run_each<Item: Sync, Outcome: Send>(
    items: &[Item],
    jobs: usize,
    stage: &str,
    progress: ProgressFn<'_>,
    work: impl Fn(&Item) -> Result<Outcome, String> + Sync,
) -> Result<Vec<Outcome>, String> {
    let total = items.len() as u64;
    let next = AtomicUsize::new(0);
    let finished = AtomicU64::new(0);
    let slots: Mutex<Vec<Option<Result<Outcome, String>>>> =
        Mutex::new(items.iter().map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(index) else {
                    break;
                };
                let outcome = work(item);
                if let Ok(mut slots) = slots.lock() {
                    slots[index] = Some(outcome);
                }
                let done = finished.fetch_add(1, Ordering::Relaxed) + 1;
                progress(Progress { stage, done, total });
            });
        }
    });
    slots
        .into_inner()
        .map_err(|_| "a worker thread panicked".to_string())?
        .into_iter()
        .map(|slot| slot.unwrap_or_else(|| Err("an item was not run".to_string())))
        .collect()
}

/// A progress callback that ignores what it is told (runs without a terminal).
pub fn no_progress(_: Progress<'_>) {}
