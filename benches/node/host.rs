//! What a kubelet run by a benchmark leaves on the host, and how it goes: its cgroup root in
//! every cgroup v1 hierarchy, the mounts under its root directory. Shared by the node
//! benchmark's standalone kubelet and the cluster benchmarks' joined one.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crilet::cri::CriClient;
use crilet::model::keys;

/// The kubelet's cgroup root (made in every v1 hierarchy before it starts; removed after).
pub const KUBELET_CGROUP_ROOT: &str = "/crilet-bench-kubelet";

/// The part of a benchmark kubelet's configuration that is the same wherever it runs: cgroupfs
/// on cgroup v1 under [`KUBELET_CGROUP_ROOT`] (its orphaned-pod-cgroup cleanup then never
/// reaches /kubepods), no image GC or eviction (a benchmark must not lose its images to a full
/// disk), pod logs in `logs`.
pub fn kubelet_node_config(endpoint: &str, logs: &Path) -> String {
    format!(
        r#"containerRuntimeEndpoint: {endpoint}
cgroupDriver: cgroupfs
cgroupRoot: {KUBELET_CGROUP_ROOT}
cgroupsPerQOS: true
enforceNodeAllocatable: ["none"]
failCgroupV1: false
failSwapOn: false
podLogsDir: {logs}
resolvConf: /etc/resolv.conf
maxPods: 110
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {{memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}}
protectKernelDefaults: false
"#,
        logs = logs.display(),
    )
}

/// Removes what the runtime still has of namespace `ns`'s pods (the kubelet leaves stopped
/// sandboxes and containers for its periodic garbage collection).
pub async fn remove_runtime_leftovers(cri: &CriClient, ns: &str) {
    let Ok((sandboxes, containers)) = cri.list_all(Some((keys::POD_NAMESPACE, ns))).await else { return };
    for c in containers {
        let _ = cri.stop_container(&c.id, Duration::ZERO).await;
        let _ = cri.remove_container(&c.id).await;
    }
    for s in sandboxes {
        let _ = cri.stop_sandbox(&s.id).await;
        let _ = cri.remove_sandbox(&s.id).await;
    }
}

/// Makes (or removes, leaves first) the kubelet's cgroup root in every cgroup v1 hierarchy.
pub fn cgroup_root(make: bool) {
    let Ok(rd) = std::fs::read_dir("/sys/fs/cgroup") else { return };
    for h in rd.flatten() {
        let hier = h.path();
        if hier.file_name().is_some_and(|n| n == "unified") || !hier.join("cgroup.procs").exists() {
            continue;
        }
        let dir = hier.join(KUBELET_CGROUP_ROOT.trim_start_matches('/'));
        if make {
            let _ = std::fs::create_dir_all(&dir);
        } else {
            remove_cgroup_tree(&dir);
        }
    }
}

fn remove_cgroup_tree(dir: &Path) {
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup_tree(&e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// Unmounts whatever is mounted under `dir` (the kubelet's token and secret tmpfs volumes, if
/// a pod's were left), deepest first.
pub fn unmount_under(dir: &Path) {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else { return };
    let mut points: Vec<&str> =
        text.lines().filter_map(|l| l.split(' ').nth(4)).filter(|p| Path::new(p).starts_with(dir)).collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in points {
        let _ = Command::new("umount").args(["-l", p]).status();
    }
}

/// Removes an agent's directory, its mounts first.
pub fn clean_dir(dir: &Path) {
    unmount_under(dir);
    let _ = std::fs::remove_dir_all(dir);
}
