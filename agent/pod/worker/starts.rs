//! Starting one container: crash-loop back-off first, then the executor (`pod::start`).

use super::*;

/// The sandbox a sync starts containers in.
pub(super) struct Sandbox<'a> {
    pub id: &'a str,
    pub ips: &'a [String],
    pub config: &'a crate::cri::api::PodSandboxConfig,
    /// The images the sync looked up while it created the sandbox (none if it did not).
    pub images_seen: Option<&'a ImagesSeen>,
}

impl Worker {
    pub(super) async fn start(
        &mut self,
        observed: &ObservedPod,
        spec: &Container,
        kind: Kind,
        sandbox: &Sandbox<'_>,
        requeue: &mut Option<i64>,
    ) -> bool {
        let now = now_ns();
        if let Some((e, until)) =
            crash_backoff_wait(&self.saved.crash_backoff, &self.desired, spec, observed, now)
        {
            self.ctx.exec.rec.warning(
                &self.desired.key,
                Some(&spec.name),
                "BackOff",
                format!(
                    "Back-off restarting failed container {} in pod {}",
                    spec.name, self.desired.key.name
                ),
            );
            self.tracked.start_errors.insert(spec.name.clone(), e);
            *requeue = Some(requeue.map_or(until, |r| r.min(until)));
            return false;
        }
        if let Some(exited) =
            observed.containers.iter().find(|o| o.name == spec.name && o.state == ContainerState::Exited)
        {
            self.saved.crash_backoff.next(&backoff_key(spec), exited.finished_at, now);
            self.save_backoff().await;
        }
        // An in-place update pulled this image before stopping the old instance (DESIGN
        // difference 4): start from that image, not from a second pull after the stop, which
        // could fail with the old container gone or resolve a moved tag to other content.
        let pulled_image = self
            .saved
            .update
            .as_ref()
            .filter(|u| !u.done && u.images.get(&spec.name) == spec.image.as_ref())
            .and_then(|u| u.pulled.get(&spec.name))
            .map(|p| p.id.as_str());
        let req = StartRequest {
            desired: &self.desired,
            spec,
            kind,
            observed,
            sandbox_id: sandbox.id,
            pod_ips: sandbox.ips,
            sandbox_config: sandbox.config,
            pulled_image,
            images_seen: sandbox.images_seen,
        };
        let span = tracing::trace_span!("start_container", kind = kind.as_str());
        match start_container(&self.ctx.starts, &req).instrument(span).await {
            Ok(id) => {
                self.tracked.start_errors.remove(&spec.name);
                self.publish_started(&id, sandbox.id).await;
                true
            }
            Err(e) => {
                // A failed start is retried after the kubelet's sync back-off (10 s, R12.9),
                // which is also when a pull back-off first expires (R7.11).
                let at = now + 10_000_000_000;
                *requeue = Some(requeue.map_or(at, |r| r.min(at)));
                self.tracked.start_errors.insert(spec.name.clone(), e);
                false
            }
        }
    }
}
