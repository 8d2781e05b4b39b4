//! Garbage collection of old instances and sandboxes, and the pod's termination and removal.

use super::*;
use crate::pod::terminate::{Deadline, kill_pod_by};

impl Worker {
    /// R12.5 / R4.10: removes the pod's garbage (`plan::gc`): each container's dead instances
    /// but the newest, with their logs, and the dead sandboxes that are not the newest and hold
    /// no containers.
    pub(super) async fn collect_garbage(&mut self, observed: &ObservedPod) {
        let garbage = crate::pod::plan::gc::garbage(observed);
        for c in garbage.containers {
            debug!(container = %c.name, id = %c.id, state = ?c.state, "removing an old dead instance");
            if self.ctx.exec.cri.remove_container(&c.id).await.is_err() {
                continue;
            }
            self.acted = true;
            if !c.log_path.is_empty() {
                // The log and every file rotated from it, as the kubelet's log cleanup (a
                // directory listing and removals: on the blocking pool).
                let path = std::path::PathBuf::from(&c.log_path);
                let removed = crate::blocking(move || crate::logrotate::remove_container_logs(&path)).await;
                if let Err(e) = removed {
                    debug!(path = %c.log_path, error = %e, "removing an old instance's logs failed");
                }
            }
            self.remove_legacy_link(&c.name, &c.id).await;
        }
        for id in garbage.sandboxes {
            let _ = self.ctx.exec.cri.remove_sandbox(id).await;
        }
    }

    /// Stops the pod within its grace budget; with `remove`, also removes sandboxes, volumes
    /// and logs. Returns false when the runtime could not be reached (the caller retries).
    pub(super) async fn terminate(
        &mut self,
        remove: bool,
        grace: Option<Duration>,
        desire: &mut watch::Receiver<Desire>,
        cancel: &CancellationToken,
    ) -> bool {
        let ctx = self.ctx.clone();
        let key = self.desired.key.clone();
        let observed = match ctx.exec.cri.observe(&self.desired.uid).await {
            Ok(o) => o,
            Err(e) => {
                warn!(error = %e, "cannot observe the pod to terminate it; retrying");
                return false;
            }
        };
        if cancel.is_cancelled() {
            return false;
        }
        self.probes.reconcile(&self.desired.pod.clone(), &observed, true);
        self.probes.save().await;
        let (_, probe_states) = self.probes.view();
        self.publish(&observed, true, &probe_states).await;
        let grace = grace.unwrap_or_else(|| termination_grace(&self.desired.pod));
        let deadline = self.begin_kill(grace).await;
        // A second deletion with a shorter grace period brings the deadline forward while the
        // kill runs (as upstream); a longer one changes nothing.
        let (deadline_tx, deadline_rx) = watch::channel(deadline);
        let pod = self.desired.pod.clone();
        let kill = kill_pod_by(
            &ctx.exec,
            &key,
            &pod,
            &observed,
            grace,
            Deadline::follow(deadline_rx),
            "pod deleted",
        );
        tokio::pin!(kill);
        let mut closed = false;
        let stopped = loop {
            tokio::select! {
                ok = &mut kill => break ok,
                r = desire.changed(), if !closed => {
                    if r.is_err() {
                        closed = true;
                        continue;
                    }
                    let shorter = match &*desire.borrow_and_update() {
                        Desire::Terminate { grace: Some(g), .. } => Some(*g),
                        _ => None,
                    };
                    let Some(g) = shorter else { continue };
                    let new = tokio::time::Instant::now() + g;
                    if new < *deadline_tx.borrow() {
                        info!(grace_s = g.as_secs_f64(), "deleted again with a shorter grace period; the deadline moves forward");
                        let _ = deadline_tx.send(new);
                        let dir = pod_dir(&ctx.node, &self.desired.uid);
                        let at = now_ns().saturating_add(i64::try_from(g.as_nanos()).unwrap_or(i64::MAX));
                        // A read and a durable write: on the blocking pool, awaited so that it
                        // lands before the kill's end removes the file.
                        let shorten = move || crate::pod::terminate::shorten_kill(&dir, at);
                        let _ = tokio::task::spawn_blocking(shorten).await;
                    }
                }
            }
        };
        // A stop that failed (the runtime is down) is retried within the same deadline.
        if !stopped {
            return false;
        }
        self.end_kill().await;
        if !remove {
            self.observe_and_publish(true).await;
        }
        if remove {
            for sb in &observed.sandboxes {
                if let Err(e) = ctx.exec.cri.remove_sandbox(&sb.id).await {
                    warn!(sandbox = %sb.id, error = %e, "removing sandbox failed; retrying");
                    return false;
                }
            }
            // Containers of a sandbox that vanished earlier.
            if let Ok(left) = ctx.exec.cri.observe(&self.desired.uid).await {
                for c in &left.containers {
                    let _ = ctx.exec.cri.stop_container(&c.id, Duration::ZERO).await;
                    let _ = ctx.exec.cri.remove_container(&c.id).await;
                }
            }
            for c in &observed.containers {
                self.remove_legacy_link(&c.name, &c.id).await;
            }
            remove_tree(pod_log_dir(&ctx.node, &self.desired)).await;
            crate::pod::cgroups::remove_pod_cgroups_settled(&ctx.cgroups, &self.desired.uid).await;
            // The pod dir goes last: an agent killed before this point finds it at its next
            // start and finishes the removal (Supervisor::reap_leftover_dirs).
            // Never into a mount a Bidirectional container left there (see mountinfo).
            let dir = pod_dir(&ctx.node, &self.desired.uid);
            if let Ok(Err(why)) =
                crate::blocking(move || Ok(crate::mountinfo::remove_tree_unless_mounted(&dir))).await
            {
                tracing::warn!(pod = %key, reason = %why, "pod dir left in place");
            }
            self.probes.stop();
            ctx.registry.remove_pod(&key);
            ctx.exec.rec.normal(&key, None, "Removed", format!("Pod {} removed", key));
        }
        true
    }

    pub(super) async fn remove_legacy_link(&self, container: &str, id: &str) {
        if let Some(link) =
            crate::pod::spec::legacy_log_symlink(&self.ctx.node, &self.desired.key, container, id)
        {
            let _ = tokio::fs::remove_file(link).await;
        }
    }
}

/// Removes the tree at `path`, if any, on the blocking pool (a pod's dirs may hold many files).
async fn remove_tree(path: std::path::PathBuf) {
    let _ = crate::blocking(move || std::fs::remove_dir_all(path)).await;
}
