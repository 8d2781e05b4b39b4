//! A container's cgroup values read back as resources, for a runtime that does not report them
//! in CRI status (the resize compares them with the allocation). The pod cgroup itself is
//! named, made, changed and removed through [`crate::cgroup::Cgroups`], which knows the driver.

use super::resize::{Amounts, CPU_PERIOD};
use crate::cgroup::{CgroupName, Cgroups, MIN_SHARES, milli_cpu_to_shares, shares_to_milli_cpu};

/// What a container's cgroup holds. Read synchronously: it is called lazily from inside the
/// pure sync decision, only for a runtime that reports no resources, and is one small sysfs
/// read. `allocated` is the container's allocation: its cpu request is the one applied when its
/// shares read back as the cgroup's. A v2 weight keeps one step in about 26 shares, so the
/// request read from the shares alone would differ from the allocation and the resize would
/// never settle.
pub fn read_container(
    cgroups: &Cgroups,
    pod: &CgroupName,
    id: &str,
    allocated: Option<&Amounts>,
) -> Option<Amounts> {
    let c = cgroups.read_values_now(&cgroups.container_path(pod, id)).ok()?;
    let applied = |a: &&Amounts| cgroups.shares_as_read(milli_cpu_to_shares(a.cpu_request)) == c.cpu_shares;
    let cpu_request = match allocated.filter(applied) {
        Some(a) => a.cpu_request,
        None if c.cpu_shares > MIN_SHARES => shares_to_milli_cpu(c.cpu_shares),
        None => 0,
    };
    Some(Amounts {
        cpu_request,
        cpu_limit: c.cpu_quota.map_or(0, |q| q * 1000 / CPU_PERIOD),
        memory_request: 0,
        memory_limit: c.memory_limit.unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::files::Hierarchy;
    use crate::cgroup::{CgroupDriver, Qos};

    /// A container's weight read back: the allocated request when it writes that weight, else
    /// the fewest shares of the weight as millicores; v1's shares are exact either way.
    #[test]
    fn cpu_request_read_back_from_the_weight() {
        let amounts = |cpu_request| Amounts { cpu_request, ..Default::default() };
        let cases = [
            (true, "39", Some(1000), 1000),
            (true, "39", None, 976),
            (true, "39", Some(900), 976),
            (true, "1", Some(0), 0),
            (true, "1", None, 0),
            (false, "1024", Some(1000), 1000),
            (false, "1024", None, 1000),
            (false, "922", Some(1000), 901),
        ];
        for (v2, shares, allocated, want) in cases {
            let root = tempfile::tempdir().expect("tempdir");
            let cgroups = Cgroups::with_hierarchy(CgroupDriver::Cgroupfs, Hierarchy::at(root.path(), v2));
            let pod = Cgroups::pod_name(Qos::Burstable, "a");
            let path = cgroups.container_path(&pod, "c1");
            let dir = |c: &str| root.path().join(c).join(path.trim_start_matches('/'));
            let (cpu, memory) = if v2 { (dir(""), dir("")) } else { (dir("cpu"), dir("memory")) };
            for d in [&cpu, &memory] {
                std::fs::create_dir_all(d).expect("mkdir");
            }
            let files: &[(&std::path::Path, &str, &str)] = if v2 {
                &[
                    (&cpu, "cpu.weight", shares),
                    (&cpu, "cpu.max", "max 100000"),
                    (&memory, "memory.max", "max"),
                ]
            } else {
                &[
                    (&cpu, "cpu.shares", shares),
                    (&cpu, "cpu.cfs_quota_us", "-1"),
                    (&memory, "memory.limit_in_bytes", "9223372036854771712"),
                ]
            };
            for (d, f, v) in files {
                std::fs::write(d.join(f), v).expect("write");
            }
            let got = read_container(&cgroups, &pod, "c1", allocated.map(amounts).as_ref()).expect("read");
            assert_eq!(got.cpu_request, want, "v2 {v2}, {shares}, allocated {allocated:?}");
        }
    }
}
