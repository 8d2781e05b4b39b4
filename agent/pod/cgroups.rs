//! Pod cgroups under the agent's own parent (cgroupfs layout `/kubepods[/<qos>]/pod<uid>`, in
//! every v1 hierarchy and in v2): removed with their pod, and swept when orphaned (the
//! kubelet's cleanupOrphanedPodCgroups): a pod cgroup whose UID no sandbox in the runtime
//! carries any more, e.g. because its sandbox was removed behind the agent's back.
//!
//! Only `pod<uid>` directories under `kubepods` are ever touched, only with `rmdir` (which the
//! kernel refuses for a cgroup that still has processes or children), and never one younger
//! than `MIN_AGE` (runc creates it while `RunPodSandbox` runs, before the sandbox is listed).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use crate::cri::Runtime;
use crate::model::keys;

const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// The QoS parents a pod cgroup lives in (see `spec::cgroup_parent`).
const QOS_PARENTS: [&str; 3] = ["kubepods/besteffort", "kubepods/burstable", "kubepods"];
/// A pod cgroup younger than this is never swept.
const MIN_AGE: Duration = Duration::from_secs(60);
/// How often orphans are looked for (the kubelet's housekeeping runs every 2 s; a minute is
/// plenty for empty directories).
const SWEEP_PERIOD: Duration = Duration::from_secs(60);

/// The cgroup hierarchies: every mounted v1 controller (and v2's `unified`) and the root itself.
fn hierarchies(root: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(root)
        .map(|d| d.filter_map(Result::ok).map(|e| e.path()).filter(|p| p.is_dir()).collect())
        .unwrap_or_default();
    out.push(root.to_path_buf());
    out
}

/// The pod UID of a pod cgroup's directory name (`pod<uid>`), if it is one.
pub fn pod_uid_of(name: &str) -> Option<&str> {
    let uid = name.strip_prefix("pod")?;
    let plausible =
        !uid.is_empty() && uid.len() <= 64 && uid.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    plausible.then_some(uid)
}

/// Removes `dir` and the cgroups below it, deepest first, with `rmdir` only: a container cgroup
/// the runtime left empty below a pod cgroup would otherwise keep the pod's busy for good; one
/// that still holds a process stays (and so does everything above it).
fn remove_empty_tree(dir: &Path) -> std::io::Result<()> {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.filter_map(Result::ok) {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                let _ = remove_empty_tree(&e.path());
            }
        }
    }
    std::fs::remove_dir(dir)
}

/// Best-effort removal of one pod's cgroups (its pod is gone).
pub fn remove_pod_cgroups(uid: &str) {
    for h in hierarchies(Path::new(CGROUP_ROOT)) {
        for parent in QOS_PARENTS {
            let dir = h.join(parent).join(format!("pod{uid}"));
            if dir.is_dir() {
                let _ = remove_empty_tree(&dir);
            }
        }
    }
}

/// Removes the pod's cgroups, trying again for a moment while the runtime's last container
/// cgroups inside them are still going away.
pub async fn remove_pod_cgroups_settled(uid: &str) {
    for _ in 0..10 {
        remove_pod_cgroups(uid);
        if !pod_cgroups_exist(uid) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    debug!(uid, "pod cgroups still busy; the orphan sweep removes them later");
}

fn pod_cgroups_exist(uid: &str) -> bool {
    hierarchies(Path::new(CGROUP_ROOT))
        .iter()
        .any(|h| QOS_PARENTS.iter().any(|p| h.join(p).join(format!("pod{uid}")).is_dir()))
}

/// A pod cgroup directory found on the machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub path: PathBuf,
    pub uid: String,
    pub age: Duration,
}

/// Every pod cgroup directory under the agent's parents in every hierarchy below `root`.
fn scan(root: &Path, now: SystemTime) -> Vec<Found> {
    let mut out = Vec::new();
    for h in hierarchies(root) {
        for parent in QOS_PARENTS {
            let Ok(entries) = std::fs::read_dir(h.join(parent)) else { continue };
            for e in entries.filter_map(Result::ok) {
                let name = e.file_name().to_string_lossy().to_string();
                let Some(uid) = pod_uid_of(&name) else { continue };
                let Ok(meta) = e.metadata() else { continue };
                if !meta.is_dir() {
                    continue;
                }
                let age = meta.modified().ok().and_then(|m| now.duration_since(m).ok()).unwrap_or_default();
                out.push(Found { path: e.path(), uid: uid.to_string(), age });
            }
        }
    }
    out
}

