//! Startup, readiness and liveness probes (spec §6): one timer-driven task per probe per
//! container instance; results feed the planner (startup, liveness) and status (started, ready).
pub mod check;
pub mod manager;
mod results;
pub mod tracker;
mod worker;

pub use self::results::{ProbeResult, ProbeResults};
