//! Pods: the per-pod worker, its pure planner, and the executor that applies plans through CRI.
pub mod backoff;
pub mod cgroups;
pub mod context;
pub mod expand;
pub mod hash;
pub mod hooks;
pub mod plan;
pub mod spec;
pub mod start;
pub mod supervisor;
pub mod terminate;
pub mod update;
pub mod worker;
