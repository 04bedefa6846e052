//! The experiments, one module each: what they run, how they summarise it, their tables and
//! figures, and their replot from kept runs. The `tailtrim experiment` subcommands call them.

pub mod chisel;
pub mod chisel_testbed;
pub mod common;
pub mod minos;
pub mod tailx;
pub mod tailx_testbed;
pub mod tier;
pub mod warmup;
