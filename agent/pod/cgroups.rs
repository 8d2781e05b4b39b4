//! Pod cgroups removed with their pod, and swept when orphaned (the kubelet's
//! cleanupOrphanedPodCgroups): a pod cgroup whose UID no sandbox in the runtime carries any
//! more, e.g. because its sandbox was removed behind the agent's back. Where they are and how
//! one goes (`rmdir`, and under systemd `StopUnit` of its slice first) is
//! [`crate::cgroup::Cgroups`]'s, by the node's driver.
//!
//! Only pod cgroups below `kubepods` are ever touched, never one younger than `MIN_AGE` (runc
//! creates it while `RunPodSandbox` runs, before the sandbox is listed; under systemd the agent
//! starts the slice just before).
//!
//! The QoS parents' values are kept here too (the kubelet's `UpdateQOSCgroups`): the
//! `burstable` shares follow the ledger, set again when it changes and every minute.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::cgroup::pods::Found;
use crate::cgroup::{Cgroups, NodeAllocatable, QosValues, qos};
use crate::cri::Runtime;
use crate::ledger::Ledger;
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

/// How often the QoS parents are set again, changed or not (the kubelet's
/// `periodicQOSCgroupUpdateInterval`), which also mends one changed behind the agent's back.
const QOS_PERIOD: Duration = Duration::from_secs(60);

/// Keeps the QoS parents' values until `cancel` fires (the kubelet's `UpdateQOSCgroups`, which
/// it runs as a pod starts and every minute): when the ledger changes (a pod admitted or
/// allocated, resized, finished or gone) they are set if the `burstable` shares moved, and
/// every `QOS_PERIOD` they are set whatever happened. The caller has set them once already, at
/// start, before any pod's cgroup. A failure is logged and tried again at the next change or
/// period.
pub async fn keep_qos(
    cgroups: Arc<Cgroups>,
    ledger: Ledger,
    node: NodeAllocatable,
    cancel: CancellationToken,
) {
    let mut changes = ledger.subscribe();
    // What changed between the caller's first setting and this subscription is looked at now.
    changes.mark_changed();
    let mut period = tokio::time::interval_at(tokio::time::Instant::now() + QOS_PERIOD, QOS_PERIOD);
    period.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut set: Option<QosValues> = Some(qos::values(node, 0));
    loop {
        let periodic = tokio::select! {
            _ = cancel.cancelled() => return,
            _ = period.tick() => true,
            r = changes.changed() => {
                if r.is_err() {
                    return;
                }
                false
            }
        };
        let burstable_cpu_milli = ledger.burstable_cpu_milli();
        let want = qos::values(node, burstable_cpu_milli);
        if !periodic && set == Some(want) {
            continue;
        }
        match cgroups.ensure_qos(&want).await {
            Ok(()) => {
                debug!(burstable_cpu_milli, periodic, "QoS cgroups updated");
                set = Some(want);
            }
            Err(e) => {
                warn!(error = %e, "updating the QoS cgroups failed; trying again at the next change or in a minute");
                set = None;
            }
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

    /// The `burstable` shares follow the ledger (cgroupfs, v1, in a temporary root).
    #[tokio::test]
    async fn burstable_shares_follow_the_ledger() {
        use crate::cgroup::files::Hierarchy;
        use crate::cgroup::{CgroupDriver, Qos};
        use crate::ledger::Held;

        let root = tempfile::tempdir().expect("tempdir");
        let cgroups =
            Arc::new(Cgroups::with_hierarchy(CgroupDriver::Cgroupfs, Hierarchy::at(root.path(), false)));
        let node = NodeAllocatable { cpu_milli: 2000, memory: 1 << 30, pids: 4096 };
        cgroups.ensure_qos(&qos::values(node, 0)).await.expect("made");
        let shares = root.path().join("cpu/kubepods/burstable/cpu.shares");
        let ledger = Ledger::default();
        let cancel = CancellationToken::new();
        let task = tokio::spawn(keep_qos(cgroups, ledger.clone(), node, cancel.clone()));
        let settles_at = |want: &'static str| {
            let shares = shares.clone();
            async move {
                for _ in 0..200 {
                    if std::fs::read_to_string(&shares).is_ok_and(|s| s == want) {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                panic!("burstable cpu.shares never became {want}");
            }
        };
        settles_at("2").await;
        let held = |cpu, qos| Some(Held { requests: (cpu, 0), qos });
        ledger.set("b1", held(500, Qos::Burstable));
        ledger.set("g", held(1000, Qos::Guaranteed));
        settles_at("512").await;
        ledger.set("b2", held(250, Qos::Burstable));
        settles_at("768").await;
        ledger.set("b1", None);
        ledger.set("b2", None);
        settles_at("2").await;
        cancel.cancel();
        task.await.expect("ends on cancel");
    }
}
