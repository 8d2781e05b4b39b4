//! A cgroup's files on cgroup v1 (one tree per controller: `memory`, `cpu`, ...) and v2 (the
//! unified tree), for either driver's paths: what the kubelet's cgroup manager reads and writes
//! (`GetCgroupConfig`, `SetCgroupConfig`, `MemoryUsage`). Blocking: call from the blocking pool.

use std::path::{Path, PathBuf};

use super::{CPU_PERIOD, CgroupValues, MAX_SHARES, MIN_SHARES};

/// Where the host mounts its cgroups.
pub const ROOT: &str = "/sys/fs/cgroup";
/// v1 reports "no limit" as a page-rounded i64::MAX; anything this large is unlimited.
const UNLIMITED: i64 = 1 << 62;

/// The host's cgroup mount: its root and whether it is v2 (unified).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hierarchy {
    root: PathBuf,
    v2: bool,
}

impl Hierarchy {
    /// `/sys/fs/cgroup`, v2 when it holds `cgroup.controllers`.
    pub fn host() -> Self {
        let root = PathBuf::from(ROOT);
        let v2 = root.join("cgroup.controllers").exists();
        Hierarchy { root, v2 }
    }

    /// A hierarchy at `root` (tests lay one out in a temporary directory).
    pub fn at(root: impl Into<PathBuf>, v2: bool) -> Self {
        Hierarchy { root: root.into(), v2 }
    }

    pub fn is_v2(&self) -> bool {
        self.v2
    }

    /// The directory of cgroup `path` (a driver's path below the root, e.g.
    /// `/kubepods.slice/kubepods-pod1.slice`) for `controller`: v2 has one tree, v1 one per
    /// controller (`/sys/fs/cgroup/memory/kubepods.slice/...`).
    pub fn dir(&self, controller: &str, path: &str) -> PathBuf {
        let rel = path.trim_start_matches('/');
        if self.v2 { self.root.join(rel) } else { self.root.join(controller).join(rel) }
    }

