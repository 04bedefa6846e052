//! tailtrim-model: analytic latency models. Pure math: no I/O, no clocks, deterministic.
//!
//! ```text
//!              ┌──────────── cheng (Theorem 1 of Cheng et al.) ─────────────┐
//!  ChengParams │ pareto::GeneralizedPareto ─▶ solve_delta (excess-LST root)  │ ─▶ ChengPrediction
//!              │   ─▶ eq. 9 key quantiles ─▶ eq. 14 E[T_S(N)] ─▶ eq. 23 T_D  │
//!              └───────────────┬─────────────────────────────────────────────┘
//!                              └─▶ cliff::{knee_utilization, cliff_table}(ξ)  (Table 4)
//!
//!              ┌──────────── chisel (layered split/merge model) ────────────┐
//!  ChiselParams│ merge wait ─▶ client threads (GI/G/1) ─▶ server threads     │ ─▶ Prediction
//!   + (B, L)   │ (M/G/1) ─▶ fork-join over chunks (harmonic numbers)         │
//!              └───────────────┬─────────────────────────────────────────────┘
//!                              └─▶ best_plan(params, grid): grid search over (B, L)
//!
//!              ┌──────────── tier (servers × threads, fan-out) ──────────────┐
//!  WorkloadProfile │ per server GI/M/c on Cheng's δ (M/G/c wait) ─▶ max over  │ ─▶ TierPrediction
//!   + TierShape    │ the fan-out (heaviest server) ─▶ + client connection wait │
//!                  └───────┬──────────────────────────────┬──────────────────┘
//!                          └─▶ plan: fewest servers for a p99 objective      └─▶ live: a proxy's interval
//! ```
//!
//! Both models are cheap enough to evaluate online: a Cheng prediction is one
//! root solve (a few thousand `exp` calls), a Chisel prediction is closed form.
//! Derivations, assumptions and known errors: `docs/model-cheng.md`, `docs/model-chisel.md`, `docs/model.md` (tier, plan, live).
//!
//! ```
//! use tailtrim_model::cheng::{predict, ChengParams};
//! use tailtrim_model::chisel::{best_plan, ChiselModel, ChiselParams, PlanGrid};
//!
//! // Cheng et al. Table 3: E[T_S(N)] between ~351 and ~366 µs.
//! let table3 = predict(&ChengParams::paper_validation())?;
//! assert!(table3.server.lower.as_micros() > 340.0 && table3.server.upper.as_micros() < 380.0);
//!
//! // Chisel: evaluate one plan, then search the grid (what a proxy does every epoch).
//! let params = ChiselParams::paper_defaults();
//! let batching = ChiselModel::new(params)?.predict(1, params.elephant_keys)?;
//! let (merge_level, chunk_size, best) = best_plan(&params, &PlanGrid::default_for(&params))?;
//! assert!(best.overall.mean <= batching.overall.mean);
//! assert!(merge_level >= 1 && chunk_size >= 1);
//! # Ok::<(), tailtrim_model::ModelError>(())
//! ```

mod error;
mod numeric;
mod time;

pub mod cheng;
pub mod chisel;
pub mod chisel_online;
pub mod cliff;
pub mod evaluate;
pub mod live;
pub mod pareto;
pub mod plan;
pub mod tier;

pub use error::ModelError;
pub use numeric::harmonic_number;
pub use time::Seconds;
