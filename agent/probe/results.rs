//! Probe outcomes as the planner sees them.

use std::collections::HashMap;

/// A cached probe outcome for one container instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeResult {
    Success,
    Failure,
    Unknown,
}

/// Startup and liveness results by container ID (the planner's view of the probe workers).
#[derive(Debug, Clone, Default)]
pub struct ProbeResults {
    pub startup: HashMap<String, ProbeResult>,
    pub liveness: HashMap<String, ProbeResult>,
}