    /// Every tree a cgroup may have a directory in: each mounted v1 controller (and v2's
    /// `unified` in hybrid mode, and `systemd`'s named tree), and the root itself (v2).
    pub fn trees(&self) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = std::fs::read_dir(&self.root)
            .map(|d| d.filter_map(Result::ok).map(|e| e.path()).filter(|p| p.is_dir()).collect())
            .unwrap_or_default();
        out.push(self.root.clone());
        out
    }

    /// Makes cgroup `path` and its missing parents (the cgroupfs manager's `Create`, for a
    /// cgroup the runtime does not make: the QoS parents). v1: in the `cpu` and `memory` trees,
    /// the ones whose files the agent writes (the runtime makes the rest with the first pod).
    /// v2: each parent first gets, in its `cgroup.subtree_control`, the controllers the root
    /// has and it lacks (libcontainer's `CreateCgroupPath`), or the child has no `cpu.weight`
    /// or `memory.max`.
    pub fn create(&self, path: &str) -> Result<(), String> {
        let mkdir = |d: &Path| match std::fs::create_dir(d) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                Err(format!("making the cgroup {}: {e}", d.display()))
            }
            _ => Ok(()),
        };
        let rel = path.trim_start_matches('/');
        if !self.v2 {
            for c in ["cpu", "memory", "pids"] {
                // A v1 host without the pids controller mounted has no pids limits to keep.
                if c == "pids" && !self.dir(c, "").is_dir() {
                    continue;
                }
                let dir = self.dir(c, path);
                std::fs::create_dir_all(&dir)
                    .map_err(|e| format!("making the cgroup {}: {e}", dir.display()))?;
            }
            return Ok(());
        }
        let available = read(&self.root.join("cgroup.controllers")).unwrap_or_default();
        let mut dir = self.root.clone();
        for component in rel.split('/').filter(|c| !c.is_empty()) {
            enable_controllers(&dir, &available);
            dir.push(component);
            mkdir(&dir)?;
        }
        Ok(())
    }

    /// The cgroup's current values (`GetCgroupConfig`).
    pub fn read_values(&self, path: &str) -> Result<CgroupValues, String> {
        if self.v2 {
            let d = self.dir("", path);
            let memory = read(&d.join("memory.max"))?;
            let cpu = read(&d.join("cpu.max"))?;
            let weight = number(&d.join("cpu.weight"))?;
            let quota = cpu.split_whitespace().next().and_then(|q| q.parse::<i64>().ok());
            return Ok(CgroupValues {
                memory_limit: memory.parse().ok(),
                cpu_quota: quota,
                cpu_shares: shares_of_weight(weight),
            });
        }
        let memory = number(&self.dir("memory", path).join("memory.limit_in_bytes"))?;
        let cpu = self.dir("cpu", path);
        let quota = number(&cpu.join("cpu.cfs_quota_us"))?;
        Ok(CgroupValues {
            memory_limit: (memory < UNLIMITED).then_some(memory),
            cpu_quota: (quota > 0).then_some(quota),
            cpu_shares: number(&cpu.join("cpu.shares"))?,
        })
    }

    pub fn write_memory_limit(&self, path: &str, limit: Option<i64>) -> Result<(), String> {
        if self.v2 {
            let v = limit.map_or_else(|| "max".to_string(), |l| l.to_string());
            return write(&self.dir("", path).join("memory.max"), &v);
        }
        write(&self.dir("memory", path).join("memory.limit_in_bytes"), &limit.unwrap_or(-1).to_string())
    }

    pub fn write_cpu_quota(&self, path: &str, quota: Option<i64>) -> Result<(), String> {
        if self.v2 {
            let q = quota.map_or_else(|| "max".to_string(), |q| q.to_string());
            return write(&self.dir("", path).join("cpu.max"), &format!("{q} {CPU_PERIOD}"));
        }
        let d = self.dir("cpu", path);
        write(&d.join("cpu.cfs_period_us"), &CPU_PERIOD.to_string())?;
        write(&d.join("cpu.cfs_quota_us"), &quota.unwrap_or(-1).to_string())
    }

    /// `pids.max` (v1: in the `pids` tree); `None` is unlimited (`max`). A v1 host without the
    /// pids controller mounted has no limit to keep (the kubelet refuses to start there; crilet
    /// runs without it, as it did before it set one).
    pub fn write_pids_limit(&self, path: &str, limit: Option<i64>) -> Result<(), String> {
        if !self.v2 && !self.dir("pids", "").is_dir() {
            return Ok(());
        }
        let v = limit.map_or_else(|| "max".to_string(), |l| l.to_string());
        write(&self.dir("pids", path).join("pids.max"), &v)
    }

    /// `pids.max`; `None` when unlimited.
    pub fn read_pids_limit(&self, path: &str) -> Result<Option<i64>, String> {
        let text = read(&self.dir("pids", path).join("pids.max"))?;
        if text == "max" {
            return Ok(None);
        }
        text.parse().map(Some).map_err(|e| format!("pids.max of {path}: {text:?}: {e}"))
    }

    pub fn write_cpu_shares(&self, path: &str, shares: i64) -> Result<(), String> {
        if self.v2 {
            return write(&self.dir("", path).join("cpu.weight"), &cpu_weight(shares).to_string());
        }
        write(&self.dir("cpu", path).join("cpu.shares"), &shares.to_string())
    }

    /// Writes every value (a new pod's cgroup, before its containers start).
    pub fn write_values(&self, path: &str, want: &CgroupValues) -> Result<(), String> {
        self.write_memory_limit(path, want.memory_limit)?;
        self.write_cpu_shares(path, want.cpu_shares)?;
        self.write_cpu_quota(path, want.cpu_quota)
    }

    /// The memory the cgroup uses now, in bytes (v1 `usage_in_bytes`, v2 `memory.current`).
    pub fn memory_usage(&self, path: &str) -> Result<i64, String> {
        if self.v2 {
            return number(&self.dir("", path).join("memory.current"));
        }
        number(&self.dir("memory", path).join("memory.usage_in_bytes"))
    }

    /// The cgroup's memory working set in bytes, as cAdvisor and so the kubelet's eviction
    /// count it: usage less the inactive file pages (v1 `total_inactive_file`, v2
    /// `inactive_file`). v2's root cgroup has no `memory.current`: its usage is the host's,
    /// `MemTotal - MemFree` (runc's root stats).
    pub fn memory_working_set(&self, path: &str) -> Result<i64, String> {
        let dir = if self.v2 { self.dir("", path) } else { self.dir("memory", path) };
        let usage = if self.v2 && path.trim_matches('/').is_empty() {
            host_memory_used()?
        } else {
            self.memory_usage(path)?
        };
        // The stats collector's parse of the same file: one reading of inactive_file.
        let (inactive, ..) = parse_memory_stat(&read(&dir.join("memory.stat"))?, self.v2);
        Ok((usage - i64::try_from(inactive).unwrap_or(i64::MAX)).max(0))
    }

    /// The tasks in the cgroup (`pids.current`), for ranking under PID pressure.
    pub fn pids_current(&self, path: &str) -> Result<i64, String> {
        number(&self.dir("pids", path).join("pids.current"))
    }
}

