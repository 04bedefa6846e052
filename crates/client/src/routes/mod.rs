//! The request path as layers, one concern per file.
//!
//! ```text
//!   failover  replica choice (C3) and failover of single-key requests   (Pool::read/write)
//!   planner   the multiget planner's plans, fetches and their retries   (Pool::multiget_each)
//!   gate      the priority gate in front of a backend's window          (Backend::call_*)
//! ```
pub mod failover;
pub mod gate;
pub mod planner;
