//! tailtrim-model: analytic latency models. Pure math: no I/O, no clocks, deterministic.
//!
//! ```text
//!              ┌──────────── cheng (Theorem 1 of Cheng et al.) ─────────────┐
//!  ChengParams │ pareto::GeneralizedPareto ─▶ solve_delta (excess-LST root)  │ ─▶ ChengPrediction
//!              │   ─▶ eq. 9 key quantiles ─▶ eq. 14 E[T_S(N)] ─▶ eq. 23 T_D  │
//!              └───────────────┬─────────────────────────────────────────────┘
//!                              └─▶ cliff::cliff_utilization(ξ)  (Table 4)
//!
//!              ┌──────────── chisel (layered split/merge model) ────────────┐
//!  ChiselParams│ merge wait ─▶ client threads (M/G/1) ─▶ server threads      │ ─▶ Prediction
//!   + (B, L)   │ (M/G/1) ─▶ fork-join over chunks (harmonic numbers)         │
//!              └───────────────┬─────────────────────────────────────────────┘
//!                              └─▶ best_plan(params, grid): grid search over (B, L)
//! ```
//!
//! Both models are cheap enough to evaluate online: a Cheng prediction is one
//! root solve (a few thousand `exp` calls), a Chisel prediction is closed form.

mod error;
mod numeric;
mod time;

pub mod cheng;
pub mod chisel;
pub mod cliff;
pub mod pareto;

pub use error::ModelError;
pub use numeric::harmonic_number;
pub use time::Seconds;
