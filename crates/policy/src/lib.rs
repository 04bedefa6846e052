//! tailtrim-policy: pure decisions, no I/O and no clock of its own.
//!
//! ```text
//!   key ──► ring (hash + distribution) ──► replica set ──┐
//!                                                        ▼
//!   request ──► planner::plan(&request, &view) ──► Vec<Action> ──► client/proxy (owns sockets)
//!               (batch · rein SBF/SDS priorities · tailx delays ·     │ priorities: serverq
//!                cost-sbf cost ranks · cost-rel relative classes ·    │ (strict · deadline · drr)
//!                size-rel: cost-rel, large opsets one class lower ·  │
//!                auto: one of batch/chisel/cost-rel per epoch)        │
//!                      ▲                                  │
//!                      └── health (TKO state, EWMA) ◄─────┘ observations (time is a parameter)
//!
//!   chisel: elephants split into chunks (chisel), mice merged into shared queries
//!           (chisel_merge: who joins, each member's share of the reply)
//!
//!   a backend's connections' requests in flight (and their oldest's age)
//!       ──► lanes::ConnectionChoice (round robin, least-loaded, avoid-slow) ──► next connection
//!   reads ──► hotkeys (sampled space-saving top-k) ─┐
//!   old owners' key listings (moved keys) ──► warmup::CopyPlanner (bounded) ──► copies
//!   membership change ──► warmup::WarmupProgress (hit ratios) ──► warm-up over?
//!   "const=20us,key=2us,dist=exp" ──► costspec::CostSpec ──► emulated / simulated times
//!                                     (server's emulation and the simulator share it)
//!   server worker / simulated core ──► dispatch (place, steal_victim, key → worker) and
//!                                      sizeaware (EpochDriver, PackedDecision) ──► same decisions
//! ```
//!
//! Modules depend one way (no import cycle, `scripts/check-cycles.py`): the planner factory
//! ([`planner::PlannerKind`]) sits above the planners (`chisel`, `rein`, `tailx`, `costsbf`, and
//! `costrel` over `costsbf`'s estimates, `sizerel` over `costrel`, `auto` over `chisel` and
//! `costrel`),
//! which sit above their contract ([`planner::base`]), whose grouping picks each key's replica
//! by [`spread::ReplicaChoice`] (C3's rule, spread over the request's replicas, or gathered on
//! few of them) over
//! [`health`]; `chisel_merge` names no other module;
//! `dispatch` and `sizeaware`'s parts use
//! the size-aware vocabulary and error ([`sizeaware::class`], [`sizeaware::error`]), and
//! [`error`] names no other module.
//!
//! Every module is deterministic: time comes in as [`health::Timestamp`], randomness (if any)
//! from a seed in the caller's config. The runtime (`tailtrim-client`) and the simulator run the
//! same code.

pub mod auto;
pub mod chisel;
pub mod chisel_merge;
pub mod costrel;
pub mod costsbf;
pub mod costspec;
pub mod dispatch;
pub mod drr;
pub mod error;
pub mod health;
pub mod hotkeys;
pub mod lanes;
pub mod planner;
pub mod rein;
pub mod ring;
pub mod serverq;
pub mod sizeaware;
pub mod sizerel;
pub mod spread;
pub mod tailx;
pub mod warmup;