/// `MemTotal - MemFree` from `/proc/meminfo`, bytes.
fn host_memory_used() -> Result<i64, String> {
    let text = read(Path::new("/proc/meminfo"))?;
    let kb = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<i64>().ok())
            .ok_or_else(|| format!("/proc/meminfo: no {key}"))
    };
    Ok((kb("MemTotal:")? - kb("MemFree:")?) * 1024)
}

/// What a cgroup has used (the files cadvisor and containerd read for the same stats): its CPU
/// time so far and its memory now. A file that cannot be read leaves its part `None`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Cumulative CPU time in ns (v1 `cpuacct.usage`, v2 `cpu.stat` `usage_usec`).
    pub cpu_ns: Option<u64>,
    pub memory: Option<MemoryUsage>,
}

/// A cgroup's memory: its usage and the `memory.stat` counters the kubelet's stats derive from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryUsage {
    /// v1 `memory.usage_in_bytes`, v2 `memory.current`.
    pub usage: u64,
    /// `total_inactive_file` (v1) or `inactive_file` (v2): the page cache the kernel reclaims
    /// first, which the working set leaves out.
    pub inactive_file: u64,
    /// `total_rss` (v1) or `anon` (v2), as cadvisor reports RSS.
    pub rss: u64,
    pub page_faults: u64,
    pub major_page_faults: u64,
    /// v2 `memory.swap.current`; v1 has no per-cgroup swap use without memsw accounting.
    pub swap: Option<u64>,
}

/// The counters of a `memory.stat` text that [`MemoryUsage`] keeps, under v1's hierarchical
/// names (`total_*`) or v2's: (inactive_file, rss, pgfault, pgmajfault). Pure.
pub fn parse_memory_stat(text: &str, v2: bool) -> (u64, u64, u64, u64) {
    let keys: [&str; 4] = if v2 {
        ["inactive_file", "anon", "pgfault", "pgmajfault"]
    } else {
        ["total_inactive_file", "total_rss", "total_pgfault", "total_pgmajfault"]
    };
    let mut out = [0u64; 4];
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let (Some(k), Some(v)) = (words.next(), words.next()) else { continue };
        if let Some(i) = keys.iter().position(|want| *want == k) {
            out[i] = v.parse().unwrap_or(0);
        }
    }
    (out[0], out[1], out[2], out[3])
}

/// v2 `cpu.stat`'s `usage_usec`, in ns. Pure.
pub fn parse_cpu_stat_usage(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("usage_usec "))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|us| us * 1000)
}

impl Hierarchy {
    /// What cgroup `path` has used (see [`Usage`]). The root (`/`) on v2 has no
    /// `memory.current`: its memory is left `None` for the caller to take from `/proc/meminfo`.
    pub fn usage(&self, path: &str) -> Usage {
        let text = |p: PathBuf| std::fs::read_to_string(p).ok();
        let num = |p: PathBuf| text(p).and_then(|t| t.trim().parse::<u64>().ok());
        if self.v2 {
            let d = self.dir("", path);
            let cpu_ns = text(d.join("cpu.stat")).as_deref().and_then(parse_cpu_stat_usage);
            let memory = num(d.join("memory.current")).map(|usage| {
                let stat = text(d.join("memory.stat")).unwrap_or_default();
                let (inactive_file, rss, page_faults, major_page_faults) = parse_memory_stat(&stat, true);
                let swap = num(d.join("memory.swap.current"));
                MemoryUsage { usage, inactive_file, rss, page_faults, major_page_faults, swap }
            });
            return Usage { cpu_ns, memory };
        }
        let cpu_ns = num(self.dir("cpuacct", path).join("cpuacct.usage"));
        let d = self.dir("memory", path);
        let memory = num(d.join("memory.usage_in_bytes")).map(|usage| {
            let stat = text(d.join("memory.stat")).unwrap_or_default();
            let (inactive_file, rss, page_faults, major_page_faults) = parse_memory_stat(&stat, false);
            MemoryUsage { usage, inactive_file, rss, page_faults, major_page_faults, swap: None }
        });
        Usage { cpu_ns, memory }
    }
}

