//! Pod cgroups found on the host, under either driver's QoS parents in every tree: looked for
//! by UID when a pod is removed, and all of them for the orphan sweep. Blocking (directory
//! listings and `rmdir`): call from the blocking pool. Only directories whose name is a pod
//! cgroup's (`pod<uid>`, `kubepods[-<qos>]-pod<uid_>.slice`) below `kubepods` are ever touched,
//! and only with `rmdir`, which the kernel refuses for a cgroup with processes or children.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::CgroupDriver;
use super::files::Hierarchy;
use super::name::{Qos, pod_uid_of};

/// A pod cgroup directory found on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub path: PathBuf,
    pub uid: String,
    pub age: Duration,
}

impl Found {
    /// Its directory's name: under systemd, the slice unit's name.
    pub fn unit(&self) -> String {
        self.path.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default()
    }
}

/// The QoS parents' directories in every tree (`<tree>/kubepods/burstable`, or
/// `<tree>/kubepods.slice/kubepods-burstable.slice`, ...).
fn parents(h: &Hierarchy, driver: CgroupDriver) -> Vec<PathBuf> {
    let rel: Vec<String> = Qos::ALL.iter().map(|q| driver.path(&q.parent())).collect();
    h.trees()
        .into_iter()
        .flat_map(|tree| rel.iter().map(move |r| tree.join(r.trim_start_matches('/'))).collect::<Vec<_>>())
        .collect()
}

/// Every pod cgroup directory below the driver's QoS parents, with its age at `now`.
pub fn scan(h: &Hierarchy, driver: CgroupDriver, now: SystemTime) -> Vec<Found> {
    let mut out = Vec::new();
    for parent in parents(h, driver) {
        let Ok(entries) = std::fs::read_dir(&parent) else { continue };
        for e in entries.filter_map(Result::ok) {
            let name = e.file_name().to_string_lossy().to_string();
            let Some(uid) = pod_uid_of(&name, driver) else { continue };
            let Ok(meta) = e.metadata() else { continue };
            if !meta.is_dir() {
                continue;
            }
            let age = meta.modified().ok().and_then(|m| now.duration_since(m).ok()).unwrap_or_default();
            out.push(Found { path: e.path(), uid, age });
        }
    }
    out
}

/// Pod `uid`'s cgroup directories, in every tree and under any QoS parent.
pub fn of_pod(h: &Hierarchy, driver: CgroupDriver, uid: &str) -> Vec<Found> {
    scan(h, driver, SystemTime::now()).into_iter().filter(|f| f.uid == uid).collect()
}

/// Removes `dir` and the cgroups below it, deepest first, with `rmdir` only: a container cgroup
/// the runtime left empty below a pod cgroup would otherwise keep the pod's busy for good; one
/// that still holds a process stays (and so does everything above it).
pub fn remove_empty_tree(dir: &Path) -> std::io::Result<()> {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.filter_map(Result::ok) {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                let _ = remove_empty_tree(&e.path());
            }
        }
    }
    std::fs::remove_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_finds_pod_directories_in_every_tree_for_the_driver() {
        let root = tempfile::tempdir().expect("tempdir");
        for dir in [
            "memory/kubepods/besteffort/poda",
            "memory/kubepods/burstable/podb",
            "cpu/kubepods/podc",
            "cpu/kubepods/besteffort/not-a-pod",
            "kubepods/besteffort/podd",
            "memory/other/pode",
            "memory/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podf_1.slice",
            "kubepods.slice/kubepods-podg.slice",
            "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podh.slice",
            "kubepods.slice/kubepods-burstable.slice/cri-containerd-x.scope",
            "systemd/kubepods.slice/kubepods-podi.slice",
        ] {
            std::fs::create_dir_all(root.path().join(dir)).expect("mkdir");
        }
        let h = Hierarchy::at(root.path(), false);
        let later = SystemTime::now() + Duration::from_secs(120);
        let uids = |driver| {
            let mut u: Vec<String> = scan(&h, driver, later).into_iter().map(|f| f.uid).collect();
            u.sort();
            u
        };
        assert_eq!(uids(CgroupDriver::Cgroupfs), vec!["a", "b", "c", "d"]);
        assert_eq!(uids(CgroupDriver::Systemd), vec!["f-1", "g", "h", "i"]);
        let found = scan(&h, CgroupDriver::Systemd, later);
        assert!(found.iter().all(|f| f.age >= Duration::from_secs(100)), "{found:?}");
        let f1 = of_pod(&h, CgroupDriver::Systemd, "f-1");
        assert_eq!(f1.len(), 1);
        assert_eq!(f1[0].unit(), "kubepods-besteffort-podf_1.slice");
    }

    #[test]
    fn an_empty_tree_goes_deepest_first() {
        let root = tempfile::tempdir().expect("tempdir");
        let pod = root.path().join("kubepods/poda");
        std::fs::create_dir_all(pod.join("c1/inner")).expect("mkdir");
        std::fs::create_dir_all(pod.join("c2")).expect("mkdir");
        remove_empty_tree(&pod).expect("rmdir");
        assert!(!pod.exists());
    }
}
