//! The host's eviction signals, as the kubelet derives them from its stats: `memory.available`
//! is the node's memory capacity less the root cgroup's working set; `nodefs.*` the statvfs of
//! `--root-dir`; `imagefs.*` the statvfs of the runtime's image filesystem (CRI `ImageFsInfo`);
//! `pid.available` the node's PIDs (`node::max_pids`) less the tasks that exist. A pod's use is
//! its cgroup's working set and tasks, and the size of its directories (volumes, logs). Every
//! read runs on the blocking pool; cgroup paths come from `cgroup::Cgroups`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tracing::debug;

use super::{Observation, Observations, PodRef, Signal, Signals, Usage};
use crate::cgroup::Cgroups;
use crate::cri::CriClient;

/// The host's readers.
pub struct HostSignals {
    pub cgroups: Arc<Cgroups>,
    /// `--root-dir`: the nodefs.
    pub root_dir: PathBuf,
    /// The image service, for the imagefs (none: imagefs is not observed).
    pub cri: Option<CriClient>,
}

impl Signals for HostSignals {
    async fn observe(&self) -> Observations {
        let mut out = Observations::new();
        let (_, capacity) = crate::node::capacity();
        match self.cgroups.memory_working_set(String::new()).await {
            Ok(ws) => {
                out.insert(
                    Signal::MemoryAvailable,
                    Observation { available: (capacity - ws).max(0), capacity },
                );
            }
            Err(e) => debug!(error = %e, "memory.available not observed"),
        }
        let root = self.root_dir.clone();
        if let Ok(Some((bytes, inodes))) = crate::blocking(move || Ok(fs_stats(&root))).await {
            out.insert(Signal::NodeFsAvailable, bytes);
            out.insert(Signal::NodeFsInodesFree, inodes);
        }
        if let Some(mount) = self.image_mount().await
            && let Ok(Some((bytes, inodes))) = crate::blocking(move || Ok(fs_stats(&mount))).await
        {
            out.insert(Signal::ImageFsAvailable, bytes);
            out.insert(Signal::ImageFsInodesFree, inodes);
        }
        if let Ok(Some(o)) = crate::blocking(|| Ok(pids())).await {
            out.insert(Signal::PidAvailable, o);
        }
        out
    }

    async fn usage(&self, pods: &[PodRef], disk: bool) -> BTreeMap<String, Usage> {
        let mut out = BTreeMap::new();
        for p in pods {
            let path = self.cgroups.pod_path(&Cgroups::pod_name(p.qos, &p.uid));
            // A pod without a cgroup to read has no stats: it ranks first, as upstream.
            let Ok(memory) = self.cgroups.memory_working_set(path.clone()).await else { continue };
            let processes = self.cgroups.pids_current(path).await.unwrap_or(0);
            let (bytes, inodes) = if disk {
                let dirs = p.dirs.clone();
                crate::blocking(move || {
                    Ok(dirs.iter().map(|d| du(d)).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1)))
                })
                .await
                .unwrap_or((0, 0))
            } else {
                (0, 0)
            };
            out.insert(p.uid.clone(), Usage { memory, disk: bytes, inodes, processes });
        }
        out
    }

    async fn dedicated_image_fs(&self) -> Option<bool> {
        use std::os::unix::fs::MetadataExt;
        let mount = self.image_mount().await?;
        let root = self.root_dir.clone();
        crate::blocking(move || {
            let image = std::fs::metadata(&mount)?.dev();
            let node = std::fs::metadata(&root)?.dev();
            Ok(image != node)
        })
        .await
        .ok()
    }
}

impl HostSignals {
    /// The image filesystem's mountpoint, as the runtime reports it.
    async fn image_mount(&self) -> Option<PathBuf> {
        let cri = self.cri.as_ref()?;
        let fs = cri.image_fs_info().await.ok()?;
        let mount = fs.into_iter().map(|f| f.mountpoint).find(|m| !m.is_empty())?;
        (!mount.is_empty()).then(|| PathBuf::from(mount))
    }
}

/// The filesystem holding `path`: bytes available to unprivileged users of the total, and free
/// inodes of the total (cAdvisor's `Available` and `InodesFree`).
fn fs_stats(path: &Path) -> Option<(Observation, Observation)> {
    let s = nix::sys::statvfs::statvfs(path).ok()?;
    let size = s.fragment_size() as i64;
    let bytes =
        Observation { available: s.blocks_available() as i64 * size, capacity: s.blocks() as i64 * size };
    let inodes = Observation { available: s.files_free() as i64, capacity: s.files() as i64 };
    Some((bytes, inodes))
}

/// `pid.available`: the node's PIDs less the tasks that exist now (the fourth field of
/// `/proc/loadavg` counts every task).
fn pids() -> Option<Observation> {
    let max = crate::node::max_pids();
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let tasks: i64 = text.split_whitespace().nth(3)?.split_once('/')?.1.parse().ok()?;
    (max > 0).then(|| Observation { available: (max - tasks).max(0), capacity: max })
}

/// The bytes (allocated blocks) and inodes under `dir`, not crossing into other filesystems'
/// mounts (a pod's tmpfs volumes use memory, not this disk).
fn du(dir: &Path) -> (i64, i64) {
    use std::os::unix::fs::MetadataExt;
    let Ok(top) = std::fs::symlink_metadata(dir) else { return (0, 0) };
    let dev = top.dev();
    let (mut bytes, mut inodes) = (0i64, 0i64);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(m) = std::fs::symlink_metadata(&d) else { continue };
        if m.dev() != dev {
            continue;
        }
        bytes += m.blocks() as i64 * 512;
        inodes += 1;
        if m.is_dir() {
            let Ok(entries) = std::fs::read_dir(&d) else { continue };
            for e in entries.flatten() {
                let Ok(em) = e.metadata() else { continue };
                if em.is_dir() {
                    stack.push(e.path());
                } else if em.dev() == dev {
                    bytes += em.blocks() as i64 * 512;
                    inodes += 1;
                }
            }
        }
    }
    (bytes, inodes)
}
