//! The node-level settings every part of the agent shares, and the per-pod paths derived from
//! them (below both the pod workers and the probes).

use std::path::{Path, PathBuf};

use crate::model::{DesiredPod, PodKey};

/// Node-level settings the configs depend on.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub root_dir: PathBuf,
    pub pod_logs_dir: PathBuf,
    /// Where the legacy `<pod>_<ns>_<container>-<id>.log` symlinks go (R1.13), for log shippers
    /// that read `/var/log/containers`; `None` makes none.
    pub container_logs_dir: Option<PathBuf>,
    pub node_name: String,
    pub host_ip: Option<String>,
    /// `--cluster-dns`, `--cluster-domain`, `--resolv-conf`: what pods' resolvers are formed
    /// from (`crate::dns`).
    pub dns: crate::dns::DnsSettings,
    /// The cgroup driver in force (`--cgroup-driver`, or the runtime's own through CRI
    /// `RuntimeConfig`): how pod cgroups are named and who makes them.
    pub cgroup_driver: crate::cgroup::CgroupDriver,
    /// `--seccomp-default`: a container that names no seccomp profile runs with the runtime's
    /// default one (RuntimeDefault) instead of unconfined.
    pub seccomp_default: bool,
}

/// `<pod-logs-dir>/<namespace>_<name>_<uid>` (R1.5).
/// The node name when none is given: the hostname, lower-cased (as the kubelet's default).
/// `crilet run` and `crilet validate` share it, since it is part of every pod's UID.
pub fn default_node_name() -> std::io::Result<String> {
    Ok(hostname::get()?.to_string_lossy().to_lowercase())
}

pub fn pod_log_dir(node: &NodeConfig, d: &DesiredPod) -> PathBuf {
    node.pod_logs_dir.join(format!("{}_{}_{}", d.key.namespace, d.key.name, d.uid))
}

/// `<root-dir>/pods/<uid>`: the pod's own state (volumes, termination-message files).
pub fn pod_dir(node: &NodeConfig, uid: &str) -> PathBuf {
    node.root_dir.join("pods").join(uid)
}

/// `<root-dir>/pods/<uid>/volumes/kubernetes.io~empty-dir/<volume>`: an emptyDir's directory.
pub fn empty_dir(root_dir: &Path, uid: &str, volume: &str) -> PathBuf {
    root_dir.join("pods").join(uid).join("volumes/kubernetes.io~empty-dir").join(volume)
}

/// The machine's memory in bytes (`MemTotal` of /proc/meminfo; 0 when unreadable).
pub fn memory_total() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// The kubelet's default hard eviction threshold for memory (memory.available<100Mi), which
/// allocatable leaves out.
pub const EVICTION_MEMORY: u64 = 100 * 1024 * 1024;

/// Node capacity: cpu (millicores) and memory (bytes), the CPUs and `MemTotal`. Read once.
pub fn capacity() -> (i64, i64) {
    static CAPACITY: std::sync::OnceLock<(i64, i64)> = std::sync::OnceLock::new();
    *CAPACITY.get_or_init(|| {
        let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        (i64::try_from(cpus).unwrap_or(1) * 1000, i64::try_from(memory_total()).unwrap_or(i64::MAX))
    })
}

/// The process IDs the node has (the kubelet's `pidlimit.Stats` `MaxPID`): the lesser of
/// `kernel.pid_max` and `kernel.threads-max`, either bounds how many tasks can exist; 0 when
/// neither is readable.
pub fn max_pids() -> i64 {
    let read = |f: &str| {
        std::fs::read_to_string(Path::new("/proc/sys/kernel").join(f))
            .ok()
            .and_then(|t| t.trim().parse::<i64>().ok())
            .filter(|n| *n > 0)
    };
    match (read("pid_max"), read("threads-max")) {
        (Some(a), Some(b)) => a.min(b),
        (a, b) => a.or(b).unwrap_or(0),
    }
}

/// Node allocatable cpu (millicores) and memory (bytes), as the Node object reports it: the
/// capacity, the memory less the eviction threshold (the agent has no system or kube
/// reservations).
pub fn allocatable() -> (i64, i64) {
    let (cpu, memory) = capacity();
    let eviction = i64::try_from(EVICTION_MEMORY).unwrap_or(0);
    (cpu, if memory > 0 { (memory - eviction).max(0) } else { 0 })
}

/// R1.13: the legacy symlink of one container instance (name cut to 251 bytes before `.log`).
pub fn legacy_log_symlink(node: &NodeConfig, pod: &PodKey, container: &str, id: &str) -> Option<PathBuf> {
    let dir = node.container_logs_dir.as_ref()?;
    let mut name = format!("{}_{}_{}-{}", pod.name, pod.namespace, container, id);
    while name.len() > 251 {
        name.pop();
    }
    Some(dir.join(format!("{name}.log")))
}

/// R1.9: the log path relative to the pod log directory.
pub fn container_log_path(name: &str, restart_count: u32) -> String {
    format!("{name}/{restart_count}.log")
}

/// R1.14: the restart count from the log directory when no instance exists in the runtime.
pub fn restart_count_from_logs(dir: &Path) -> Option<u32> {
    let entries = std::fs::read_dir(dir).ok()?;
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            let (n, rest) = name.split_once(".log")?;
            (rest.is_empty() || rest.starts_with('.')).then(|| n.parse::<u32>().ok()).flatten()
        })
        .max()
        .map(|n| n + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_count_from_log_dir() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(restart_count_from_logs(dir.path()), None);
        for f in ["0.log", "3.log.20240101-000000", "2.log", "x.log"] {
            std::fs::write(dir.path().join(f), "").expect("write");
        }
        assert_eq!(restart_count_from_logs(dir.path()), Some(4));
    }
}
