//! RestartAllContainers (KEP-5532): an exit whose first matching rule says so stops every
//! container of the pod at once (no preStop, no grace) and removes them all, keeping the
//! sandbox, its IP and the volumes; the next sync finds nothing left and starts the pod over:
//! init containers, sidecars and apps in order, each restart count one up (counted from the log
//! files, which stay). The instances whose exit triggered it are removed last, so an agent that
//! dies halfway sees the trigger again and finishes the job.

use super::*;
use crate::pod::plan::ContainerReset;
use crate::pod::start::{backoff_key, crash_backoff_wait};

impl Worker {
    /// Executes a reset plan. Repeated pod restarts back off as a container's do: the back-off of
    /// the container whose exit triggered it applies before the reset.
    pub(super) async fn reset_all(
        &mut self,
        observed: &ObservedPod,
        reset: &[ContainerReset],
    ) -> Result<Option<i64>, crate::cri::CriError> {
        let now = now_ns();
        let key = self.desired.key.clone();
        let triggers: Vec<(Container, i64)> = all_containers(&self.desired.pod)
            .into_iter()
            .filter_map(|(spec, _)| {
                let c = observed.newest(&spec.name)?;
                let fired = c.state == ContainerState::Exited
                    && crate::status::restart_all_rule_matches(&spec, c.exit_code);
                fired.then_some((spec, c.finished_at))
            })
            .collect();
        for (spec, _) in &triggers {
            if let Some((_, until)) =
                crash_backoff_wait(&self.saved.crash_backoff, &self.desired, spec, observed, now)
            {
                debug!(container = %spec.name, "restart of all containers waits for its back-off");
                return Ok(Some(until));
            }
        }
        for (spec, finished_at) in &triggers {
            self.saved.crash_backoff.next(&backoff_key(spec), *finished_at, now);
        }
        self.save_backoff().await;
        let names: Vec<&str> = triggers.iter().map(|(s, _)| s.name.as_str()).collect();
        info!(exited = ?names, instances = reset.len(), "restarting all containers (RestartAllContainers)");
        self.ctx.exec.rec.normal(
            &key,
            None,
            "RestartAllContainers",
            format!(
                "Container {} exited with a restart policy rule: restarting all containers",
                names.join(", ")
            ),
        );
        for r in reset.iter().filter(|r| r.kill) {
            self.tracked.killed_by_agent.insert(r.id.clone());
            self.ctx.exec.rec.normal(
                &key,
                Some(&r.name),
                "Killing",
                format!("Stopping container {}: all containers restart", r.name),
            );
            self.ctx.exec.cri.stop_container(&r.id, Duration::ZERO).await?;
        }
        for r in reset {
            self.ctx.exec.cri.remove_container(&r.id).await?;
        }
        // Nothing is left: come back at once to start the pod over.
        Ok(Some(now_ns()))
    }
}
