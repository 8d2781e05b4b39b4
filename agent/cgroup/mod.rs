//! The node's pod cgroups, as the kubelet's cgroup manager keeps them under either cgroup
//! driver (`pkg/kubelet/cm`): how a pod's cgroup is named (`name`), which driver is in force
//! (`driver`), its files on cgroup v1 and v2 (`files`), the pod cgroups found on the host
//! (`pods`). Pure naming and resolution; the file functions block (blocking pool).

pub mod driver;
pub mod files;
pub mod name;
pub mod pods;

pub use driver::CgroupDriver;
pub use name::{CgroupName, Qos};

/// The CFS period the kubelet uses (100 ms), in µs.
pub const CPU_PERIOD: i64 = 100_000;
/// The kernel's floor for `cpu.shares` (the kubelet's `MinShares`).
pub const MIN_SHARES: i64 = 2;

/// A cgroup's values as the kubelet sets a pod's (`ResourceConfig`): the memory limit and the
/// CFS quota (`None`: unlimited) and the cpu shares (a weight on v2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CgroupValues {
    /// Bytes; `None` = unlimited.
    pub memory_limit: Option<i64>,
    /// µs per `CPU_PERIOD`; `None` = unlimited.
    pub cpu_quota: Option<i64>,
    pub cpu_shares: i64,
}
