//! A container's cgroup values read back as resources, for a runtime that does not report them
//! in CRI status (the resize compares them with the allocation). The pod cgroup itself is
//! named, made, changed and removed through [`crate::cgroup::Cgroups`], which knows the driver.

use super::resize::{Amounts, CPU_PERIOD};
use crate::cgroup::{CgroupName, Cgroups};

/// What a container's cgroup holds. Read synchronously: it is called lazily from inside the
/// pure sync decision, only for a runtime that reports no resources, and is one small sysfs
/// read.
pub fn read_container(cgroups: &Cgroups, pod: &CgroupName, id: &str) -> Option<Amounts> {
    let c = cgroups.read_values_now(&cgroups.container_path(pod, id)).ok()?;
    Some(Amounts {
        cpu_request: if c.cpu_shares > 2 { (c.cpu_shares * 1000 + 1023) / 1024 } else { 0 },
        cpu_limit: c.cpu_quota.map_or(0, |q| q * 1000 / CPU_PERIOD),
        memory_request: 0,
        memory_limit: c.memory_limit.unwrap_or(0),
    })
}