/// The orphans among `found`: no sandbox carries their UID, and they are old enough.
pub fn orphans(found: &[Found], live: &HashSet<String>) -> Vec<PathBuf> {
    found.iter().filter(|f| !live.contains(&f.uid) && f.age >= MIN_AGE).map(|f| f.path.clone()).collect()
}

/// One sweep: removes the orphaned pod cgroups that are empty. Returns how many went.
pub async fn sweep(cri: &dyn Runtime) -> usize {
    // Every sandbox and container the runtime has, whoever made it: a UID any of them carries
    // is alive.
    let (sandboxes, containers) = match cri.list_all(None).await {
        Ok(v) => v,
        Err(e) => {
            debug!(error = %e, "pod cgroup sweep skipped: the runtime did not answer");
            return 0;
        }
    };
    let live: HashSet<String> = sandboxes
        .iter()
        .filter_map(|s| {
            s.metadata.as_ref().map(|m| m.uid.clone()).or_else(|| s.labels.get(keys::POD_UID).cloned())
        })
        .chain(containers.iter().filter_map(|c| c.labels.get(keys::POD_UID).cloned()))
        .collect();
    let found = tokio::task::spawn_blocking(|| scan(Path::new(CGROUP_ROOT), SystemTime::now()))
        .await
        .unwrap_or_default();
    let mut removed = 0;
    for path in orphans(&found, &live) {
        match remove_empty_tree(&path) {
            Ok(()) => removed += 1,
            // Busy (processes or children left): not ours to force.
            Err(e) => debug!(path = %path.display(), error = %e, "orphaned pod cgroup not removed"),
        }
    }
    if removed > 0 {
        info!(removed, "removed orphaned pod cgroups");
    }
    removed
}

/// Sweeps at start-up and then every `SWEEP_PERIOD` until `cancel` fires.
pub async fn sweep_periodically(cri: std::sync::Arc<dyn Runtime>, cancel: CancellationToken) {
    loop {
        if cancel.is_cancelled() {
            return;
        }
        let n = sweep(&*cri).await;
        if n > 0 {
            debug!(n, "pod cgroup sweep");
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(SWEEP_PERIOD) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_cgroup_names() {
        for (name, want) in [
            ("pod6b1c2d3e-0000-4000-8000-000000000001", Some("6b1c2d3e-0000-4000-8000-000000000001")),
            ("podabc", Some("abc")),
            ("pod", None),
            ("besteffort", None),
            ("pod../x", None),
            ("pod a", None),
        ] {
            assert_eq!(pod_uid_of(name), want, "{name}");
        }
    }

    #[test]
    fn only_old_pod_cgroups_without_a_sandbox_are_orphans() {
        let f = |path: &str, uid: &str, secs: u64| Found {
            path: PathBuf::from(path),
            uid: uid.into(),
            age: Duration::from_secs(secs),
        };
        let found = vec![
            f("/cg/kubepods/besteffort/poda", "a", 3600),
            f("/cg/kubepods/besteffort/podb", "b", 3600),
            f("/cg/kubepods/burstable/podc", "c", 5),
            f("/cg/kubepods/podd", "d", 61),
        ];
        let live: HashSet<String> = ["b".to_string()].into();
        assert_eq!(
            orphans(&found, &live),
            vec![PathBuf::from("/cg/kubepods/besteffort/poda"), PathBuf::from("/cg/kubepods/podd")]
        );
    }

    #[test]
    fn scan_finds_pod_directories_in_every_hierarchy() {
        let root = tempfile::tempdir().expect("tempdir");
        for dir in [
            "memory/kubepods/besteffort/poda",
            "memory/kubepods/burstable/podb",
            "cpu/kubepods/podc",
            "cpu/kubepods/besteffort/not-a-pod",
            "kubepods/besteffort/podd",
            "memory/other/pode",
        ] {
            std::fs::create_dir_all(root.path().join(dir)).expect("mkdir");
        }
        let later = SystemTime::now() + Duration::from_secs(120);
        let mut uids: Vec<String> = scan(root.path(), later).into_iter().map(|f| f.uid).collect();
        uids.sort();
        assert_eq!(uids, vec!["a", "b", "c", "d"]);
        let found = scan(root.path(), later);
        assert!(found.iter().all(|f| f.age >= Duration::from_secs(100)), "{found:?}");
    }
}
