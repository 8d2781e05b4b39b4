//! Reading and writing a pod's cgroup values (the kubelet's pod container manager,
//! `SetPodCgroupConfig`/`GetPodCgroupConfig`/`GetPodCgroupMemoryUsage`), on cgroup v1 (the
//! `memory` and `cpu` hierarchies) and v2 (the unified tree), with the cgroupfs layout crilet
//! gives the runtime: the pod at `<parent>` (`/kubepods[/<qos>]/pod<uid>`), each container at
//! `<parent>/<container id>`.

use std::path::{Path, PathBuf};

use super::resize::{Amounts, CPU_PERIOD, PodCgroup};

const ROOT: &str = "/sys/fs/cgroup";
/// v1 reports "no limit" as a page-rounded i64::MAX; anything this large is unlimited.
const UNLIMITED: i64 = 1 << 62;

fn v2() -> bool {
    Path::new(ROOT).join("cgroup.controllers").exists()
}

fn dir(controller: &str, cgroup: &str) -> PathBuf {
    let rel = cgroup.trim_start_matches('/');
    if v2() { Path::new(ROOT).join(rel) } else { Path::new(ROOT).join(controller).join(rel) }
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

/// The cgroup's current values (`GetPodCgroupConfig`).
pub fn read_config(cgroup: &str) -> Result<PodCgroup, String> {
    if v2() {
        let d = dir("", cgroup);
        let memory = read(&d.join("memory.max"))?;
        let cpu = read(&d.join("cpu.max"))?;
        let weight = number(&d.join("cpu.weight"))?;
        let quota = cpu.split_whitespace().next().and_then(|q| q.parse::<i64>().ok());
        return Ok(PodCgroup {
            memory_limit: memory.parse().ok(),
            cpu_quota: quota,
            // cpu.weight back to shares (the inverse of `weight` below).
            cpu_shares: ((weight - 1) * 262_142) / 9999 + 2,
        });
    }
    let memory = number(&dir("memory", cgroup).join("memory.limit_in_bytes"))?;
    let cpu = dir("cpu", cgroup);
    let quota = number(&cpu.join("cpu.cfs_quota_us"))?;
    Ok(PodCgroup {
        memory_limit: (memory < UNLIMITED).then_some(memory),
        cpu_quota: (quota > 0).then_some(quota),
        cpu_shares: number(&cpu.join("cpu.shares"))?,
    })
}

/// cgroup v2's `cpu.weight` for v1 shares (the runtime-spec conversion the kubelet uses).
fn weight(shares: i64) -> i64 {
    1 + ((shares.clamp(2, 262_144) - 2) * 9999) / 262_142
}

pub fn write_memory_limit(cgroup: &str, limit: Option<i64>) -> Result<(), String> {
    if v2() {
        let v = limit.map_or_else(|| "max".to_string(), |l| l.to_string());
        return write(&dir("", cgroup).join("memory.max"), &v);
    }
    write(&dir("memory", cgroup).join("memory.limit_in_bytes"), &limit.unwrap_or(-1).to_string())
}

pub fn write_cpu_quota(cgroup: &str, quota: Option<i64>) -> Result<(), String> {
    if v2() {
        let q = quota.map_or_else(|| "max".to_string(), |q| q.to_string());
        return write(&dir("", cgroup).join("cpu.max"), &format!("{q} {CPU_PERIOD}"));
    }
    let d = dir("cpu", cgroup);
    write(&d.join("cpu.cfs_period_us"), &CPU_PERIOD.to_string())?;
    write(&d.join("cpu.cfs_quota_us"), &quota.unwrap_or(-1).to_string())
}

pub fn write_cpu_shares(cgroup: &str, shares: i64) -> Result<(), String> {
    if v2() {
        return write(&dir("", cgroup).join("cpu.weight"), &weight(shares).to_string());
    }
    write(&dir("cpu", cgroup).join("cpu.shares"), &shares.to_string())
}

/// Writes every value of `want` (a new pod's cgroup, before its containers start).
pub fn write_config(cgroup: &str, want: &PodCgroup) -> Result<(), String> {
    write_memory_limit(cgroup, want.memory_limit)?;
    write_cpu_shares(cgroup, want.cpu_shares)?;
    write_cpu_quota(cgroup, want.cpu_quota)
}

/// The memory the cgroup uses now, in bytes (`GetPodCgroupMemoryUsage`; v1 `usage_in_bytes`,
/// v2 `memory.current`).
pub fn memory_usage(cgroup: &str) -> Result<i64, String> {
    if v2() {
        return number(&dir("", cgroup).join("memory.current"));
    }
    number(&dir("memory", cgroup).join("memory.usage_in_bytes"))
}

/// The cgroup path of a container of the pod at `parent`.
pub fn container_cgroup(parent: &str, id: &str) -> String {
    format!("{}/{id}", parent.trim_end_matches('/'))
}

/// What a container's cgroup holds (for a runtime that does not report it in CRI status).
pub fn read_container(parent: &str, id: &str) -> Option<Amounts> {
    let c = read_config(&container_cgroup(parent, id)).ok()?;
    Some(Amounts {
        cpu_request: if c.cpu_shares > 2 { (c.cpu_shares * 1000 + 1023) / 1024 } else { 0 },
        cpu_limit: c.cpu_quota.map_or(0, |q| q * 1000 / CPU_PERIOD),
        memory_request: 0,
        memory_limit: c.memory_limit.unwrap_or(0),
    })
}