/// cgroup v2's `cpu.weight` for v1 shares, as the kubelet writes its own cgroups' weight
/// (`getCPUWeight` in `cgroup_manager_linux.go`, the KEP-2254 mapping of [2, 262144] onto
/// [1, 10000]). runc ≥ 1.3.2 maps a *container's* shares with another, quadratic formula
/// (opencontainers/cgroups `ConvertCPUSharesToCgroupV2Value`); the kubelet's pod and QoS
/// cgroups keep this one, and so do crilet's.
pub fn cpu_weight(shares: i64) -> i64 {
    if shares >= MAX_SHARES {
        return 10_000;
    }
    1 + ((shares.max(MIN_SHARES) - MIN_SHARES) * 9999) / 262_142
}

/// The shares a v2 `cpu.weight` reads back as: the fewest that [`cpu_weight`] maps to `weight`,
/// so shares read back and written again keep the weight. The kubelet's `CpuWeightToCpuShares`
/// floors the same formula instead, which lands one weight lower for most weights (39 reads
/// back as 998 shares, which write 38), so a value read back never equals what was written.
pub fn shares_of_weight(weight: i64) -> i64 {
    let steps = (weight.clamp(1, 10_000) - 1) * 262_142;
    // The least `s - 2` with `(s - 2) · 9999 / 262142 ≥ weight - 1`: the quotient rounded up.
    (steps + 9998) / 9999 + MIN_SHARES
}

/// Enables in `dir`'s `cgroup.subtree_control` the controllers of `available` (a
/// `cgroup.controllers` line) it lacks: all at once, else one by one, each failure left to show
/// as a missing file in the child (libcontainer's `CreateCgroupPath` does the same).
fn enable_controllers(dir: &Path, available: &str) {
    let file = dir.join("cgroup.subtree_control");
    let enabled = read(&file).unwrap_or_default();
    let enabled: Vec<&str> = enabled.split_whitespace().map(|c| c.trim_start_matches('+')).collect();
    let missing: Vec<String> =
        available.split_whitespace().filter(|c| !enabled.contains(c)).map(|c| format!("+{c}")).collect();
    if missing.is_empty() || write(&file, &missing.join(" ")).is_ok() {
        return;
    }
    for c in missing {
        if let Err(e) = write(&file, &c) {
            tracing::debug!(error = %e, "enabling a cgroup controller failed");
        }
    }
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|e| format!("reading {}: {e}", path.display()))
}

fn write(path: &Path, value: &str) -> Result<(), String> {
    std::fs::write(path, value).map_err(|e| format!("writing {value} to {}: {e}", path.display()))
}

