//! What a pod worker keeps under the pod's dir so a restarted agent carries on where it was:
//! outside conditions, the last published status, the crash-loop back-off, the in-place update
//! and a pod kill's deadline (the worker's `Saved`, read back by `Saved::load`).

use super::*;
use crate::node::NodeConfig;

impl Saved {
    /// What an earlier agent saved under pod `uid`'s dir (nothing, for a pod new to the node),
    /// read on the blocking pool.
    pub(super) async fn load(node: &NodeConfig, uid: &str) -> Self {
        let (node, uid) = (node.clone(), uid.to_string());
        match tokio::task::spawn_blocking(move || Self::read(&node, &uid)).await {
            Ok(saved) => saved,
            Err(e) => {
                warn!(error = %e, "reading the pod's saved state failed; starting afresh");
                Saved {
                    crash_backoff: Backoff::crash_loop(),
                    update: None,
                    status: None,
                    status_json: None,
                    conditions: None,
                    kill: false,
                }
            }
        }
    }

    /// [`Saved::load`]'s reads. Blocks on the disk.
    fn read(node: &NodeConfig, uid: &str) -> Self {
        let crash_backoff = match std::fs::read(backoff_path(node, uid)) {
            Ok(json) => Backoff::crash_loop().with_json(&json),
            Err(_) => Backoff::crash_loop(),
        };
        let status_json = std::fs::read(status_path(node, uid)).ok();
        Saved {
            crash_backoff,
            update: UpdateState::load(&update_state_path(node, uid)),
            status: status_json.as_deref().and_then(|b| serde_json::from_slice(b).ok()),
            status_json,
            conditions: std::fs::read(conditions_path(node, uid))
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok()),
            kill: crate::pod::terminate::saved_kill_path(&pod_dir(node, uid)).exists(),
        }
    }
}

impl Worker {
    pub(super) async fn save_backoff(&self) {
        let Some(json) = self.saved.crash_backoff.to_json() else { return };
        let path = backoff_path(&self.ctx.node, &self.desired.uid);
        if let Err(e) = crate::checkpoint::write_async(path, json).await {
            debug!(error = %crate::error_chain(&e), "saving the crash-loop back-off failed");
        }
    }

    /// Saves the published status under the pod's dir when it changed (atomically).
    pub(super) async fn save_status(&mut self, status: &PodStatus) {
        let Ok(json) = serde_json::to_vec(status) else { return };
        if self.saved.status_json.as_deref() == Some(json.as_slice()) {
            return;
        }
        let path = status_path(&self.ctx.node, &self.desired.uid);
        let write = crate::checkpoint::write_async(path, json.clone());
        match write.instrument(tracing::trace_span!("save_status")).await {
            Ok(()) => self.saved.status_json = Some(json),
            Err(e) => debug!(error = %crate::error_chain(&e), "saving the pod status failed"),
        }
    }

    pub(super) async fn save_update(&self) {
        if let Some(u) = &self.saved.update {
            if let Err(e) = u.save(update_state_path(&self.ctx.node, &self.desired.uid)).await {
                warn!(error = %crate::error_chain(&e), "saving the in-place update state failed");
            }
        }
    }

    /// The deadline of a pod kill starting (or, after an agent restart, resuming) now.
    pub(super) async fn begin_kill(&mut self, grace: Duration) -> tokio::time::Instant {
        self.saved.kill = true;
        let dir = pod_dir(&self.ctx.node, &self.desired.uid);
        let now = now_ns();
        // Reads and durably writes the saved deadline: on the blocking pool.
        match tokio::task::spawn_blocking(move || crate::pod::terminate::begin_kill(&dir, grace, now)).await {
            Ok(deadline) => deadline,
            Err(e) => {
                warn!(error = %e, "reading the saved kill deadline failed; the full grace period applies");
                tokio::time::Instant::now() + grace
            }
        }
    }

    /// Forgets a saved kill deadline (a file operation, on the blocking pool, only when one may
    /// exist: this runs on every sync that plans no pod kill).
    pub(super) async fn end_kill(&mut self) {
        if std::mem::take(&mut self.saved.kill) {
            let dir = pod_dir(&self.ctx.node, &self.desired.uid);
            let _ = tokio::task::spawn_blocking(move || crate::pod::terminate::end_kill(&dir)).await;
        }
    }
}

/// Where a pod's outside conditions are saved: they live only in the agent (no API server), so
/// a restarted agent reloads them instead of flapping `Ready` (DESIGN: no readiness flap).
pub(super) fn conditions_path(node: &NodeConfig, uid: &str) -> std::path::PathBuf {
    pod_dir(node, uid).join("conditions.json")
}

/// Where a pod's last published status is saved: the kubelet carries restartCount and lastState
/// forward from the status it published (kept by the API server); crilet keeps its own, so a
/// restarted agent still knows the last state of an instance the runtime has removed since.
pub(super) fn status_path(node: &NodeConfig, uid: &str) -> std::path::PathBuf {
    pod_dir(node, uid).join("status.json")
}

/// Where a pod's crash-loop back-off is saved: restarting the agent must not restart a
/// crash-looping container early.
pub(super) fn backoff_path(node: &NodeConfig, uid: &str) -> std::path::PathBuf {
    pod_dir(node, uid).join("crash-backoff.json")
}

pub(super) fn update_state_path(node: &NodeConfig, uid: &str) -> std::path::PathBuf {
    pod_dir(node, uid).join("inplace-update.json")
}

/// Where a pod's allocation (KEP-1287: the resources it was admitted or last resized to) is
/// saved: containers are started with it, also after an agent restart.
pub(super) fn allocation_path(node: &NodeConfig, uid: &str) -> std::path::PathBuf {
    pod_dir(node, uid).join("allocation.json")
}
