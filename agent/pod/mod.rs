//! Pods: the per-pod worker, its pure planner, and the executor that applies plans through CRI.
pub mod carry;
pub mod cgroups;
// Shared with the probes, so they live below both; re-exported for the pod modules.
pub use crate::{backoff, context, expand};

#[cfg(test)]
mod env_tests;
pub mod hash;
pub mod hooks;
pub mod metadata_env;
pub mod plan;
pub mod pod_cgroup;
pub mod resize;
pub mod seccomp;
pub mod security;
pub mod shutdown;
pub mod spec;
pub mod start;
pub mod stop_signal;
pub mod supervisor;
pub mod terminate;
pub mod update;
pub mod userns;
pub mod worker;