fn number(path: &Path) -> Result<i64, String> {
    let text = read(path)?;
    text.parse::<i64>().map_err(|e| format!("{}: {text:?}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kubelet's `getCPUWeight` at the points its tests and KEP-2254 name, and the exact
    /// inverse (the kubelet's own reads 998, 2046 and 2597, a weight lower).
    #[test]
    fn shares_to_weight_as_the_kubelet() {
        for (shares, weight) in [
            (2, 1),
            (3, 1),
            (102, 4),
            (1024, 39),
            (2048, 79),
            (10_240, 391),
            (262_143, 9999),
            (262_144, 10_000),
            (1_000_000, 10_000),
            (0, 1),
        ] {
            assert_eq!(cpu_weight(shares), weight, "{shares} shares");
        }
        for (weight, shares) in [(1, 2), (39, 999), (79, 2047), (100, 2598), (10_000, 262_144), (0, 2)] {
            assert_eq!(shares_of_weight(weight), shares, "weight {weight}");
        }
    }

    /// Shares written as a weight and read back write the same weight again.
    #[test]
    fn weights_read_back_round_trip() {
        for shares in [2, 3, 102, 250, 256, 1024, 2048, 262_143, 262_144] {
            let weight = cpu_weight(shares);
            let back = shares_of_weight(weight);
            assert_eq!(cpu_weight(back), weight, "{shares} shares → weight {weight} → {back} shares");
            assert!(back <= shares, "{shares} shares read back as more: {back}");
        }
        // Every weight: its shares are the fewest that write it.
        for weight in 1..=10_000 {
            let s = shares_of_weight(weight);
            assert_eq!(cpu_weight(s), weight, "weight {weight}");
            assert!(s == MIN_SHARES || cpu_weight(s - 1) < weight, "weight {weight}: {s} is not the least");
        }
    }

    /// `memory.stat` and `cpu.stat` as each version spells them.
    #[test]
    fn usage_files_parse() {
        let v1 = "cache 10\nrss 5\ninactive_file 7\ntotal_rss 50\ntotal_inactive_file 70\ntotal_pgfault 3\ntotal_pgmajfault 1\n";
        let v2 = "anon 40\nfile 100\ninactive_file 60\npgfault 9\npgmajfault 2\n";
        for (text, is_v2, want) in [
            (v1, false, (70, 50, 3, 1)),
            (v2, true, (60, 40, 9, 2)),
            ("", true, (0, 0, 0, 0)),
            ("bad", false, (0, 0, 0, 0)),
        ] {
            assert_eq!(parse_memory_stat(text, is_v2), want, "{text:?}");
        }
        for (text, want) in [
            ("usage_usec 1500\nuser_usec 1000\n", Some(1_500_000)),
            ("user_usec 1\n", None),
            ("usage_usec x\n", None),
        ] {
            assert_eq!(parse_cpu_stat_usage(text), want, "{text:?}");
        }
    }

    /// Each value's file on v1 and v2, for a cgroupfs and a systemd path.
    #[test]
    fn files_on_v1_and_v2() {
        let path = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-poda.slice";
        for v2 in [false, true] {
            let root = tempfile::tempdir().expect("tempdir");
            let h = Hierarchy::at(root.path(), v2);
            for c in ["memory", "cpu", ""] {
                std::fs::create_dir_all(h.dir(c, path)).expect("mkdir");
            }
            let want =
                CgroupValues { memory_limit: Some(64 << 20), cpu_quota: Some(25_000), cpu_shares: 1024 };
            h.write_values(path, &want).expect("write");
            let file = |c: &str, f: &str| std::fs::read_to_string(h.dir(c, path).join(f)).expect("read");
            if v2 {
                assert!(root.path().join(path.trim_start_matches('/')).join("cpu.weight").is_file());
                assert_eq!(file("", "memory.max"), "67108864");
                assert_eq!(file("", "cpu.max"), "25000 100000");
                assert_eq!(file("", "cpu.weight"), "39");
                // What the kernel would show: the fewest shares of weight 39.
                let got = h.read_values(path).expect("read back");
                assert_eq!(got, CgroupValues { cpu_shares: 999, ..want });
            } else {
                assert!(root.path().join("memory").join(path.trim_start_matches('/')).is_dir());
                assert_eq!(file("memory", "memory.limit_in_bytes"), "67108864");
                assert_eq!(file("cpu", "cpu.cfs_quota_us"), "25000");
                assert_eq!(file("cpu", "cpu.cfs_period_us"), "100000");
                assert_eq!(file("cpu", "cpu.shares"), "1024");
                assert_eq!(h.read_values(path).expect("read back"), want);
            }
            std::fs::create_dir_all(h.dir("pids", path)).expect("mkdir pids");
            h.write_pids_limit(path, Some(32_768)).expect("pids");
            assert_eq!(file(if v2 { "" } else { "pids" }, "pids.max"), "32768");
            assert_eq!(h.read_pids_limit(path), Ok(Some(32_768)));
            h.write_pids_limit(path, None).expect("unlimited pids");
            assert_eq!(file(if v2 { "" } else { "pids" }, "pids.max"), "max");
            assert_eq!(h.read_pids_limit(path), Ok(None));
            h.write_memory_limit(path, None).expect("unlimit");
            h.write_cpu_quota(path, None).expect("unquota");
            if v2 {
                assert_eq!(file("", "memory.max"), "max");
                assert_eq!(file("", "cpu.max"), "max 100000");
            } else {
                assert_eq!(file("memory", "memory.limit_in_bytes"), "-1");
                assert_eq!(file("cpu", "cpu.cfs_quota_us"), "-1");
            }
        }
    }
}
