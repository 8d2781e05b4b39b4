//! Pod cgroups removed with their pod, and swept when orphaned (the kubelet's
//! cleanupOrphanedPodCgroups): a pod cgroup whose UID no sandbox in the runtime carries any
//! more, e.g. because its sandbox was removed behind the agent's back. Where they are and how
//! one goes (`rmdir`, and under systemd `StopUnit` of its slice first) is
//! [`crate::cgroup::Cgroups`]'s, by the node's driver.
//!
//! Only pod cgroups below `kubepods` are ever touched, never one younger than `MIN_AGE` (runc
//! creates it while `RunPodSandbox` runs, before the sandbox is listed; under systemd the agent
//! starts the slice just before).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use crate::cgroup::Cgroups;
use crate::cgroup::pods::Found;
use crate::cri::Runtime;
use crate::model::keys;

/// A pod cgroup younger than this is never swept.
const MIN_AGE: Duration = Duration::from_secs(60);
/// How often orphans are looked for (the kubelet's housekeeping runs every 2 s; a minute is
/// plenty for empty directories).
const SWEEP_PERIOD: Duration = Duration::from_secs(60);

/// Removes the pod's cgroups, trying again for a moment while the runtime's last container
/// cgroups inside them are still going away.
pub async fn remove_pod_cgroups_settled(cgroups: &Cgroups, uid: &str) {
    for _ in 0..10 {
        if cgroups.remove_pod(uid).await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    debug!(uid, "pod cgroups still busy; the orphan sweep removes them later");
}

/// The orphans among `found`: no sandbox carries their UID, and they are old enough.
pub fn orphans(found: Vec<Found>, live: &HashSet<String>) -> Vec<Found> {
    found.into_iter().filter(|f| !live.contains(&f.uid) && f.age >= MIN_AGE).collect()
}

/// One sweep: removes the orphaned pod cgroups that are empty. Returns how many went.
pub async fn sweep(cri: &dyn Runtime, cgroups: &Cgroups) -> usize {
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
    let orphaned = orphans(cgroups.scan_pods().await, &live);
    let tried = orphaned.len();
    // Busy ones (processes or children left) are not ours to force.
    let removed = tried - cgroups.remove(orphaned).await.len();
    if removed > 0 {
        info!(removed, "removed orphaned pod cgroups");
    }
    removed
}

/// Sweeps at start-up and then every `SWEEP_PERIOD` until `cancel` fires.
pub async fn sweep_periodically(cri: Arc<dyn Runtime>, cgroups: Arc<Cgroups>, cancel: CancellationToken) {
    loop {
        if cancel.is_cancelled() {
            return;
        }
        let n = sweep(&*cri, &cgroups).await;
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
    use std::path::PathBuf;

    use super::*;

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
            f("/cg/kubepods.slice/kubepods-podd.slice", "d", 61),
        ];
        let live: HashSet<String> = ["b".to_string()].into();
        let paths: Vec<PathBuf> = orphans(found, &live).into_iter().map(|f| f.path).collect();
        assert_eq!(
            paths,
            vec![
                PathBuf::from("/cg/kubepods/besteffort/poda"),
                PathBuf::from("/cg/kubepods.slice/kubepods-podd.slice")
            ]
        );
    }
}
