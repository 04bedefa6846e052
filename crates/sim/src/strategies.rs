//! The simulated dispatch policies as strategies, one file each, as the server's
//! `policies/` are: [`engine`](crate::engine) runs the event loop and names each policy in
//! one place (the factory in `engine::run`); a strategy holds only its policy's state and
//! decides with the policy crate's code ([`crate::decide`]). Both see each other through
//! [`host`]: the engine implements [`host::Host`], each policy [`host::Strategy`].
//!
//! ```text
//!   engine ──► pinned · early_binding · stealing · late_binding · size_aware ──► host
//!     │                      (each: arrive, next_job, and its own hooks)          ▲
//!     └──────────────────────── implements host::Host ─────────────────────────────┘
//! ```

pub mod early_binding;
pub mod host;
pub mod late_binding;
pub mod pinned;
pub mod size_aware;
pub mod stealing;
